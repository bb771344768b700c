"""Reading a verl config (an OmegaConf ``DictConfig``) by dotted key: one way, used by every hook."""

from __future__ import annotations

from typing import Any


def select(cfg, key: str, default: Any = None) -> Any:
    """The value at ``key`` (``a.b.c``), or ``default`` when a part of the path is missing."""
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=default)


def files(cfg, key: str) -> list[str]:
    """A files key (``data.train_files``: one path or a list of paths) as a list of strings, interpolations
    resolved."""
    from omegaconf import OmegaConf

    value = select(cfg, key)
    return [str(f) for f in OmegaConf.to_container(value, resolve=True)] if OmegaConf.is_list(value) else [str(value)]
