"""A regular (non-editable) install ships every subpackage: setuptools installs only the packages listed."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_for_regular_installs():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "verl_isocompute").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    missing = sorted(on_disk - listed)
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"


def test_every_recipe_ships_for_regular_installs():
    """setuptools ships only the package-data globs: every recipe and piece must match one (else
    `--config-name` / `+isocompute=[...]` fail after `pip install verl-isocompute`, not in an editable install)."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["verl_isocompute.recipes"]
    recipes = ROOT / "recipes"
    shipped = {path for pattern in globs for path in recipes.glob(pattern)}
    missing = sorted(str(p.relative_to(recipes)) for p in recipes.rglob("*.yaml") if p not in shipped)
    assert not missing, f"add {missing} to [tool.setuptools.package-data] in pyproject.toml"
