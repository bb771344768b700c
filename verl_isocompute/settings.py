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
import dataclasses
import difflib
import math
import types
from dataclasses import MISSING, Field, field, fields
from typing import Any, Union, get_args, get_origin, get_type_hints

from verl_isocompute.errors import IsoComputeError
from verl_isocompute.numeric import integral, yaml_bool, yaml_number


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


class SettingsError(IsoComputeError, ValueError):
    """A setting that its declared type or limits refuse; the message names the key and the fix."""


def check_mapping(block: dict[str, Any], cls: type, path: str) -> Any:
    """A plain (resolved) mapping as the settings dataclass ``cls``, each field read as its type within the limits
    :func:`setting` declared (``path``: the dotted key of the mapping, for messages). Booleans are read as YAML
    reads them (never by truthiness), numbers must be finite, a list-typed field refuses one value, a field with
    no list type refuses a list, an unknown key is refused naming the nearest known one, a nested settings class
    is checked the same way, and ``???`` (a mandatory key left unset) reads as None."""
    if not isinstance(block, dict):
        raise SettingsError(f"{path}={block!r}: must be a mapping with the keys "
                            f"{', '.join(f.name for f in dataclasses.fields(cls))}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in block:
        if name not in fields:
            nearest = difflib.get_close_matches(str(name), fields, n=1, cutoff=0.0)
            raise SettingsError(f"unknown key {path}.{name}: did you mean {path}.{nearest[0]}? (the keys of {path}: "
                                f"{', '.join(fields)})")
    hints = get_type_hints(cls)
    values = {}
    for name, value in block.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            values[name] = check_mapping({} if value is None else value, tp, f"{path}.{name}")
        else:
            values[name] = _value(f"{path}.{name}", None if value == "???" else value, tp, fields[name].metadata)
    return cls(**values)


def _value(key: str, value: Any, tp: Any, limits: dict[str, Any]) -> Any:
    """``value`` as the type ``tp`` within ``limits``, or a SettingsError naming ``key``."""
    if get_origin(tp) in (Union, types.UnionType):
        members = [t for t in get_args(tp) if t is not type(None)]
        if value is None and len(members) < len(get_args(tp)):
            return None
        lists = [t for t in members if get_origin(t) is tuple]
        scalars = [t for t in members if get_origin(t) is not tuple]
        chosen = lists if (isinstance(value, (list, tuple)) and lists) or not scalars else scalars
        nullable = {**limits, "nullable": len(members) < len(get_args(tp))}
        return _value(key, value, chosen[0], nullable)
    if get_origin(tp) is tuple:
        if not isinstance(value, (list, tuple)):
            raise SettingsError(f"{key}={value!r} is one value where a list is expected: write {key}=[{value}] "
                                "(or a longer list)")
        return tuple(_value(f"{key}[{i}]", item, get_args(tp)[0], limits) for i, item in enumerate(value))
    if value is None:
        raise SettingsError(f"{key} must be set: it has no unset value ({_expected(tp, limits)})")
    if tp is bool:
        try:
            return yaml_bool(value)
        except ValueError as exc:
            raise SettingsError(f"{key}={value!r}: {exc}") from None
    if tp is str:
        if isinstance(value, (bool, int, float)) and "choices" not in limits:  # hydra and YAML read 123, true unquoted
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            kind = "boolean" if isinstance(value, bool) else "number"
            raise SettingsError(f"{key}={shown}: use {_expected(tp, limits)}; unquoted, {shown} reads as a {kind}: quote it "
                                f"for hydra, e.g. '{key}=\"{shown}\"' on a shell command line")
        if not isinstance(value, str):
            raise SettingsError(f"{key}={value!r}: use {_expected(tp, limits)}")
        if "choices" in limits and value not in limits["choices"]:
            raise SettingsError(f"{key}={value!r}: use {_expected(tp, limits)}")
        return value
    return _number(key, value, tp, limits)


def _number(key: str, value: Any, tp: type, limits: dict[str, Any]) -> int | float:
    """``value`` as a finite int or float within ``limits`` (a whole number for ``int``), or a SettingsError."""
    number = yaml_number(value)  # YAML 1.1 reads 1e6 (no dot) as a string
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        raise SettingsError(f"{key}={value!r}: use {_expected(tp, limits)}")
    if tp is int:
        number = integral(number)
        if not isinstance(number, int):
            raise SettingsError(f"{key}={value!r}: use {_expected(tp, limits)}")
    low, high = limits.get("minimum"), limits.get("maximum")
    above, below = limits.get("above"), limits.get("below")
    if (low is not None and number < low) or (high is not None and number > high) \
            or (above is not None and number <= above) or (below is not None and number >= below):
        raise SettingsError(f"{key}={value!r} is out of range: use {_expected(tp, limits)}")
    return number


def _expected(tp: Any, limits: dict[str, Any]) -> str:
    """What a field takes, in words: "a whole number >= 2", "a finite number >= 0 and < 0.5", "one of a, b"."""
    if "choices" in limits:
        return f"one of {', '.join(limits['choices'])}" + (" or null" if limits.get("nullable") else "")
    if tp is str:
        return "a text"
    what = "a whole number" if tp is int else "a finite number"
    bounds = [f"{sign} {limits[name]:g}" for name, sign in (("minimum", ">="), ("above", ">"), ("maximum", "<="),
                                                              ("below", "<")) if limits.get(name) is not None]
    return f"{what} {' and '.join(bounds)}".rstrip()
