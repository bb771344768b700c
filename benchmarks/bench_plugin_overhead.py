"""Plugin overhead: median step time of our recipe vs plain verl GRPO, identical settings, one run each.

Two real CPU verl runs of the hard recipe on the tiny model (same data, batch, seeds, sampling):

- ``isocompute``: our trainer (loss installation, masks, compute accounting, run log, unbiased metrics)
  and our ``isocompute_grpo`` estimator, with the regulariser-only zero-variance filter on;
- ``verl``: verl's own ``sync`` trainer and ``grpo`` estimator.

The first step of each run is dropped (warm-up). Target: isocompute / verl median step time <= 1.05.
The two runs alternate in time, and the machine's noise shows in the spread printed next to the medians.

    python benchmarks/bench_plugin_overhead.py [--steps 8]
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
    args = parser.parse_args()
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in VARIANTS.items():
            run_dir = Path(tmp) / name
            cmd = [sys.executable, "-m", "verl_isocompute.main", *COMMON, *extra,
                   f"trainer.total_training_steps={args.steps}", f"isocompute.run_dir={run_dir}"]
            print(f"running {name} ({args.steps} steps) ...", flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"{name} run failed:\n{proc.stderr[-3000:]}")
            times[name] = step_times(run_dir)
    print(f"{'run':<12}{'median s/step':>15}{'min':>8}{'max':>8}")
    for name, t in times.items():
        print(f"{name:<12}{statistics.median(t):>15.3f}{min(t):>8.3f}{max(t):>8.3f}")
    ratio = statistics.median(times["isocompute"]) / statistics.median(times["verl"])
    print(f"isocompute / verl median step time: {ratio:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
