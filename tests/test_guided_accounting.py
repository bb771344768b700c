"""Guided runs: the run-time prefix check, per-placement accuracy, the guidance spend in the run log and in
``isocompute fit``, validation refused when guided, and the guided recipe through verl's main_ppo (unit, seconds)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from test_guided_placement import frame

from verl_isocompute.commands.fit import main as fit_main
from verl_isocompute.guided import spend
from verl_isocompute.guided.check import PrefixCheckError, assistant_guided_rows, check_prefixes, prefix_mismatch
from verl_isocompute.guided.metrics import guided_metrics
from verl_isocompute.guided.placement import ASSISTANT, USER, guided_dataset
from verl_isocompute.training.guided_mixture import check_validation_files, guidance_spend, prepare_guided, spend_locations
from verl_isocompute.scaling import load_curve
from verl_isocompute.scaling.points import validation_points
from verl_isocompute.scaling.run_logs import load_runs
from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep, write_run_logs
from verl_isocompute.training.config import RecipeError, compose_recipe
from verl_isocompute.training.prepare import prepare_guided_data

# -- the run-time prefix check ---------------------------------------------------------------------------
PREFIX = [7, 8, 9]


def row(prompt, response, response_mask=None, loss_mask=None, input_ids=None):
    """One row as the trainer reads it from the TransferQueue (1-d tensors)."""
    t = torch.tensor
    return dict(prompt=t(prompt), response=t(response), input_ids=t(input_ids if input_ids is not None else prompt + response),
                response_mask=t(response_mask or [1] * len(response)), loss_mask=t(loss_mask or [1] * len(response)))


def check(rows):
    return check_prefixes(list(range(len(rows))), [PREFIX] * len(rows), [r["prompt"] for r in rows], [r["response"] for r in rows],
                          [r["input_ids"] for r in rows], [r["response_mask"] for r in rows], [r["loss_mask"] for r in rows], step=3)


def test_check_passes_prompt_ending_with_the_prefix_and_masks_over_the_response():
    assert check([row([1, 2, *PREFIX], [4, 5]), row([1, *PREFIX], [6], [0], [0])]) == 2


@pytest.mark.parametrize(("broken", "what"), [
    # the agent loop put the last prefix token into the response, under the mask: trained on
    (row([1, 2, 7, 8], [9, 4, 5]), "the prompt ids end with \\[2, 7, 8\\], the prefix's ids are \\[7, 8, 9\\]"),
    # a mask one entry longer than the response: it reaches the prompt's last (prefix) token
    (row([1, 2, *PREFIX], [4, 5], response_mask=[1, 1, 1]), "response_mask has 3 entries for 2 response tokens"),
    (row([1, 2, *PREFIX], [4, 5], loss_mask=[1]), "loss_mask has 1 entries for 2 response tokens"),
    # the sequence the loss indexes is not prompt + response
    (row([1, 2, *PREFIX], [4, 5], input_ids=[1, 2, 7, 8, 9, 9, 4, 5]), "input_ids \\(8 ids\\) are not the prompt"),
])
def test_check_names_the_row_and_what_differs(broken, what):
    good = row([1, 2, *PREFIX], [4, 5])
    with pytest.raises(PrefixCheckError, match=f"step 3, batch row 1 .*{what}"):
        check([good, broken])
    assert prefix_mismatch([], [1], [2], None, [1], [1]) == "the prefix tokenises to no ids"


def test_assistant_guided_rows_are_the_rows_checked():
    infos = [{"guided": False, "placement": ""}, {"guided": True, "placement": ASSISTANT}, None,
             {"guided": True, "placement": USER}, {"guided": True, "placement": ASSISTANT}]
    assert assistant_guided_rows(infos) == [1, 4]


# -- per-placement accuracy ------------------------------------------------------------------------------
def test_mixed_placements_are_split_and_a_single_placement_is_not():
    infos = [{"guided": True, "placement": USER}, {"guided": True, "placement": USER}, {"guided": True, "placement": ASSISTANT},
             {"guided": False, "placement": ""}, {"guided": True, "placement": ASSISTANT}]
    acc = np.array([1.0, 0.0, 1.0, 0.0, 0.0])
    real = np.array([True, True, True, True, False])  # the last row is padding
    assert guided_metrics(infos, acc, real) == {
        "isocompute/guided_rows": 3, "isocompute/guided/train_acc": pytest.approx(2 / 3),
        "isocompute/unguided_rows": 1, "isocompute/unguided/train_acc": 0.0,
        "isocompute/guided_user_rows": 2, "isocompute/guided_user/train_acc": 0.5,
        "isocompute/guided_assistant_rows": 1, "isocompute/guided_assistant/train_acc": 1.0,
    }
    one = guided_metrics(infos[:2] + infos[3:4], acc[[0, 1, 3]], real[[0, 1, 3]])
    assert not [k for k in one if "guided_user" in k or "guided_assistant" in k]


def test_the_run_log_keeps_every_guided_metric_under_the_keys_it_always_had():
    """The trainer copies guided_metrics' keys into isocompute.jsonl from GUIDED_METRICS (not a second
    spelling); the row's keys and their order are those of 0.1's run logs (keys added since at the end)."""
    from verl_isocompute.guided.metrics import GUIDED_METRICS
    from verl_isocompute.training.run_log_writer import RUN_LOG_METRICS

    infos = [{"guided": True, "placement": USER}, {"guided": True, "placement": ASSISTANT}, {"guided": False}]
    assert set(guided_metrics(infos, np.array([1.0, 0.0, 1.0]), np.ones(3, dtype=bool))) == set(GUIDED_METRICS)
    assert RUN_LOG_METRICS == (
        "isocompute/train_acc", "isocompute/zero_var_group_frac", "isocompute/reg_active_frac", "isocompute/trained_frac",
        "isocompute/trained_per_group_min", "isocompute/trained_per_group_max", "isocompute/padding_rows",
        "isocompute/singleton_rows", "isocompute/evicted_groups", "isocompute/evicted_rollouts",
        "isocompute/reg_entropy_mean", "isocompute/reg_kl_mean", "isocompute/reg_token_share", "isocompute/reg_seq_share",
        "training/rollout_probs_diff_max", "response_length/mean",
        "isocompute/guided_rows", "isocompute/unguided_rows", "isocompute/guided/train_acc", "isocompute/unguided/train_acc",
        "isocompute/guided_user_rows", "isocompute/guided_assistant_rows", "isocompute/guided_user/train_acc",
        "isocompute/guided_assistant/train_acc", "isocompute/guided_prefix_checked",
        "isocompute/zero_var_rollout_share", "isocompute/group_n_min", "isocompute/group_n_max", "isocompute/group_n_mean",
        "isocompute/expected_zero_var_share", "isocompute/expected_zero_var_share_fixed_n",
        "isocompute/expected_nonzero_groups", "isocompute/expected_nonzero_groups_fixed_n",
    )


# -- the guidance spend ----------------------------------------------------------------------------------
def spend_config(tmp_path, locations):
    return OmegaConf.create({"isocompute": {"run_dir": str(tmp_path / "run"), "guided": {"enable": False, "spend": locations}}})


def test_spend_locations_come_from_the_guided_block():
    assert spend_locations({}) == [] and spend_locations({"spend": None}) == []
    assert spend_locations({"spend": "/a"}) == ["/a"] and spend_locations({"spend": ["/a", "/b/spend.json"]}) == ["/a", "/b/spend.json"]


def test_traces_and_prefix_search_directories_bring_their_own_spend(tmp_path):
    """With guidance on, the traces' curation directory's spend.json counts without being listed (PrefixRL
    counts the FLOPs that found the traces); without a spend file there, or with guidance off, nothing is added."""
    curated = tmp_path / "curated"
    curated.mkdir()
    block = {"enable": True, "traces": str(curated), "spend": []}
    assert spend_locations(block) == []
    spend.write(curated, spend.CURATION, {"p": spend.Spend(32, 640)})
    assert spend_locations(block) == [str(curated)]
    assert spend_locations({**block, "enable": False}) == []
    assert spend.total(spend_locations({**block, "spend": [str(curated / "spend.json")]})) == {"curation": spend.Spend(32, 640)}
    searched = tmp_path / "search"
    spend.write(searched, spend.PREFIX_SEARCH, {"p": spend.Spend(24, 300)})
    (searched / "prefixes.parquet").write_bytes(b"")
    for prefixes in (searched, searched / "prefixes.parquet"):
        assert spend.total(spend_locations({**block, "prefixes": str(prefixes)})) == {
            "curation": spend.Spend(32, 640), "prefix_search": spend.Spend(24, 300)}


def test_guidance_spend_sums_the_listed_files_and_names_a_missing_one(tmp_path):
    spend.write(tmp_path / "search", spend.PREFIX_SEARCH, {"p": spend.Spend(40, 900)})
    spend.write(tmp_path / "traces", spend.REJECTION_SAMPLING, {"p": spend.Spend(60, 3000), "val": spend.Spend(40, 2000)})
    spend.write(tmp_path / "traces", spend.CURATION, {"p": spend.Spend(8, 80), "easy": spend.Spend(8, 70)})
    locations = [str(tmp_path / "search"), str(tmp_path / "traces" / "spend.json")]
    stages = guidance_spend(spend_config(tmp_path, locations))
    assert stages == {"prefix_search": spend.Spend(40, 900), "rejection_sampling": spend.Spend(100, 5000), "curation": spend.Spend(16, 150)}
    # a run counts the spend on its training problems only (here "p"): not the validation or non-Hard problems
    trained = guidance_spend(spend_config(tmp_path, locations), {"p"})
    assert trained == {"prefix_search": spend.Spend(40, 900), "rejection_sampling": spend.Spend(60, 3000), "curation": spend.Spend(8, 80)}
    # the run log: header {stage: {rollouts, tokens}}; each row's C and tokens plus the guidance, then curation
    assert spend.as_json(trained)["prefix_search"] == {"rollouts": 40, "tokens": 900}
    assert spend.with_guidance(1000, 20_000, trained) == {"rollouts_with_guidance": 1100, "tokens_with_guidance": 23_900,
                                                          "rollouts_with_curation": 1108, "tokens_with_curation": 23_980}
    assert spend.with_guidance(1000, 20_000, {}) == {"rollouts_with_guidance": 1000, "tokens_with_guidance": 20_000,
                                                     "rollouts_with_curation": 1000, "tokens_with_curation": 20_000}
    with pytest.raises(RecipeError, match=f"isocompute.guided.spend: {tmp_path / 'nope'} holds no spend.json"):
        prepare_guided_data(spend_config(tmp_path, [*locations, str(tmp_path / "nope")]))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json: not a spend file"):
        guidance_spend(spend_config(tmp_path, [str(tmp_path / "bad.json")]))


# -- validation on unguided problems only ----------------------------------------------------------------
def test_validation_file_with_guided_rows_is_refused(tmp_path):
    problems = frame(4)
    problems.to_parquet(tmp_path / "val.parquet")
    guided_dataset(problems, "extra_info.solution").frame.to_parquet(tmp_path / "mixed.parquet")
    cfg = OmegaConf.create({"data": {"val_files": [str(tmp_path / "val.parquet")]}})
    check_validation_files(cfg)  # the originals: fine
    cfg.data.val_files = [str(tmp_path / "val.parquet"), str(tmp_path / "mixed.parquet")]
    with pytest.raises(ValueError, match=f"^data.val_files: {tmp_path / 'mixed.parquet'} holds 4 guided rows .*pass the original file"):
        check_validation_files(cfg)
    cfg = OmegaConf.create({"isocompute": {"guided": {"enable": False}}, "data": {"val_files": str(tmp_path / "mixed.parquet")}})
    with pytest.raises(RecipeError, match="holds 4 guided rows"):  # our entry point: before Ray starts
        prepare_guided_data(cfg)


# -- the guided recipe through verl's main_ppo -----------------------------------------------------------
def test_stock_main_ppo_config_gets_the_same_mixture_from_the_trainer(tmp_path, tiny_model_path, monkeypatch):
    """main_ppo does not run our prepare(): the trainer applies isocompute.guided (prepare_guided) before verl
    builds its datasets, and an already prepared config (our entry point) is left alone."""
    from test_stock_entry import compose_stock

    from verl_isocompute.training.prepare import prepare

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    # prepare() points verl's file logger at the run dir through the environment: undone after the test (a
    # leaked path would be inherited by later tests' verl runs, which then log their metrics there)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "")
    frame(6).to_parquet(tmp_path / "train.parquet")
    frame(3).to_parquet(tmp_path / "val.parquet")
    given = [f"isocompute.run_dir={tmp_path}/run", f"actor_rollout_ref.model.path={tiny_model_path}",
             f"data.train_files={tmp_path}/train.parquet", f"data.val_files={tmp_path}/val.parquet"]
    stock = compose_stock("isocompute_hard_guided", given)
    OmegaConf.resolve(stock)  # what main_ppo's TaskRunner does before building the trainer
    assert stock.isocompute.guided.enable and stock.isocompute.guided.ratio == 1.0
    assert prepare_guided(stock).guided == 6  # the trainer's _prepare_guided
    ours = prepare(compose_recipe("isocompute_hard_guided", given))
    assert stock.data.train_files == ours.data.train_files == str(tmp_path / "run" / "guided" / "train.parquet")
    assert prepare_guided(ours) is None and len(pd.read_parquet(ours.data.train_files)) == 12  # applied once: 6 + 6


# -- isocompute fit with the guidance spend --------------------------------------------------------------
def test_fit_can_count_c_with_the_guidance_spend(tmp_path, capsys):
    truth = load_curve("paper:qwen2.5-7b-easy")
    sweep = synthetic_sweep({n: c for n, c in curves_for(truth).items() if n in (16, 64, 256, 1024)}, points_per_run=30, seed=3)
    guided = sweep["n"].isin([64, 1024])  # guided runs log rollouts_with_guidance; the others are unguided baselines
    sweep["rollouts_with_guidance"] = np.where(guided, sweep["rollouts"] + 5e5, np.nan)
    write_run_logs(sweep.assign(rollouts_with_guidance=sweep["rollouts_with_guidance"]), tmp_path / "runs")
    logs = load_runs([tmp_path / "runs"])
    points, notes = validation_points(logs, compute="rollouts_with_guidance")
    plain, _ = validation_points(logs, compute="rollouts")
    both = points.merge(plain, on=["run", "n", "step"], suffixes=("", "_plain"))
    spent = both["C"] - both["C_plain"]
    assert (spent[both["n"].isin([64, 1024])] == 5e5).all() and (spent[~both["n"].isin([64, 1024])] == 0).all()
    # before training (step 0) a guided run has already spent its guidance: a point at C = 5e5
    assert set(points.loc[points["step"] == 0, "n"]) == {64, 1024}
    assert any(note.startswith("no guidance spend logged") for note in notes)
    assert fit_main([str(tmp_path / "runs"), "--out", str(tmp_path / "fit"), "--compute", "rollouts_with_guidance",
                     "--bootstrap", "0"]) in (0, 1), capsys.readouterr().err
    assert load_curve(tmp_path / "fit" / "curve.json").compute_unit == "rollouts_with_guidance"


def test_fit_can_count_c_with_curation_for_both_arms(tmp_path):
    """rollouts_with_curation: guided runs add guidance + curation, unguided baselines their curation only (both
    arms curate the same problems); a run logging neither counts its rollouts."""
    truth = load_curve("paper:qwen2.5-7b-easy")
    sweep = synthetic_sweep({n: c for n, c in curves_for(truth).items() if n in (16, 64, 256)}, points_per_run=20, seed=4)
    guided, baseline = sweep["n"] == 64, sweep["n"] == 16
    sweep["rollouts_with_guidance"] = np.where(guided, sweep["rollouts"] + 5e5, np.where(baseline, sweep["rollouts"], np.nan))
    sweep["rollouts_with_curation"] = np.where(guided, sweep["rollouts"] + 7e5, np.where(baseline, sweep["rollouts"] + 2e5, np.nan))
    write_run_logs(sweep, tmp_path / "runs")
    logs = load_runs([tmp_path / "runs"])
    points, notes = validation_points(logs, compute="rollouts_with_curation")
    plain, _ = validation_points(logs, compute="rollouts")
    both = points.merge(plain, on=["run", "n", "step"], suffixes=("", "_plain"))
    spent = (both["C"] - both["C_plain"]).groupby(both["n"]).unique()
    assert {n: list(v) for n, v in spent.items()} == {16: [2e5], 64: [7e5], 256: [0.0]}
    assert any(note.startswith("no spend logged") for note in notes)


def test_the_trainer_reads_the_guided_block_as_the_schema_does(tmp_path, tiny_model_path, monkeypatch):
    """Under main_ppo the trainer builds the mixture from the resolved config, where YAML may give ``copies=2.0``:
    it is read as the schema reads it (2), as our entry point's check does (it was a TypeError in range())."""
    from test_stock_entry import compose_stock

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    frame(6).to_parquet(tmp_path / "train.parquet")
    frame(3).to_parquet(tmp_path / "val.parquet")
    given = [f"isocompute.run_dir={tmp_path}/run", f"actor_rollout_ref.model.path={tiny_model_path}",
             f"data.train_files={tmp_path}/train.parquet", f"data.val_files={tmp_path}/val.parquet",
             "isocompute.guided.copies=2.0", "isocompute.guided.fraction=0.6", "isocompute.guided.max_fraction=0.6"]
    stock = compose_stock("isocompute_hard_guided", given)
    OmegaConf.resolve(stock)
    assert stock.isocompute.guided.copies == 2.0 and isinstance(stock.isocompute.guided.copies, float)
    assert prepare_guided(stock).guided > 6  # more than one guided copy of some problem
