"""Entry point for our recipes: ``python -m verl_isocompute.main --config-name RECIPE key=value ...``.

It composes one of our hydra recipes (each extends verl's ``ppo_trainer``), resolves our ``isocompute:``
block into plain verl settings (:func:`verl_isocompute.training.prepare.prepare`: platform, model, data,
allocation, learning rate, run directory), and hands the config to verl's own ``run_ppo`` with verl's
own TaskRunner: the run is an ordinary verl run. ``python -m verl.trainer.main_ppo`` with the same recipe
resolves to the same config (docs/STOCK_VERL.md); this entry point adds the CPU platform switch
(``VERL_PLATFORM=cpu`` must be set before verl is imported) and checks before Ray starts.

Overrides work as in verl (``actor_rollout_ref.rollout.n=8``); new keys need ``+key=value``.

SIGTERM or SIGINT (Ctrl-C) stops the run: the Ray instance it started is shut down (no verl or Ray
process is left), the run directory is kept, and the exit status is 128 + the signal number (143, 130)
with one line saying what was kept. However the run ends, the shared memory its processes created in /dev/shm
is removed (:mod:`verl_isocompute.cpu.shm`).
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from verl_isocompute.training.config import RecipeError
from verl_isocompute.training.prepare import prepare
from verl_isocompute.training import resolvers
from verl_isocompute.training.resolvers import LAUNCH_DIR_ENV


def run(cfg: DictConfig) -> None:
    """Prepare ``cfg`` and run it with verl's trainer."""
    prepare(cfg)
    import verl  # noqa: F401  (loads plugins, ours included, with VERL_PLATFORM already set)
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    import verl_isocompute.plugin  # noqa: F401  (surface a broken plugin here, where verl would hide it; the parts
    # registered when verl imports their registry raise there, in the TaskRunner, see plugin.ON_IMPORT)

    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    run_ppo(cfg, task_runner_class=TaskRunnerV1)


@hydra.main(config_path="pkg://verl_isocompute.recipes", config_name="cpu_demo", version_base=None)
def main(cfg: DictConfig) -> None:
    from verl_isocompute.cpu.shm import removing_shared_memory
    from verl_isocompute.workflow import launch

    try:
        with removing_shared_memory(), launch.shutting_down_ray_on_error():
            run(cfg)
    except launch.Interrupted as exc:
        print(f"isocompute: stopped by {exc}; verl and its Ray processes are stopped; kept the run directory "
              f"{cfg.isocompute.run_dir} (its run log has the steps finished so far)", file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)
    except RecipeError as exc:
        print(f"isocompute: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # model / data errors of ours carry their fix in the message
        from verl_isocompute.cpu.models import ModelError
        from verl_isocompute.cpu.vllm_cpu import RolloutSyncError

        if isinstance(exc, ModelError):
            print(f"isocompute: error: {exc}", file=sys.stderr)
            sys.exit(2)
        cause = _root_cause(exc)
        if isinstance(cause, RolloutSyncError):  # raised in a training worker, reaches us wrapped by Ray
            print(f"isocompute: error: {cause}", file=sys.stderr)
            sys.exit(1)
        raise


def _root_cause(exc: BaseException) -> BaseException:
    """The exception at the bottom of a chain: Ray wraps a worker's exception (``RayTaskError.cause``) once per
    process it crossed, and each wrapper's text is a whole traceback."""
    while (inner := getattr(exc, "cause", None) or exc.__cause__) is not None and inner is not exc:
        exc = inner
    return exc


if __name__ == "__main__":
    # relative paths (isocompute.run_dir) are this directory, also in verl's Ray processes (they inherit it)
    os.environ[LAUNCH_DIR_ENV] = os.getcwd()
    resolvers.ENTRY_SETS_PLATFORM = True  # `--cfg job --resolve` resolves trainer.device as a run would
    main()
