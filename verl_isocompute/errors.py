"""The package's errors: one base class, so the ``isocompute`` command reports any of them the same way, once
(one line naming the problem and the fix, exit status 2, no traceback).

:class:`IsoComputeError` marks an error meant for the user: bad input, or a setting a run, a curation, a
search or a fit cannot use. Each error class keeps the built-in class it always had (``ValueError`` for
bad input, ``RuntimeError`` for a model or a sweep that cannot go on), so code that catches those is
unaffected.
"""

from __future__ import annotations


class IsoComputeError(Exception):
    """An error meant for the user; the message names the problem and the fix."""


class CurateError(IsoComputeError, ValueError):
    """Input or settings a curation cannot use; the message names the fix."""
