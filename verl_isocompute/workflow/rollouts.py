"""Sample k responses per problem from the base model with verl's rollout servers, and score them.

This drives verl's rollout machinery the way verl's own standalone generation does
(``verl/trainer/main_generation_server.py``): one replica per ``tensor_model_parallel_size`` GPUs is
created from verl's registry (``get_rollout_replica_class(rollout.name)``: vLLM's replica on GPUs, our
``hf`` replica on a CPU) and started with ``init_standalone()``, which gives it its own (logical) GPU
resource pool. Requests then go to the replica's server the way verl's agent loop sends them during
training, token in / token out: the prompt is the tokenizer's chat template applied to the problem's
messages (``add_generation_prompt=True``), sampling parameters are temperature, top_p, top_k and
max_tokens (= ``rollout.response_length``), one request per sample, all k samples of a problem in
flight together so the server batches them. verl's script instead posts OpenAI chat requests over
HTTP; the ``hf`` server has no HTTP front end, and token requests are what training uses, so the
difficulty is measured under exactly the prompts and sampling of training.

Each response is decoded (special tokens skipped, as verl's reward managers do) and scored by the
recipe's reward function (``reward.custom_reward_function``, loaded with verl's own loader); a sample is
correct by the rule training uses (:func:`verl_isocompute.rules.metrics.is_correct`): when the reward's
``acc`` is true, or, for a reward that does not give one, when the score exceeds 0.5. Problems are processed with at most ``concurrency`` in flight; each is handed to a callback
as soon as its k scores are in (the cache appends it), so an interruption loses only the ones in flight.
Ray and the replicas are started once (:func:`running`) for any number of batches: curation samples one,
the prefix search (:mod:`verl_isocompute.workflow.prefix_search`) one per round.

Ray: a private local instance with the recipe's ``ray_kwargs.ray_init`` (on the CPU platform: logical
GPUs for the resource pool), or an existing cluster when an address is given (then the cluster must
offer the GPUs).
"""

from __future__ import annotations

import asyncio
import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from omegaconf import DictConfig, OmegaConf

from verl_isocompute.rules.metrics import is_correct


def _ray_init(cfg: DictConfig, address: str | None) -> None:
    import ray
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    ray_init = OmegaConf.to_container(cfg.ray_kwargs.get("ray_init", {}), resolve=True) or {}
    runtime_env = OmegaConf.to_container(
        OmegaConf.merge(get_ppo_ray_runtime_env(cfg), ray_init.pop("runtime_env", None) or {}), resolve=True
    )
    if os.environ.get("VERL_PLATFORM"):
        runtime_env.setdefault("env_vars", {})["VERL_PLATFORM"] = os.environ["VERL_PLATFORM"]
    if address:
        # joining a cluster: it brings its own resources, and Ray refuses them as arguments
        ray_init = {k: v for k, v in ray_init.items() if k not in ("num_cpus", "num_gpus")}
    ray_init = {k: v for k, v in ray_init.items() if v is not None}
    ray.init(address=address or "local", runtime_env=runtime_env, **ray_init)


def correct(result: Any) -> tuple[bool, Any]:
    """(is the sample correct, the extracted answer if the reward reports one) from a reward's return value,
    by the rule training uses (:func:`verl_isocompute.rules.metrics.is_correct`)."""
    if isinstance(result, dict):
        return is_correct(result.get("score", 0.0), result.get("acc")), result.get("pred")
    return is_correct(result), None


class ProblemTooLong(ValueError):
    pass


class KSampler:
    """Started replicas of the recipe's rollout backend, a tokenizer and the reward function."""

    def __init__(self, cfg: DictConfig, k: int, concurrency: int = 64, keep_correct: bool = False) -> None:
        from transformers import AutoTokenizer
        from verl.trainer.ppo.reward import get_custom_reward_fn

        self.cfg = cfg
        self.k = k
        self.concurrency = concurrency
        self.keep_correct = keep_correct  # outcomes carry "kept": the correct responses' text and token ids
        rollout = cfg.actor_rollout_ref.rollout
        self.prompt_length = int(rollout.prompt_length)
        self.sampling_params = {
            "temperature": float(rollout.temperature),
            "top_p": float(rollout.top_p),
            "top_k": int(rollout.top_k),
            "repetition_penalty": 1.0,
            "max_tokens": int(rollout.response_length),
        }
        model = cfg.actor_rollout_ref.model
        self.tokenizer = AutoTokenizer.from_pretrained(model.path, trust_remote_code=bool(model.get("trust_remote_code", False)))
        chat_kwargs = cfg.data.get("apply_chat_template_kwargs")
        self.chat_kwargs = OmegaConf.to_container(chat_kwargs, resolve=True) if chat_kwargs else {}
        self.reward_fn = get_custom_reward_fn(cfg)
        if self.reward_fn is None:
            from verl_isocompute.rules.reward import compute_score

            self.reward_fn = compute_score
        self.replicas: list[Any] = []

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The token ids the agent loop would send: chat template with the generation prompt."""
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False, **self.chat_kwargs
        )
        ids = [int(t) for t in (ids["input_ids"] if isinstance(ids, dict) else ids)]
        if len(ids) > self.prompt_length:
            raise ProblemTooLong(f"prompt of {len(ids)} tokens > data.max_prompt_length={self.prompt_length}")
        return ids

    async def start(self) -> None:
        from verl.workers.rollout.replica import get_rollout_replica_class

        cfg = self.cfg
        rollout = cfg.actor_rollout_ref.rollout
        tp = int(rollout.tensor_model_parallel_size)
        gpus = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
        replica_cls = get_rollout_replica_class(rollout.name)
        self.replicas = [
            replica_cls(replica_rank=rank, config=rollout, model_config=cfg.actor_rollout_ref.model,
                        gpus_per_node=int(cfg.trainer.n_gpus_per_node))
            for rank in range(max(1, gpus // tp))
        ]
        await asyncio.gather(*[replica.init_standalone() for replica in self.replicas])

    def text(self, token_ids: list[int]) -> str:
        """A response as the reward sees it (special tokens skipped, as verl's reward managers do)."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    async def _score(self, problem: dict[str, Any], token_ids: list[int]) -> tuple[bool, Any]:
        text = self.text(token_ids)
        result = await asyncio.to_thread(
            self.reward_fn, data_source=problem.get("data_source"), solution_str=text,
            ground_truth=problem["ground_truth"], extra_info=problem.get("extra_info"),
        )
        return correct(result)

    async def _problem(self, index: int, problem: dict[str, Any], prompt_ids: list[int], n: int | None = None,
                       round_: int = 0) -> dict[str, Any]:
        server = self.replicas[index % len(self.replicas)].server_handle
        n = self.k if n is None else n
        request = problem.get("request_id", f"curate-{problem['problem_id']}")  # unique among requests in flight
        # each sample numbered by (rollout seed, round, i), so a resumed curation's rounds draw new samples, not
        # its first ones again (the hf server hashes it with the prompt; vLLM takes it as the request's seed)
        base = int(self.cfg.actor_rollout_ref.rollout.get("seed") or 0) << 40
        outputs = await asyncio.gather(*[
            server.generate.remote(prompt_ids=prompt_ids,
                                   sampling_params={**self.sampling_params, "seed": base + (round_ << 20) + i},
                                   request_id=f"{request}-{round_}-{i}")
            for i in range(n)
        ])
        scored = await asyncio.gather(*[self._score(problem, out.token_ids) for out in outputs])
        max_tokens = self.sampling_params["max_tokens"]
        outcome = {
            "id": problem["problem_id"], "k": n, "correct": int(sum(ok for ok, _ in scored)),
            "scores": [int(ok) for ok, _ in scored],
            "answers": [None if a is None else str(a)[:64] for _, a in scored],
            "response_tokens": [len(out.token_ids) for out in outputs],
            "truncated": int(sum(len(out.token_ids) >= max_tokens for out in outputs)),
        }
        if self.keep_correct:
            outcome["kept"] = [{"sample": i, "text": self.text(out.token_ids), "token_ids": [int(t) for t in out.token_ids]}
                              for i, (out, (ok, _)) in enumerate(zip(outputs, scored)) if ok]
        return outcome

    async def sample_batch(self, problems: list[dict[str, Any]], on_done: Callable[[dict[str, Any]], None]) -> None:
        """Sample and score every problem (dicts with problem_id, prompt_ids, ground_truth, ...) on the started
        replicas; ``on_done`` gets each problem's outcome (plus the problem's ``carry`` fields) as it finishes."""
        gate = asyncio.Semaphore(self.concurrency)

        async def one(index: int, problem: dict[str, Any]) -> None:
            async with gate:
                outcome = await self._problem(index, problem, problem["prompt_ids"])
            on_done({**outcome, **problem.get("carry", {})})

        await asyncio.gather(*[one(i, p) for i, p in enumerate(problems)])

    async def run_rounds(self, problems: list[dict[str, Any]], on_done: Callable[[dict[str, Any], dict[str, Any]], None],
                         next_round: Callable[[dict[str, Any]], tuple[int, int]]) -> None:
        """Sample each problem in rounds (rejection sampling): ``next_round(problem)`` gives (round, samples),
        samples 0 when the problem is done; each round's outcome goes to ``on_done(problem, outcome)``, which
        updates what ``next_round`` sees. A problem's rounds run one after the other, problems concurrently."""
        gate = asyncio.Semaphore(self.concurrency)

        async def one(index: int, problem: dict[str, Any]) -> None:
            while True:
                round_, n = next_round(problem)
                if n <= 0:
                    return
                async with gate:
                    outcome = await self._problem(index, problem, problem["prompt_ids"], n, round_)
                on_done(problem, outcome)

        await asyncio.gather(*[one(i, p) for i, p in enumerate(problems)])


class Session:
    """The started replicas, sampled from blocking code: each call runs on the session's one event loop."""

    def __init__(self, sampler: KSampler, loop: asyncio.AbstractEventLoop) -> None:
        self.sampler, self.loop = sampler, loop

    def __call__(self, problems: list[dict[str, Any]], on_done: Callable[[dict[str, Any]], None]) -> None:
        """k samples per problem (:meth:`KSampler.sample_batch`)."""
        self.loop.run_until_complete(self.sampler.sample_batch(problems, on_done))

    def rounds(self, problems: list[dict[str, Any]], on_done: Callable[[dict[str, Any], dict[str, Any]], None],
               next_round: Callable[[dict[str, Any]], tuple[int, int]]) -> None:
        """Samples in rounds per problem (:meth:`KSampler.run_rounds`)."""
        self.loop.run_until_complete(self.sampler.run_rounds(problems, on_done, next_round))


@contextmanager
def running(sampler: KSampler, ray_address: str | None = None) -> Iterator[Session]:
    """Start Ray and the rollout replicas once; yield a :class:`Session` (``session(problems, on_done)``,
    callable any number of times: the prefix search samples one batch per round); stop Ray on leaving, and remove
    the shared memory the session's processes left in /dev/shm (vLLM's queues: :mod:`verl_isocompute.cpu.shm`)."""
    import ray

    from verl_isocompute.cpu.shm import removing_shared_memory

    with removing_shared_memory():
        _ray_init(sampler.cfg, ray_address)
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(sampler.start())
            yield Session(sampler, loop)
        finally:
            # as asyncio.run does: cancel what an interruption left in flight before closing the loop
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()
            ray.shutdown()


def sample(sampler: KSampler, problems: list[dict[str, Any]], on_done: Callable[..., None],
           ray_address: str | None = None, next_round: Callable[[dict[str, Any]], tuple[int, int]] | None = None) -> None:
    """Start Ray and the rollout replicas, sample and score every problem (each with ``prompt_ids``), stop Ray.

    With ``next_round``, in rounds (:meth:`KSampler.run_rounds`) instead of k samples each."""
    with running(sampler, ray_address) as session:
        if next_round is None:
            session(problems, on_done)
        else:
            session.rounds(problems, on_done, next_round)
