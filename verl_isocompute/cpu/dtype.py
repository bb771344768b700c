"""Which floating-point type a CPU run trains and samples in: bfloat16 only where the CPU computes it natively.

bfloat16 halves memory traffic, and on CPUs with native bf16 instructions (x86 ``avx512_bf16``, or AMX
tiles ``amx_bf16``) oneDNN's bf16 matmuls are faster than fp32 (SmolLM2 trains ~2.8x faster in bf16 on
such a CPU). Everywhere else torch *emulates* bf16 arithmetic: on a 2-core AVX2 EPYC one forward+backward
of SmolLM2-135M on 8 x 144 tokens took 9.6 s in fp32 and 257 s in bf16, 27x slower (issue 9 §3). So the
default, ``auto``, picks bf16 only when a native-bf16 CPU flag is present and fp32 otherwise; ``float32``
or ``bfloat16`` force a choice. :func:`choose_dtype` is the pure decision; :func:`prepare_cpu_dtype`
makes it the dtype the trainer and the reference store *and compute* in (FSDP mixed precision) and the
rollout's, before verl starts.

``torch.backends.cpu.get_cpu_capability()`` names the widest vector ISA torch dispatches to ("AVX2",
"AVX512", ...) but not bf16 support (an AVX512 CPU may lack ``avx512_bf16``), so the flags are read from
``/proc/cpuinfo``; where it is unreadable (not Linux) the choice is fp32, the safe one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

DTYPE_KEY = "isocompute.cpu.dtype"
DTYPE_CHOICES = ("auto", "float32", "bfloat16")
# CPU flags (as /proc/cpuinfo spells them) under which oneDNN runs bf16 matmuls in hardware.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# verl's dtype settings of the three models a run holds: they must agree (the rollout samples with the
# weights the trainer sends, and the trainer recomputes the rollout's log-probs).
DTYPE_TARGETS = (
    "actor_rollout_ref.actor.fsdp_config.dtype",
    "actor_rollout_ref.ref.fsdp_config.dtype",
    "actor_rollout_ref.rollout.dtype",
)
# The FSDP mixed-precision blocks whose ``param_dtype`` is the dtype the trainer and the reference compute in.
COMPUTE_DTYPE_TARGETS = (
    "actor_rollout_ref.actor.fsdp_config.mixed_precision",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision",
)


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str  # "float32" | "bfloat16"
    reason: str  # one sentence: why, naming the CPU capability and flags


def choose_dtype(requested: str, capability: str, flags: frozenset[str] | set[str] | None) -> DtypeChoice:
    """The run's dtype from the user's request and the CPU (pure).

    ``requested``: auto | float32 | bfloat16 (``isocompute.cpu.dtype`` or ``isocompute demo --dtype``).
    ``capability``: ``torch.backends.cpu.get_cpu_capability()``; ``flags``: the CPU flags, None if unknown.
    """
    requested = str(requested).strip().lower()
    if requested not in DTYPE_CHOICES:
        raise ValueError(f"{DTYPE_KEY}={requested!r}: use one of {', '.join(DTYPE_CHOICES)}")
    native = sorted(set(flags or ()) & set(NATIVE_BF16_FLAGS))
    has = f"CPU {capability} with {', '.join(native)}" if native else (
        f"CPU {capability}, flags unknown" if flags is None else f"CPU {capability} without {'/'.join(NATIVE_BF16_FLAGS)}")
    if requested == "float32":
        return DtypeChoice("float32", f"requested ({has})")
    if requested == "bfloat16":
        warn = "" if native else ": bf16 is emulated here, expect it to be many times slower than float32"
        return DtypeChoice("bfloat16", f"requested ({has}){warn}")
    if native:
        return DtypeChoice("bfloat16", f"auto: {has}, native bf16 matmuls are faster than float32")
    return DtypeChoice("float32", f"auto: {has}, bf16 would be emulated (27x slower than float32 on an AVX2 CPU)")


def _cpuinfo_field(keys: tuple[str, ...], cpuinfo: Path) -> str | None:
    """The value of the first ``/proc/cpuinfo`` line whose key is one of ``keys``; None where unreadable or absent."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            return value
    return None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """This CPU's flags from ``/proc/cpuinfo`` (x86 ``flags``, Arm ``Features``); None where unreadable."""
    value = _cpuinfo_field(("flags", "Features"), cpuinfo)
    return None if value is None else frozenset(value.split())


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """This CPU's model name from ``/proc/cpuinfo`` (x86 ``model name``); None where unreadable or not given."""
    value = _cpuinfo_field(("model name",), cpuinfo)
    return None if value is None else value.strip()


def cpu_capability() -> str:
    import torch

    return torch.backends.cpu.get_cpu_capability()


def detect_dtype(requested: str = "auto") -> DtypeChoice:
    """:func:`choose_dtype` for this machine."""
    return choose_dtype(requested, cpu_capability(), cpu_flags())


def prepare_cpu_dtype(cfg: DictConfig) -> DtypeChoice:
    """Make one dtype govern everything a CPU run computes, and print it with the reason (a CPU run only).

    The recipes write the three dtypes as ``${isocompute.cpu_dtype:}`` (the resolver applies
    :func:`choose_dtype` to ``isocompute.cpu.dtype``), so a dtype set on the command line simply replaces
    it, as with verl's own entry point; the three must then still agree.

    ``fsdp_config.dtype`` is only the dtype the weights are *stored* in: verl's FSDP engine computes in
    ``fsdp_config.mixed_precision.param_dtype`` (FSDP2's MixedPrecisionPolicy casts the weights to it, and
    every forward runs under ``torch.autocast`` to it unless it is fp32), and with ``mixed_precision`` unset
    that is bf16. A "float32" run would then train in (emulated, on AVX2: ~20x slower) bf16 while the
    rollout samples in fp32, and the two disagree on every log-prob. So ``param_dtype`` must equal the dtype
    too: the CPU overlay sets it by interpolation, and a config without it gets it here.
    """
    requested = OmegaConf.select(cfg, DTYPE_KEY, default="auto") or "auto"
    choice = detect_dtype(requested)
    values = {key: OmegaConf.select(cfg, key) for key in DTYPE_TARGETS}
    if len(set(values.values())) > 1:
        raise ValueError(
            f"{', '.join(f'{k}={v}' for k, v in values.items())} disagree; set {DTYPE_KEY}=float32 or bfloat16 "
            "instead (the rollout samples with the trainer's weights)"
        )
    given = {k: v for k, v in values.items() if v != choice.dtype}
    if given:
        choice = DtypeChoice(next(iter(given.values())),
                             f"set in the config or on the command line; {DTYPE_KEY}={requested} would give {choice.dtype}")
    for key in COMPUTE_DTYPE_TARGETS:
        _govern_compute_dtype(cfg, key, choice.dtype)
    autocast = "no autocast" if choice.dtype == "float32" else f"autocast {choice.dtype}"
    print(f"[isocompute] dtype: {choice.dtype} for the trainer's and the reference's weights and compute "
          f"(FSDP param_dtype, {autocast}) and the rollout ({choice.reason}; {DTYPE_KEY}=float32|bfloat16 overrides)",
          flush=True)
    return choice


def _canonical(dtype) -> str | None:
    """verl's spellings of a dtype (``fp32``, ``bf16``, ``float32``, ...) as ``float32`` / ``bfloat16``."""
    text = str(dtype).strip().lower().removeprefix("torch.")
    return {"fp32": "float32", "32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
            "fp16": "float16", "16": "float16", "float16": "float16"}.get(text)


def _govern_compute_dtype(cfg: DictConfig, key: str, dtype: str) -> None:
    """``key`` (an FSDP ``mixed_precision`` block) computes in ``dtype``: filled in when absent, refused when
    it names another dtype."""
    block = OmegaConf.select(cfg, key)
    if block is None:
        with open_dict(cfg):
            OmegaConf.update(cfg, key, {"param_dtype": dtype, "reduce_dtype": "float32", "buffer_dtype": "float32"},
                             force_add=True)
        return
    param_dtype = block.get("param_dtype", "bf16")  # verl's default when the key is missing
    if _canonical(param_dtype) != dtype:
        raise ValueError(
            f"{key}.param_dtype={param_dtype} but the run's dtype is {dtype}: the trainer would compute in "
            f"{param_dtype} while the rollout samples in {dtype}; drop the mixed_precision override or set "
            f"{key}.param_dtype={dtype}"
        )
