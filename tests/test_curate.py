"""Difficulty curation: screening, splits at the paper's thresholds, mixtures, train/val, cache, outputs.

No model here (the answer check starts math-verify worker processes); curation with the tiny model through
verl's rollout machinery (Ray + our hf server) runs end to end in test_sweep_e2e.py.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from pathlib import Path

from verl_isocompute import errors
from verl_isocompute.data import difficulty as dif
from verl_isocompute.data import problem_sets as pset
from verl_isocompute.data import problems as prob
from verl_isocompute.data.arithmetic import to_verl_row
from verl_isocompute.workflow import curate as c
from verl_isocompute.workflow import curate_report as rep
from verl_isocompute.workflow import sample_cache as sc


def _rows(answers):
    return pd.DataFrame([to_verl_row(f"Calculate {i} + 0.", a, "train", i) for i, a in enumerate(answers)])


def _difficulty(counts, k=16):
    ids = [f"p{i:03d}" for i in range(len(counts))]
    frame = pd.DataFrame({"problem_id": ids, "data_source": "x", "k": k, "correct": counts,
                          "mean_response_tokens": 10.0, "truncated": 0.0})
    frame.insert(4, "avg@k", frame["correct"] / k)
    frame.insert(5, "pass@k", (frame["correct"] > 0).astype(float))
    return frame


# --- screening --------------------------------------------------------------------------------------


def test_screen_counts_and_skips_bad_problems():
    rows = _rows(["3", "4", "\\frac{1}{", "5"]).to_dict("records")
    rows[1]["reward_model"] = {"style": "rule", "ground_truth": None}  # no ground truth
    rows.append(dict(rows[0]))  # a duplicate of row 0
    rows.append({**rows[3], "prompt": "not chat messages"})
    df = pd.DataFrame(rows)
    problems, skipped = pset.screen(df)
    assert len(problems) == 2 and problems["problem_id"].is_unique
    reasons = dict(zip(skipped["row"], skipped["reason"]))
    assert reasons == {1: "no ground truth", 2: "unparsable ground truth", 4: "duplicate", 5: "prompt is not a list of chat messages"}
    assert skipped.loc[skipped["row"] == 4, "detail"].item() == "same prompt and answer as row 0"
    # without the answer check the unparsable reference is kept (rewards that are not math-verify)
    problems, skipped = pset.screen(df, check_answers=False)
    assert len(problems) == 3 and "unparsable ground truth" not in set(skipped["reason"])


def test_problem_id_is_stable_and_depends_on_prompt_and_answer():
    messages = [{"role": "user", "content": "1+1?"}]
    assert prob.problem_id(messages, "2") == prob.problem_id([dict(messages[0])], "2")
    assert prob.problem_id(messages, "2") != prob.problem_id(messages, "3")
    assert len(prob.problem_id(messages, "2")) == 16
    # parquet gives numpy arrays of dicts back: same id
    df = _rows(["2"])
    assert prob.messages_of(np.array(df["prompt"][0], dtype=object)) == df["prompt"][0]


def test_load_parquet_requires_verl_columns(tmp_path):
    pd.DataFrame({"question": ["1+1"], "answer": ["2"]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(errors.CurateError, match="no 'prompt' column"):
        pset.load_parquet([tmp_path / "x.parquet"])
    with pytest.raises(errors.CurateError, match="does not exist"):
        pset.load_parquet([tmp_path / "missing.parquet"])


def test_generate_gives_verl_rows():
    df = pset.generate("basic_arithmetic", 5, seed=3, max_digits=2)
    assert len(df) == 5 and set(df["data_source"]) == {"reasoning_gym/basic_arithmetic"}
    assert all(prob.ground_truth_of(rm) for rm in df["reward_model"])
    with pytest.raises(errors.CurateError, match="no_such_task"):
        pset.generate("no_such_task", 5)


# --- splits, mixtures, train/val --------------------------------------------------------------------


def test_splits_use_the_papers_thresholds_at_k16():
    # one problem per count c = 0..16
    splits = dif.assign_splits(_difficulty(list(range(17))))
    counts = lambda ids: sorted(int(i[1:]) for i in ids)  # noqa: E731
    assert counts(splits["easy"]) == [5, 6, 7, 8, 9]  # avg@16 in [0.3, 0.6]
    assert counts(splits["hard"]) == [0, 1]  # avg@16 in [0, 1/16]
    assert counts(splits["extremely_hard"]) == [0]  # pass@16 = 0
    assert counts(splits["very_easy"]) == [10, 11, 12, 13, 14]  # [0.6, 0.9]


def test_thresholds_are_configurable_and_checked():
    splits = dif.assign_splits(_difficulty(list(range(17))), dif.Thresholds(easy=(0.25, 0.75), hard=(0.0, 0.0)))
    assert len(splits["easy"]) == 9 and len(splits["hard"]) == 1
    with pytest.raises(errors.CurateError, match="--easy 0.7,0.3"):
        dif.Thresholds(easy=(0.7, 0.3))


def test_mixtures_keep_proportions_and_never_repeat_a_problem():
    # 600 hard (c = 0), 300 easy (c = 6), 300 very easy (c = 12)
    splits = dif.assign_splits(_difficulty([0] * 600 + [6] * 300 + [12] * 300))
    mixes = dif.build_mixtures(splits, size=1000, seed=0)
    assert mixes["hard_only"].counts == {"hard": 600} and "only 600 hard" in mixes["hard_only"].note
    assert mixes["dual"].counts == {"hard": 300, "easy": 300}  # easy limits dual to 600
    assert mixes["tri"].counts == {"hard": 500, "easy": 250, "very_easy": 250}
    assert len(mixes["tri"].ids) == 1000 and mixes["tri"].note == "1000 problems"
    for mix in mixes.values():
        assert len(set(mix.ids)) == len(mix.ids)
    hard = set(splits["hard"])
    assert sum(i in hard for i in mixes["tri"].ids) == 500
    # the same seed gives the same mixture
    assert dif.build_mixtures(splits, size=1000, seed=0)["tri"].ids == mixes["tri"].ids


def test_overlapping_pools_give_a_problem_to_one_component():
    # with k = 5, 3/5 = 0.6 is both easy and very easy
    splits = dif.assign_splits(_difficulty([3] * 10 + [0] * 10, k=5))
    assert set(splits["easy"]) == set(splits["very_easy"])
    tri = dif.build_mixtures(splits, size=100)["tri"]
    assert tri.counts == {"hard": 0, "easy": 0, "very_easy": 0} and "very_easy" in tri.note
    dual = dif.build_mixtures(splits, size=100)["dual"]
    assert dual.counts == {"hard": 10, "easy": 10} and len(set(dual.ids)) == 20


def test_train_val_split_is_disjoint_and_scaled_for_small_sets():
    ids = [f"p{i}" for i in range(2000)]
    train, val = dif.train_val_split(ids)
    assert len(val) == 300 and len(train) == 1700 and not set(train) & set(val)
    assert len(dif.train_val_split(ids[:1000])[1]) == 200  # at most 20% of the set
    train, val = dif.train_val_split(ids[:40])
    assert len(val) == 8 and len(train) == 32  # 20% of a small set
    train, val = dif.train_val_split(ids[:3])
    assert len(val) == 1 and len(train) == 2
    assert dif.train_val_split(ids[:1]) == ([], [])


# --- cache and outputs ------------------------------------------------------------------------------


def test_cache_resumes_ignores_a_cut_line_and_refuses_other_settings(tmp_path):
    settings = {"model": "m", "k": 4, "temperature": 0.6}
    cache = sc.SampleCache(tmp_path, settings)
    cache.append({"id": "a", "k": 4, "correct": 1})
    cache.append({"id": "b", "k": 4, "correct": 0})
    cache.close()
    with open(tmp_path / sc.SAMPLES_FILE, "a") as f:
        f.write('{"id": "c", "k": 4, "corr')  # killed mid-write
    assert set(sc.SampleCache(tmp_path, settings).load()) == {"a", "b"}
    with pytest.raises(errors.CurateError, match=r"k: 4 -> 16.*--restart"):
        sc.SampleCache(tmp_path, {**settings, "k": 16})
    assert sc.SampleCache(tmp_path, {**settings, "k": 16}, restart=True).load() == {}


def test_write_outputs_writes_every_file(tmp_path):
    problems, _ = pset.screen(_rows([str(i) for i in range(40)]), check_answers=False)
    counts = [0] * 15 + [1] * 5 + [6] * 10 + [12] * 10
    records = {pid: {"id": pid, "k": 16, "correct": n, "response_tokens": [5] * 16, "truncated": 2}
               for pid, n in zip(problems["problem_id"], counts)}
    difficulty = dif.difficulty_table(problems, records, 16)
    assert difficulty["avg@k"].tolist() == [n / 16 for n in counts]
    assert difficulty["pass@k"].tolist() == [float(n > 0) for n in counts]
    skipped = pd.DataFrame([{"row": 40, "reason": "no ground truth", "detail": ""}])
    summary = rep.write_outputs(tmp_path, problems, difficulty, skipped, {"k": 16, "model": "m"}, mixture_size=20)
    assert summary["splits"] == {"easy": 10, "hard": 20, "extremely_hard": 15, "very_easy": 10}
    assert summary["mixtures"]["tri"]["size"] == 20 and summary["mixtures"]["tri"]["counts"] == {"hard": 10, "easy": 5, "very_easy": 5}
    for name in ("difficulty.parquet", "difficulty.png", "report.md", "skipped.parquet", "summary.json",
                 "splits/easy.parquet", "splits/hard.parquet", "splits/extremely_hard.parquet", "splits/very_easy.parquet",
                 "mixtures/hard_only.parquet", "mixtures/dual.parquet", "mixtures/tri.parquet",
                 "sets/hard/train.parquet", "sets/hard/val.parquet", "sets/tri/train.parquet"):
        assert (tmp_path / name).is_file(), name
    hard = pd.read_parquet(tmp_path / "splits" / "hard.parquet")
    assert len(hard) == 20 and set(hard.columns) >= {"prompt", "reward_model", "data_source", "extra_info"}
    assert all(e["difficulty_avg_at_k"] <= 1 / 16 for e in hard["extra_info"])
    train, val = (pd.read_parquet(tmp_path / "sets" / "hard" / f"{s}.parquet") for s in ("train", "val"))
    assert len(val) == 4 and len(train) == 16
    ids = lambda f: {e["difficulty_id"] for e in f["extra_info"]}  # noqa: E731
    assert not ids(train) & ids(val)
    report = (tmp_path / "report.md").read_text()
    assert "| no ground truth | 1 |" in report and "| hard | avg@16 in [0, 0.0625] | 20 |" in report


def test_tune_split_is_disjoint_and_leaves_the_validation_problems_as_they_were(tmp_path):
    problems, _ = pset.screen(_rows([str(i) for i in range(40)]), check_answers=False)
    records = {pid: {"id": pid, "k": 16, "correct": 6, "response_tokens": [5] * 16, "truncated": 0}
               for pid in problems["problem_id"]}  # all 40 easy
    difficulty = dif.difficulty_table(problems, records, 16)

    def split(out, **kwargs):
        summary = rep.write_outputs(out, problems, difficulty, pd.DataFrame(columns=["row", "reason", "detail"]),
                                  {"k": 16, "model": "m"}, sets=("easy",), val_size=8, **kwargs)
        files = {s: out / "sets" / "easy" / f"{s}.parquet" for s in ("train", "val", "tune")}
        ids = {s: [e["difficulty_id"] for e in pd.read_parquet(f)["extra_info"]] for s, f in files.items() if f.is_file()}
        return summary, ids

    plain, without = split(tmp_path / "plain")
    tuned, ids = split(tmp_path / "tuned", tune_size=10)
    assert "tune" not in without and plain["train_val"]["easy"] == {"train": 32, "val": 8}
    assert tuned["train_val"]["easy"] == {"train": 22, "val": 8, "tune": 10}
    assert ids["val"] == without["val"]  # choosing settings on a tuning split never moves the held-out problems
    assert set(ids["tune"]) | set(ids["train"]) == set(without["train"])
    assert not set(ids["tune"]) & set(ids["train"]) and not set(ids["tune"]) & set(ids["val"])
    assert "| easy | 22 | 8 | 10 |" in (tmp_path / "tuned" / "report.md").read_text()


def test_negative_tune_size_is_refused():
    with pytest.raises(errors.CurateError, match="--tune-size must be at least 0"):
        c.CurateConfig(out=Path("x"), generate="basic_arithmetic", tune_size=-1).check()


# --- the command ------------------------------------------------------------------------------------


def _curate(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", "curate", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_dataset_without_usable_problems_is_a_clear_error(tmp_path):
    df = _rows(["1", "2"])
    df["reward_model"] = [{"style": "rule", "ground_truth": None}] * 2
    df.to_parquet(tmp_path / "bad.parquet")
    proc = _curate("--data", tmp_path / "bad.parquet", "--out", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert "no usable problem among 2: {'no ground truth': 2}" in proc.stderr and "Traceback" not in proc.stderr


def test_verl_interfaces_curation_relies_on():
    """Curation drives verl's standalone rollout path; if verl moves one of these, this says which."""
    import inspect

    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env  # noqa: F401
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.workers.rollout.replica import RolloutReplica, get_rollout_replica_class  # noqa: F401

    assert inspect.iscoroutinefunction(RolloutReplica.init_standalone)
    assert isinstance(RolloutReplica.server_handle, property)
    assert list(inspect.signature(get_custom_reward_fn).parameters) == ["config"]


def test_the_command_line_defaults_are_the_settings_defaults(tmp_path):
    """isocompute curate's flags default to CurateConfig's values, written once (a library caller and the
    command get the same curation)."""
    from verl_isocompute.commands.cli import parse_args
    from verl_isocompute.commands.curate import settings_from_args

    args = parse_args(["curate", "--generate", "basic_arithmetic", "--out", str(tmp_path)])
    assert settings_from_args(args) == c.CurateConfig(out=tmp_path, generate="basic_arithmetic")
