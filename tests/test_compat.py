"""Old import paths (0.1) still work for one release and give the very same module objects."""

import importlib
import subprocess
import sys

import pytest

from verl_isocompute._compat import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_is_the_new_module(old):
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match="moved to"):
        assert importlib.import_module(old) is new


def test_old_names_work_in_a_fresh_interpreter():
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n    import verl_isocompute.allocation\nexcept DeprecationWarning as w:\n    print('warned', w)\n"
        "warnings.simplefilter('ignore')\n"
        "from verl_isocompute.allocation import allocate\n"
        "from verl_isocompute.scaling.allocation import allocate as new\n"
        "assert allocate is new\n"
        "import verl_isocompute.reward, verl_isocompute.rules.reward as r\n"
        "assert verl_isocompute.reward is r\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "warned verl_isocompute.allocation moved to verl_isocompute.training.allocation_hook" in out
    assert out.strip().endswith("ok")


@pytest.mark.parametrize(
    "old",
    ["verl_isocompute.scaling.fit", "verl_isocompute.scaling.compare", "verl_isocompute.workflow.curate", "verl_isocompute.workflow.sweep.runner",
     "verl_isocompute.training.config", "verl_isocompute.workflow.sweep.plan"],
)
def test_names_moved_out_of_a_split_module_still_import_with_a_warning(old):
    """A module split by concept keeps its old names for one release: the same object, a DeprecationWarning."""
    module = importlib.import_module(old)
    assert module._MOVED
    for name, new in module._MOVED.items():
        with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to {new}"):
            assert getattr(module, name) is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError):
        getattr(module, "no_such_name")


@pytest.mark.parametrize(
    "module, old, new",
    [
        ("verl_isocompute.workflow.curate", "CurateSettings", "CurateConfig"),
        ("verl_isocompute.workflow.prefix_search", "PrefixSearchSettings", "PrefixSearchConfig"),
        ("verl_isocompute.scaling.pipeline", "FitOptions", "FitConfig"),
        ("verl_isocompute.workflow.sweep.executors", "RayOptions", "RayConfig"),
        ("verl_isocompute.training.guided_mixture", "GuideOptions", "GuideConfig"),
        ("verl_isocompute.data.arithmetic", "ArithmeticSpec", "ArithmeticConfig"),
        ("verl_isocompute.data.worked", "WorkedSpec", "WorkedConfig"),
        ("verl_isocompute.guided.search_tables", "RECORDS_FILE", "RUNGS_FILE"),
        ("verl_isocompute.rules.metrics", "validation_records", "validation_samples"),
    ],
)
def test_renamed_names_keep_their_old_name_with_a_warning(module, old, new):
    """0.2 names every settings dataclass ``...Config`` and keeps "records" for the fit's record-breaking points;
    each old name is the same object as the new one for one release, with a warning naming the new one."""
    loaded = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{module}.{old} is now {module}.{new}"):
        assert getattr(loaded, old) is getattr(loaded, new)


def test_the_package_itself_uses_no_old_path():
    """Our own code never goes through a deprecated path (it would warn every user): no import of an old path
    and no string naming one (a ``pkg://`` path, a lazy import) in the package outside the alias table, and the
    scaling package's lazy exports name current modules. Docstrings and comments may name the old paths."""
    import ast
    import re
    from pathlib import Path

    from verl_isocompute import scaling

    root = Path(scaling.__file__).parent.parent
    old = re.compile("|".join(re.escape(name) + r"(?![\w])" for name in MOVED))
    used = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "_compat.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                names = [node.value]
            used += [f"{path.relative_to(root)}:{node.lineno}: {name}" for name in names if old.search(name)]
    assert used == []
    assert {name: module for name, module in scaling._EXPORTS.items() if f"{scaling.__name__}.{module}" in MOVED} == {}


def test_a_verl_config_naming_the_old_reward_path_still_loads_our_reward():
    """`reward.custom_reward_function.path=pkg://verl_isocompute.training.reward` (the path earlier 0.2 recipes wrote)
    goes through verl's own loader (verl/trainer/ppo/reward.py, what verl's reward workers call): it finds our
    compute_score, warns naming the new path, and the function grades as our recipes' does."""
    import verl  # noqa: F401  (our plugin: the recipes on hydra's search path, the alias finder)
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from verl_isocompute.rules import reward
    from verl_isocompute.training.config import compose_recipe

    old = "verl_isocompute.training.reward"
    cfg = compose_recipe("isocompute_hard", [f"reward.custom_reward_function.path=pkg://{old}"])
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to verl_isocompute.rules.reward"):
        scored = get_custom_reward_fn(cfg)
    assert scored.args[0] is reward.compute_score  # verl's partial(_call_with_kwargs, our function, reward_kwargs)
    assert scored.args[1] == {"answer": "auto"}  # the recipe's reward_kwargs reach it as with the new path
    sample = {"data_source": "isocompute/arithmetic", "ground_truth": "12", "extra_info": {}}
    assert scored(solution_str="7 + 5 = \\boxed{12}", **sample)["score"] == 1.0
    assert scored(solution_str="\\boxed{13}", **sample)["score"] == 0.0


def test_the_per_prompt_settings_of_the_run_time_split_are_the_schemas():
    """Issue 42: one type per block. The run-time split's own PerPromptSettings (scaling/adaptive.py) is gone; its
    old name gives the schema's class, with a warning, and AdaptiveN takes it as it is."""
    from verl_isocompute.scaling import adaptive
    from verl_isocompute.training.schema import PerPromptSettings

    with pytest.warns(DeprecationWarning, match="scaling.adaptive.PerPromptSettings moved to verl_isocompute.training.schema"):
        assert adaptive.PerPromptSettings is PerPromptSettings
    split = adaptive.AdaptiveN(8, 2, per_prompt=PerPromptSettings(n_min=3))
    assert split.bounds() == (3, 32) and split.bounds(2) == (3, 8)  # n_max unset: 4 x the step's n
    assert sum(split.assign(["a", "b"], ["p", "q"], [None, None])) == 16


@pytest.mark.parametrize(
    ("old", "new"),
    [("dataset_size", "dataset_size"), ("check_allocation_keys", "check_allocation_keys"),
     ("ALLOCATION_KEYS", "ALLOCATION_KEYS"), ("OPTIM", "OPTIM")],
)
def test_the_resolvers_allocation_names_moved_to_the_one_decision(old, new):
    from verl_isocompute.training import allocation_hook, resolvers

    with pytest.warns(DeprecationWarning, match=f"resolvers.{old} moved to verl_isocompute.training.allocation_hook"):
        assert getattr(resolvers, old) is getattr(allocation_hook, new)


def test_the_resolvers_deciding_functions_read_the_one_decision():
    """resolvers.allocation / lr_decision decided again at each call; their old names now read decide(cfg)."""
    from omegaconf import OmegaConf

    from verl_isocompute.training import allocation_hook, resolvers

    cfg = OmegaConf.create({"isocompute": {"allocation": {"enable": True, "curve": "paper:qwen2.5-7b-hard",
                                                          "budget_rollouts": 2e5, "b_problem": 8, "dataset_size": 64}}})
    for old, read in (("allocation", lambda d: d.allocation), ("lr_decision", lambda d: d.lr)):
        with pytest.warns(DeprecationWarning, match=f"resolvers.{old} is now .*allocation_hook.decide"):
            function = getattr(resolvers, old)
        assert function(cfg) == read(allocation_hook.decide(cfg))
