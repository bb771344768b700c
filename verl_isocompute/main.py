"""Entry point for our recipes: ``python -m verl_isocompute.main --config-name RECIPE key=value ...``.

It composes one of our hydra recipes (each extends verl's ``ppo_trainer``), resolves our ``isocompute:``
block into plain verl settings (:func:`verl_isocompute.training.prepare.prepare`: platform, model, data,
allocation, learning rate, run directory), and hands the config to verl's own ``run_ppo`` with verl's
own TaskRunner: the run is an ordinary verl run. ``python -m verl.trainer.main_ppo`` with the same recipe
resolves to the same config (docs/STOCK_VERL.md); this entry point adds the CPU platform switch
(``VERL_PLATFORM=cpu`` must be set before verl is imported) and checks before Ray starts.

Overrides work as in verl (``actor_rollout_ref.rollout.n=8``); new keys need ``+key=value``. An override the recipe
cannot take is one line naming the fix (:func:`entry`): a key it does not have (with hydra's hint, and which
recipes declare it), a config group set to null (``isocompute=null``).

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


DEFAULT_RECIPE = "cpu_demo"
# Set by entry() while hydra composes the recipe, unless the user had set it: hydra then raises a composition error
# to entry() instead of printing it over several lines (main() unsets it: the run's own errors are reported as before).
_FULL_ERROR = "HYDRA_FULL_ERROR"
_set_here = False  # whether entry() set it


@hydra.main(config_path="pkg://verl_isocompute.recipes", config_name=DEFAULT_RECIPE, version_base=None)
def main(cfg: DictConfig) -> None:
    from verl_isocompute.cpu.shm import removing_shared_memory
    from verl_isocompute.workflow import launch

    if _set_here:
        os.environ.pop(_FULL_ERROR, None)

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


def entry(argv: list[str]) -> None:
    """:func:`main` with the command line ``argv``: an error composing the recipe (a key it does not have, a config
    group set to null, an override hydra cannot parse) is one line naming the fix
    (:func:`~verl_isocompute.training.recipe_keys.composition_error`) and exit status 2, as our other errors."""
    global _set_here
    _set_here = _FULL_ERROR not in os.environ  # a user's HYDRA_FULL_ERROR=1 keeps hydra's full report
    if _set_here:
        os.environ[_FULL_ERROR] = "1"
    try:
        main()
    except Exception as exc:
        if not _set_here or _FULL_ERROR not in os.environ:  # raised by the run, after main() began
            raise
        from verl_isocompute.training.recipe_keys import composition_error

        names = [a.split("=", 1)[1] if "=" in a else b for a, b in zip(argv, [*argv[1:], ""])
                 if a.split("=", 1)[0] in ("--config-name", "-cn")]
        overrides = [a for a in argv if "=" in a and not a.startswith("-")]
        print(f"isocompute: error: {composition_error(exc, (names or [DEFAULT_RECIPE])[-1], overrides)}", file=sys.stderr)
        sys.exit(2)
    finally:
        if _set_here:
            os.environ.pop(_FULL_ERROR, None)


if __name__ == "__main__":
    # relative paths (isocompute.run_dir) are this directory, also in verl's Ray processes (they inherit it)
    os.environ[LAUNCH_DIR_ENV] = os.getcwd()
    resolvers.ENTRY_SETS_PLATFORM = True  # `--cfg job --resolve` resolves trainer.device as a run would
    entry(sys.argv[1:])
