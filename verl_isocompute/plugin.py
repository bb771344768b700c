"""Target of our ``verl.plugins`` entry point: registers every extension of verl-isocompute.

``import verl`` imports this module in every verl process (driver, TaskRunner, Ray workers), so the
registrations are present wherever verl looks them up. verl swallows errors raised here (logged at DEBUG
level only), which would leave a run silently without our extensions: ``isocompute doctor`` (with the
probes of :mod:`verl_isocompute.registration_probes`) is how a user finds out.

Registration is idempotent: importing twice, or calling :func:`register_all` again, changes nothing.
"""

from __future__ import annotations


def register_all() -> None:
    """Register all our extensions with verl (safe to call any number of times)."""
    from verl_isocompute import cpu
    from verl_isocompute.training import resolvers, searchpath

    # First the config resolvers and the recipes' search path: verl's `main_ppo` composes our recipes (whose
    # keys interpolate the resolvers) right after `import verl` has loaded this module.
    resolvers.register()
    searchpath.register()
    # Then: importing verl's trainer modules resolves the platform, and under VERL_PLATFORM=cpu the
    # cpu platform must already be registered by then.
    cpu.register()
    from verl_isocompute.training import advantage, trainer  # noqa: F401  (the trainer registers on import)

    advantage.register()
    from verl_isocompute.guided import agent_loop  # noqa: F401  (registers the assistant-placement agent loop)


register_all()
