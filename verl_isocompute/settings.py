"""Settings dataclasses written once, as TRL writes its trainer configs: each field carries its default and its
help text, and a command's argparse options are built from the fields, so neither is written twice.

:func:`setting` declares a field (``default`` or ``default_factory``, ``help``); :func:`add_setting` adds the
command-line option of one field, taking its default and help from the dataclass (``_`` becomes ``-`` in the
flag). A default that is not None or a bool is shown as ``(default X)``; ``default_help`` replaces that with
words (``"default: the recipe's"``). A field may also declare the values a config may give it (``minimum``,
``choices``, ...: :data:`LIMITS`), which the config schema checks (:mod:`verl_isocompute.training.schema`).
Pure: no third-party import.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, Field, field, fields
from typing import Any


# The bounds and choices a field may declare (read by verl_isocompute.training.schema, which checks config values).
LIMITS = ("minimum", "maximum", "above", "below", "choices")


def setting(default: Any = MISSING, help: str = "", *, default_factory: Any = MISSING, default_help: str | None = None,
            **limits: Any) -> Any:
    """A settings field with its help text (what it does, why the default); ``default_help`` says the default in
    words where the value alone would mislead (None meaning "the recipe's"). ``limits``: the values a config may
    give it, ``minimum`` / ``maximum`` (inclusive), ``above`` / ``below`` (exclusive) for numbers (each item of a
    list), ``choices`` for words."""
    unknown = set(limits) - set(LIMITS)
    if unknown:
        raise TypeError(f"setting() got unknown limit(s) {sorted(unknown)}; use {', '.join(LIMITS)}")
    metadata = {"help": help, **limits} if default_help is None else {"help": help, "default_help": default_help, **limits}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def setting_field(cls: type, name: str) -> Field:
    """The field ``name`` of the settings dataclass ``cls``."""
    for f in fields(cls):
        if f.name == name:
            return f
    raise KeyError(f"{cls.__name__} has no setting {name!r}")


def help_text(cls: type, name: str) -> str:
    """The help text of one setting, as written on its field."""
    return setting_field(cls, name).metadata.get("help", "")


def default_of(cls: type, name: str) -> Any:
    """The default of one setting (a fresh value for a ``default_factory``)."""
    f = setting_field(cls, name)
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default


def add_setting(parser: argparse.ArgumentParser, cls: type, name: str, *flags: str, **kwargs: Any) -> argparse.Action:
    """Add the option of setting ``name`` of ``cls`` to ``parser`` (a parser or a group): ``--name`` with ``-``
    for ``_`` unless ``flags`` are given, the field's default and help; ``kwargs`` are argparse's (``type``,
    ``metavar``, ``choices``, ``action``; a ``default`` or ``help`` given here wins, for an option whose meaning
    is the field's inverse)."""
    f = setting_field(cls, name)
    if f.default is not MISSING or f.default_factory is not MISSING:
        kwargs.setdefault("default", default_of(cls, name))
    if "help" not in kwargs:
        text = f.metadata.get("help", "").replace("%", "%%")
        default = kwargs.get("default")
        if "default_help" in f.metadata:
            text += f" ({f.metadata['default_help']})" if f.metadata["default_help"] else ""
        elif isinstance(default, (tuple, list)) and default:  # as typed: 0.25 0.75 (nargs), else 0.3,0.6
            text += f" (default {(' ' if kwargs.get('nargs') else ',').join(f'{v:g}' if isinstance(v, float) else str(v) for v in default)})"
        elif default not in (None, (), []) and not isinstance(default, bool) and kwargs.get("action") not in ("store_true", "store_false"):
            text += " (default %(default)s)"
        kwargs["help"] = text
    return parser.add_argument(*(flags or (f"--{name.replace('_', '-')}",)), **kwargs)


def from_args(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """The settings ``cls`` from parsed ``args``: each field from the option of the same name, unless ``given``
    (an option whose value needs converting, or whose meaning is the field's inverse)."""
    return cls(**{f.name: given[f.name] if f.name in given else getattr(args, f.name) for f in fields(cls)})
