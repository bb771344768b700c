"""Compose one of our recipes with overrides outside ``hydra.main`` (for ``isocompute curate`` and ``sweep``).

The result is the config ``python -m verl_isocompute.main --config-name RECIPE key=value ...`` would
start from, before :func:`verl_isocompute.main.prepare` resolves our ``isocompute`` block. Composing
imports verl's config package (the recipes extend verl's ``ppo_trainer``), so call it only where verl
is needed anyway or where checking overrides before a long run is worth a few seconds.
"""

from __future__ import annotations

from omegaconf import DictConfig

from verl_isocompute.main import RecipeError

RECIPES_MODULE = "verl_isocompute.recipes"


def compose_recipe(recipe: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The composed config of ``recipe`` with verl-style ``overrides``; :class:`RecipeError` names a bad one."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(RECIPES_MODULE, version_base=None):
            return compose(config_name=recipe, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RecipeError(f"recipe {recipe!r} with overrides {list(overrides)}: {first}") from None
