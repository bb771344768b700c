"""The ``hf`` rollout backend: HF transformers generation inside verl's async rollout machinery.

verl 0.9 generates through rollout *servers*: each replica runs a server actor (vLLM, SGLang, TRT-LLM),
verl's agent loop sends it one token-in / token-out request per sample, and the trainer pushes new
weights to it after every step through a ``ServerAdapter`` living in the training worker. None of the
shipped servers runs on a CPU. This module supplies the three pieces for a transformers model:

- :class:`HFRolloutServer`, a Ray actor holding the model. Requests that arrive together are
  **batched**: the server collects concurrent requests (all n samples of every prompt of a step arrive
  at once) and samples them as one padded batch with a KV cache (:mod:`.sampler`). It returns token ids
  and per-token log-probs, which verl compares with the trainer's (``training/rollout_probs_diff_*``).
  Samples are **reproducible**: each is drawn from its own seed (:func:`.sampler.sequence_seed`) of the
  rollout seed (``rollout.seed``), the prompt's token ids and the sample's index. verl's agent loop does
  not send that index, so the server numbers the requests for the same prompt (and sampling settings)
  since the last weight update, in verl's batch order within a wave of requests (the ``priority`` verl gives
  each sample, its row in the step's batch), not in arrival order. The same run twice gives the same
  rollouts, and a prompt's samples do not change with the other prompts of its batch. One limit: when the
  agent loop sends a prompt's n requests in two waves (more than the batch window apart), the n samples are
  still the same, but which of the prompt's rows gets which can differ (GRPO treats a group's samples alike:
  the update changes only by float summation order). With several replicas the seed also names the replica (which samples of a
  prompt each serves is verl's routing).
- :class:`HFReplica`, registered in ``RolloutReplicaRegistry`` as ``hf``: launches one server per
  replica next to the training workers.
- :class:`HFServerAdapter`, registered for ``(hf, async)``: receives the trainer's full weights after
  each optimizer step and loads them into the server, so the next rollout is on-policy.

Limits: one server per replica (tensor/pipeline parallel size 1), no multi-modal inputs, no LoRA
adapters, no prefix caching. It is meant for tests, laptops and checking a recipe before a GPU run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Generator, Optional

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from verl_isocompute.rules.names import ROLLOUT_NAME

from .sampler import BatchSampler, SamplingParams, sequence_seed
from .threads import cpu_threads

logger = logging.getLogger(__name__)

# How long the server waits for more requests once it has some: the agent loop's workers submit a
# step's samples within a few milliseconds of each other, and one big batch beats several small ones.
BATCH_WINDOW_S = float(os.environ.get("ISOCOMPUTE_HF_BATCH_WINDOW_S", "0.05"))

_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16,
           "float32": torch.float32, "fp32": torch.float32}


def server_actor_name(replica_rank: int, role_suffix: str = "", name_suffix: str = "", node_rank: int = 0) -> str:
    """The Ray name of a replica's server actor (the one place it is spelled): the replica launches it
    under this name and the training worker's adapter looks it up by it. ``role_suffix`` is ``_reward`` /
    ``_teacher`` for those models' replicas, ``name_suffix`` verl's per-manager suffix."""
    return f"{ROLLOUT_NAME}_server{role_suffix}_{replica_rank}_{node_rank}{name_suffix}"


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future
    priority: int  # the sample's row in verl's batch: orders a prompt's samples
    index: Optional[int] = None  # the caller's number for this sample (sampling_params["seed"]), else counted
    seed: int = 0  # set when its wave is numbered


def _torch_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[str(name).lower()]
    except KeyError:
        raise ValueError(f"rollout.dtype={name!r} is not supported by the hf rollout; use one of {sorted(_DTYPES)}") from None


class HFRolloutServer:
    """Ray actor: a transformers causal LM serving batched token-in / token-out sampling."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0, seed: int = 0) -> None:
        from transformers import AutoModelForCausalLM, GenerationConfig
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig, RolloutConfig

        config = omega_conf_to_dataclass(config, dataclass_type=RolloutConfig)
        model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.config = config
        self.replica_rank = replica_rank
        self.global_steps: Optional[int] = None
        path = model_config.local_path
        self.dtype = _torch_dtype(config.dtype)
        torch.set_num_threads(cpu_threads())
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=self.dtype, attn_implementation="sdpa")
        self.model.eval()
        tokenizer = model_config.tokenizer
        eos = set()
        try:
            gen_eos = GenerationConfig.from_pretrained(path).eos_token_id
        except OSError:
            gen_eos = None
        for source in (gen_eos, self.model.config.eos_token_id, getattr(tokenizer, "eos_token_id", None)):
            if source is None:
                continue
            eos.update(source if isinstance(source, (list, tuple)) else [source])
        if not eos:
            raise ValueError(f"model at {path} defines no end-of-sequence token; the hf rollout needs one to stop")
        pad = getattr(tokenizer, "pad_token_id", None)
        self.sampler = BatchSampler(self.model, sorted(eos), pad if pad is not None else min(eos))
        self.seed = int(seed) + 7919 * int(replica_rank)
        self._samples_of: Counter = Counter()  # requests per (prompt, sampling settings) since the last weight update
        self.max_model_len = int(config.max_model_len or (config.prompt_length + config.response_length))
        self.max_num_seqs = int(config.max_num_seqs or 1024)
        self._pending: list[_Request] = []
        self._batcher: Optional[asyncio.Task] = None
        self._weights_lock = asyncio.Lock()
        self.stats = {"batches": 0, "sequences": 0, "tokens": 0, "seconds": 0.0}

    # -- generation ------------------------------------------------------------------------------------
    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Optional[list[Any]] = None,
        video_data: Optional[list[Any]] = None,
        audio_data: Optional[list[Any]] = None,
        mm_processor_kwargs: Optional[dict[str, Any]] = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> TokenOutput:
        if image_data or video_data or audio_data:
            raise NotImplementedError("the hf rollout serves text-only models; use vllm or sglang for multi-modal data")
        prompt_ids = [int(t) for t in prompt_ids]
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens leaves no room in max_model_len={self.max_model_len}; "
                "raise data.max_prompt_length/rollout.response_length or shorten prompts"
            )
        sp = dict(sampling_params)
        # vLLM's per-request seed: a caller that numbers its own samples (curation's rounds, across a resume) keeps
        # them apart; verl's agent loop sends none, and the server counts a prompt's samples itself
        index = sp.pop("seed", None)
        max_tokens = sp.pop("max_tokens", None) or sp.pop("max_new_tokens", None)
        if max_tokens is None:
            max_tokens = min(
                self.config.response_length, self.config.prompt_length + self.config.response_length - len(prompt_ids)
            )
        params = SamplingParams(
            max_tokens=max(1, min(int(max_tokens), room)),
            temperature=float(sp.get("temperature", 1.0)),
            top_p=float(sp.get("top_p", 1.0)),
            top_k=int(sp.get("top_k", -1) if sp.get("top_k") is not None else -1),
            ignore_eos=bool(sp.get("ignore_eos", False)),
        )
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(prompt_ids, params, future, int(priority), None if index is None else int(index)))
        if self._batcher is None or self._batcher.done():
            self._batcher = asyncio.create_task(self._run_batches())
        out = await future
        return TokenOutput(
            token_ids=out.token_ids,
            log_probs=out.log_probs if sp.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps, "finish_reason": out.finish_reason},
        )

    async def _run_batches(self) -> None:
        while self._pending:
            # let the rest of this wave of requests arrive
            seen = -1
            while seen != len(self._pending):
                seen = len(self._pending)
                await asyncio.sleep(BATCH_WINDOW_S)
            taken, self._pending = sorted(self._pending, key=lambda r: r.priority), []
            groups: dict[tuple, list] = {}
            for request in taken:
                if request.index is not None:
                    request.seed = sequence_seed(self.seed, request.prompt_ids, request.index)
                else:
                    key = (tuple(request.prompt_ids), request.params)
                    request.seed = sequence_seed(self.seed, request.prompt_ids, self._samples_of[key])
                    self._samples_of[key] += 1
                groups.setdefault(request.params.group_key, []).append(request)
            for items in groups.values():
                for start in range(0, len(items), self.max_num_seqs):
                    await self._sample(items[start : start + self.max_num_seqs])

    async def _sample(self, items: list[_Request]) -> None:
        prompts = [r.prompt_ids for r in items]
        limits = [r.params.max_tokens for r in items]
        try:
            async with self._weights_lock:
                t0 = time.perf_counter()
                outs = await asyncio.to_thread(
                    self.sampler.generate, prompts, items[0].params, limits, [r.seed for r in items]
                )
                self.stats["seconds"] += time.perf_counter() - t0
        except Exception as exc:  # hand the failure to every waiting request instead of hanging them
            for request in items:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        self.stats["batches"] += 1
        self.stats["sequences"] += len(outs)
        self.stats["tokens"] += sum(len(o.token_ids) for o in outs)
        for request, out in zip(items, outs, strict=True):
            if not request.future.done():
                request.future.set_result(out)

    # -- weights ---------------------------------------------------------------------------------------
    async def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> int:
        """Load the trainer's full weights; returns the number of tensors loaded."""
        async with self._weights_lock:
            result = self.model.load_state_dict(state_dict, strict=False)
            if result.unexpected_keys:
                raise ValueError(f"trainer sent weights the rollout model does not have: {result.unexpected_keys[:5]}")
            tied = set(getattr(self.model, "_tied_weights_keys", None) or [])
            missing = [k for k in result.missing_keys if k not in tied and not k.endswith("lm_head.weight")]
            if missing:
                raise ValueError(f"trainer weights lack rollout parameters: {missing[:5]}")
            self._samples_of.clear()  # new weights: a prompt's samples are numbered from 0 again
        if global_steps is not None:
            self.global_steps = global_steps
        return len(state_dict)

    async def get_stats(self) -> dict[str, float]:
        return dict(self.stats)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # -- lifecycle calls verl makes on every backend; nothing to free or pause on a CPU -----------------
    async def wake_up(self, tags: Optional[list[str]] = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None  # the KV cache lives only for the duration of one batch

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict[str, Any]:
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self._pending or (self._batcher is not None and not self._batcher.done()):
            await asyncio.sleep(0.01)


class HFReplica(RolloutReplica):
    """A rollout replica served by one :class:`HFRolloutServer` actor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.world_size != 1:
            raise ValueError(
                "the hf rollout runs one model per replica: set actor_rollout_ref.rollout.tensor_model_parallel_size=1 "
                "(and data/pipeline parallel size 1); each training rank gets its own replica"
            )

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        node_id = ray.get_runtime_context().get_node_id()
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
        suffix = "_reward" if self.is_reward_model else "_teacher" if self.is_teacher_model else ""
        name = server_actor_name(self.replica_rank, suffix, self.name_suffix)
        server = (
            ray.remote(HFRolloutServer)
            .options(
                name=name,
                num_cpus=1,
                num_gpus=0,
                max_concurrency=self.max_concurrency,
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                runtime_env={"env_vars": {"VERL_PLATFORM": os.environ.get("VERL_PLATFORM", "cpu")}},
            )
            .remote(
                config=self.config,
                model_config=self.model_config,
                replica_rank=self.replica_rank,
                seed=getattr(self.config, "seed", 0) or 0,
            )
        )
        await server.get_stats.remote()  # surface model-loading errors here, not at the first request
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf-replica-{self.replica_rank}{suffix}{self.name_suffix}"


class HFServerAdapter(BaseRollout):
    """Lives in each training worker; pushes the trainer's weights to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        self.replica_rank = rank if replica_rank == -1 else replica_rank
        self.dtype = _torch_dtype(self.config.dtype)
        self._server = None

    def _server_handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_actor_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        global_steps: Optional[int] = None,
        wire_format: str = "named_tensors",
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf rollout takes full named tensors, not {wire_format!r}")
        state_dict = {}
        # Every rank must walk the generator: producing full tensors from sharded ones is collective.
        for name, tensor in weights:
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            state_dict[name] = tensor.detach().to("cpu", dtype=self.dtype if tensor.is_floating_point() else tensor.dtype).clone()
        await self._server_handle().update_weights.remote(state_dict, global_steps)
