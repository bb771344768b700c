"""Which of our recipes declare a key, and hydra's error composing a recipe as one line that names the fix.

hydra refuses an override of a key the composed config does not have with "Could not override 'KEY'. To append
to your config use +KEY=VALUE": right, but bare. Our settings are declared once (:mod:`verl_isocompute.training.schema`)
and written by some recipes and pieces only (``isocompute.cpu.dtype`` by ``+platform=cpu``, ``isocompute.data.task``
by none), so :func:`composition_error` keeps hydra's hint and says which recipes declare the key (read from the
recipe files and their ``defaults`` lists, nothing composed), or that none does, or which setting of ours a
misspelt key is nearest to. A config group set to null (``isocompute=null``: the group of our pieces) makes hydra
raise a bare ValueError with no key named: the line names the override and the group's options.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from functools import cache
from pathlib import Path
from typing import Any

RECIPES_MODULE = "verl_isocompute.recipes"


@cache
def _recipe_files() -> dict[str, dict[str, Any]]:
    """Every YAML file of the recipes package, keyed by its path without suffix (``cpu_demo``, ``platform/cpu``)."""
    import yaml

    spec = importlib.util.find_spec(RECIPES_MODULE)
    root = Path(next(iter(spec.submodule_search_locations)))
    return {p.relative_to(root).with_suffix("").as_posix(): yaml.safe_load(p.read_text()) or {}
            for p in sorted(root.rglob("*.yaml"))}


def _writes(tree: Any, key: str) -> bool:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


def _includes(name: str) -> list[str]:
    """The recipe files ``name``'s defaults list brings in (ours only; verl's ``ppo_trainer`` is not read)."""
    files, out = _recipe_files(), []
    for entry in files[name].get("defaults") or []:
        entries = [entry] if isinstance(entry, str) else [f"{group}/{option}" for group, options in entry.items()
                                                            for option in (options if isinstance(options, list) else [options])]
        for item in entries:
            group = name.rsplit("/", 1)[0] if "/" in name else ""
            for candidate in (f"{group}/{item}" if group else item, item):
                if candidate in files:
                    out.append(candidate)
                    break
    return out


def declaring(key: str) -> list[str]:
    """How to get a config that has ``key``: the recipes (top-level files) whose composition writes it, and the
    pieces that write it, as the override that adds them (``+platform=cpu``, ``+isocompute=[schedule]``)."""
    files = _recipe_files()

    def writes(name: str, seen: frozenset = frozenset()) -> bool:
        return name not in seen and (_writes(files[name], key) or any(writes(n, seen | {name}) for n in _includes(name)))

    recipes = [f"recipe {name}" for name in files if "/" not in name and writes(name)]
    pieces = [f"+{name.split('/')[0]}=" + (f"[{name.split('/')[1]}]" if name.startswith("isocompute/") else name.split("/")[1])
              for name in files if "/" in name and _writes(files[name], key)]
    return recipes + pieces


def composition_error(exc: Exception, recipe: str, overrides: list[str] | tuple[str, ...]) -> str:
    """hydra's (or OmegaConf's) error composing ``recipe`` with ``overrides``, as one line naming the fix."""
    from verl_isocompute.training.schema import leaves

    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [type(exc).__name__]
    if isinstance(exc, ValueError) and lines[0].startswith("Config group override must be"):
        nulls = [o for o in overrides if re.fullmatch(r"[+~]*[\w/]+=\s*(null|~)?\s*", o)]
        shown = nulls[0] if nulls else "a config group set to null"
        group = shown.split("=", 1)[0].lstrip("+~")
        options = sorted(name.split("/", 1)[1] for name in _recipe_files() if name.startswith(f"{group}/"))
        if group == "isocompute":
            return (f"{shown}: isocompute is the group of our recipe pieces ({', '.join(options)}: add some with "
                    f"+isocompute=[{options[0]},...]) and our settings block (set one with isocompute.KEY=VALUE); a config "
                    "group cannot be null: leave it out to keep the recipe's")
        return (f"{shown}: {group} is a config group, which cannot be null: give one of its options ({group}=NAME), or "
                "leave it out to keep the recipe's")
    missing = re.match(r"Could not override '([^']+)'\.", lines[0])
    if not missing:  # the first line (a resolver's message without OmegaConf's wrapper) and hydra's hints
        first = lines[0].split("raised while resolving interpolation: ", 1)[-1]
        return "; ".join([first, *(line for line in lines[1:] if line.startswith(("To ", "See ")))])
    key = missing.group(1)
    hint = next((line for line in lines[1:] if line.startswith("To append")), f"To add it use +{key}=VALUE")
    said = f"Could not override '{key}': recipe {recipe} has no such key. {hint}"
    ours = [k for k, _, _ in leaves()]
    if key in ours:
        where = declaring(key)
        return said + (f"; {key} is declared by {', '.join(where)}" if where else
                       f"; {key} is a setting of ours (training/schema.py) that no recipe writes")
    if key.startswith("isocompute."):  # hydra's hint would add the typo, for the schema to refuse it
        nearest = difflib.get_close_matches(key, ours, n=1, cutoff=0.0)
        return f"Could not override '{key}': it is not a setting of ours; did you mean {nearest[0]}?"
    return said
