"""Target of our ``verl.plugins`` entry point: registers every extension of verl-isocompute.

``import verl`` imports this module in every verl process (driver, TaskRunner, Ray workers), so the
registrations are present wherever verl looks them up. verl swallows errors raised here (logged at DEBUG
level only), which would leave a run silently without our extensions: ``isocompute doctor`` and
:func:`check_registrations` are how a user finds out.

Registration is idempotent: importing twice, or calling :func:`register_all` again, changes nothing.
"""

from __future__ import annotations

# name -> how to check it is registered; used by `isocompute doctor` and the import-contract test.
EXPECTED = {
    "platform:cpu": lambda: __import__("verl.plugin.platform", fromlist=["PlatformRegistry"]).PlatformRegistry.get("cpu") is not None,
    "rollout:hf": lambda: "hf" in __import__("verl.workers.rollout.replica", fromlist=["x"]).RolloutReplicaRegistry._registry,
    "rollout_adapter:hf": lambda: ("hf", "async") in __import__("verl.workers.rollout.base", fromlist=["x"])._ROLLOUT_REGISTRY,
}


def register_all() -> None:
    """Register all our extensions with verl (safe to call any number of times)."""
    from verl_isocompute import cpu

    cpu.register()


def check_registrations() -> dict[str, bool]:
    """Which of our registrations verl can see in this process."""
    results = {}
    for name, probe in EXPECTED.items():
        try:
            results[name] = bool(probe())
        except Exception:
            results[name] = False
    return results


register_all()
