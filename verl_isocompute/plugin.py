"""Target of our ``verl.plugins`` entry point: registers every extension of verl-isocompute.

``import verl`` imports this module in every verl process (driver, TaskRunner, Ray workers), so the
registrations are present wherever verl looks them up. verl swallows errors raised here (logged at DEBUG
level only), which would leave a run silently without our extensions: ``isocompute doctor`` (with the
probes of :mod:`verl_isocompute.registration_probes`) is how a user finds out.

Two kinds of registration:

* at once, because verl needs them before it imports anything else: the config resolvers, the recipes' search
  path and the CPU platform (cheap: no verl trainer module is imported for them). The CPU rollout's registrations
  and, under ``VERL_PLATFORM=cpu``, the CPU adjustments of verl's FSDP engine and process group are made by
  :mod:`verl_isocompute.cpu` when verl imports the modules they go into, the same way: importing those modules
  at once cost ~4 s of CPU in every process of a CPU run (``import verl`` took 1.4x the CPU of verl without the
  plugin, now 1.0x: ``python benchmarks/bench_plugin_overhead.py --imports 5``), the driver's, the reward loop's
  and the request router's included, which train nothing (and the driver builds no rollout);
* when verl imports the module that holds the registry (:data:`ON_IMPORT`, through ``wrapt``'s post-import
  hooks): the estimators, the trainer and the prefix agent loop. Each of our modules in that table registers
  itself when it is imported, so the hook only imports it. Registering those at once would import verl's v1
  trainer (and with it the agent loop, reward loop, FastAPI, datasets, peft...) into every verl process,
  training workers included, that never look a trainer up: the actor worker's imports took 7% more CPU with it
  (7.2 s against 6.8 s, CHANGELOG), in each of the several worker processes a run starts.

Registration is idempotent: importing twice, or calling :func:`register_all` again, changes nothing.
"""

from __future__ import annotations

import importlib

import wrapt

# verl module whose import brings the registry in -> our module that registers into it when imported.
# verl looks each name up only after importing these (``get_adv_estimator_fn`` in core_algos, ``get_trainer_cls``
# from verl.trainer.ppo.v1, the agent-loop registry in verl.experimental.agent_loop); a hook fires once the
# module has run, or at once if it is already imported.
ON_IMPORT: dict[str, str] = {
    "verl.trainer.ppo.core_algos": "verl_isocompute.training.advantage",  # the two GRPO estimators
    "verl.trainer.ppo.v1": "verl_isocompute.training.trainer",  # the isocompute trainer
    "verl.experimental.agent_loop": "verl_isocompute.training.guided_agent_loop",  # the assistant-placement agent loop
}
_hooked: set[str] = set()


def _importer(ours: str):
    def hook(_verl_module) -> None:
        # A module of ours that is still running its own imports (it was imported first and is what imported
        # verl) comes back half-initialised here and registers itself when it finishes.
        importlib.import_module(ours)

    return hook


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
    for target, ours in ON_IMPORT.items():
        if target not in _hooked:
            _hooked.add(target)
            wrapt.register_post_import_hook(_importer(ours), target)


def register_now() -> None:
    """Register everything in this process now, importing the registry modules (``isocompute doctor``: an error
    in one of them surfaces here, where a post-import hook would raise it in the middle of verl's imports). The
    hooks are in place already: importing this module ran :func:`register_all`."""
    for target in ON_IMPORT:
        importlib.import_module(target)


register_all()
