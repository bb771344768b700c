"""Bad input in the ``isocompute:`` block and in sweep plans (issue 35): each refused in one line naming the key
and the fix before Ray starts, or read as the user meant it.

- Run rows: the entry point (``python -m verl_isocompute.main``'s ``run``, in this process) and the sweep's
  dry run on the same settings, through the plan's overrides: one check (the schema, then
  ``training.config.check_config``), the same line from both, nothing built.
- Switch rows: a YAML word for false (``off``, ``'false'``) turns nothing on, in a run, in the trainer's own
  reading (``build_adaptive``, what it does under verl's main_ppo) and in a sweep plan.
- verl's ``main_ppo``: the hydra callback refuses a bad key with one line and exit status 2.
- Sweep plans whose cells run the n schedule or per-prompt n are refused by ``--dry-run``: ``fit`` would
  leave every such cell out.
"""

from __future__ import annotations

import pytest
import yaml
from test_bad_inputs_surfaces import BASE, _entry_point_refuses, _plan
from test_bad_inputs_workflow import _check  # exit status and the one error line

from verl_isocompute.commands.cli import main

SCHEDULE = ["isocompute.schedule.enable=true", "isocompute.schedule.curve=paper:qwen2.5-7b-easy",
            "isocompute.schedule.budget_rollouts=4096"]
PER_PROMPT = ["isocompute.per_prompt_n.enable=true"]


def _dry_run(tmp_path, monkeypatch, capsys, plan):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    rc = main(["sweep", "--plan", str(path), "--dry-run"])
    out, err = capsys.readouterr()
    return rc, out, err


# (id, overrides of the plan / the run, piece of the one error line)
RUN_ROWS = [
    ("n_grid a scalar", [*SCHEDULE, "isocompute.schedule.n_grid=8"],
     "isocompute.schedule.n_grid=8 is one value where a list is expected: write isocompute.schedule.n_grid=[8]"),
    ("absurd schedule budget", [*SCHEDULE, "isocompute.schedule.budget_rollouts=1e30"],
     "isocompute.schedule: a budget of 1e+30 rollouts pays for at least 4.88e+26 steps of 2,048 rollouts (b_problem 2 "
     "x the grid's largest n 1024), more than 10,000,000: check the budget"),
    ("zero schedule budget", [*SCHEDULE, "isocompute.schedule.budget_rollouts=0"],
     "isocompute.schedule.budget_rollouts=0 is out of range: use a finite number > 0"),
    ("infinite curation weight", [*PER_PROMPT, "isocompute.per_prompt_n.curation_weight=inf"],
     "isocompute.per_prompt_n.curation_weight=inf: use a finite number >= 0"),
    ("a switch that is no boolean", ["isocompute.per_prompt_n.enable=maybe"],
     "isocompute.per_prompt_n.enable='maybe': use true or false"),
    ("unknown key", [*PER_PROMPT, "+isocompute.per_prompt_n.nmin=3"],
     "unknown key isocompute.per_prompt_n.nmin: did you mean isocompute.per_prompt_n.n_min?"),
    # issue 46: "use a text" did not say that hydra had read the value as a number, nor how to quote it
    ("a number where a text is expected", ["isocompute.recipe=123"],
     "isocompute.recipe=123: use a text; unquoted, 123 reads as a number: quote it for hydra, e.g. "
     "'isocompute.recipe=\"123\"' on a shell command line"),
    # issue 46: a data setting the chosen mode does not read was ignored without a word
    ("products with operators", ["+isocompute.data.task=products", "+isocompute.data.operators=+-"],
     "isocompute.data.task=products multiplies only, so isocompute.data.operators would be ignored"),
    ("products with allow_parentheses", ["+isocompute.data.task=products", "+isocompute.data.allow_parentheses=false"],
     "isocompute.data.task=products multiplies only, so isocompute.data.allow_parentheses would be ignored"),
    ("a task with the worked source", ["isocompute.data.source=worked", "+isocompute.data.task=products"],
     "isocompute.data.task=products has no effect with isocompute.data.source=worked: the problems are the worked chains"),
    ("a task with files", ["isocompute.data.source=files", "+isocompute.data.task=products"],
     "isocompute.data.task=products has no effect with isocompute.data.source=files: the problems are data.train_files, "
     "read as they are"),
    ("worked terms with arithmetic", ["+isocompute.data.terms=4"],
     "isocompute.data.terms=4 has no effect with isocompute.data.source=arithmetic"),
]


@pytest.mark.parametrize(("overrides", "message"), [pytest.param(*r[1:], id=r[0]) for r in RUN_ROWS])
def test_the_run_and_the_dry_run_refuse_a_bad_setting_in_one_line(tmp_path, monkeypatch, capsys, overrides, message):
    plan = _plan(overrides)
    rc, out, err = _dry_run(tmp_path, monkeypatch, capsys, plan)
    _check(rc, out, err, 2, message, "isocompute sweep")
    _entry_point_refuses(tmp_path, monkeypatch, plan, message)


def _cfg(*overrides):
    from verl_isocompute.workflow.sweep.preflight import compose

    return compose("cpu_demo", ["isocompute.model=tiny", *overrides])


# (id, overrides with a YAML word for false, what the run would refuse if the word turned the feature on)
OFF_ROWS = [
    ("per-prompt n off", ["isocompute.per_prompt_n.enable=off", "isocompute.per_prompt_n.n_max=2"]),
    ("schedule 'false'", ["isocompute.schedule.enable='false'", *SCHEDULE[1:], "actor_rollout_ref.actor.optim.lr=1e-3"]),
    ("schedule no", ["isocompute.schedule.enable=no", *SCHEDULE[1:], "isocompute.schedule.budget_rollouts=1"]),
]


@pytest.mark.parametrize("overrides", [pytest.param(r[1], id=r[0]) for r in OFF_ROWS])
def test_a_yaml_word_for_false_turns_nothing_on(overrides):
    from verl_isocompute.training.adaptive_config import build_adaptive
    from verl_isocompute.training.config import check_config

    on = [o.replace("=off", "=true").replace("='false'", "=true").replace("=no", "=true") for o in overrides]
    with pytest.raises(ValueError):  # the same settings with the feature on are refused: the row can tell
        check_config(_cfg(*on))
    cfg = _cfg(*overrides)
    assert check_config(cfg) == [] and build_adaptive(cfg) is None  # build_adaptive: the trainer's own reading


def test_switches_read_by_resolvers_and_hooks_follow_yaml_too():
    """The allocation (a resolver reads its switch) and the reuse of log-probs (a hook) are off with ``off``:
    with the allocation on, its missing curve would be the error; with reuse on, the second epoch would be."""
    from verl_isocompute.training.config import RecipeError, check_config

    assert check_config(_cfg("isocompute.allocation.enable=off")) == []  # the recipe's own sizes
    with pytest.raises(RecipeError, match="isocompute.allocation: curve is not set"):
        check_config(_cfg("isocompute.allocation.enable=on"))
    with pytest.raises(RecipeError, match="needs a fully on-policy recipe"):
        check_config(_cfg("actor_rollout_ref.actor.ppo_epochs=2"))
    assert check_config(_cfg("actor_rollout_ref.actor.ppo_epochs=2", "isocompute.reuse_rollout_log_probs=off")) == []


def test_verl_main_ppo_preflight_refuses_a_bad_key_in_one_line(capsys):
    from verl_isocompute.training.preflight import check_stock_run

    with pytest.raises(SystemExit) as info:
        check_stock_run(_cfg(*PER_PROMPT, "isocompute.per_prompt_n.curation_weight=inf"))
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.strip().splitlines() == [
        "isocompute: error: isocompute.per_prompt_n.curation_weight=inf: use a finite number >= 0"]


@pytest.mark.parametrize(("overrides", "key"), [
    pytest.param(SCHEDULE, "isocompute.schedule.enable=true", id="schedule"),
    pytest.param(PER_PROMPT, "isocompute.per_prompt_n.enable=true", id="per-prompt n"),
])
def test_the_dry_run_refuses_cells_fit_would_refuse(tmp_path, monkeypatch, capsys, overrides, key):
    rc, out, err = _dry_run(tmp_path, monkeypatch, capsys, _plan(overrides))
    _check(rc, out, err, 2, f"{key}: a pilot sweep's cells are fitted one curve per n, and `isocompute fit` refuses "
           "runs whose n varies; drop it from the plan's overrides", "isocompute sweep")


@pytest.mark.parametrize("overrides", [
    pytest.param(["isocompute.per_prompt_n.enable=off"], id="off"),
    pytest.param(["isocompute.schedule.enable='false'", *SCHEDULE[1:]], id="'false'"),
])
def test_a_plan_that_turns_them_off_with_a_yaml_word_is_accepted(tmp_path, monkeypatch, capsys, overrides):
    rc, out, err = _dry_run(tmp_path, monkeypatch, capsys, _plan(overrides))
    assert rc == 0, err
    assert BASE["recipe"] in out or "cell" in out


def test_the_data_keys_left_alone_are_those_the_recipes_write():
    """check_data_settings leaves alone the isocompute.data keys a recipe writes for every source (their value says
    nothing of the command line): exactly those, read from the recipe files, so a key added to a recipe is named."""
    from pathlib import Path

    import verl_isocompute.recipes as recipes
    from verl_isocompute.training.input_checks import RECIPE_DATA_KEYS

    written = set()
    for path in Path(recipes.__file__).parent.rglob("*.yaml"):
        data = ((yaml.safe_load(path.read_text()) or {}).get("isocompute") or {}).get("data") or {}
        written |= set(data)
    assert written == set(RECIPE_DATA_KEYS)


@pytest.mark.parametrize("overrides", [
    pytest.param(["+isocompute.data.task=products"], id="products alone"),
    pytest.param(["isocompute.data.source=worked", "+isocompute.data.terms=3", "+isocompute.data.digits=1"], id="worked"),
    pytest.param(["+isocompute.data.task=basic_arithmetic", "+isocompute.data.operators=*"], id="arithmetic operators"),
])
def test_data_settings_the_source_reads_pass(overrides):
    from verl_isocompute.training.config import check_config

    assert check_config(_cfg(*overrides)) == []
