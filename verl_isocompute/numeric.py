"""Numbers read from YAML, JSON and the command line: the package's one set of checks.

Each caller raises its own error class with its own message (a plan key, a flag, a curve field), so what
lives here are the predicates and the one coercion they share:

- YAML 1.1 (PyYAML, OmegaConf) reads ``1e6`` (no dot) as the *string* ``"1e6"``; ``1.0e6`` is a float.
  :func:`yaml_number` reads such a string as the float it was meant to be and leaves anything else as it is,
  for the caller's check to name it.
- ``True`` is an ``int`` to Python but never a number here; NaN and infinity are not numbers either.
- A count written as an integral float (``6.5e4`` in YAML) counts as that integer.
- A switch reads as YAML 1.1 reads it (:func:`yaml_bool`): hydra hands ``enable=off`` or ``enable='false'``
  over as a string, whose Python truth is True, so a switch is never tested by its truth.

Pure standard library.
"""

from __future__ import annotations

import math
from typing import Any


def yaml_number(value: Any) -> Any:
    """``value``, with a string that reads as a number (``"1e6"``, ``" 1_000 "``) as that float."""
    if isinstance(value, str):
        try:
            return float(value.strip().replace("_", ""))
        except ValueError:
            return value
    return value


def is_real(value: Any) -> bool:
    """A finite int or float, not a bool (``true`` and ``"6.0"`` are not numbers, whatever float() says)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_positive(value: Any) -> bool:
    """A finite number > 0 (:func:`is_real`)."""
    return is_real(value) and value > 0


def integral(value: Any) -> Any:
    """``value``, with an integral float (``6.5e4``, ``8.0``) as that int."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def as_count(value: Any, minimum: int = 1) -> int | None:
    """``value`` as an integer >= ``minimum`` (an integral float counts), or None when it is not one."""
    value = integral(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return None
    return value


# The YAML 1.1 spec's boolean words, in any case (PyYAML itself reads only some of them), with 1 / 0 as
# OmegaConf's BooleanNode takes them.
_TRUE = frozenset({"true", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "no", "n", "off", "0"})


def yaml_bool(value: Any) -> bool:
    """A switch as YAML reads it: a bool, 1 / 0, or one of true/false, yes/no, y/n, on/off, 1/0 in any case;
    anything else is a ValueError (the caller names the key)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("use true or false (YAML's yes / no, on / off read as such)")
