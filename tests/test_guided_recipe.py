"""``isocompute.guided`` in a recipe, ``isocompute guide``, and the guided/unguided training metrics."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from test_guided_placement import frame

from verl_isocompute.commands.cli import main
from verl_isocompute.guided.metrics import guided_metrics
from verl_isocompute.training.guided_mixture import GuideConfig, prepare_guided
from verl_isocompute.training.config import RecipeError, compose_recipe
from verl_isocompute.training.prepare import prepare_guided_data


def test_recipe_defaults_are_the_options_defaults():
    block = OmegaConf.to_container(compose_recipe("isocompute_hard").isocompute.guided)
    assert block.pop("enable") is False and block.pop("spend") == []
    assert block == asdict(GuideConfig())


def config(tmp_path, **guided):
    frame(6).to_parquet(tmp_path / "train.parquet")
    return OmegaConf.create({
        "isocompute": {"run_dir": str(tmp_path / "run"), "guided": {"enable": True, **guided}},
        "data": {"train_files": [str(tmp_path / "train.parquet")], "val_files": str(tmp_path / "val.parquet")},
    })


def test_enabled_recipe_trains_on_the_mixture_and_keeps_validation(tmp_path):
    cfg = config(tmp_path, placement="assistant", ratio=0.5)
    result = prepare_guided(cfg)
    assert cfg.data.train_files == str(tmp_path / "run" / "guided" / "train.parquet")
    assert cfg.data.val_files == str(tmp_path / "val.parquet")  # validation stays unguided
    written = pd.read_parquet(cfg.data.train_files)
    assert (len(written), result.guided) == (9, 3) and set(written["agent_name"]) == {"single_turn_agent", "isocompute_prefix_continuation"}


def test_disabled_recipe_changes_nothing(tmp_path):
    cfg = config(tmp_path)
    cfg.isocompute.guided.enable = False
    assert prepare_guided(cfg) is None and cfg.data.train_files == [str(tmp_path / "train.parquet")]


@pytest.mark.parametrize(("guided", "match"), [
    ({"solution_key": "extra_info.nope"}, "solution_key=extra_info.nope.*missing 6"),
    ({"placement": "middle"}, "placement"),
    ({"ratio_typo": 1}, "unknown key"),
])
def test_bad_guided_settings_are_one_recipe_error(tmp_path, guided, match):
    with pytest.raises(RecipeError, match=match):
        prepare_guided_data(config(tmp_path, **guided))


def test_guide_command(tmp_path, capsys):
    frame(4, bad={0: None}).to_parquet(tmp_path / "train.parquet")
    assert main(["guide", str(tmp_path / "train.parquet"), "-o", str(tmp_path / "g.parquet"), "--placement", "user"]) == 0
    assert "4 unguided + 3 guided rows" in capsys.readouterr().out and len(pd.read_parquet(tmp_path / "g.parquet")) == 7
    assert main(["guide", str(tmp_path / "nope.parquet"), "-o", str(tmp_path / "x.parquet")]) == 2
    assert main(["guide", str(tmp_path / "train.parquet"), "-o", str(tmp_path / "x.parquet"), "--ratio", "3"]) == 2
    assert "ratio=3.0" in capsys.readouterr().err and not (tmp_path / "x.parquet").exists()


def test_guided_metrics_split_accuracy_and_skip_padding():
    infos = [{"guided": True}, {"guided": True}, {"guided": False}, {"guided": False}, {"guided": True}]
    acc = np.array([1.0, 0.0, 0.0, 0.0, 1.0])
    real = np.array([True, True, True, True, False])  # the last row is padding
    assert guided_metrics(infos, acc, real) == {
        "isocompute/guided_rows": 2, "isocompute/guided/train_acc": 0.5,
        "isocompute/unguided_rows": 2, "isocompute/unguided/train_acc": 0.0,
    }
    assert guided_metrics([{"index": 1}, None], acc[:2], real[:2]) == {}  # an unguided dataset: no metrics
    assert guided_metrics([], acc, real) == {}  # no extra_info in the batch at all


def test_mixture_counts_for_the_run_log_header():
    from verl_isocompute.guided.metrics import mixture_counts

    infos = [{"guided": False, "problem_id": "a"}, {"guided": False, "problem_id": "b"},
             {"guided": True, "problem_id": "a", "placement": "assistant"}, {"guided": True, "problem_id": "a", "placement": "user"}]
    assert mixture_counts(infos) == {"guided": 2, "unguided": 2, "ratio": 1.0, "problems": 2, "problems_guided": 1,
                                     "placements": {"user": 1, "assistant": 1}}
    assert mixture_counts([{"index": 1}, None]) is None  # not a guided dataset
    assert mixture_counts([{"guided": True}])["ratio"] is None  # prefixed problems only


def test_cpu_overlay_gives_the_guided_recipe_worked_problems_and_room_for_the_prefix(tmp_path, monkeypatch, isocompute_cache):
    """`+platform=cpu` on the guided recipe: generated problems with worked solutions and 256 prompt tokens
    (the overlay's 96 for its arithmetic would drop every guided row); unguided recipes keep 96 and arithmetic."""
    from verl_isocompute.training.config import resolve

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "")
    monkeypatch.setenv("VERL_PLATFORM", "cpu")  # what the entry point sets for isocompute.platform=cpu
    guided = compose_recipe("isocompute_hard_guided", ["+platform=cpu", "isocompute.model=tiny", "isocompute.data.train_size=8",
                                                       "isocompute.data.val_size=2", f"isocompute.run_dir={tmp_path}/run"])
    plain = compose_recipe("isocompute_hard", ["+platform=cpu", "isocompute.model=tiny"])
    assert (OmegaConf.select(plain, "data.max_prompt_length"), OmegaConf.select(plain, "isocompute.data.source")) == (96, "arithmetic")
    resolve(guided)
    assert (guided.data.max_prompt_length, guided.isocompute.data.source) == (256, "worked")
    train = pd.read_parquet(guided.data.train_files)
    assert len(train) == 8 and all("\\boxed{" in i["solution"] for i in train["extra_info"])
    assert prepare_guided(guided).guided == 8  # every problem has a usable prefix under the recipe's quarter cap
    from verl_isocompute.training.guided_training_set import check_guided_lengths

    check_guided_lengths(guided)  # and verl's filter keeps every guided row at 256 tokens


def test_curate_generates_worked_problems():
    from verl_isocompute.data.problem_sets import generate
    from verl_isocompute.errors import CurateError

    frame_ = generate("worked", 3, seed=1, terms=4, digits=2)
    assert len(frame_) == 3 and frame_.loc[0, "extra_info"]["solution"].count("\n") == 4
    with pytest.raises(CurateError, match="--generate worked: unknown --gen-arg max_digits"):
        generate("worked", 3, max_digits=2)
