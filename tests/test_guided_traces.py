"""PrefixRL traces (verl_isocompute.guided.traces): the pass@K stopping rule, resuming rounds from the cache,
the traces file (cut by a kill, then appended to), the trace chosen per problem, matching rows by problem id,
``isocompute guide --traces`` and ``isocompute.guided.traces``, and the spend recomputed from the cache."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf
from test_guided_placement import frame

from verl_isocompute import errors
from verl_isocompute.commands.cli import main
from verl_isocompute.data import problems as prob
from verl_isocompute.guided import spend
from verl_isocompute.guided import traces as T
from verl_isocompute.guided.placement import ASSISTANT, NO_TRACE, USER
from verl_isocompute.training.guided_mixture import GuideConfig, prepare_guided
from verl_isocompute.workflow import curate as c
from verl_isocompute.workflow import sample_cache as sc

TRACE = "Step one: 2x = 6.\nSo x = 3.\nThen x + 1 = 4.\nCheck 4 - 1 = 3.\nYes.\nThe answer is 4.\n"


# --- the stopping rule, and resuming it from the cache -----------------------------------------------


@pytest.mark.parametrize(("taken", "found", "pass_k", "expected"), [
    (4, 0, 16, 4),  # no success yet: a round of k
    (12, 0, 16, 4),
    (14, 0, 16, 2),  # the last round is cut to reach K exactly
    (16, 0, 16, 0),  # K samples in all: stop
    (8, 1, 16, 0),  # the first success stops the problem
    (4, 0, None, 0),  # no --pass-k: never
])
def test_rejection_round_stops_at_the_first_success_or_k_samples(taken, found, pass_k, expected):
    assert T.rejection_round(4, pass_k, taken, found) == expected


def test_next_round_resumes_from_the_cache_records():
    assert sc.next_round(sc.progress_of(None, []), 4, 12) == (0, 4)  # not curated: curation's k first
    record = {"id": "p", "k": 4, "correct": 0}
    one = [{"id": "p", "k": 4, "correct": 0, "round": 1}]
    assert sc.next_round(sc.progress_of(record, []), 4, 12) == (1, 4)
    assert sc.next_round(sc.progress_of(record, one), 4, 12) == (2, 4)  # round 1 cached: continue with round 2
    assert sc.next_round(sc.progress_of(record, one), 4, 8) == (2, 0)  # 8 taken of K = 8: done
    assert sc.next_round(sc.progress_of(record, [{**one[0], "correct": 1}]), 4, 12) == (2, 0)  # solved in round 1
    assert sc.next_round(sc.progress_of({**record, "correct": 2}, []), 4, 12) == (1, 0)  # solved by curation


def test_cache_without_traces_is_never_mixed_silently(tmp_path):
    records = {"a": {"k": 4, "correct": 2}, "b": {"k": 4, "correct": 0}, "c": {"k": 4, "correct": 1, "traces_kept": True}}
    assert sc.to_resample(records, records, tmp_path, keep_correct=False, resample_untraced=False) == set()
    with pytest.raises(errors.CurateError, match="1 problems with correct samples taken without --keep-correct.*--resample-untraced"):
        sc.to_resample(records, records, tmp_path, keep_correct=True, resample_untraced=False)
    # only "a" lost responses: "b" had nothing correct to keep, "c" kept its traces
    assert sc.to_resample(records, records, tmp_path, keep_correct=True, resample_untraced=True) == {"a"}


def test_pass_k_needs_keep_correct_and_more_than_k(tmp_path):
    with pytest.raises(errors.CurateError, match="add --keep-correct"):
        c.CurateConfig(out=tmp_path, generate="x", pass_k=32).check()
    with pytest.raises(errors.CurateError, match="give more than --k"):
        c.CurateConfig(out=tmp_path, generate="x", k=16, pass_k=16, keep_correct=True).check()
    c.CurateConfig(out=tmp_path, generate="x", k=16, pass_k=64, keep_correct=True).check()


# --- the cache: traces file and spend -----------------------------------------------------------------


def _kept(*samples):
    return [{"sample": i, "text": f"t{i}", "token_ids": [i, i + 1]} for i in samples]


def test_traces_file_cut_by_a_kill_keeps_its_complete_lines_and_takes_more(tmp_path):
    path = tmp_path / T.TRACES_FILE
    writer = T.TraceWriter(path)
    writer.write(T.trace_lines("a", 0, _kept(0, 2)))
    writer.write(T.trace_lines("b", 1, _kept(1)))
    data = path.read_bytes()  # flushed but never closed: what a kill leaves
    writer._file = None  # drop the handle without finishing the gzip stream
    path.write_bytes(data[:-3])  # and the last bytes lost in flight
    lines = T.read_traces(tmp_path)
    assert [(t["id"], t["sample"]) for t in lines] in ([("a", 0), ("a", 2)], [("a", 0), ("a", 2), ("b", 1)])
    writer = T.TraceWriter(path)  # a resumed curation: the cut file is rewritten, then appended to
    repaired = path.read_bytes()
    T.TraceWriter(path).close()  # a run with nothing to add leaves the file as it is
    assert path.read_bytes() == repaired
    writer.write(T.trace_lines("c", 0, _kept(3)))
    writer.close()
    again = T.read_traces(path)
    assert again == lines + T.trace_lines("c", 0, _kept(3)) and again[0]["stage"] == "curation"
    with gzip.open(path, "rt") as handle:  # a clean gzip file again
        assert len(handle.read().splitlines()) == len(again)


def test_missing_or_bad_traces_file_is_one_clear_error(tmp_path):
    with pytest.raises(T.TracesError, match=r"traces.jsonl.gz not found: run `isocompute curate --keep-correct --out"):
        T.read_traces(tmp_path)
    (tmp_path / T.TRACES_FILE).write_text("not gzip")
    with pytest.raises(T.TracesError, match="not a gzip file"):
        T.read_traces(tmp_path)


def test_spend_is_recomputed_from_the_cache_on_resume(tmp_path):
    settings = {"k": 4}
    cache = sc.SampleCache(tmp_path, settings)
    cache.append({"id": "a", "k": 4, "correct": 0, "response_tokens": [5, 6, 7, 8]})
    cache.append_round({"id": "a", "k": 4, "correct": 1, "round": 1, "response_tokens": [1, 1, 1, 1]})
    cache.close()
    first = cache.spend()
    assert first == {spend.CURATION: {"a": spend.Spend(4, 26)}, spend.REJECTION_SAMPLING: {"a": spend.Spend(4, 4)}}
    cache = sc.SampleCache(tmp_path, settings)  # a rerun: one more problem, "a" re-sampled, a line cut by a kill
    cache.append({"id": "b", "k": 4, "correct": 3, "response_tokens": [2, 2, 2, 2]})
    cache.append({"id": "a", "k": 4, "correct": 1, "response_tokens": [1, 2, 3, 4], "traces_kept": True})
    cache.close()
    with open(tmp_path / sc.SAMPLES_FILE, "a") as handle:
        handle.write('{"id": "c", "k": 4, "corr')
    cache = sc.SampleCache(tmp_path, settings)  # resumed after the cut line: the next record is not glued to it
    cache.append({"id": "d", "k": 4, "correct": 0, "response_tokens": [0, 0, 0, 0]})
    cache.close()
    for stage, spent in cache.spend().items():
        spend.write(tmp_path, stage, spent)
    # every sampling counts once: "a"'s replaced record too (it was spent), the cut line not (never finished)
    assert spend.read(tmp_path) == {spend.CURATION: spend.Spend(16, 44), spend.REJECTION_SAMPLING: spend.Spend(4, 4)}
    assert cache.load()["a"]["correct"] == 1  # the difficulty uses the newest record
    assert sc.trace_counts(cache.load(), cache.load_rounds(), [], 8)["rejection"] == {
        "problems": 1, "rounds": 1, "samples": 4, "problems_solved": 1}


# --- choosing and placing traces ----------------------------------------------------------------------


def _trace(text, n_tokens, pid="p", round_=0, sample=0):
    return {"id": pid, "stage": "curation", "round": round_, "sample": sample, "text": text, "token_ids": list(range(n_tokens))}


def test_choose_trace_takes_the_shortest_usable_one():
    usable = lambda trace: "\n" in trace["text"].strip()  # "has an inner step"
    one_step, long_, short, short_too = _trace("42", 1), _trace(TRACE * 2, 90), _trace(TRACE, 40, sample=1), _trace(TRACE, 40, sample=2)
    assert T.choose_trace([long_, one_step, short, short_too], usable) is short  # shortest usable, first of equals
    assert T.choose_trace([one_step, _trace("4 2", 3)], usable) is one_step  # none usable: the shortest, reason counted later
    assert T.choose_trace([], usable) is None


def _curated_dir(tmp_path: Path, df: pd.DataFrame, keep: dict[int, list[dict]]) -> Path:
    """A curation directory holding traces for rows ``keep`` of ``df`` (ids as curation computes them)."""
    out = tmp_path / "curated"
    writer = T.TraceWriter((out.mkdir() or out) / T.TRACES_FILE)
    for i, kept in keep.items():
        row = df.iloc[i]
        pid = prob.problem_id(prob.messages_of(row["prompt"]), prob.ground_truth_of(row["reward_model"]))
        writer.write(T.trace_lines(pid, 0, kept))
    writer.close()
    return out


def test_guided_rows_get_their_own_problems_trace(tmp_path):
    df = frame(4)
    out = _curated_dir(tmp_path, df, {
        0: [{"sample": 0, "text": TRACE + "Longer.\n", "token_ids": list(range(50))},
            {"sample": 1, "text": "Short.\nTwo.\nThree.\nFour.\nFive.\n", "token_ids": list(range(9))}],
        2: [{"sample": 3, "text": TRACE, "token_ids": list(range(30))}],
        3: [{"sample": 0, "text": "42", "token_ids": [7]}],  # one step: no prefix
    })
    shuffled = df.iloc[[3, 2, 1, 0]].reset_index(drop=True)  # matching is by problem id, not by row order
    result = GuideConfig(traces=str(out)).build(shuffled)
    assert (result.guided, dict(result.skipped)) == (2, {NO_TRACE: 1, "one_step": 1})
    guided = {r["prompt"][1]["content"]: r for r in result.frame.to_dict("records") if r["extra_info"]["guided"]}
    assert guided["Problem 0?"]["extra_info"]["guide_prefix"] == "Short.\n"  # the shortest trace, cut at a line
    assert TRACE.startswith(guided["Problem 2?"]["extra_info"]["guide_prefix"])
    assert {r["extra_info"]["placement"] for r in guided.values()} == {ASSISTANT}  # PrefixRL's default for traces
    assert GuideConfig(traces=str(out), placement=USER).build(df).frame["extra_info"].iloc[-1]["placement"] == USER
    assert GuideConfig().build(df).frame["extra_info"].iloc[-1]["placement"] == USER  # oracle default unchanged


def test_guide_command_and_recipe_key_read_traces(tmp_path, capsys):
    df = frame(3)
    df.to_parquet(tmp_path / "train.parquet")
    out = _curated_dir(tmp_path, df, {1: [{"sample": 0, "text": TRACE, "token_ids": [1, 2]}]})
    assert main(["guide", str(tmp_path / "train.parquet"), "-o", str(tmp_path / "g.parquet"), "--traces", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 unguided + 1 guided rows" in printed and "skipped problems: no_trace 2" in printed
    assert main(["guide", str(tmp_path / "train.parquet"), "-o", str(tmp_path / "x.parquet"), "--traces", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none/traces.jsonl.gz not found: run `isocompute curate --keep-correct" in err
    assert not (tmp_path / "x.parquet").exists()
    cfg = OmegaConf.create({"isocompute": {"run_dir": str(tmp_path / "run"), "guided": {"enable": True, "traces": str(out)}},
                            "data": {"train_files": str(tmp_path / "train.parquet")}})
    assert prepare_guided(cfg).guided == 1
    cfg.data.train_files = str(tmp_path / "train.parquet")  # prepare_guided pointed it at the mixture
    cfg.isocompute.guided.traces = str(tmp_path / "none")
    with pytest.raises(ValueError, match="isocompute.guided: .*not found"):
        prepare_guided(cfg)
    (tmp_path / "e").mkdir()
    cfg.isocompute.guided.traces = str(_curated_dir(tmp_path / "e", df, {}))  # curated with the flag, none correct
    with pytest.raises(ValueError, match="isocompute.guided: no problem has a usable trace"):
        prepare_guided(cfg)


def test_token_cuts_keep_the_traces_own_ids_and_need_its_model(tmp_path, tiny_model_path):
    """cut=tokens: the first h kept ids of the shortest trace, two lengths with copies=2, the text decoded with
    the tokenizer of the model named in curation.json; assistant placement only; no curation.json is one line."""
    import json

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    df = frame(2)
    ids = [t for ch in TRACE for t in tok.encode(ch, add_special_tokens=False)]  # a tokenisation, not the tokenizer's own
    out = _curated_dir(tmp_path, df, {0: [{"sample": 0, "text": TRACE, "token_ids": ids}]})
    options = GuideConfig(traces=str(out), cut="tokens", copies=2, fraction=0.5, max_fraction=0.5)
    with pytest.raises(T.TracesError, match="curation.json: cannot load the tokenizer of the model that sampled the traces"):
        options.build(df)
    (out / "curation.json").write_text(json.dumps({"model": str(tiny_model_path)}))
    result = options.build(df)
    guided = [i for i in result.frame["extra_info"] if i["guided"]]
    assert (result.guided, dict(result.skipped)) == (2, {NO_TRACE: 1})
    n = len(ids)
    assert [list(i["guide_prefix_ids"]) for i in guided] == [ids[: n // 4], ids[: n // 2]]
    assert [i["guide_prefix"] for i in guided] == [tok.decode(ids[: n // 4]), tok.decode(ids[: n // 2])]
    assert all(i["placement"] == ASSISTANT for i in guided)
    with pytest.raises(ValueError, match="token cuts append kept token ids to the prompt: they need placement=assistant"):
        GuideConfig(traces=str(out), cut="tokens", placement=USER).build(df)
