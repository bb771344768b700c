"""Settings written once (verl_isocompute.settings): each settings dataclass carries every default and help
text, and the commands build their options from it, so a command line and a library call mean the same."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from pathlib import Path

import pytest

from verl_isocompute.commands.cli import parse_args
from verl_isocompute.data.difficulty import Thresholds
from verl_isocompute.training.guided_mixture import GuideConfig
from verl_isocompute.scaling.allocation import AllocationConfig
from verl_isocompute.scaling.pipeline import FitConfig
from verl_isocompute.settings import add_setting, default_of, help_text, setting
from verl_isocompute.workflow.curate import CurateConfig
from verl_isocompute.workflow.prefix_search import PrefixSearchConfig

SETTINGS = (CurateConfig, PrefixSearchConfig, FitConfig, GuideConfig, AllocationConfig, Thresholds)


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda c: c.__name__)
def test_every_setting_has_its_help_text(cls):
    assert [f.name for f in dataclasses.fields(cls) if not f.metadata.get("help")] == []


def _options(command: str) -> dict[str, argparse.Action]:
    """The command's options by dest, as its module adds them to its parser."""
    parser = argparse.ArgumentParser()
    importlib.import_module(f"verl_isocompute.commands.{command.replace('-', '_')}").add_arguments(parser)
    return {a.dest: a for a in parser._actions}


# command -> settings class, and the fields whose option is not the field itself (an inverse flag, a
# differently typed value, or no flag)
COMMANDS = {
    "curate": (CurateConfig, {"check_answers", "thresholds", "sets", "gen_args"}),
    "prefix-search": (PrefixSearchConfig, {"check_answers", "overrides"}),  # overrides: trailing words of DATA
    "fit": (FitConfig, {"shared_r0"}),
    "guide": (GuideConfig, set()),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_option_takes_its_default_and_help_from_the_field(command):
    cls, other = COMMANDS[command]
    options = _options(command)
    for f in dataclasses.fields(cls):
        if f.name in other:
            continue
        action = options[f.name]
        assert f.metadata["help"].replace("%", "%%") in action.help, f.name
        if not action.required and f.name not in ("data", "overrides"):
            assert action.default == default_of(cls, f.name), f.name


def test_a_bare_command_line_is_the_settings_defaults(tmp_path):
    from verl_isocompute.commands.curate import settings_from_args
    from verl_isocompute.commands.fit import options_from_args

    assert options_from_args(parse_args(["fit", "runs", "--out", str(tmp_path)])) == FitConfig()
    curate = settings_from_args(parse_args(["curate", "--generate", "basic_arithmetic", "--out", str(tmp_path)]))
    assert curate == CurateConfig(out=tmp_path, generate="basic_arithmetic")
    assert _options("curate")["easy"].default == Thresholds().easy


def test_add_setting_shows_the_default_as_typed():
    @dataclasses.dataclass(frozen=True)
    class Example:
        out: Path = setting(help="where")
        band: tuple[float, float] = setting((0.25, 0.75), "a band")
        pair: tuple[float, float] = setting((0.3, 0.6), "a pair written LO,HI")
        model: str | None = setting(None, "which model", default_help="default: the recipe's")
        rate: float = setting(0.5, "a rate in %")

    parser = argparse.ArgumentParser()
    helps = {
        "band": add_setting(parser, Example, "band", type=float, nargs=2).help,
        "pair": add_setting(parser, Example, "pair").help,
        "model": add_setting(parser, Example, "model").help,
        "rate": add_setting(parser, Example, "rate", type=float).help,
        "out": add_setting(parser, Example, "out", required=True).help,
    }
    assert helps == {"band": "a band (default 0.25 0.75)", "pair": "a pair written LO,HI (default 0.3,0.6)",
                     "model": "which model (default: the recipe's)", "rate": "a rate in %% (default %(default)s)",
                     "out": "where"}
    assert parser.parse_args(["--out", "x"]).rate == 0.5 and help_text(Example, "rate") == "a rate in %"
