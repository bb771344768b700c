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
        "import verl_isocompute.reward, verl_isocompute.training.reward as r\n"
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
        ("verl_isocompute.guided.mixture", "GuideOptions", "GuideConfig"),
        ("verl_isocompute.data.arithmetic", "ArithmeticSpec", "ArithmeticConfig"),
        ("verl_isocompute.data.worked", "WorkedSpec", "WorkedConfig"),
    ],
)
def test_settings_classes_renamed_to_one_suffix_keep_their_old_name_with_a_warning(module, old, new):
    """0.2 names every settings dataclass ``...Config``; the old name is the same class for one release."""
    loaded = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{module}.{old} is now {module}.{new}"):
        assert getattr(loaded, old) is getattr(loaded, new)
