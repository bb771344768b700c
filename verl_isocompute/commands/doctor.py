"""Check that verl sees this plugin, that the CPU backend works, and that our reward runs off the main thread.

Every check runs in a fresh Python process, because what matters is what verl does on its own: ``import
verl`` loads plugins through the ``verl.plugins`` entry point and silently ignores one that fails to
import, so a broken install looks exactly like a working one until a run behaves wrongly. Exit status 0
means healthy; 1 means something is wrong, and the table says what to do.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.version import Version

VERL_RANGE = SpecifierSet(">=0.9.1,<0.10")
CHECK_TIMEOUT_S = 180


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _run_python(code: str, env_extra: dict[str, str] | None = None) -> tuple[int, str, str]:
    import os

    env = dict(os.environ)
    env.pop("VERL_PLATFORM", None)
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=CHECK_TIMEOUT_S
    )
    return proc.returncode, proc.stdout, proc.stderr


def _last_json(stdout: str) -> dict:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no result printed")


def check_verl_version() -> Check:
    try:
        installed = version("verl")
    except PackageNotFoundError:
        return Check("verl version", False, "verl is not installed", "pip install 'verl[verl-core]>=0.9.1,<0.10'")
    ok = Version(installed) in VERL_RANGE
    return Check(
        "verl version",
        ok,
        f"{installed} (supported: {VERL_RANGE})",
        "" if ok else f"pip install 'verl[verl-core]{VERL_RANGE}' (this plugin relies on verl internals of that range)",
    )


def check_registrations(platform: str | None = None) -> Check:
    """Our registrations as verl sees them after its own plugin loading (optionally on a platform)."""
    name = "plugin loaded by verl" + (f" (VERL_PLATFORM={platform})" if platform else "")
    env = {"VERL_PLATFORM": platform} if platform else {}
    code = """
        import json, verl
        from verl_isocompute.registration_probes import check_registrations
        print(json.dumps(check_registrations()))
    """
    rc, out, err = _run_python(code, env)
    if rc != 0:
        return Check(name, False, f"`import verl` failed: {err.strip().splitlines()[-1:]}", "reinstall verl")
    seen = _last_json(out)
    missing = [name for name, ok in seen.items() if not ok]
    if not missing:
        return Check(name, True, f"{len(seen)} registrations visible after `import verl`")
    import os

    policy = os.environ.get("VERL_USE_EXTERNAL_PLUGINS", "auto")
    if policy.strip().lower() == "none" or (policy not in ("", "auto") and "isocompute" not in policy.split(",")):
        return Check(
            name,
            False,
            f"VERL_USE_EXTERNAL_PLUGINS={policy} keeps verl from loading this plugin",
            "unset VERL_USE_EXTERNAL_PLUGINS, or include isocompute in it",
        )
    # Register directly, the deferred registrations included, to surface the error verl swallowed.
    rc, _, err = _run_python("from verl_isocompute.plugin import register_now; register_now()", env)
    cause = err.strip().splitlines()[-1] if rc != 0 and err.strip() else "no entry point named isocompute in group verl.plugins"
    return Check(
        name,
        False,
        f"missing: {', '.join(missing)}; cause: {cause}",
        "reinstall: pip install -e . (or pip install verl-isocompute); the cause above names what failed to import",
    )


def check_cpu_backend() -> Check:
    code = """
        import json, os
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(__import__("random").randint(20000, 40000)))
        import verl, torch
        from verl.utils.device import get_device_name, get_nccl_backend
        from verl.utils.distributed import initialize_global_process_group_ray
        from verl.workers.engine.base import EngineRegistry
        initialize_global_process_group_ray()
        t = torch.ones(2)
        torch.distributed.all_reduce(t)
        engine = EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__
        print(json.dumps({"device": get_device_name(), "backend": get_nccl_backend(),
                          "group": torch.distributed.get_backend(), "engine": engine}))
    """
    rc, out, err = _run_python(code, {"VERL_PLATFORM": "cpu"})
    if rc != 0:
        return Check("CPU backend", False, (err.strip().splitlines() or ["failed"])[-1], "run `isocompute doctor` after reinstalling; report the error above")
    info = _last_json(out)
    ok = info["device"] == "cpu" and info["backend"] == "gloo"
    return Check("CPU backend", ok, f"device={info['device']} collectives={info['group']} fsdp2 engine={info['engine']}")


def check_reward_thread() -> Check:
    code = """
        import json
        from concurrent.futures import ThreadPoolExecutor
        from verl_isocompute.rules.reward import compute_score
        cases = [("so the answer is \\\\boxed{\\\\frac{1}{2}}", "0.5", 1.0), ("\\\\boxed{3}", "4", 0.0)]
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda c: compute_score("doctor", c[0], c[1])["score"], cases))
        print(json.dumps({"got": got, "want": [c[2] for c in cases]}))
    """
    rc, out, err = _run_python(code)
    if rc != 0:
        return Check("reward off the main thread", False, (err.strip().splitlines() or ["failed"])[-1], "pip install math-verify")
    res = _last_json(out)
    ok = res["got"] == res["want"]
    return Check("reward off the main thread", ok, f"scores from a thread pool: {res['got']} (expected {res['want']})",
                 "" if ok else "math-verify misbehaves off the main thread; reinstall math-verify")


def run_checks() -> list[Check]:
    """Every check, in this order. The four that start a Python process (each imports verl and torch, most
    of a check's time) run at the same time: on 2 cores that halves the doctor's wall time."""
    from concurrent.futures import ThreadPoolExecutor

    checks = (check_registrations, lambda: check_registrations("cpu"), check_cpu_backend, check_reward_thread)
    with ThreadPoolExecutor(len(checks)) as pool:
        running = [pool.submit(check) for check in checks]
        return [check_verl_version(), *(future.result() for future in running)]


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args) -> int:
    checks = run_checks()
    if args.json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{'ok ' if c.ok else 'BAD'}  {c.name:<{width}}  {c.detail}")
            if not c.ok and c.fix:
                print(f"{'':5}{'':<{width}}  fix: {c.fix}")
    return 0 if all(c.ok for c in checks) else 1
