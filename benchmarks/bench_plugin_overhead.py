"""Plugin overhead: median step time of our recipe vs plain verl GRPO, identical settings, one run each.

Two real CPU verl runs of the hard recipe on the tiny model (same data, batch, seeds, sampling):

- ``isocompute``: our trainer (loss installation, masks, compute accounting, run log, unbiased metrics)
  and our ``isocompute_grpo`` estimator, with the regulariser-only zero-variance filter on;
- ``verl``: verl's own ``sync`` trainer and ``grpo`` estimator.

The first step of each run is dropped (warm-up). Runs go in ABBA order (``--repeats 2``) so slow drift of
the machine's load hits both variants alike; step times of all runs of a variant are pooled. Printed: the
median and the minimum step time of each, and their ratios. Target: isocompute / verl median <= 1.05.
On a shared machine the minimum is the steadier figure; a large max means another process took the CPU.

    python benchmarks/bench_plugin_overhead.py [--steps 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

COMMON = [
    "--config-name", "isocompute_hard", "+platform=cpu", "isocompute.model=tiny",
    "trainer.val_before_train=false", "trainer.test_freq=-1",
]
VARIANTS = {
    "isocompute": ["isocompute.zero_variance.mode=regularizers"],
    "verl": ["trainer.v1.trainer_mode=sync", "algorithm.adv_estimator=grpo"],
}


def step_times(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "verl_metrics.jsonl").read_text().splitlines()]
    return [r["data"]["timing_s/step"] for r in rows if "timing_s/step" in r["data"]][1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2, help="runs per variant, in ABBA order")
    args = parser.parse_args()
    names = list(VARIANTS)
    order = [names if i % 2 == 0 else names[::-1] for i in range(args.repeats)]
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(n for pair in order for n in pair):
            run_dir = Path(tmp) / f"{name}-{i}"
            cmd = [sys.executable, "-m", "verl_isocompute.main", *COMMON, *VARIANTS[name],
                   f"trainer.total_training_steps={args.steps}", f"isocompute.run_dir={run_dir}"]
            print(f"running {name} ({args.steps} steps) ...", flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"{name} run failed:\n{proc.stderr[-3000:]}")
            times[name].extend(step_times(run_dir))
    print(f"{'run':<12}{'steps':>6}{'median s/step':>15}{'min':>8}{'max':>8}")
    for name, t in times.items():
        print(f"{name:<12}{len(t):>6}{statistics.median(t):>15.3f}{min(t):>8.3f}{max(t):>8.3f}")
    iso, ref = times["isocompute"], times["verl"]
    print(f"isocompute / verl: median {statistics.median(iso) / statistics.median(ref):.3f}, "
          f"min {min(iso) / min(ref):.3f} (target: median <= 1.05)")


if __name__ == "__main__":
    main()
