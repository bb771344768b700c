"""The package's errors: one base class, so a command reports any of them the same way (one line, exit 2).

A :class:`IsoComputeError` is bad input or a setting a run, a curation, a search or a fit cannot use; its
message names the problem and the fix. It is a ``ValueError``, as the package's errors always were.
"""

from __future__ import annotations


class IsoComputeError(ValueError):
    """Bad input or settings; the message names the problem and the fix."""


class CurateError(IsoComputeError):
    """Input or settings a curation cannot use; the message names the fix."""
