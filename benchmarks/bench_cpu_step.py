"""The CPU demo's training step, phase by phase, in float32 and bfloat16 side by side on this machine.

Two parts, one run, the CPU named at the top (``torch.backends.cpu.get_cpu_capability()`` and whether
it has native bf16, the flag :mod:`verl_isocompute.cpu.dtype` decides by):

1. **Calibration.** One forward+backward of SmolLM2-135M on 8 x 144 tokens with 2 threads, fp32 and
   bf16 (median of ``--repeats``). Issue 9 measured it at 9.6 s fp32 / 257 s bf16 on a 2-core AVX2 EPYC
   (no native bf16), the machine the README's demo figure is for; ``reference / here`` scales a time
   measured here to that machine (> 1: this machine is faster).
2. **The demo's step.** The ``cpu_demo`` recipe (SmolLM2, its batch and lengths, validation off) run
   through verl for ``--steps`` steps per dtype; verl's ``timing_s/*`` of the last step: rollout (gen,
   reward included), old log-prob (0 when the recipe reuses the rollout's), advantage, actor update,
   weight sync, and the rest of the step (Ray calls, TransferQueue, our bookkeeping), plus the verl
   process's wall time (Ray start-up, model load) - with each phase's bf16 / fp32 ratio.

    python benchmarks/bench_cpu_step.py [--steps 1] [--dtypes float32 bfloat16]
        [--skip-demo] [--repeats 2] [key=value ...   extra overrides of the cpu_demo recipe]

About 10-20 minutes on 2 cores (each demo step is ~1 minute on the reference AVX2 machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REFERENCE_FWD_BWD_S = {"float32": 9.6, "bfloat16": 257.0}  # issue 9 §3: 2-core AMD EPYC, AVX2, idle
TOKENS = (8, 144)
# verl's timing keys of one step, in the order the step runs them.
PHASES = [
    ("rollout", "timing_s/gen"),
    ("old log-prob", "timing_s/old_log_prob"),
    ("ref log-prob", "timing_s/ref"),
    ("advantage", "timing_s/adv"),
    ("update", "timing_s/update_actor"),
    ("weight sync", "timing_s/update_weights"),
]


def calibrate(dtype: str, repeats: int) -> float:
    """Median seconds of one forward+backward of SmolLM2 on 8 x 144 tokens with 2 threads, on the trainer's
    precision path: the CPU run stores the weights in ``dtype`` and computes in it (FSDP
    ``mixed_precision.param_dtype``), under ``torch.autocast`` only when it is not fp32, as verl's FSDP engine
    does (:func:`verl_isocompute.cpu.dtype.prepare_cpu_dtype`)."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM

    from verl_isocompute.cpu.models import ensure_model

    torch.set_num_threads(2)
    torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(ensure_model("smollm2"), dtype=torch_dtype, attn_implementation="sdpa")
    model.train()
    ids = torch.randint(0, model.config.vocab_size, TOKENS, generator=torch.Generator().manual_seed(0))
    autocast = contextlib.nullcontext() if dtype == "float32" else torch.autocast("cpu", dtype=torch_dtype)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        with autocast:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    return statistics.median(times)


def demo_step(dtype: str, steps: int, overrides: list[str], root: Path) -> dict[str, float]:
    """verl's timings of the last of ``steps`` demo steps in ``dtype``, and the process's wall time."""
    run_dir = root / dtype
    cmd = [
        sys.executable, "-m", "verl_isocompute.main", "--config-name", "cpu_demo",
        f"isocompute.cpu.dtype={dtype}", f"isocompute.run_dir={run_dir}", f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false", "trainer.test_freq=-1", *overrides,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "verl_metrics.jsonl").read_text().splitlines() if line.strip()]
    last = [r["data"] for r in rows if "timing_s/step" in r["data"]][-1]
    out = {name: float(last.get(key, 0.0)) for name, key in PHASES}
    out["rest of step (Ray, TransferQueue, bookkeeping)"] = last["timing_s/step"] - sum(out.values())
    out["step"] = float(last["timing_s/step"])
    out["verl process wall time"] = wall
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1, help="demo steps per dtype; the last one is reported")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=2, help="calibration repeats per dtype")
    parser.add_argument("--skip-demo", action="store_true", help="calibration only")
    parser.add_argument("--skip-calibration", action="store_true")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()

    from verl_isocompute.cpu import cpu_threads
    from verl_isocompute.cpu.dtype import detect_dtype

    auto = detect_dtype("auto")
    print(f"CPU: {auto.reason.removeprefix('auto: ')}; threads {cpu_threads()}; the demo's auto dtype: {auto.dtype}")
    if not args.skip_calibration:
        print(f"\ncalibration: one forward+backward of SmolLM2-135M on {TOKENS[0]} x {TOKENS[1]} tokens, 2 threads")
        print(f"{'dtype':<10}{'here s':>10}{'AVX2 ref s':>12}{'ref / here':>12}")
        for dtype in args.dtypes:
            here = calibrate(dtype, args.repeats)
            print(f"{dtype:<10}{here:>10.1f}{REFERENCE_FWD_BWD_S[dtype]:>12.1f}{REFERENCE_FWD_BWD_S[dtype] / here:>12.2f}", flush=True)
    if args.skip_demo:
        return
    with tempfile.TemporaryDirectory(prefix="bench_cpu_step.") as tmp:
        results = {dtype: demo_step(dtype, args.steps, args.overrides, Path(tmp)) for dtype in args.dtypes}
    names = list(next(iter(results.values())))
    print(f"\nthe demo's step (cpu_demo recipe, step {args.steps} of {args.steps}, seconds)")
    header = f"{'phase':<48}" + "".join(f"{d:>10}" for d in args.dtypes)
    both = len(args.dtypes) == 2
    print(header + (f"{'bf16/fp32':>11}" if both else ""))
    for name in names:
        values = [results[d][name] for d in args.dtypes]
        ratio = f"{values[1] / values[0]:>11.2f}" if both and values[0] > 0.05 else ""
        print(f"{name:<48}" + "".join(f"{v:>10.1f}" for v in values) + ratio)


if __name__ == "__main__":
    main()
