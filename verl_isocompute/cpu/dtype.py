"""Which floating-point type a CPU run trains and samples in: bfloat16 only where the CPU computes it natively.

bfloat16 halves memory traffic, and on CPUs with native bf16 instructions (x86 ``avx512_bf16``, or AMX
tiles ``amx_bf16``) oneDNN's bf16 matmuls are faster than fp32 (SmolLM2 trains ~2.8x faster in bf16 on
such a CPU). Everywhere else torch *emulates* bf16 arithmetic: on a 2-core AVX2 EPYC one forward+backward
of SmolLM2-135M on 8 x 144 tokens took 9.6 s in fp32 and 257 s in bf16, 27x slower (issue 9 §3). So the
default, ``auto``, picks bf16 only when a native-bf16 CPU flag is present and fp32 otherwise; ``float32``
or ``bfloat16`` force a choice. :func:`choose_dtype` is the pure decision; :func:`prepare_cpu_dtype`
writes it into the trainer's, the reference's and the rollout's dtype before verl starts.

``torch.backends.cpu.get_cpu_capability()`` names the widest vector ISA torch dispatches to ("AVX2",
"AVX512", ...) but not bf16 support (an AVX512 CPU may lack ``avx512_bf16``), so the flags are read from
``/proc/cpuinfo``; where it is unreadable (not Linux) the choice is fp32, the safe one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

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


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """This CPU's flags from ``/proc/cpuinfo`` (x86 ``flags``, Arm ``Features``); None where unreadable."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def cpu_capability() -> str:
    import torch

    return torch.backends.cpu.get_cpu_capability()


def detect_dtype(requested: str = "auto") -> DtypeChoice:
    """:func:`choose_dtype` for this machine."""
    return choose_dtype(requested, cpu_capability(), cpu_flags())


def prepare_cpu_dtype(cfg: DictConfig) -> DtypeChoice:
    """Print the dtype a CPU run uses and why (a CPU run only).

    The recipes write the three dtypes as ``${isocompute.cpu_dtype:}`` (the resolver applies
    :func:`choose_dtype` to ``isocompute.cpu.dtype``), so a dtype set on the command line simply replaces
    it, as with verl's own entry point; the three must then still agree.
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
    print(f"[isocompute] dtype: {choice.dtype} ({choice.reason}; {DTYPE_KEY}=float32|bfloat16 overrides)", flush=True)
    return choice
