"""Failed samples never end a run (issue 9 section 1), on batches padded by verl's own helper, no Ray.

A rollout whose agent loop raised leaves no row. verl then pads the batch back to the size the update
needs with ``padding_utils.upsample_batch_to_divisible_size`` (rows sharing one fresh uid, tagged
``is_padding``, the first row's reward info copied in). That helper, verl's advantage step and our trainer's
``_compute_advantage`` run unmodified here; only the TransferQueue store is an in-memory dict (TransferQueue
itself needs Ray actors). Also: validation with failed samples, the replay-buffer policy, eviction counting.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transfer_queue
from transfer_queue import KVBatchMeta
from verl.trainer.ppo import padding_utils
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from verl_isocompute.training.config import compose_recipe
from verl_isocompute.rules.masks import row_ids
from verl_isocompute.rules.names import REG_MASK_FIELD, ROW_ID_FIELD, SEQ_COUNT_FIELD
from verl_isocompute.training.trainer import IsoComputeTrainer

EOS, N = 2, 4


class InMemoryKV:
    """kv_batch_get / kv_batch_put of TransferQueue over a dict (fields missing from a row are skipped, as
    TransferQueue does for verl's optional fields such as ``values``)."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.tags: dict[str, dict] = {}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        for i, key in enumerate(keys):
            row = self.rows.setdefault(key, {})
            for name in (fields.keys() if fields is not None else ()):
                value = fields[name]
                row[name] = value[i] if isinstance(value, torch.Tensor) else list(value)[i]
            if tags is not None:
                self.tags[key] = tags[i]
        return KVBatchMeta(keys=list(keys), tags=[self.tags.get(k, {}) for k in keys], partition_id=partition_id)

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        rows = [self.rows[k] for k in keys]
        names = [f for f in (select_fields or rows[0]) if all(f in r for r in rows)]
        return list_of_dict_to_tensordict([{f: r[f] for f in names} for r in rows])


def _sample(uid, session, length, acc):
    response = torch.arange(10, 10 + length)
    mask = torch.ones(length, dtype=torch.int64)
    scores = torch.zeros(length)
    scores[-1] = acc
    prompt = torch.tensor([5, 6, 7])
    ids = torch.cat([prompt, response])
    return {"prompts": prompt, "responses": response, "response_mask": mask, "loss_mask": mask.clone(),
            "rm_scores": scores, "rollout_log_probs": torch.full((length,), -0.5), "num_turns": 2,
            "extra_fields": {"reward_extra_info": {"acc": acc}}, "input_ids": ids, "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(len(ids)), "uid": uid, "session_id": session, "data_source": "demo"}


# uidA varies (1, 0, 1, 1), uidC is all correct, uidB lost 3 of its 4 sessions: 9 real rows, padded to 12.
SPEC = [("uidA", 0, 1.0), ("uidA", 1, 0.0), ("uidA", 2, 1.0), ("uidA", 3, 1.0), ("uidB", 0, 1.0),
        ("uidC", 0, 1.0), ("uidC", 1, 1.0), ("uidC", 2, 1.0), ("uidC", 3, 1.0)]


@pytest.fixture
def padded(monkeypatch):
    kv = InMemoryKV()
    monkeypatch.setattr(transfer_queue, "kv_batch_get", kv.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", kv.kv_batch_put)
    assert padding_utils.tq is transfer_queue  # verl's helper reaches the store through this module
    keys = [f"{u}_{s}_0" for u, s, _ in SPEC]
    tags = [{"status": "success", "global_steps": 3} for _ in SPEC]
    kv.kv_batch_put(keys, "train", fields=list_of_dict_to_tensordict(
        [_sample(u, s, 3 + (i % 3), acc) for i, (u, s, acc) in enumerate(SPEC)]), tags=tags)
    batch = padding_utils.upsample_batch_to_divisible_size(KVBatchMeta(keys=keys, tags=tags, partition_id="train"), 12, EOS)
    # verl computes old log-probs after padding (_balance_batch pads, _compute_old_log_prob follows)
    old = [kv.rows[k]["rollout_log_probs"] - 0.01 * (1 + kv.rows[k]["response_mask"].numel()) for k in batch.keys]
    kv.kv_batch_put(batch.keys, "train", fields=list_of_dict_to_tensordict([{"old_log_probs": t} for t in old]))
    return kv, batch


def _trainer(*overrides):
    cfg = compose_recipe("isocompute_easy", ["data.train_batch_size=3", f"actor_rollout_ref.rollout.n={N}", *overrides])
    trainer = IsoComputeTrainer.__new__(IsoComputeTrainer)  # no workers: only the advantage step runs
    trainer.config = cfg
    trainer._read_settings(cfg)
    trainer.global_steps, trainer._epoch_samples = 3, []
    return trainer


def _field(kv, batch, name):
    return [kv.rows[k][name] for k in batch.keys]


def test_verl_pads_with_one_fresh_uid(padded):
    kv, batch = padded
    pad = [k for k, t in zip(batch.keys, batch.tags) if t.get("is_padding")]
    assert len(batch) == 12 and len(pad) == 3 and batch.keys[-3:] == pad
    assert {kv.rows[k]["uid"] for k in pad} == {pad[0].rsplit("_", 2)[0]} and pad[0].startswith("pad")
    assert all(kv.rows[k]["extra_fields"]["reward_extra_info"]["acc"] == 1.0 for k in pad)  # copied from row 0


@pytest.mark.parametrize("estimator", ["isocompute_grpo", "isocompute_grpo_decoupled"])
@pytest.mark.parametrize("mode", ["off", "groups", "regularizers"])
def test_trainer_advantage_step_on_a_padded_batch(padded, estimator, mode):
    kv, batch = padded
    trainer = _trainer(f"algorithm.adv_estimator={estimator}", "isocompute.decoupled.n_train=2",
                       f"isocompute.zero_variance.mode={mode}")
    metrics = {}
    out = trainer._compute_advantage(batch, metrics)  # verl's advantage step + our masks; raised before
    assert out.keys == batch.keys

    adv = [a.abs().sum().item() for a in _field(kv, batch, "advantages")]
    trained = [int(m.sum()) > 0 for m in _field(kv, batch, "loss_mask")]
    assert [int(m.sum()) for m in _field(kv, batch, "response_mask")] == [int(m.sum()) for m in _field(kv, batch, "loss_mask")]
    assert adv[4] == 0 and adv[9:] == [0, 0, 0]  # the group of one and the padding rows: advantage 0 ...
    assert not trained[4] and not any(trained[9:])  # ... and never trained
    assert adv[5:9] == [0] * 4  # all-correct group: no signal
    a_trained = trained[:4]
    if estimator == "isocompute_grpo_decoupled":
        assert sum(a_trained) == 2 and all(adv[i] > 0 for i in range(4) if a_trained[i])
        assert all(adv[i] == 0 for i in range(4) if not a_trained[i])
    else:
        assert a_trained == [True] * 4 and all(a > 0 for a in adv[:4])
    c_trained = trained[5:9]
    expected_c = 0 if mode == "groups" else (2 if estimator == "isocompute_grpo_decoupled" else 4)
    assert sum(c_trained) == expected_c

    assert metrics["isocompute/padding_rows"] == 3 and metrics["isocompute/singleton_rows"] == 1
    assert metrics["isocompute/train_acc"] == pytest.approx(8 / 9)  # padding's copied acc does not count
    assert metrics["isocompute/zero_var_group_frac"] == pytest.approx(2 / 3)  # B (alone) and C, of A, B, C
    kept = sum(trained)
    assert {float(v) for v in _field(kv, batch, SEQ_COUNT_FIELD)} == {float(kept)}
    assert metrics["isocompute/loss_seqs"] == kept
    assert np.array_equal([float(v) for v in _field(kv, batch, ROW_ID_FIELD)], row_ids(batch.keys))
    if mode == "regularizers":
        reg = [float(v) for v in _field(kv, batch, REG_MASK_FIELD)]
        assert [bool(r) for r in reg] == [t and i < 4 for i, t in enumerate(trained)]  # varying group A only
    else:
        assert REG_MASK_FIELD not in kv.rows[batch.keys[0]]
    assert trainer._epoch_samples and len(trainer._epoch_samples) == 9


def test_estimator_outside_the_trainer_does_not_raise_on_a_padded_batch(padded):
    """verl's own advantage step with our estimator and no trainer context: total, padding rows get 0."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    kv, batch = padded
    td = kv.kv_batch_get(batch.keys, "train", ["uid", "response_mask", "rm_scores"])
    data = DataProto(batch=td.to_padded_tensor())
    data.batch["token_level_rewards"] = data.batch["rm_scores"]
    data.non_tensor_batch["uid"] = np.array(data.batch.pop("uid").tolist(), dtype=object)
    out = compute_advantage_for_multi_trajectories(data, batch_keys=batch.keys, adv_estimator="isocompute_grpo", num_repeat=N)
    adv = out.batch["advantages"].abs().sum(dim=-1)
    assert adv[4] == 0 and (adv[9:] == 0).all() and (adv[:4] > 0).all()


def test_seq_mean_with_dropped_rows_needs_one_mini_batch():
    with pytest.raises(ValueError, match="ppo_mini_batch_size=3 .*token-mean"):
        _trainer("isocompute.zero_variance.mode=groups", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=1")
    _trainer("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "actor_rollout_ref.actor.ppo_mini_batch_size=1")


def test_trainer_refuses_a_schedule_whose_rates_it_would_misreport():
    cfg = compose_recipe("isocompute_easy", ["actor_rollout_ref.actor.optim.lr_scheduler_type=constant"])
    trainer = IsoComputeTrainer.__new__(IsoComputeTrainer)
    with pytest.raises(ValueError, match="optim.lr_scheduler_type=constant.*lr_scheduler_type=cosine"):
        trainer._read_settings(cfg)


def test_failed_groups_are_evicted_and_refilled():
    """The replay buffer verl builds for our trainer evicts a group with a failed rollout (never pads it)."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

    trainer = _trainer()
    trainer.trainer_mode = trainer.config.trainer.v1.trainer_mode
    trainer._add_prompts_to_generate = lambda n: n
    assert isinstance(trainer._build_replay_buffer(), ReplayBufferAsync)
    trainer.trainer_mode = "sync"  # what verl picks for trainer_mode=sync: short groups and padding
    with pytest.raises(ValueError, match="evicts and refills groups with failed rollouts.*got ReplayBuffer"):
        trainer._build_replay_buffer()
    assert ReplayBufferAsync is not ReplayBuffer


def test_evicted_groups_are_charged_to_compute():
    from verl_isocompute.training.trainer import ComputeCounter

    trainer = _trainer()
    trainer.compute, trainer._step_info = ComputeCounter(64, 900), {"rollouts": 12, "tokens": 50}
    metrics = {"training/rollout_failure/evicted_samples": 2.0}  # verl evicted 2 groups with a failed rollout
    trainer._charge_compute(metrics)
    assert (trainer.compute.rollouts, trainer.compute.tokens) == (64 + 12 + 2 * N, 900 + 50)
    assert metrics["isocompute/evicted_groups"] == 2 and metrics["isocompute/evicted_rollouts"] == 2 * N
    assert metrics["isocompute/rollouts"] == trainer.compute.rollouts


def test_trainer_validation_with_failed_samples_never_raises():
    trainer = _trainer()  # val_kwargs.n = 4 = k
    sources, uids = ["isocompute/arithmetic"] * 3, ["u1", "u1", "u2"]  # u1: 2 of 4 came back, u2: 1 of 4
    infos = {"reward": [1.0, 0.0, 1.0], "acc": [True, False, True]}
    expected = {(sources[0], "u1"): 4, (sources[0], "u2"): 4, (sources[0], "u3"): 4}  # u3: all 4 failed
    metrics = trainer._val_metrics_update(sources, uids, infos, [], expected_acc_counts=expected)
    assert metrics["val/failed_samples"] == 9
    assert metrics["val/avg@4"] == pytest.approx((1 / 4 + 1 / 4 + 0) / 3)
    assert metrics["val/best@4"] == pytest.approx(2 / 3) and metrics["val/worst@4"] == 0.0


def test_the_eviction_counts_we_read_are_the_names_verls_replay_buffer_writes(monkeypatch):
    """Canary: verl's own eviction step (one stale, one DAPO-filtered and one failed group) writes exactly the
    counters our compute accounting charges (rules/metrics.py EVICTION_METRICS); renamed in verl, C would
    silently stop counting evicted groups. The real failed rollouts are in test_recipe_e2e.py."""
    from collections import Counter

    from verl.trainer.ppo.v1 import replay_buffer

    from verl_isocompute.rules.metrics import EVICTION_METRICS, evicted_groups

    trainer = _trainer()
    trainer.trainer_mode = trainer.config.trainer.v1.trainer_mode
    trainer._add_prompts_to_generate = lambda n: n
    buffer = trainer._build_replay_buffer()
    monkeypatch.setattr(replay_buffer.tq, "kv_clear", lambda **kwargs: None)
    buffer.prompt_global_steps["train"]["stale"] = 1
    _, _, _, metrics = buffer._evict_terminal_groups(5, "train", ({"stale"}, {"dapo"}, {"failed"}, Counter({1.0: 1})))
    counts = {key for key in metrics if key.endswith("/evicted_samples")}
    assert counts == set(EVICTION_METRICS)
    assert evicted_groups(metrics) == 3
    # and a group with a failed rollout is one it evicts, never one it samples
    buffer.finished_keys["train"], buffer.failure_keys["train"] = {"done"}, {"failed"}
    reasons = buffer._terminal_eviction_reasons(5, "train")
    assert reasons[2] == {"failed"} and buffer._sampleable_terminal_keys("train", reasons) == {"done"}
