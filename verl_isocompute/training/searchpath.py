"""Our recipes on the config search path of verl's ``python -m verl.trainer.main_ppo``.

``--config-name isocompute_easy`` then finds the recipe with no other argument, in editable and regular
installs alike. Why a hydra search-path plugin and not only ``'hydra.searchpath=[pkg://verl_isocompute.recipes]'``
on the command line: hydra 1.3 looks the primary config (``--config-name``) up *before* it applies a
command-line ``hydra.searchpath``, and caches the miss (``CachingConfigRepository``), so a recipe outside
the app's own config directory is never found that way; that argument still works (it only adds the path
again), as does ``--config-path`` pointing at the recipes directory.

The path is appended after the app's own, so an app's configs win over ours on a name clash (ours are
named ``isocompute*``, ``cpu_demo``, ``platform/cpu`` and the ``isocompute/`` pieces). Registered from our
``verl.plugins`` entry point (:mod:`verl_isocompute.plugin`), i.e. only in processes that import verl;
the ``hydra_plugins`` namespace package would reach every hydra app, and setuptools' editable installs hide
namespace packages from hydra's plugin scan.
"""

from __future__ import annotations

RECIPES = "pkg://verl_isocompute.recipes"


def register() -> None:
    """Add :data:`RECIPES` to hydra's search path of every app composed in this process (idempotent)."""
    from hydra.core.config_search_path import ConfigSearchPath
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    class IsoComputeRecipes(SearchPathPlugin):
        def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
            if RECIPES not in [element.path for element in search_path.get_path()]:
                search_path.append(provider="verl-isocompute", path=RECIPES)

    plugins = Plugins.instance()
    if not any(p.__name__ == IsoComputeRecipes.__name__ for p in plugins.discover(SearchPathPlugin)):
        plugins.register(IsoComputeRecipes)
