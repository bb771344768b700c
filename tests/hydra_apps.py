"""Run a hydra entry point (verl's ``main_ppo`` or ours) in this process, as its command line would, without Ray.

Starting ``python -m verl.trainer.main_ppo`` costs ~8 s of imports per process; in this process verl is
imported once. Hydra parses ``argv`` exactly as on the command line (its own argparse: a misplaced option is
the same error), composes, runs the callbacks and then the task function. A run that would get past the
checks to verl's ``run_ppo`` (which starts Ray) fails the test instead: tests here pass ``--cfg job`` or
expect a check to stop the run first.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import dataclass


@dataclass
class AppResult:
    code: int
    out: str
    err: str


class RayWouldStart(AssertionError):
    pass


def run_app(module: str, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None,
            run_ppo=None) -> AppResult:
    """``python -m MODULE ARGV`` in this process; ``env``: variables to set ("" unsets one) for the call.
    ``run_ppo``: called instead of verl's ``run_ppo(config, task_runner_class)`` (default: fail the test)."""
    import importlib

    from hydra.core.global_hydra import GlobalHydra

    from verl_isocompute.training import resolvers

    app = importlib.import_module(module)
    saved_env = dict(os.environ)
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    saved_entry = getattr(resolvers, "ENTRY_SETS_PLATFORM", False)
    out, err = io.StringIO(), io.StringIO()

    def no_ray(*args, **kwargs):
        raise RayWouldStart("the run got past every check and would start Ray here")

    import verl.trainer.main_ppo as main_ppo

    real_run_ppo = main_ppo.run_ppo
    main_ppo.run_ppo = run_ppo or no_ray  # our entry imports it from there at run time too
    try:
        for key, value in (env or {}).items():
            if value == "":
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if cwd:
            os.chdir(cwd)
        os.environ[resolvers.LAUNCH_DIR_ENV] = os.getcwd()  # as a fresh process records it (runs/<experiment> is here)
        GlobalHydra.instance().clear()
        sys.argv = [f"{module}.py", *argv]
        if module == "verl_isocompute.main":
            resolvers.ENTRY_SETS_PLATFORM = True  # what its `if __name__ == "__main__"` block sets
        code = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                app.main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return AppResult(code, out.getvalue(), err.getvalue())
    finally:
        main_ppo.run_ppo = real_run_ppo
        resolvers.ENTRY_SETS_PLATFORM = saved_entry
        GlobalHydra.instance().clear()
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
