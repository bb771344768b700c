"""Plugin overhead: median step time of our recipe vs plain verl GRPO, identical settings, one run each.

Two real CPU verl runs of the hard recipe on the tiny model (same data, batch, seeds, sampling):

- ``isocompute``: our trainer (loss installation, masks, compute accounting, run log, unbiased metrics)
  and our ``isocompute_grpo`` estimator, with the regulariser-only zero-variance filter on;
- ``verl``: verl's own ``sync`` trainer and ``grpo`` estimator.

The first step of each run is dropped (warm-up). Runs go in ABBA order (``--repeats 2``) so slow drift of
the machine's load hits both variants alike; step times of all runs of a variant are pooled. Printed: the
median and the minimum step time of each, and their ratios. Target: isocompute / verl median <= 1.05.
On a shared machine the minimum is the steadier figure; a large max means another process took the CPU.

``--imports N`` measures instead what the plugin adds to the start of every verl process of a CPU run: the CPU
time of ``import verl`` in a fresh process under ``VERL_PLATFORM=cpu``, with the plugin and without
(``VERL_USE_EXTERNAL_PLUGINS=none``), N alternating pairs; printed: the medians and their ratio. A run starts
several such processes (the driver, TaskRunner, workers, reward loop, router), so this is paid several times a run.

    python benchmarks/bench_plugin_overhead.py [--steps 8] [--repeats 2]
    python benchmarks/bench_plugin_overhead.py --imports 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def import_cpu_seconds(plugins: str) -> float:
    """CPU time (user + system) of ``import verl`` in a fresh process on the CPU platform."""
    env = {**os.environ, "VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_PLUGINS": plugins}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-W", "ignore", "-c", "import verl"], env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imports(pairs: int) -> None:
    times: dict[str, list[float]] = {"with plugin": [], "without": []}
    for i in range(pairs):
        for name in (list(times) if i % 2 == 0 else list(times)[::-1]):
            times[name].append(import_cpu_seconds("auto" if name == "with plugin" else "none"))
    for name, t in times.items():
        print(f"import verl, {name:<12} CPU s: median {statistics.median(t):.2f} ({', '.join(f'{x:.2f}' for x in t)})")
    ratio = statistics.median(times["with plugin"]) / statistics.median(times["without"])
    print(f"with / without: {ratio:.3f} (VERL_PLATFORM=cpu, {pairs} pairs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2, help="runs per variant, in ABBA order")
    parser.add_argument("--imports", type=int, metavar="N", help="measure `import verl` with and without the plugin instead, N pairs")
    args = parser.parse_args()
    if args.imports:
        imports(args.imports)
        return
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
