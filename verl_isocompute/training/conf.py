"""Reading a verl config (an OmegaConf ``DictConfig``) by dotted key: one way, used by every hook; a switch
(:func:`flag`) as YAML reads it, never by its Python truth."""

from __future__ import annotations

from typing import Any

from verl_isocompute.numeric import yaml_bool


def select(cfg, key: str, default: Any = None) -> Any:
    """The value at ``key`` (``a.b.c``), or ``default`` when a part of the path is missing."""
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=default)


def flag(cfg, key: str, default: bool = False) -> bool:
    """The switch at ``key`` (``default`` when unset) as YAML reads it: ``off``, ``'false'``, ``no`` and ``0`` are
    False (:func:`verl_isocompute.numeric.yaml_bool`); anything else not a boolean is a ValueError naming the key."""
    value = select(cfg, key)
    if value is None:
        return default
    try:
        return yaml_bool(value)
    except ValueError as exc:
        raise ValueError(f"{key}={value!r}: {exc}") from None


def files(cfg, key: str) -> list[str]:
    """A files key (``data.train_files``: one path or a list of paths) as a list of strings, interpolations
    resolved."""
    from omegaconf import OmegaConf

    value = select(cfg, key)
    return [str(f) for f in OmegaConf.to_container(value, resolve=True)] if OmegaConf.is_list(value) else [str(value)]
