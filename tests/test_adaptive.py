"""Per-step n inside the trainer (issue 21): the ledger of groups in flight, what per-prompt n logs, the checkpoint
state, the config checks, the worker's peak lr, and variable group sizes through every piece that sees groups
(estimators, zero-variance filter, decoupled baseline, TIS, metrics), each against numbers computed by hand.
The real runs are tests/test_adaptive_e2e.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from verl_isocompute.scaling.curve import Curve
from verl_isocompute.scaling.schedule import NSchedule, ScheduleError
from verl_isocompute.scaling.adaptive import AdaptiveN, prompt_id
from verl_isocompute.training.schema import PerPromptSettings
from verl_isocompute.scaling.per_prompt_n import AVG_AT_K_KEY, K_KEY

# curation's avg@k as 16,000 pseudo-samples: the posterior is all but a point mass, so v(p, n) = 1 - p^n - (1-p)^n
EASY = {AVG_AT_K_KEY: 0.5, K_KEY: 16}
HARD = {AVG_AT_K_KEY: 0.02, K_KEY: 16}
SHARP = PerPromptSettings(n_min=2, n_max=None, curation_weight=1000.0)


def v(p: float, n: int) -> float:
    return 1 - p**n - (1 - p) ** n


def test_an_easy_and_a_hard_prompt_get_the_hand_computed_split_and_the_step_logs_what_it_bought():
    """16 rollouts (n = 8) over p = 0.5 and p = 0.02: marginal gains 0.5^n (easy) and ~0.02 * 0.98^n (hard); greedy
    gives the easy prompt 2 -> 6 (gains 1/4 .. 1/32 beat the hard one's 0.019), then the hard one takes the other 8
    while its gain stays above the easy one's next, 1/64 (0.98^n > 0.78: n <= 12): n = (6, 10)."""
    adaptive = AdaptiveN(n=8, b_problem=2, per_prompt=SHARP)
    ns = adaptive.assign(["u1", "u2"], ["easy", "hard"], [EASY, HARD])
    assert ns == [6, 10] and sum(ns) == 16
    metrics = adaptive.observe(["u1"] * 6 + ["u2"] * 10, [True, False] * 3 + [False] * 10)
    zero_var = lambda ns: (ns[0] * (0.5 ** ns[0] * 2) + ns[1] * (0.02 ** ns[1] + 0.98 ** ns[1])) / sum(ns)  # noqa: E731
    assert metrics["group_n_min"] == 6 and metrics["group_n_max"] == 10
    assert metrics["group_n_mean"] == 8
    assert metrics["expected_zero_var_share"] == pytest.approx(zero_var([6, 10]), rel=2e-3)  # 0.522
    assert metrics["expected_zero_var_share_fixed_n"] == pytest.approx(zero_var([8, 8]), rel=2e-3)  # 0.429
    assert metrics["expected_nonzero_groups"] == pytest.approx(v(0.5, 6) + v(0.02, 10), rel=2e-3)  # 1.152
    assert metrics["expected_nonzero_groups_fixed_n"] == pytest.approx(v(0.5, 8) + v(0.02, 8), rel=2e-3)  # 1.141
    # the finding: more groups with a gradient, and yet a larger share of rollouts in zero-variance groups
    assert metrics["expected_nonzero_groups"] > metrics["expected_nonzero_groups_fixed_n"]
    assert metrics["expected_zero_var_share"] > metrics["expected_zero_var_share_fixed_n"]
    # the run's own groups moved the beliefs: 3 of 6 and 0 of 10 on top of curation's 8,000 / 320 successes
    assert adaptive.tracker.counts == {"easy": [3.0, 3.0], "hard": [0.0, 10.0]}
    assert AdaptiveN.histogram(ns) == {"6": 1, "10": 1}


def test_evicted_groups_are_charged_their_own_n_and_their_budget_goes_to_the_replacements():
    # 24 rollouts: each easy prompt 2 -> 6 (gains 1/4 .. 1/32), the hard one the other 10 (gains 0.0192 at n = 2
    # down to 0.0157 at n = 11, all above the easy ones' next, 1/64)
    adaptive = AdaptiveN(n=8, b_problem=3, per_prompt=SHARP)
    assert adaptive.assign(["a", "b", "c"], ["easy", "hard", "easy2"], [EASY, HARD, EASY]) == [6, 12, 6]
    # verl evicted b (a failed rollout): it no longer holds it; its 12 rollouts pay for the replacement
    budget = adaptive.evict(live_uids=["a", "c"])
    assert budget == 12 and adaptive.assign(["d"], ["easy3"], [EASY], budget) == [12]
    adaptive.observe(["a"] * 6 + ["c"] * 6 + ["d"] * 12, [True] * 24)  # the trained step: 6 + 6 + 12 = 24 = 3 x 8
    record = adaptive.end_step()
    assert (record.evicted_groups, record.evicted_rollouts, sorted(record.trained_n)) == (1, 12, [6, 6, 12])
    assert adaptive.groups == {} and adaptive.end_step().evicted_rollouts == 0  # the next step starts clean


def test_without_per_prompt_n_every_prompt_gets_the_steps_n_and_a_group_never_trained_is_charged():
    adaptive = AdaptiveN(n=4, b_problem=2)
    assert adaptive.assign(["a", "b"], ["p", "q"], [None, None]) == [4, 4]
    assert adaptive.observe(["a"] * 4, [True, False, True, True]) == {}  # nothing to log without the split
    record = adaptive.end_step()  # b was sampled and never reached the update (dropped without a refill)
    assert (record.evicted_groups, record.evicted_rollouts) == (1, 4)


def test_prompt_ids_are_stable_across_fetches_and_keep_guided_copies_apart():
    prompt = [{"role": "user", "content": "1+1?"}]
    assert prompt_id("arith", 7, prompt) == prompt_id("arith", 7, [dict(prompt[0])])
    assert prompt_id("arith", 7, prompt) != prompt_id("arith", 7, [{"role": "user", "content": "1+1? Start: 2"}])
    assert prompt_id("arith", 7, prompt) != prompt_id("arith", 8, prompt)


# log2 n*(c) = 1 + 2 / (1 + exp(-3.5 (log10 c - 1.63))) on c in [10, 1000], grid 2, 4, 8 (the e2e run's curve)
CURVE = Curve(L=2.0, k=3.5, log10_C0=1.63, b=1.0, c_range=(10.0, 1000.0), n_grid=(2, 4, 8))


def crossing(log2_n: float) -> float:
    """The c at which log2 n*(c) reaches ``log2_n``, the sigmoid solved by hand."""
    return 10 ** (1.63 - math.log(2 / (log2_n - 1) - 1) / 3.5)


def test_the_schedule_state_and_pass_rates_round_trip_and_a_mismatch_is_refused():
    assert 16 < crossing(1.6) < 32 and 96 < crossing(2.6) < 128  # n: 2 -> 4 at c = 24.4, 4 -> 8 at c = 106
    adaptive = AdaptiveN(4, 8, NSchedule(CURVE, 8, 100, warmup_steps=2), SHARP)
    plans = [adaptive.plan_step(step, c) for step, c in ((1, 0), (2, 16), (3, 32))]
    assert [p.n for p in plans] == [2, 2, 4] and adaptive.n == 4
    assert [p.lr for p in plans] == pytest.approx([1e-6 * math.sqrt(16 / 1024) / 2, 1e-6 * math.sqrt(16 / 1024),
                                                   1e-6 * math.sqrt(32 / 1024)])
    assert not adaptive.last_step(32) and adaptive.last_step(64)  # after step 4 at n = 4: 96 spent, 4 left < 32
    adaptive.assign(["u"], ["p"], [None])
    adaptive.observe(["u"] * 4, [True, True, False, True])
    saved = json.loads(json.dumps(adaptive.state_dict()))
    resumed = AdaptiveN(4, 8, NSchedule(CURVE, 8, 200, warmup_steps=2), SHARP)  # extended budget: allowed
    resumed.load_state_dict(saved)
    assert resumed.n == 4 and resumed.tracker.counts == {"p": [3.0, 1.0]}
    assert resumed.plan_step(4, 64).n == 4 and resumed.plan_step(5, 96).n == 4 and resumed.plan_step(6, 128).n == 8
    with pytest.raises(ScheduleError, match="saved with isocompute.per_prompt_n on"):
        AdaptiveN(4, 8, NSchedule(CURVE, 8, 100)).load_state_dict(saved)
    with pytest.raises(ScheduleError, match=r"b_problem 8 \(now 4\)"):
        AdaptiveN(4, 4, NSchedule(CURVE, 4, 100), SHARP).load_state_dict(saved)


def _compose(*overrides):
    from verl_isocompute.training.config import compose_recipe

    return compose_recipe("isocompute_hard", ["+platform=cpu", *overrides])


SCHEDULED = ["isocompute.schedule.enable=true", "isocompute.schedule.budget_rollouts=100"]


@pytest.fixture
def curve_file(tmp_path):
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(CURVE.to_dict()))
    return f"isocompute.schedule.curve={path}"


@pytest.mark.parametrize("extra, words", [
    (["actor_rollout_ref.actor.ppo_mini_batch_size=4"], "needs one mini-batch and one epoch per step"),
    (["actor_rollout_ref.actor.ppo_epochs=2"], "needs one mini-batch and one epoch per step"),
    (["actor_rollout_ref.actor.optim.lr=1e-3"], "sets the lr of each step from isocompute.lr"),
    (["isocompute.per_prompt_n.enable=true", "isocompute.per_prompt_n.n_min=3"], "must bracket every step's n"),
    (["trainer.v1.trainer_mode=sync"], r"applied by the isocompute trainer only: .*`\+isocompute=\[lr_rule,run_log,schedule\]`"),
    (["isocompute.schedule.margin=0.7"], r"isocompute.schedule.margin=0.7 is out of range: .*< 0.5"),
    (["+isocompute.schedule.budget=5"], "unknown key isocompute.schedule.budget: did you mean isocompute.schedule.budget_rollouts"),
])
def test_settings_the_trainer_cannot_honour_are_one_line_each(curve_file, extra, words):
    from verl_isocompute.training.config import RecipeError, check_config

    check_config(_compose(curve_file, *SCHEDULED))  # the settings themselves are fine
    with pytest.raises(RecipeError, match=words) as info:
        check_config(_compose(curve_file, *SCHEDULED, *extra))
    assert "\n" not in str(info.value)


def test_per_prompt_n_under_the_decoupled_baseline_needs_n_min_at_least_n_train():
    from verl_isocompute.training.config import RecipeError, check_config

    with pytest.raises(RecipeError, match="n_min=2 is below isocompute.decoupled.n_train=3"):
        check_config(_compose("isocompute.per_prompt_n.enable=true", "algorithm.adv_estimator=isocompute_grpo_decoupled",
                              "isocompute.decoupled.n_train=3"))


def _scheduled_trainer(curve_file, *overrides):
    """Our trainer's settings, read as its constructor does, with no workers (nothing here reaches them)."""
    from verl_isocompute.training.run_log_writer import ComputeCounter
    from verl_isocompute.training.trainer import IsoComputeTrainer

    trainer = IsoComputeTrainer.__new__(IsoComputeTrainer)
    trainer.config = _compose(curve_file, *overrides)
    trainer._read_settings(trainer.config)
    trainer.compute, trainer.train_dataset, trainer.global_steps = ComputeCounter(), [None] * 256, 1
    trainer.started_at = "2026-01-01T00:00:00Z"  # the constructor stamps it; the header carries it as it is
    return trainer


def test_evicted_groups_that_spend_the_budget_make_the_step_the_last_with_its_checkpoint_and_validation(curve_file):
    """B_problem 8, budget 48, n 2 until c = 24.4: step 1 (16 rollouts) is planned with room for two more steps;
    groups verl evicted in it bring C to 64, where n is 4 and no step fits. The step becomes verl's last (its
    saving and validation frequencies are set to hit it, then restored) and its row records C's excess."""
    trainer = _scheduled_trainer(curve_file, "isocompute.schedule.enable=true", "isocompute.schedule.budget_rollouts=48",
                                 "trainer.save_freq=100", "trainer.test_freq=-1")
    trainer.total_training_steps = 3
    trainer.adaptive.plan_step(1, 0)
    assert not trainer.adaptive.last_step(0) and not trainer.adaptive.budget_spent(16)
    trainer.compute.add(16 + 24 * 2, 0)  # the step's 16 rollouts and 24 evicted groups of 2
    trainer._end_at_spent_budget()
    assert trainer.total_training_steps == 1
    assert (trainer.config.trainer.save_freq, trainer.config.trainer.test_freq) == (1, -1)  # -1: verl never validates
    row = trainer._adaptive_row(1, {})
    assert (row["budget_rollouts"], row["rollouts_over_budget"]) == (48, 16)  # at most the 48 evicted rollouts
    assert "rollouts_over_budget" not in trainer._adaptive_row(0, {})  # the row before training: no budget record
    trainer._adaptive_step_end(1)
    assert (trainer.config.trainer.save_freq, trainer.config.trainer.test_freq) == (100, -1)
    # a step whose evictions leave room for another changes nothing, and its row has no budget record
    trainer.total_training_steps, trainer.compute.rollouts, trainer.config.trainer.test_freq = 3, 24, 100
    trainer._end_at_spent_budget()
    assert trainer.total_training_steps == 3 and trainer.config.trainer.test_freq == 100
    assert "rollouts_over_budget" not in trainer._adaptive_row(1, {})


def test_the_header_carries_step_ones_n_and_lr_under_the_schedule_and_the_configs_without(curve_file):
    scheduled = _scheduled_trainer(curve_file, "isocompute.schedule.enable=true", "isocompute.schedule.budget_rollouts=48")
    scheduled.total_training_steps = 3
    header = scheduled._header()
    assert scheduled.config.actor_rollout_ref.rollout.n == 4  # the CPU recipe's n; step 1 runs at n*(0) = 2
    assert (header["n"], header["lr_batch_rollouts"]) == (2, 16)
    assert header["lr"] == pytest.approx(1e-6 * math.sqrt(16 / 1024))  # the LR rule at B = 8 x 2
    assert header["schedule"]["budget_rollouts"] == 48 and header["schedule"]["n_grid"] == [2, 4, 8]
    fixed = _scheduled_trainer(curve_file)
    fixed.total_training_steps = 3
    header = fixed._header()
    assert (header["n"], header["lr"]) == (4, fixed.config.actor_rollout_ref.actor.optim.lr) and "schedule" not in header


def test_the_header_names_the_cpu_the_run_ran_on(curve_file):
    """The run log says on what machine its numbers were made: torch's vector ISA and the CPU's model name."""
    from verl_isocompute.cpu.dtype import cpu_model

    trainer = _scheduled_trainer(curve_file)
    trainer.total_training_steps = 3
    header = trainer._header()
    assert header["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert header["cpu_model"] == cpu_model() and (cpu_model() is None or cpu_model() in Path("/proc/cpuinfo").read_text())


def test_the_workers_peak_lr_moves_the_rate_and_keeps_the_warm_up_in_updates():
    """IsoComputeActorWorker.set_peak_lr on the scheduler verl builds (cosine, floor 1, 1-based, W = 4): after
    update 2 the next rate is peak * 3/4; with a new peak it is new * 3/4, and update 4 reaches the new peak."""
    from verl.utils.torch_functional import get_cosine_schedule_with_warmup

    from verl_isocompute.training.lr_worker import IsoComputeActorWorker

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=4, num_training_steps=10, min_lr_ratio=1.0,
                                                zero_indexed_step=False)
    for _ in range(2):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * 3 / 4)
    worker = IsoComputeActorWorker.__new__(IsoComputeActorWorker)
    worker.actor = type("Actor", (), {"engine": type("Engine", (), {"lr_scheduler": scheduler})()})()
    method = getattr(IsoComputeActorWorker.set_peak_lr, "__wrapped__", IsoComputeActorWorker.set_peak_lr)
    assert method(worker, 4e-3) == pytest.approx(4e-3 * 3 / 4)
    optimizer.step()
    scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(4e-3) and scheduler.state_dict()["base_lrs"] == [4e-3]


# -- variable group sizes through every piece that sees groups: a group of 2 and a group of 5 -------------
UIDS = np.array(["a", "a", "b", "b", "b", "b", "b"], dtype=object)
ACC = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])


def test_grpo_advantages_on_groups_of_two_and_five():
    """a: scores (1, 0), mean 1/2, std 0.7071 -> +-0.7071. b: (1, 1, 0, 0, 0), mean 2/5, std sqrt(0.3) = 0.5477
    -> 0.6 / 0.5477 = 1.0954 and -0.4 / 0.5477 = -0.7303."""
    from verl_isocompute.training.advantage import compute_isocompute_grpo

    rewards = torch.zeros(7, 3)
    rewards[:, -1] = torch.tensor(ACC)
    adv, _ = compute_isocompute_grpo(rewards, torch.ones(7, 3), UIDS, epsilon=0.0, norm_adv_by_std_in_grpo=True)
    s = math.sqrt(0.5)
    expected = [1 / 2 / s, -1 / 2 / s, 0.6 / math.sqrt(0.3), 0.6 / math.sqrt(0.3)] + [-0.4 / math.sqrt(0.3)] * 3
    assert adv[:, 0].tolist() == pytest.approx(expected)


def test_zero_variance_filter_and_decoupled_subset_on_groups_of_two_and_five():
    from verl_isocompute.rules.masks import decoupled_train_mask, step_masks

    uids = np.array(["a", "a", "b", "b", "b", "b", "b", "c", "c", "c"], dtype=object)  # c: 3 rollouts, all right
    acc = np.concatenate([ACC, [1.0, 1.0, 1.0]])
    masks = step_masks(uids, acc, None, "groups")
    assert masks.keep.tolist() == [True] * 7 + [False] * 3 and masks.seq_count == 7
    assert masks.trained_per_group.tolist() == [2, 5, 0] and (masks.groups, masks.varying_groups) == (3, 2)
    # 1 - varies over the real rollouts: the share of rollouts in zero-variance groups, 3 of 10 (a group share: 1/3)
    assert 1 - masks.varies.mean() == pytest.approx(0.3)
    # decoupled n_train = 3: the group of 2 trains on both, the groups of 5 and 3 on exactly 3
    train = decoupled_train_mask(uids, 3, seed=(0, 1))
    assert [int(train[uids == g].sum()) for g in "abc"] == [2, 3, 3]
    decoupled = step_masks(uids, acc, None, "off", n_train=3, seed=(0, 1))
    assert decoupled.trained_per_group.tolist() == [2, 3, 3]


def test_tis_weights_are_per_token_whatever_the_group_sizes():
    """verl's rollout correction (token level, cap 2): w = min(exp(old - rollout), 2) per token; the groups of 2 and
    5 change nothing (it never reads the uid)."""
    from verl import DataProto
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    gap = torch.tensor([[0.0, 0.5, 1.0]] * 7) * torch.arange(1, 8).unsqueeze(1) / 7
    rollout = torch.full((7, 3), -1.0)
    data = DataProto.from_dict({"old_log_probs": rollout + gap, "rollout_log_probs": rollout,
                                "response_mask": torch.ones(7, 3, dtype=torch.int64)})
    data.non_tensor_batch["uid"] = UIDS
    out, _ = compute_rollout_correction_and_add_to_batch(
        data, RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=2.0))
    assert torch.allclose(out.batch["rollout_is_weights"], torch.exp(gap).clamp(max=2.0), rtol=1e-6)


def test_metrics_read_each_problems_pass_rate_from_its_own_group_size():
    from verl_isocompute.rules.metrics import pass_rate_histogram

    records = [{"uid": u, "acc": a} for u, a in zip(UIDS, ACC)]
    hist = pass_rate_histogram(records, bins=5)  # a: 1/2, b: 2/5 (not 2/2 or 2/7)
    assert hist["counts"] == [0, 0, 2, 0, 0] and hist["n_problems"] == 2


def test_each_prompt_reaches_verls_agent_loop_with_its_own_n(monkeypatch):
    """The trainer's submission adds ``__rollout_n__`` as verl's agent loop reads a row (``v[i].data`` of a
    NonTensorStack, then ``prompt.pop("__rollout_n__", config.n)``): per-prompt n for a step's batch, the evicted
    group's rollouts for its replacement."""
    import numpy as np
    import transfer_queue
    from tensordict import NonTensorStack
    from verl.utils import tensordict_utils as tu

    from verl_isocompute.training.trainer import IsoComputeTrainer

    cfg = _compose("isocompute.per_prompt_n.enable=true", "isocompute.per_prompt_n.curation_weight=1000",
                   "data.train_batch_size=2", "actor_rollout_ref.rollout.n=8")
    trainer = IsoComputeTrainer.__new__(IsoComputeTrainer)
    trainer.config, trainer.trainer_mode, trainer.global_steps = cfg, "isocompute", 1
    trainer._read_settings(cfg)
    sent = []
    trainer.agent_loop_manager = type("Manager", (), {"generate_sequences": lambda self, batch: sent.append(batch)})()
    live = {}
    monkeypatch.setattr(transfer_queue, "kv_batch_put", lambda keys, partition_id, tags=None, fields=None: live.update(
        {k: t for k, t in zip(keys, tags)}))
    monkeypatch.setattr(transfer_queue, "kv_list", lambda partition_id=None: {"train": dict(live)})

    def batch(uids, infos):
        prompts = np.empty(len(uids), dtype=object)
        prompts[:] = [[{"role": "user", "content": u}] for u in uids]
        return tu.get_tensordict({"uid": np.array(uids, dtype=object), "data_source": np.array(["d"] * len(uids), dtype=object),
                                  "index": np.arange(len(uids)), "raw_prompt": prompts,
                                  "extra_info": np.array(infos, dtype=object)})

    def rollout_ns(td):  # what verl's AgentLoopWorkerTQ reads per row (batch.items(), v[i].data) and pops
        column = dict(td.items())["__rollout_n__"]
        assert isinstance(column, NonTensorStack)
        return [column[i].data for i in range(len(td))]

    trainer._submit_batch_to_rollout(batch(["u1", "u2"], [EASY, HARD]))
    assert rollout_ns(sent[-1]) == [6, 10]  # the hand-computed split of 16 (test above)
    del live["u2"]  # verl evicted u2 (a failed rollout) and asks for one prompt in its place
    trainer._submit_batch_to_rollout(batch(["u3"], [EASY]))
    assert rollout_ns(sent[-1]) == [10] and trainer.adaptive.record.evicted_rollouts == 10
