"""The pre-registered n* sweep's committed logs (tests/fixtures/nstar_cpu; docs/EVIDENCE.md section 4): the
registered rule, the fit and the comparison with intervals over seeds give, from those logs, what was recorded
when the sweep was read, and EVIDENCE.md quotes exactly that (tests/nstar_sweep.py says how it is recorded)."""

from __future__ import annotations

import json
import math
import re

import pytest

import nstar_sweep

recorded = pytest.mark.skipif(not nstar_sweep.EXPECTED.is_file(), reason="the n* sweep is not recorded yet (EVIDENCE.md "
                              "section 4, registration 4: read once its ten runs have finished)")


def _close(got, want, path=""):
    """Every leaf of ``got`` that differs from ``want`` (numbers to 1e-6 relative, 1e-9 absolute)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{path}: keys {sorted(got)} != {sorted(want)}"
        return [m for k in want for m in _close(got[k], want[k], f"{path}/{k}")]
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got} != {want}"
        return [m for i, (g, w) in enumerate(zip(got, want)) for m in _close(g, w, f"{path}[{i}]")]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return [] if math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9) else [f"{path}: {got} != {want}"]
    return [] if got == want else [f"{path}: {got!r} != {want!r}"]


@recorded
def test_the_fixture_holds_whole_seeds_of_both_arms_run_to_the_budget():
    import run_files

    cells = sorted(p.name for p in (nstar_sweep.FIXTURE / "cells").iterdir())
    seeds = sorted({c.rsplit("-s", 1)[1] for c in cells})
    assert len(seeds) >= 3 and cells == sorted(f"b8_n{n}-s{s}" for s in seeds for n in (2, 8))
    for cell in cells:
        log = run_files.read_log(nstar_sweep.FIXTURE / "cells" / cell)
        rows = [r for _, r in log.rows if r["step"] > 0]
        n = int(log.header["n"])
        assert [r["rollouts"] for r in rows] == [8 * n * i for i in range(1, len(rows) + 1)]
        assert rows[-1]["rollouts"] == nstar_sweep.BUDGET


@recorded
def test_registration_6s_runs_trained_on_every_problem_once():
    """Registration 6 (seeds 5-10) rests on "every training problem is seen for the first time": checked from each
    run's ``train_problems.jsonl``, not assumed. Every step of the run log names its 8 problems with n rollouts
    each, and no problem id comes back within a run. Seeds 0-4 ran before the file existed."""
    import run_files

    checked = 0
    for cell in sorted((nstar_sweep.FIXTURE / "cells").iterdir()):
        if int(cell.name.rsplit("-s", 1)[1]) < 5:
            continue
        log = run_files.read_log(cell)
        n, steps = int(log.header["n"]), [r["step"] for _, r in log.rows if r["step"] > 0]
        records = [json.loads(line) for line in (cell / "train_problems.jsonl").read_text().splitlines()]
        assert sorted({r["step"] for r in records}) == steps, cell.name
        assert all(r["k"] == n for r in records), cell.name
        assert [sum(r["step"] == s for r in records) for s in steps] == [8] * len(steps), cell.name
        problems = [r["problem"] for r in records]
        assert len(set(problems)) == len(problems) == 8 * len(steps), f"{cell.name}: a problem repeats"
        checked += 1
    assert checked == 12  # seeds 5-10 of both arms: all finished and read


@recorded
def test_the_rule_fit_and_comparison_on_the_logs_are_what_was_recorded(tmp_path):
    expected = json.loads(nstar_sweep.EXPECTED.read_text())
    got = json.loads(json.dumps(nstar_sweep.figures(tmp_path / "fit"), default=float, allow_nan=False))
    moved = _close(got, expected)
    assert not moved, "the n* sweep's figures moved:\n" + "\n".join(moved)
    assert (tmp_path / "fit" / "compare.csv").is_file()  # what `isocompute fit` writes from the same comparison


@recorded
def test_allocate_compare_on_the_sweeps_flat_curve_prints_the_recorded_comparison(tmp_path, capsys):
    """Item 6 of the verdict: `isocompute allocate --compare` at the largest budget, with intervals over seeds.
    n* is 2 at every C the runs cover, so the fit writes a flat curve (before, none: allocate had nothing to
    read); allocate then gives n = 2 and the same per-n rewards and intervals as the recorded comparison."""
    from verl_isocompute.commands import cli
    from verl_isocompute.scaling.pipeline import run_fit

    expected = json.loads(nstar_sweep.EXPECTED.read_text())
    outcome = run_fit([nstar_sweep.FIXTURE / "cells"], tmp_path / "fit", nstar_sweep.options())
    assert outcome.result.n_star_flat == 2 and (tmp_path / "fit" / "curve.json").is_file()
    assert cli.main(["allocate", "--curve", str(tmp_path / "fit" / "curve.json"), "--budget", "960", "--b-problem",
                     "8", "--compare", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["n"], got["steps"], got["rollouts_used"]) == (2, 60, 960)
    rows = {row["n"]: row for row in got["compare"]["rows"]}
    for want in expected["fit"]["compare"]:
        row = rows[want["n"]]
        for key in ("reward", "reward_low", "reward_high", "best_share"):
            assert math.isclose(row[key], want[key], rel_tol=1e-9), (want["n"], key, row[key], want[key])


@recorded
def test_evidence_md_quotes_the_report():
    text = (nstar_sweep.ROOT / "docs" / "EVIDENCE.md").read_text()
    marker = "<!-- from tests/nstar_sweep.py --report -->\n"
    assert text.count(marker) == 1
    block = text.split(marker)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    assert block == nstar_sweep.report()


def _synthetic_sweep(root, seeds=3, gap=0.0, lead8=0.0):
    """Runs shaped as the sweep writes them: n = 2 and n = 8 per seed, 1,024 rollouts, a training reward rising
    from 0.4 by 0.2 over the budget (n = 2 ahead by ``gap`` in the first quarter, n = 8 in the last; n = 8 ahead
    by ``lead8`` throughout), test-set counts at both ends."""
    import numpy as np

    rng = np.random.default_rng(0)
    for s in range(seeds):
        for n in (2, 8):
            cell = root / "cells" / f"b8_n{n}-s{s}"
            cell.mkdir(parents=True)
            rows = [{"header": {"n": n, "b_problem": 8}},
                    {"step": 0, "n": n, "b_problem": 8, "rollouts": 0, "tokens": 0, "epoch": 0.0}]
            for step in range(1, 1024 // (8 * n) + 1):
                c = step * 8 * n
                ahead = (gap if (n == 2 and c <= 256) or (n == 8 and c > 768) else 0.0) + (lead8 if n == 8 else 0.0)
                reward = float(np.clip(0.4 + 0.2 * c / 1024 + ahead + rng.normal(0, 0.02), 0, 1))
                rows.append({"step": step, "n": n, "b_problem": 8, "rollouts": c, "tokens": 0, "epoch": 0.0,
                             "train/reward": reward})
            (cell / "isocompute.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
            counts = [{"step": st, "data_source": "x", "problem": f"p{i}", "k": 4, "correct": (i + st + s) % 5,
                       "answered": 4, "echo": 0, "lenient": (i + st + s) % 5} for st in (0, 1024 // (8 * n)) for i in range(8)]
            (cell / "validation_problems.jsonl").write_text("".join(json.dumps(x) + "\n" for x in counts))


def test_the_recorder_reads_a_sweep_into_the_rule_the_fit_and_the_report(tmp_path, monkeypatch):
    """The fixture's tooling on runs of known shape: n = 2 ahead by 0.1 in the first quarter, n = 8 in the last, so
    D_q1 ~ +0.1, D_q4 ~ -0.1 and Delta ~ -0.2 (the paper's direction); recorded, reported and re-checked as the
    committed sweep will be."""
    _synthetic_sweep(tmp_path, gap=0.1)
    monkeypatch.setattr(nstar_sweep, "FIXTURE", tmp_path)
    monkeypatch.setattr(nstar_sweep, "EXPECTED", tmp_path / "expected.json")
    saved = nstar_sweep.record()
    verdict = saved["verdict"]
    assert verdict["seeds"] == [0, 1, 2]
    assert verdict["D_q1"]["mean"] == pytest.approx(0.1, abs=0.02) and verdict["D_q4"]["mean"] == pytest.approx(-0.1, abs=0.02)
    assert verdict["Delta"]["high"] < 0 and verdict["verdict"] == "n* rises with C"
    compare = {row["n"]: row for row in saved["fit"]["compare"]}
    assert set(compare) == {2, 8} and all(row["resamples"] > 0 for row in compare.values())
    assert compare[2]["best_share"] + compare[8]["best_share"] == pytest.approx(1.0)
    assert set(saved["test_set"]["strict_change_over_seeds"]) == {"2", "8"}
    text = nstar_sweep.report()
    assert text.splitlines()[0] == "verdict: n* rises with C (seeds [0, 1, 2], budget 1024 rollouts)"
    assert "compare at C = 960, n = 2: reward" in text and "test set, n = 8: strict accuracy change" in text
    again = json.loads(json.dumps(nstar_sweep.figures(), default=float, allow_nan=False))
    assert not _close(again, json.loads((tmp_path / "expected.json").read_text()))


def test_every_resample_of_a_flat_sweep_is_refitted(tmp_path, monkeypatch):
    """Where the two arms do not differ, each n's curve sits on a flat ridge (C_mid not identified) and a refit from
    the full-data curve needs hundreds of damped steps. Every resample must still count: a refit cut short is left
    out of the intervals, and which ones are cut short is not random (100 steps left out ~40% of these)."""
    _synthetic_sweep(tmp_path, seeds=5, gap=0.0)
    monkeypatch.setattr(nstar_sweep, "FIXTURE", tmp_path)
    requested = nstar_sweep.options().bootstrap
    # a resample counts in the comparison only when every n's refit converged on it
    assert [row["resamples"] for row in nstar_sweep.figures()["fit"]["compare"]] == [requested, requested]


@pytest.mark.parametrize("gap, lead8, edge", [(0.0, 0.15, True), (0.1, 0.0, False)])
def test_a_change_of_n_star_only_where_a_larger_n_starts_is_named(tmp_path, gap, lead8, edge):
    """n = 8's first step spends 64 rollouts and n = 2's 16, so below C = 64 only n = 2 was run and is n*. With
    n = 8 ahead wherever it was run, the envelope still goes from 2 to 8 at C = 64 and a sigmoid fits that: the fit
    must say the change is where n = 8's runs begin, not a crossing. Where n = 8 overtakes n = 2 inside both
    ranges (the paper's shape), it must not."""
    from verl_isocompute.scaling.pipeline import run_fit

    _synthetic_sweep(tmp_path, seeds=3, gap=gap, lead8=lead8)
    result = run_fit([tmp_path / "cells"], None, nstar_sweep.options()).result
    assert result.curve is not None  # n* changes on the grid either way, so a sigmoid is fitted
    named = [w for w in result.warnings if w.startswith("n* changes only where the runs of an n begin or end")]
    assert bool(named) == edge
    if edge:  # the first value of the fit's grid (20 a decade) at or past 64
        at = float(re.search(r"\(near C = ([0-9.e+]+)[,)]", named[0]).group(1))
        assert 64 <= at <= 64 * 10 ** (1 / 20) * 1.01
