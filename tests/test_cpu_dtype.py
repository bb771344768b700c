"""The CPU dtype decision (bf16 only where the CPU has native bf16) and how a run's config receives it."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_isocompute.cpu.dtype import COMPUTE_DTYPE_TARGETS, DTYPE_TARGETS, choose_dtype, cpu_flags, cpu_model, prepare_cpu_dtype

AVX2_EPYC = frozenset({"fpu", "sse4_2", "avx", "avx2", "fma"})  # the issue's reference machine: no native bf16
AVX512_BF16 = AVX2_EPYC | {"avx512f", "avx512bw", "avx512_bf16"}
SAPPHIRE_RAPIDS = AVX2_EPYC | {"avx512f", "amx_tile", "amx_bf16"}
AVX512_NO_BF16 = AVX2_EPYC | {"avx512f", "avx512bw", "avx512vl"}  # bf16 is emulated here too


@pytest.mark.parametrize(
    ("capability", "flags", "dtype"),
    [
        ("AVX2", AVX2_EPYC, "float32"),
        ("AVX512", AVX512_NO_BF16, "float32"),
        ("AVX512", AVX512_BF16, "bfloat16"),
        ("AVX512", SAPPHIRE_RAPIDS, "bfloat16"),
        ("DEFAULT", None, "float32"),  # flags unreadable (not Linux): the safe choice
    ],
)
def test_auto_picks_bf16_only_where_native(capability, flags, dtype):
    choice = choose_dtype("auto", capability, flags)
    assert choice.dtype == dtype
    assert capability in choice.reason and choice.reason.startswith("auto")


def test_the_reason_names_the_flag_it_found_or_missed():
    assert "avx512_bf16" in choose_dtype("auto", "AVX512", AVX512_BF16).reason
    assert "without avx512_bf16/amx_bf16" in choose_dtype("auto", "AVX2", AVX2_EPYC).reason
    assert "emulated" in choose_dtype("auto", "AVX2", AVX2_EPYC).reason


def test_an_explicit_request_wins_and_warns_when_emulated():
    assert choose_dtype("float32", "AVX512", AVX512_BF16).dtype == "float32"
    forced = choose_dtype("BFloat16", "AVX2", AVX2_EPYC)
    assert forced.dtype == "bfloat16" and "emulated" in forced.reason
    assert "emulated" not in choose_dtype("bfloat16", "AVX512", AVX512_BF16).reason


def test_an_unknown_request_names_the_key_and_the_choices():
    with pytest.raises(ValueError, match=r"isocompute\.cpu\.dtype='fp8'.*auto, float32, bfloat16"):
        choose_dtype("fp8", "AVX2", AVX2_EPYC)


def test_cpu_flags_and_model_read_x86_and_arm_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert cpu_flags(x86) == {"fpu", "avx2", "avx512_bf16"}
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert cpu_flags(arm) == {"fp", "asimd", "bf16"}
    assert cpu_flags(tmp_path / "missing") is None
    assert cpu_model(x86) == "AMD EPYC" and cpu_model(arm) is None and cpu_model(tmp_path / "missing") is None


def _cfg(dtype="auto", current="${isocompute.cpu_dtype:}"):
    from verl_isocompute.training import resolvers

    resolvers.register()
    return OmegaConf.create({
        "isocompute": {"cpu": {"dtype": dtype}},
        "actor_rollout_ref": {
            "actor": {"fsdp_config": {"dtype": current}},
            "ref": {"fsdp_config": {"dtype": current}},
            "rollout": {"dtype": current},
        },
    })


def test_the_recipe_interpolation_gives_trainer_reference_and_rollout_one_dtype(capsys):
    cfg = _cfg("bfloat16")
    choice = prepare_cpu_dtype(cfg)
    assert [OmegaConf.select(cfg, k) for k in DTYPE_TARGETS] == ["bfloat16"] * 3 == [choice.dtype] * 3
    out = capsys.readouterr().out
    assert out.startswith("[isocompute] dtype: bfloat16 for the trainer's and the reference's weights and compute") and "(requested" in out
    cfg.isocompute.cpu.dtype = "float32"  # the interpolation follows the key
    assert [OmegaConf.select(cfg, k) for k in DTYPE_TARGETS] == ["float32"] * 3


def test_auto_follows_the_cpu_flags(monkeypatch):
    from verl_isocompute.cpu import dtype as dtype_module

    monkeypatch.setattr(dtype_module, "cpu_flags", lambda: frozenset({"avx2"}))
    assert OmegaConf.select(_cfg("auto"), DTYPE_TARGETS[0]) == "float32"
    monkeypatch.setattr(dtype_module, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    assert OmegaConf.select(_cfg("auto"), DTYPE_TARGETS[0]) == "bfloat16"


def test_a_dtype_given_on_the_command_line_replaces_the_interpolation(capsys):
    cfg = _cfg("float32", current="bfloat16")  # all three given, as `...dtype=bfloat16` on the command line
    choice = prepare_cpu_dtype(cfg)
    assert choice.dtype == "bfloat16" and "would give float32" in choice.reason
    cfg.actor_rollout_ref.rollout.dtype = "float32"
    with pytest.raises(ValueError, match="disagree"):
        prepare_cpu_dtype(cfg)


def test_the_trainer_and_the_reference_compute_in_the_dtype_not_in_verls_bf16_default(capsys):
    """verl's FSDP engine computes in ``mixed_precision.param_dtype`` (bf16 when the block is unset) whatever
    ``fsdp_config.dtype`` says: a config without the block gets it, in the run's dtype."""
    cfg = _cfg("float32")
    prepare_cpu_dtype(cfg)
    for key in COMPUTE_DTYPE_TARGETS:
        assert OmegaConf.to_container(OmegaConf.select(cfg, key)) == {
            "param_dtype": "float32", "reduce_dtype": "float32", "buffer_dtype": "float32"}
    assert "(FSDP param_dtype, no autocast)" in capsys.readouterr().out
    cfg = _cfg("bfloat16")
    prepare_cpu_dtype(cfg)
    assert [OmegaConf.select(cfg, f"{k}.param_dtype") for k in COMPUTE_DTYPE_TARGETS] == ["bfloat16"] * 2
    assert "autocast bfloat16" in capsys.readouterr().out


@pytest.mark.parametrize("given", [{"param_dtype": "bf16"}, {"reduce_dtype": "fp32"}, {"param_dtype": "fp16"}])
def test_a_mixed_precision_that_computes_in_another_dtype_is_refused(given):
    cfg = _cfg("float32")
    cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision = given  # no param_dtype: verl's default, bf16
    with pytest.raises(ValueError, match=r"actor\.fsdp_config\.mixed_precision\.param_dtype=(bf16|fp16) but the run's dtype is float32"):
        prepare_cpu_dtype(cfg)


def test_a_mixed_precision_in_the_dtype_is_kept_in_any_spelling():
    cfg = _cfg("bfloat16")
    cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision = {"param_dtype": "bf16", "reduce_dtype": "bf16"}
    prepare_cpu_dtype(cfg)
    assert OmegaConf.to_container(cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision) == {
        "param_dtype": "bf16", "reduce_dtype": "bf16"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_cpu_overlay_makes_param_dtype_follow_the_dtype(dtype, monkeypatch):
    """The overlay writes param_dtype as ``${..dtype}``: a dtype given on the command line moves it too."""
    from test_recipes import compose_recipe

    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    given = [f"actor_rollout_ref.{k}.dtype={dtype}" for k in ("actor.fsdp_config", "ref.fsdp_config", "rollout")]
    cfg = compose_recipe("isocompute_easy", ["+platform=cpu", *given])
    for key in COMPUTE_DTYPE_TARGETS:
        assert OmegaConf.select(cfg, f"{key}.param_dtype") == dtype
    prepare_cpu_dtype(cfg)
