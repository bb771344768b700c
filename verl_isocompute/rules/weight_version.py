"""Rollouts tied to the weights they were sampled with: each step trains only on rollouts of the current policy.

The playbook's recipe is fully on-policy (arXiv 2603.12151, section 2): the rollouts of step k are sampled
with the weights after update k - 1, and truncated importance sampling only corrects the small numerical
gap between the rollout engine and the trainer, not a policy one or more updates old. verl stamps every
trajectory with the weight version of the rollout server that sampled it: the trainer passes its step
with each weight sync (``update_weights(global_steps)``), the server returns it with each response, and
the agent loop tags the trajectory ``min_global_steps`` / ``max_global_steps`` (the versions its turns
saw). The isocompute trainer syncs after every update, so before the update of step k every rollout must
carry version k - 1 (after a resume from the checkpoint of step s, the first step's rollouts carry s).
A weight sync that did not reach a rollout server, or rollouts left over from an earlier step (verl's
asynchronous modes sample ahead), would otherwise train silently as if on-policy:
:func:`check_rollout_versions` stops the run with one message naming the step and the versions found.

Not checked: verl's padding rows (copies of real rows), and runs that replay cached rollouts on purpose
(``skip.rollout_tq.enable``, which stamps them with the current step). Pure: no verl, no torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


class StaleRolloutError(RuntimeError):
    """Rollouts sampled with other weights than the trainer's reached an update."""


def check_rollout_versions(tags: Iterable[dict], step: int) -> int | None:
    """The weight version the rollouts of ``step`` were sampled with (``tags``: verl's per-row tags), which
    must be ``step - 1`` for every non-padding row; :class:`StaleRolloutError` otherwise. None when no row
    carries a version (a rollout backend that does not report one)."""
    expected = step - 1
    versions: Counter = Counter()
    for tag in tags:
        if tag.get("is_padding", False):
            continue
        versions[(tag.get("min_global_steps"), tag.get("max_global_steps"))] += 1
    if not versions or set(versions) == {(None, None)}:
        return None
    wrong = {span: count for span, count in versions.items() if span != (expected, expected)}
    if wrong:
        found = ", ".join(f"{count} from version {_span(span)}" for span, count in sorted(wrong.items(), key=str))
        raise StaleRolloutError(
            f"step {step}: the trainer's weights are version {expected} (its number of updates so far), but of "
            f"{sum(versions.values())} rollouts {found}: a weight sync did not reach the rollout servers, or rollouts "
            "of an earlier step were sampled; this recipe trains fully on-policy, so the run stops here"
        )
    return expected


def _span(span: tuple) -> str:
    low, high = span
    return str(low) if low == high else f"{low} to {high}"
