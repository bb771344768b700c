"""No guided row lost silently: guided prompts measured as verl measures them (against verl's own dataset
filter), the refusal before training, and the prefix search's rungs measured the same way.

verl's ``RLHFDataset`` (the class training builds) is run here on the guided files, so the filter's real
behaviour, not a copy of it, decides which rows survive."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from verl_isocompute.data.worked import worked_arithmetic
from verl_isocompute.guided import placement as G
from verl_isocompute.guided.lengths import filter_length, overlong, sent_length
from verl_isocompute.guided.search_tables import PROMPT_TOO_LONG, problems_of
from verl_isocompute.training.guided_training_set import check_guided_lengths
from verl_isocompute.jsonl import plain


@pytest.fixture(scope="module")
def tok(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def verl_keeps(path, tok, max_prompt_length: int, tmp_path) -> int:
    """Rows of ``path`` that verl's own RLHFDataset keeps under ``filter_overlong_prompts``."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create({"max_prompt_length": max_prompt_length, "filter_overlong_prompts": True,
                               "filter_overlong_prompts_workers": 1, "cache_dir": str(tmp_path / "verl-cache")})
    return len(RLHFDataset(data_files=[str(path)], tokenizer=tok, config=config, processor=None))


def mixture(tmp_path, placement: str):
    result = G.guided_dataset(worked_arithmetic(6, terms=5), "extra_info.solution", placement=placement,
                              fraction=0.5, max_fraction=0.5)
    path = tmp_path / f"{placement}.parquet"
    result.frame.to_parquet(path, index=False)
    return path, [plain(r) for r in result.frame.to_dict("records")]


def run_config(path, model, max_prompt_length: int, filtered: bool = True):
    return OmegaConf.create({"data": {"train_files": str(path), "max_prompt_length": max_prompt_length,
                                      "filter_overlong_prompts": filtered},
                             "actor_rollout_ref": {"model": {"path": str(model)}, "rollout": {"prompt_length": max_prompt_length}}})


def test_assistant_rows_are_measured_longer_by_verl_than_the_agent_loop_sends(tmp_path, tok, tiny_model_path):
    """The 6-token gap: verl's filter renders the prefix as a closed assistant message plus a new generation
    prompt. A length that fits what the agent loop sends still loses every assistant row in verl's filter, and
    the run refuses it; the length our check asks for keeps them all in verl's filter."""
    path, rows = mixture(tmp_path, G.ASSISTANT)
    guided = [r for r in rows if r["extra_info"]["guided"]]
    sent = [sent_length(tok, r["prompt"], placement=G.ASSISTANT) for r in guided]
    measured = [filter_length(tok, r["prompt"]) for r in guided]
    assert all(m > s for m, s in zip(measured, sent, strict=True))  # verl counts more than is sent
    fits_as_sent = max(sent)
    unguided = len(rows) - len(guided)
    assert verl_keeps(path, tok, fits_as_sent, tmp_path) < len(rows)  # verl drops guided rows that fit as sent
    with pytest.raises(ValueError) as refused:
        check_guided_lengths(run_config(path, tiny_model_path, fits_as_sent))
    message = str(refused.value)
    dropped = len(rows) - verl_keeps(path, tok, fits_as_sent, tmp_path)
    assert message.startswith(f"data.max_prompt_length={fits_as_sent} is too short for the guided rows: verl's "
                              f"filter_overlong_prompts would drop {dropped} of the {len(guided)} guided rows")
    assert f"set data.max_prompt_length={max(measured)} or more" in message and "\n" not in message
    check_guided_lengths(run_config(path, tiny_model_path, max(measured)))  # the length it names: nothing dropped
    assert verl_keeps(path, tok, max(measured), tmp_path) == len(rows) == unguided + len(guided)


def test_a_short_overlay_length_is_refused_whatever_set_it_and_the_cut_is_counted_without_the_filter(tmp_path, tok, tiny_model_path):
    """POPE's user placement at the CPU overlay's old 96 tokens: verl's filter would drop every guided row (the
    run trained unguided with exit 0); now one line with the count. With the filter off the agent loop would
    left-truncate them instead: counted against what it sends."""
    path, rows = mixture(tmp_path, G.USER)
    guided = sum(r["extra_info"]["guided"] for r in rows)
    assert verl_keeps(path, tok, 96, tmp_path) == len(rows) - guided  # verl: every guided row dropped
    with pytest.raises(ValueError, match=rf"would drop {guided} of the {guided} guided rows"):
        check_guided_lengths(run_config(path, tiny_model_path, 96))
    with pytest.raises(ValueError, match=rf"would left-truncate \(data.filter_overlong_prompts is off\) {guided} of the {guided}"):
        check_guided_lengths(run_config(path, tiny_model_path, 96, filtered=False))
    found = overlong(rows, tok, 96)
    assert (found.count, found.rows) == (guided, guided)
    check_guided_lengths(run_config(tmp_path / "none.parquet", tiny_model_path, 96))  # remote / absent: verl's to report


def test_the_search_keeps_only_rungs_verls_filter_keeps(tmp_path, tok):
    """The prefix search measures each rung as verl's filter will: every rung it accepts survives verl's real
    filter at that length (today it accepted assistant rungs verl then dropped); a ladder ends at the first rung
    that does not fit, and a problem with none left is prompt_too_long with the length that would fit."""
    from verl_isocompute.data.problem_sets import screen
    from verl_isocompute.workflow.prefix_search import guided_prompts, too_long_line

    frame, _ = screen(worked_arithmetic(4, terms=6), check_answers=False)
    sampler = SimpleNamespace(tokenizer=tok, chat_kwargs={}, prompt_length=0)
    full = problems_of(frame, "extra_info.solution", G.ASSISTANT, 0.6)
    lengths = [filter_length(tok, G.assistant_turn(p.messages, rung.text)) for p in full for rung in p.ladder]
    sampler.prompt_length = sorted(lengths)[len(lengths) // 2]  # about half the rungs fit
    problems = problems_of(frame, "extra_info.solution", G.ASSISTANT, 0.6)
    prompts = guided_prompts(problems, sampler, G.ASSISTANT)
    accepted = [(p, rung) for p in problems for rung in p.ladder]
    assert 0 < len(accepted) < len(lengths) and len(prompts) == len(accepted)
    rows = [{"prompt": G.assistant_turn(p.messages, rung.text), "data_source": "d", "reward_model": {"ground_truth": "1"}}
            for p, rung in accepted]
    import pandas as pd

    pd.DataFrame(rows).to_parquet(tmp_path / "rungs.parquet", index=False)
    assert verl_keeps(tmp_path / "rungs.parquet", tok, sampler.prompt_length, tmp_path) == len(rows)
    sampler.prompt_length = 20  # shorter than any guided prompt
    problems = problems_of(frame, "extra_info.solution", G.USER, 0.6)
    assert guided_prompts(problems, sampler, G.USER) == {}
    assert {p.reason for p in problems} == {PROMPT_TOO_LONG}
    line = too_long_line(problems, sampler, len(problems))
    shortest = min(p.too_long_by for p in problems)
    assert line == (f"data.max_prompt_length=20 is shorter than every guided prompt of the 4 problems with a prefix "
                    f"(as verl's filter_overlong_prompts measures them), so training would drop every guided row; the "
                    f"shortest guided prompt has {shortest} tokens, set data.max_prompt_length={shortest} or more")


@pytest.mark.e2e  # the command in a fresh process (imports verl)
def test_prefix_search_where_no_rung_fits_stops_with_one_line(tmp_path, tiny_model_path):
    """Today: exit 0, every problem skipped as prompt_too_long, "all decided by the cache" with nothing cached.
    Now exit 2 before any Ray start, naming data.max_prompt_length; nothing is written."""
    worked_arithmetic(3, terms=5).to_parquet(tmp_path / "d.parquet")
    proc = subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", "prefix-search", tmp_path / "d.parquet",
                           "-o", tmp_path / "out", "--model", "tiny", "data.max_prompt_length=96"],
                          capture_output=True, text=True, timeout=300)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert last.startswith("isocompute prefix-search: error: data.max_prompt_length=96 is shorter than every guided "
                           "prompt of the 3 problems with a prefix") and "set data.max_prompt_length=" in last
    assert not (tmp_path / "out" / "rungs.jsonl").exists() and "all decided" not in proc.stderr


@pytest.mark.e2e  # python -m verl_isocompute.main in a fresh process
def test_a_guided_run_whose_rows_verl_would_drop_refuses_before_it_starts(tmp_path, tiny_model_path):
    """The real entry point, the guided recipe on the CPU overlay with its old 96-token prompts (given here on
    the command line): before, verl dropped every guided row and the run trained unguided with exit 0; now
    exit 2 before Ray starts, one line naming data.max_prompt_length and the count."""
    worked_arithmetic(6, terms=5).to_parquet(tmp_path / "train.parquet")
    worked_arithmetic(2, terms=5, seed=1).to_parquet(tmp_path / "val.parquet")
    proc = subprocess.run([sys.executable, "-m", "verl_isocompute.main", "--config-name", "isocompute_hard_guided",
                           "+platform=cpu", "isocompute.model=tiny", "isocompute.data.source=files",
                           f"data.train_files={tmp_path / 'train.parquet'}", f"data.val_files={tmp_path / 'val.parquet'}",
                           "data.max_prompt_length=96", "trainer.total_training_steps=1", f"isocompute.run_dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("isocompute: error: data.max_prompt_length=96 is too short for the guided rows: verl's "
                           "filter_overlong_prompts would drop 6 of the 6 guided rows"), last
    assert not (tmp_path / "run" / "isocompute.jsonl").exists()  # nothing trained
