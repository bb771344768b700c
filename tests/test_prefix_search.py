"""The prefix search's pure parts: problems and ladders, records -> prefixes table, spend, resume bookkeeping,
outputs, the choice read back by the guided dataset, and the command's bad input. Sampling with verl's
rollout servers runs end to end in test_prefix_search_e2e.py."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from verl_isocompute.data.problems import problem_id
from verl_isocompute.data.worked import worked_arithmetic
from verl_isocompute.errors import CurateError
from verl_isocompute.guided import placement as G
from verl_isocompute.guided import search_tables as ps
from verl_isocompute.guided import spend
from verl_isocompute.guided.prefixes import prefix_ladder
from verl_isocompute.guided.search_rules import next_rungs
from verl_isocompute.workflow.sample_cache import SampleCache

SOLUTION = "a = 1\nb = 2\nc = 3\nd = 4\nThe answer is \\boxed{10}.\n"


def problem(pid: str, solution: str | None = SOLUTION, reason: str | None = None) -> ps.Problem:
    ladder = () if reason else tuple(prefix_ladder(solution, 0.8))
    return ps.Problem(pid, [{"role": "user", "content": pid}], "10", ladder=ladder, reason=reason)


def rec(pid: str, rung: int, correct: int, k: int = 4, tokens: int = 5) -> dict:
    return {"id": pid, "rung": rung, "k": k, "correct": correct, "response_tokens": [tokens] * k}


def test_problems_of_cuts_ladders_and_names_why_a_problem_has_none():
    frame = worked_arithmetic(3, terms=4)
    frame["extra_info"] = [{**e, "solution": None} if i == 1 else e for i, e in enumerate(frame["extra_info"])]
    frame["prompt"] = [[{"role": "system", "content": "only a system turn"}] if i == 2 else p for i, p in enumerate(frame["prompt"])]
    frame.insert(0, "problem_id", ["p0", "p1", "p2"])
    user = ps.problems_of(frame, "extra_info.solution", G.USER, 0.6)
    assert [p.reason for p in user] == [None, "missing", G.NO_USER_TURN]
    assert [x.text for x in user[0].ladder] == [x.text for x in prefix_ladder(frame.loc[0, "extra_info"]["solution"], 0.6)]
    assistant = ps.problems_of(frame, "extra_info.solution", G.ASSISTANT, 0.6)
    assert assistant[2].reason is None  # the assistant placement needs no user turn
    assert ps.problems_of(frame, "extra_info.nope", G.USER, 0.6)[0].reason == "missing"


def test_spend_is_every_records_k_and_response_tokens():
    records = [rec("a", 1, 0, k=4, tokens=3), rec("a", 2, 1, k=4, tokens=7), rec("b", 1, 2, k=8, tokens=1)]
    assert ps.spend_of(records) == spend.Spend(16, 4 * 3 + 4 * 7 + 8 * 1)
    assert ps.spend_of([]) == spend.Spend(0, 0)


def test_prefixes_table_pope_statuses_rungs_and_guided_avg():
    problems = [problem("chosen2"), problem("exhausted"), problem("pending"), problem("skipped", None, "one_step")]
    n = len(problems[0].ladder)
    records = [rec("chosen2", 1, 0), rec("chosen2", 2, 3)] + [rec("exhausted", r, 0) for r in range(1, n + 1)] + [rec("pending", 1, 0)]
    table = ps.prefixes_table(problems, records, placement=G.ASSISTANT).set_index("problem_id")
    assert list(table["status"]) == ["chosen", "exhausted", "pending", "skipped"]
    assert list(table["reason"]) == ["", ps.NO_SUCCESS, "", "one_step"]
    assert table.at["chosen2", "rung"] == 2 and table.at["chosen2", "guided_avg_at_k"] == 0.75
    assert table.at["chosen2", "prefix"] == "a = 1\nb = 2\n" and table.at["chosen2", "prefix_fraction"] == pytest.approx(12 / len(SOLUTION))
    assert table.at["exhausted", "rungs_sampled"] == n == table.at["exhausted", "n_rungs"]
    assert set(table["placement"]) == {G.ASSISTANT}


def test_prefixes_table_band_rule_and_later_records_replace_earlier():
    problems = [problem("x"), problem("y")]
    records = [rec("x", 1, 0), rec("x", 2, 2), rec("y", 1, 4), rec("y", 1, 1)]  # y's rung 1 sampled again: 1/4
    table = ps.prefixes_table(problems, records, rule="band", band=(0.25, 0.75)).set_index("problem_id")
    assert table.at["x", "rung"] == 2 and table.at["x", "guided_avg_at_k"] == 0.5
    assert table.at["y", "rung"] == 1 and table.at["y", "guided_avg_at_k"] == 0.25


def test_resume_continues_from_the_cache_and_refuses_other_settings(tmp_path):
    identity = {"model": "m", "k": 4, "placement": "user", "solution_key": "extra_info.solution"}
    cache = SampleCache(tmp_path, identity, samples_file=ps.RUNGS_FILE, settings_file=ps.SETTINGS_FILE)
    for r in (rec("a", 1, 0), rec("b", 1, 2)):
        cache.append(r)
    cache.close()
    with open(tmp_path / ps.RUNGS_FILE, "a") as f:
        f.write('{"id": "a", "rung": 2, "k"')  # a line cut by a kill
    again = SampleCache(tmp_path, identity, samples_file=ps.RUNGS_FILE, settings_file=ps.SETTINGS_FILE)
    records = again.outcomes()
    assert [(r["id"], r["rung"]) for r in records] == [("a", 1), ("b", 1)]
    assert next_rungs({"a": 3, "b": 3}, records) == {"a": 2}  # b is decided; a climbs
    with pytest.raises(CurateError, match="placement: 'user' -> 'assistant'.*--restart"):
        SampleCache(tmp_path, {**identity, "placement": "assistant"}, samples_file=ps.RUNGS_FILE, settings_file=ps.SETTINGS_FILE)
    fresh = SampleCache(tmp_path, {**identity, "k": 8}, restart=True, samples_file=ps.RUNGS_FILE, settings_file=ps.SETTINGS_FILE)
    assert fresh.outcomes() == []
    assert not (tmp_path / "samples.jsonl").exists()  # curation's cache file is another file


def test_outputs_and_spend_are_recomputed_not_added(tmp_path):
    problems = [problem("a"), problem("b", None, "missing")]
    records = [rec("a", 1, 0), rec("a", 2, 1)]
    table = ps.prefixes_table(problems, records)
    settings = {"model": "m", "rollout": "hf", "k": 4, "temperature": 0.6, "top_p": 1.0, "max_response_length": 8,
                "reward": "r", "solution_key": "extra_info.solution", "placement": "user", "rule": "pope",
                "band": [0.25, 0.75], "max_fraction": 0.8}
    screened = pd.DataFrame({"row": [5], "reason": ["no ground truth"], "detail": [""]})
    for _ in range(2):  # a resumed run writes the same totals again
        summary = ps.write_outputs(tmp_path, table, records, screened, settings, rounds=2)
    assert spend.read(tmp_path) == {spend.PREFIX_SEARCH: spend.Spend(8, 40)}
    assert summary["status"] == {"chosen": 1, "skipped": 1} and summary["screened_out"] == {"no ground truth": 1}
    assert summary["chosen_rungs"] == {2: 1}
    assert pd.read_parquet(tmp_path / ps.PREFIXES_FILE).equals(table)
    report = (tmp_path / "report.md").read_text()
    assert "8 rollouts" in report and "skipped: missing | 1" in report
    assert (tmp_path / ps.PLOT_FILE).read_bytes()[:4] == b"\x89PNG"


def _searched_table(frame: pd.DataFrame, placement: str) -> pd.DataFrame:
    """A search table for ``frame``: problem 0 chosen at rung 2, problem 1 exhausted, problem 2 skipped."""
    ids = [problem_id(list(p), rm["ground_truth"]) for p, rm in zip(frame["prompt"], frame["reward_model"])]
    problems = [ps.Problem(pid, [], "", ladder=tuple(prefix_ladder(i["solution"], 0.8)))
                for pid, i in zip(ids, frame["extra_info"])]
    problems[2].reason, problems[2].ladder = "one_step", ()
    records = [rec(ids[0], 1, 0), rec(ids[0], 2, 1)] + [rec(ids[1], r, 0) for r in range(1, len(problems[1].ladder) + 1)]
    return ps.prefixes_table(problems, records, placement=placement)


def test_guided_dataset_uses_the_searched_prefix_and_counts_the_rest(tmp_path):
    frame = worked_arithmetic(4, terms=5)
    _searched_table(frame.iloc[:3], G.ASSISTANT).to_parquet(tmp_path / ps.PREFIXES_FILE)
    chosen = ps.read_chosen(tmp_path, G.ASSISTANT)
    result = G.guided_dataset(frame, "extra_info.solution", placement=G.ASSISTANT, searched=chosen)
    assert result.guided == 1 and dict(result.skipped) == {G.NO_PREFIX_FOUND: 1, "one_step": 1, G.NOT_SEARCHED: 1}
    guided = result.frame[[i["guided"] for i in result.frame["extra_info"]]].iloc[0]
    expected = prefix_ladder(frame.loc[0, "extra_info"]["solution"], 0.8)[1]
    assert guided["prompt"][-1]["content"] == expected.text and guided["extra_info"]["prefix_fraction"] == pytest.approx(expected.fraction)
    with pytest.raises(ValueError, match="searched with placement assistant, not user"):
        ps.read_chosen(tmp_path / ps.PREFIXES_FILE, G.USER)
    with pytest.raises(ValueError, match="no prefixes.parquet there"):
        ps.read_chosen(tmp_path / "nowhere", G.USER)


def test_recipe_key_and_guide_command_take_the_search(tmp_path):
    from verl_isocompute.training.guided_mixture import GuideConfig

    frame = worked_arithmetic(3, terms=5)
    frame.to_parquet(tmp_path / "train.parquet")
    _searched_table(frame, G.USER).to_parquet(tmp_path / ps.PREFIXES_FILE)
    assert GuideConfig(prefixes=str(tmp_path)).build(frame).guided == 1
    proc = subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", "guide", tmp_path / "train.parquet",
                           "-o", tmp_path / "g.parquet", "--prefixes", tmp_path], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "3 unguided + 1 guided rows" in proc.stdout and "no_prefix_found 1" in proc.stdout


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", "prefix-search", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def _refused(capsys, *args) -> tuple[int, str]:
    """``isocompute prefix-search ARGS`` in this process, for input refused before the recipe is composed (nothing
    of verl is imported): the exit status and stderr. A traceback would be an exception raised here."""
    from verl_isocompute.commands.cli import main

    return main(["prefix-search", *map(str, args)]), capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--k", "0"], "--k must be at least 1, got 0"),
    (["--max-fraction", "1.5"], "--max-fraction must be in (0, 1]"),
    (["--band", "0.8", "0.2"], "--band 0.8 0.2: need 0 <= LOW <= HIGH <= 1"),
])
def test_bad_settings_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    worked_arithmetic(2).to_parquet(tmp_path / "d.parquet")
    rc, err = _refused(capsys, tmp_path / "d.parquet", "-o", tmp_path / "out", *args)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_missing_file_and_wrong_solution_key_are_clear_errors(tmp_path, capsys):
    rc, err = _refused(capsys, tmp_path / "none.parquet", "-o", tmp_path / "out")
    assert rc == 2 and "none.parquet not found" in err
    worked_arithmetic(2).to_parquet(tmp_path / "d.parquet")
    rc, err = _refused(capsys, tmp_path / "d.parquet", "-o", tmp_path / "out", "--solution-key", "extra_info.sol")
    assert rc == 2 and "no problem has a usable prefix at --solution-key extra_info.sol ({'missing': 2})" in err
    assert not (tmp_path / "out").exists()  # nothing written, nothing started


@pytest.mark.e2e  # the command in a fresh process, past its config (imports verl)
def test_overrides_may_follow_the_options(tmp_path):
    worked_arithmetic(2).to_parquet(tmp_path / "d.parquet")
    proc = _cli(tmp_path / "d.parquet", "-o", tmp_path / "out", "--k", "2", "isocompute.model=nosuch")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr  # (verl's import warnings come first)
    assert proc.stderr.strip().splitlines()[-1].startswith("isocompute prefix-search: error: unknown model 'nosuch'")


def test_a_stop_before_any_sample_names_no_file(tmp_path, monkeypatch, capsys):
    """SIGTERM before the first rung finished: the line says nothing was sampled (it used to name a
    rungs.jsonl that did not exist); after some, where they are kept."""
    import signal

    from verl_isocompute.commands.cli import main
    from verl_isocompute.workflow import prefix_search as driver
    from verl_isocompute.workflow.launch import Interrupted

    worked_arithmetic(2).to_parquet(tmp_path / "d.parquet")

    def stopped(settings, **_):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(driver, "prefix_search", stopped)
    assert main(["prefix-search", str(tmp_path / "d.parquet"), "-o", str(tmp_path / "out")]) == 143
    err = capsys.readouterr().err
    assert "stopped by SIGTERM; Ray is stopped; nothing was sampled yet: rerun the same command" in err and "rungs.jsonl" not in err
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ps.RUNGS_FILE).write_text('{"id": "a"}\n')
    assert main(["prefix-search", str(tmp_path / "d.parquet"), "-o", str(tmp_path / "out")]) == 143
    assert f"kept the rungs sampled so far in {tmp_path / 'out' / ps.RUNGS_FILE}" in capsys.readouterr().err
