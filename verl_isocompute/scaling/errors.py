"""The two ways the scaling toolkit refuses: bad input, and a fit that did not work.

Both carry a message meant for the user (what is wrong and how to fix it); the ``isocompute fit``
command prints it without a traceback.
"""

from __future__ import annotations

from verl_isocompute.errors import IsoComputeError


class ScalingError(IsoComputeError, ValueError):
    """Input the toolkit cannot use (no runs, a missing metric, a broken log); the message names the fix."""


class FitError(ScalingError):
    """A fit that did not converge: nothing is written rather than a bogus curve."""
