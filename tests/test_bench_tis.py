"""The truncated-importance-sampling figures of the README (benchmarks/bench_tis.py; issue 34): the table is what
verl's logged rollout-correction metrics of the committed runs give, and the summary counts what it names."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_tis  # noqa: E402

PUBLISHED = ROOT / "docs" / "evidence" / "tis"


def test_the_committed_report_is_what_the_committed_runs_give(tmp_path):
    committed = (PUBLISHED / "report.md").read_text()
    copy = tmp_path / "tis"
    shutil.copytree(PUBLISHED, copy)
    (copy / "report.md").unlink()
    assert bench_tis.report(copy) == committed


def test_the_readme_quotes_the_report_line_for_line():
    report = (PUBLISHED / "report.md").read_text()
    marker = "<!-- from docs/evidence/tis/report.md -->\n"
    blocks = [part.split("\n\n", 1)[0] for part in (ROOT / "README.md").read_text().split(marker)[1:]]
    assert len(blocks) == 1 and blocks[0].count("\n") >= 7
    assert blocks[0] in report


def test_both_arms_ran_ten_to_twenty_bf16_steps_with_the_cap_of_2():
    for arm in bench_tis.ARMS:
        rows = bench_tis.steps_of(PUBLISHED / arm)
        assert 10 <= len(rows) <= 20
        assert all(r["rollout_is_max"] <= 2.0 + 1e-6 for r in rows)  # the weights the loss used are truncated at 2
        info = json.loads((PUBLISHED / arm / bench_tis.RUN_FILE).read_text())
        assert f"actor_rollout_ref.rollout.name={arm}" in info["command"]
        assert info["machine"]["cpu_capability"] and "avx512_bf16" in info["machine"]["native_bf16"]


def _write(run_dir: Path, shares: list[float]) -> None:
    run_dir.mkdir(parents=True)
    lines = []
    for step, share in enumerate(shares, 1):
        data = {f"{bench_tis.PREFIX}{k}": v for k, v in {
            "rollout_is_mean": 1.0 + step / 1000, "rollout_is_max": 1.5, "rollout_is_min": 0.6 - step / 100,
            "rollout_is_seq_max": 1.02, "kl": 1e-3 * step, "rollout_is_ratio_fraction_high": share}.items()}
        lines.append(json.dumps({"step": step, "data": {"critic/score/mean": 0.5, **data}}))
    lines.append(json.dumps({"step": len(shares), "data": {"val/strict_acc": 0.5}}))  # a row without the metrics
    (run_dir / "verl_metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_the_summary_counts_capped_steps_and_spans_over_steps(tmp_path):
    _write(tmp_path / "hf", [0.0, 0.002, 0.0, 0.0005])
    summary = bench_tis.summarize(bench_tis.steps_of(tmp_path / "hf"))
    assert summary["steps"] == 4 and summary["steps_capped"] == 2
    assert summary["above_max"] == 0.002 and abs(summary["above_mean"] - 0.000625) < 1e-12
    assert summary["span"]["rollout_is_mean"] == (1.001, 1.004)
    assert summary["span"]["rollout_is_min"] == pytest.approx((0.56, 0.59))
    text = bench_tis.report(tmp_path)
    assert "| steps with any token above the cap of 2 | 2 of 4 |" in text
    assert "| share of tokens above the cap: largest step / mean over steps | 0.20% / 0.062% |" in text


def test_missing_runs_and_runs_without_tis_are_one_line_each(tmp_path, capsys):
    assert bench_tis.main(["--from", str(tmp_path)]) == 2
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "verl_metrics.jsonl").write_text(json.dumps({"step": 1, "data": {"x": 1}}) + "\n")
    assert bench_tis.main(["--from", str(tmp_path)]) == 2
    assert bench_tis.main(["--stage", "run", "--steps", "0", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"bench_tis: error: {tmp_path}: no run directories vllm / hf there; run them first (--stage run)",
                   f"bench_tis: error: {tmp_path / 'vllm' / 'verl_metrics.jsonl'}: no actor/rollout_corr/* metrics; "
                   "the run had no truncated importance sampling",
                   "bench_tis: error: --steps 0: a run needs at least one training step"]


def test_the_report_takes_any_steps_flag_it_does_not_use(tmp_path, capsys):
    """Issue 46: ``--stage report --steps 0`` was refused for a count of training steps only the run stage uses."""
    _write(tmp_path / "hf", [0.0, 0.002])
    assert bench_tis.main(["--stage", "report", "--from", str(tmp_path), "--steps", "0"]) == 0
    assert "| steps with any token above the cap of 2 | 1 of 2 |" in capsys.readouterr().out
