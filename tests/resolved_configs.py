"""Every recipe's fully resolved config, as both entry points print it (``--cfg job --resolve``), normalised.

The fixture ``tests/fixtures/resolved_configs.json`` pins what each launch resolves to: every runnable recipe
of ``recipes/*.yaml`` on its own and with ``+platform=cpu``, with the allocation off and on, under
``python -m verl.trainer.main_ppo`` and ``python -m verl_isocompute.main``, and verl's own ``ppo_trainer``
with our pieces (main_ppo only: our entry point's search path holds our recipes, not verl's configs). It was
written before the allocation became one decision per launch (issue 42), so tests/test_resolved_configs.py
proves that change left every resolved value as it was.

What differs between machines is replaced by a name: the launch directory (``<launch>``), the cache the
built-in model and generated data land in (``<cache>``), and the CPU dtype ``isocompute.cpu.dtype=auto``
chooses from the CPU's flags (``<auto dtype>``, in the keys it sets). The file stores the leaves every case
shares once (``common``) and, per case, the leaves that differ (``cases``).

Regenerate it (only when a change of the resolved configs is intended, and say so in the commit)::

    python tests/resolved_configs.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

FIXTURE = Path(__file__).parent / "fixtures" / "resolved_configs.json"
ENTRIES = {"stock": "verl.trainer.main_ppo", "ours": "verl_isocompute.main"}
RECIPES = ("cpu_demo", "isocompute_easy", "isocompute_hard", "isocompute_mixed", "isocompute_hard_guided")
ALLOCATION = ("isocompute.allocation.enable=true", "isocompute.allocation.curve=paper:qwen2.5-7b-hard",
              "isocompute.allocation.budget_rollouts=2e5", "isocompute.allocation.b_problem=8")
USER_BATCH = ("data.train_batch_size=64", "actor_rollout_ref.rollout.n=8")
# Keys whose value is ${isocompute.cpu_dtype:} in the CPU overlay (recipes/platform/cpu.yaml), and verl's one key
# that interpolates the rollout's (its distillation teacher's inference dtype): bfloat16 on a CPU with bf16
# instructions, float32 on an AVX2 one.
DTYPE_KEYS = tuple(f"actor_rollout_ref.{role}.fsdp_config.{leaf}" for role in ("actor", "ref")
                   for leaf in ("dtype", "mixed_precision.param_dtype")) + (
    "actor_rollout_ref.rollout.dtype", "distillation.teacher_models.teacher_model.inference.dtype")


def cases() -> dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """name -> (config name, overrides, entries); ``M``, ``T`` and ``V`` stand for a model and data files."""
    given = ("actor_rollout_ref.model.path=M", "data.train_files=T", "data.val_files=V")
    out: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}
    for recipe in RECIPES:
        platforms = {"cpu": ("isocompute.model=tiny",)} if recipe == "cpu_demo" else {"gpu": given, "cpu": ("+platform=cpu",)}
        for platform, overrides in platforms.items():
            for allocated in (False, True):
                name = f"{recipe}/{platform}/{'allocation' if allocated else 'plain'}"
                out[name] = (recipe, overrides + (ALLOCATION if allocated else ()), tuple(ENTRIES))
    # a command-line value replaces the interpolation; with the allocation on, the decided values may be pasted
    for name, extra in (("command-line", ("actor_rollout_ref.rollout.n=64", "actor_rollout_ref.actor.optim.lr=3e-6")),
                        ("allocation-pasted", ALLOCATION + (
                            "actor_rollout_ref.rollout.n=8", "data.train_batch_size=8", "trainer.total_training_steps=3125",
                            "trainer.total_epochs=500", "actor_rollout_ref.actor.optim.lr=2.5e-07")),
                        ("allocation-decoupled", ALLOCATION + ("algorithm.adv_estimator=isocompute_grpo_decoupled",
                                                               "isocompute.decoupled.n_train=4"))):
        out[f"isocompute_hard/gpu/{name}"] = ("isocompute_hard", given + extra, tuple(ENTRIES))
    pieces = ("+isocompute=[estimator,lr_rule,run_log]",)
    allocation = ("+isocompute=[allocation]", *ALLOCATION[1:3], "data.train_files=T", "data.val_files=V")
    for platform, extra in (("gpu", ()), ("cpu", ("+platform=cpu",))):
        out[f"ppo_trainer/{platform}/pieces"] = ("ppo_trainer", extra + pieces + USER_BATCH, ("stock",))
        out[f"ppo_trainer/{platform}/allocation"] = ("ppo_trainer", extra + allocation, ("stock",))
    return out


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        return {k: v for key, value in tree.items() for k, v in _leaves(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def normalise(resolved: dict, launch: str, cache: str, auto_dtype: str) -> dict[str, Any]:
    """The resolved config's leaves (dotted key -> value), machine-specific values named."""
    leaves = _leaves(resolved)
    if leaves.get("isocompute.cpu.dtype") == "auto":
        leaves.update({key: "<auto dtype>" for key in DTYPE_KEYS if leaves.get(key) == auto_dtype})

    def named(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(cache, "<cache>").replace(launch, "<launch>")
        if isinstance(value, list):
            return [named(v) for v in value]
        return value

    return {key: named(value) for key, value in leaves.items()}


def resolve_case(name: str, entry: str, workdir: Path, cache: Path, model: str, data: tuple[str, str]) -> dict[str, Any]:
    """The case's config as ``python -m ENTRY --cfg job --resolve --config-name ... OVERRIDES`` prints it, in this
    process (tests/hydra_apps.py), started from ``workdir``; normalised."""
    from hydra_apps import run_app

    from verl_isocompute.cpu.dtype import choose_dtype, cpu_flags

    config, overrides, _ = cases()[name]
    values = {"M": model, "T": data[0], "V": data[1]}
    argv = [o.split("=", 1)[0] + "=" + values[o.split("=", 1)[1]] if o.split("=", 1)[-1] in values else o for o in overrides]
    cpu = "cpu" in name.split("/")
    env = {"VERL_PLATFORM": "cpu" if cpu and entry == "stock" else "", "VERL_FILE_LOGGER_PATH": ""}
    result = run_app(ENTRIES[entry], ["--cfg", "job", "--resolve", "--config-name", config, *argv], env=env, cwd=str(workdir))
    if result.code != 0:
        raise AssertionError(f"{entry} {name}: exit {result.code}: {result.err[-2000:]}")
    auto = choose_dtype("auto", "", cpu_flags()).dtype
    return normalise(yaml.safe_load(result.out), str(workdir), str(cache), auto)


def inputs(cache: Path) -> tuple[str, tuple[str, str]]:
    """The model and data files the GPU cases name (M, T, V): the built-in tiny model and a generated set."""
    from verl_isocompute.cpu.models import ensure_model
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset

    model = ensure_model("tiny", root=cache / "models")
    train, val = write_arithmetic_dataset(cache / "resolved-data", ArithmeticConfig(train_size=64, val_size=8))
    return str(model), (str(train), str(val))


def compact(resolved: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"common": leaves every case shares, "cases": {case: the leaves that differ}}``."""
    names = list(resolved)
    first = resolved[names[0]]
    common = {k: v for k, v in first.items() if all(k in r and r[k] == v for r in resolved.values())}
    cases = {name: dict(sorted((k, v) for k, v in leaves.items() if k not in common)) for name, leaves in resolved.items()}
    return {"common": dict(sorted(common.items())), "cases": cases}


def expand(fixture: dict[str, Any], name: str) -> dict[str, Any]:
    """The leaves of one case from the compact form."""
    return {**fixture["common"], **fixture["cases"][name]}


def write_fixture() -> None:
    """Resolve every case under every entry it applies to (they must agree) and write :data:`FIXTURE`."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cache, workdir = Path(tmp) / "cache", Path(tmp) / "launch"
        workdir.mkdir()
        os.environ["ISOCOMPUTE_CACHE"] = str(cache)
        model, data = inputs(cache)
        resolved = {}
        for name, (_, _, entries) in cases().items():
            dumps = {entry: resolve_case(name, entry, workdir, cache, model, data) for entry in entries}
            first = dumps[entries[0]]
            for entry, dump in dumps.items():
                if dump != first:
                    raise AssertionError(f"{name}: {entry} resolves differently from {entries[0]}")
            resolved[name] = first
    FIXTURE.write_text(json.dumps(compact(resolved), indent=1, sort_keys=False) + "\n")
    print(f"wrote {FIXTURE} ({len(resolved)} cases)")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    import verl  # noqa: F401  (loads our plugin, as main_ppo does)

    write_fixture()
