"""The isocompute trainer's verl hooks for per-step n: the n schedule and per-prompt n (``scaling/adaptive.py``).

A mixin of :class:`verl_isocompute.training.trainer.IsoComputeTrainer`; with both ``isocompute.schedule`` and
``isocompute.per_prompt_n`` off (``self.adaptive`` is None) every hook is verl's own. With either on:

- **every prompt carries its n.** ``_submit_batch_to_rollout`` (verl's one path to the rollout, for a step's
  batch and for the prompts that replace evicted groups) adds verl's per-sample ``__rollout_n__``: n_t each, or
  the per-prompt split of b_problem * n_t; a replacement gets the rollouts of the groups verl evicted (those it
  no longer holds in the TransferQueue), so a step trains exactly b_problem * n_t rollouts;
- **the driver's ``rollout.n`` is the step's n.** verl's trainer sizes the update's mini-batch (and the batch
  multiple it pads to) as ``ppo_mini_batch_size * rollout.n``: with one mini-batch per step (checked) and
  sum n_i = b_problem * n_t, that is the whole step;
- **the schedule plans step t when step t-1 ends** (:meth:`AdaptiveTrainerMixin._plan_step`, and before step 1
  in ``on_train_begin``), from the rollouts spent so far (C, evicted groups included): n_t, the LR rule's peak
  at b_problem * n_t, sent to the actor workers (:mod:`verl_isocompute.training.lr_worker`), and, when the
  budget pays for no step after it, verl's ``total_training_steps`` set to t (so step t saves its checkpoint and
  validates as verl's last step). Before step 1 ``total_training_steps`` is the most steps the budget could pay
  for (all at the grid's smallest n), and ``trainer.total_epochs`` is raised to cover them;
- **groups evicted in a step can spend the rest of the budget** (their rollouts are charged on top of the step's
  B_t): the trainer charges C right after verl's rollout and update, before verl decides whether to save and
  validate, and :meth:`AdaptiveTrainerMixin._end_at_spent_budget` then makes that step the last. verl read
  ``is_last_step`` when the step began, but it reads ``trainer.save_freq`` and ``trainer.test_freq`` after the
  step, so those are set to the step's number for that one step (when positive: a run that never saves or
  validates keeps that) and restored after it. The last row records the budget and the rollouts C passed it by;
- **resume-safe**: the schedule's state (its n and every change) and the pass-rate counts are saved in each
  checkpoint folder (``isocompute_adaptive.json``, written before verl marks the checkpoint complete) and
  loaded with it.
"""

from __future__ import annotations

import json
import math
import os

from omegaconf import open_dict

from verl_isocompute import atomic
from verl_isocompute.runlog import metric_key
from verl_isocompute.scaling.adaptive import AdaptiveN, prompt_id
from verl_isocompute.training.adaptive_config import build_adaptive, check_adaptive

STATE_FILE = "isocompute_adaptive.json"
ROLLOUT_N_FIELD = "__rollout_n__"  # verl's per-sample n (verl/trainer/ppo/v1/agent_loop_tq.py, _run_prompt)
STEP_FREQS = ("save_freq", "test_freq")  # what verl's fit loop reads after a step to save and validate


def _column(batch, key: str) -> list:
    value = batch.get(key, None) if key in batch.keys() else None
    return [None] * len(batch) if value is None else list(value.tolist())


class AdaptiveTrainerMixin:
    """verl hooks for :class:`~verl_isocompute.scaling.adaptive.AdaptiveN` (module docstring)."""

    adaptive: AdaptiveN | None = None

    def _read_adaptive(self, config, lr_from_rule) -> None:
        check_adaptive(config, lr_from_rule)
        self.adaptive = build_adaptive(config)
        self._peak_lr = float(config.actor_rollout_ref.actor.optim.lr)
        self._step_ns: list[int] = []
        self._step_freqs: dict = {}  # trainer.save_freq / test_freq as configured, while one step overrides them

    # -- set-up --------------------------------------------------------------------------------------
    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        if self.adaptive is not None and self.adaptive.schedule is not None:
            from verl_isocompute.training.lr_worker import use_lr_worker

            use_lr_worker(self.role_worker_mapping)

    def _init_dataloader(self):
        super()._init_dataloader()
        schedule = self.adaptive.schedule if self.adaptive is not None else None
        if schedule is None:
            return
        # the most steps the budget can pay for; the run ends sooner when n grows (_plan_step)
        self.total_training_steps = schedule.steps_left(0, min(schedule.grid))
        with open_dict(self.config):
            self.config.trainer.total_epochs = max(int(self.config.trainer.total_epochs),
                                                   math.ceil(self.total_training_steps / max(1, self.steps_per_epoch)))
            self.config.actor_rollout_ref.actor.optim.total_training_steps = self.total_training_steps

    # -- each step -----------------------------------------------------------------------------------
    def _plan_step(self, step: int) -> None:
        """Decide step ``step``'s n (and lr) from the compute spent so far; see the module docstring."""
        c, schedule = self.compute.rollouts, self.adaptive.schedule
        if schedule is None:
            return
        if self.adaptive.budget_spent(c):  # resumed with a budget its checkpoint's C had spent (in a run: _end_at_spent_budget)
            print(f"[isocompute] schedule: the budget of {schedule.budget_rollouts:,} rollouts is spent ({c:,} used); "
                  f"the run ends after step {step - 1}", flush=True)
            self.total_training_steps = step - 1
            return
        plan = self.adaptive.plan_step(step, c)
        self.n = plan.n
        with open_dict(self.config):
            self.config.actor_rollout_ref.rollout.n = plan.n
        self.actor_rollout_wg.set_peak_lr(plan.peak_lr)
        self._peak_lr = plan.peak_lr
        if self.adaptive.last_step(c):
            self.total_training_steps = step
        if plan.changed:
            print(f"[isocompute] schedule: step {step} runs at n = {plan.n} (n*(c) = {plan.n_star:.2f} after "
                  f"{c:,} rollouts), lr {plan.peak_lr:.3g} after warm-up", flush=True)

    def _end_at_spent_budget(self) -> None:
        """After the step's rollouts are charged and before verl's checkpoint and validation: when its evicted
        groups left no budget for another step, make this step verl's last (module docstring)."""
        step = int(self.global_steps)
        if self.adaptive is None or step >= self.total_training_steps:
            return
        if not self.adaptive.budget_spent(self.compute.rollouts):
            return
        schedule = self.adaptive.schedule
        print(f"[isocompute] schedule: groups evicted in step {step} spent the budget of {schedule.budget_rollouts:,} "
              f"rollouts ({self.compute.rollouts:,} used): step {step} is the last, with its checkpoint and "
              "validation", flush=True)
        self.total_training_steps = step
        trainer = self.config.trainer
        self._step_freqs = {key: trainer[key] for key in STEP_FREQS if int(trainer[key]) > 0}
        for key in self._step_freqs:
            trainer[key] = step  # verl saves / validates when global_steps % freq == 0

    def _adaptive_step_end(self, step: int) -> None:
        """After verl's checkpoint, validation and metrics of ``step``: the frequencies back, the next step planned."""
        self.config.trainer.update(self._step_freqs)
        self._step_freqs = {}
        if step < self.total_training_steps:
            self._plan_step(step + 1)  # from the C just charged: n, lr and the last step of the budget

    def _submit_batch_to_rollout(self, batch):
        if self.adaptive is None:
            return super()._submit_batch_to_rollout(batch)
        import transfer_queue as tq
        from verl.utils import tensordict_utils as tu

        uids = [str(u) for u in _column(batch, "uid")]
        ids = [prompt_id(s, i, p) for s, i, p in zip(_column(batch, "data_source"), _column(batch, "index"),
                                                     _column(batch, "raw_prompt"), strict=True)]
        budget = None
        if self.adaptive.groups:  # prompts replacing groups verl evicted: their rollouts, spread anew
            live = (tq.kv_list(partition_id="train") or {}).get("train", {})
            budget = self.adaptive.evict(key for key, tag in live.items() if tag.get("is_prompt", False)) or None
        ns = self.adaptive.assign(uids, ids, _column(batch, "extra_info"), budget)
        self._step_ns.extend(ns)
        tu.assign_non_tensor_stack(batch, ROLLOUT_N_FIELD, [int(n) for n in ns])
        return super()._submit_batch_to_rollout(batch)

    def _adaptive_observe(self, uids, acc, real, metrics: dict) -> None:
        """The step's trained groups: pass rates updated, the per-prompt metrics logged."""
        if self.adaptive is not None:
            found = self.adaptive.observe(list(uids[real]), [bool(a) for a in acc[real]])
            metrics.update({metric_key(name): value for name, value in found.items()})

    def _adaptive_evictions(self, evicted_groups: int) -> tuple[int, int]:
        """(groups, rollouts) sampled this step and never trained; verl's count without per-step n."""
        if self.adaptive is None:
            return evicted_groups, evicted_groups * self.n
        record = self.adaptive.end_step()
        return record.evicted_groups, record.evicted_rollouts

    def _adaptive_row(self, step: int, metrics: dict) -> dict:
        """Run-log fields of a step: the n_i distribution, the schedule's n*(c) and peak lr, and on the run's last
        step the budget and the rollouts C passed it by."""
        out = {}
        if self.adaptive is not None and self.adaptive.per_prompt is not None and self._step_ns:
            out["group_n_hist"] = AdaptiveN.histogram(self._step_ns)
        if self.adaptive is not None and self.adaptive.plan is not None:
            out["n_star"], out["peak_lr"] = self.adaptive.plan.n_star, self.adaptive.plan.peak_lr
            if 0 < self.total_training_steps <= step:  # the last training row (step 0 is never past a total > 0)
                out.update(self.adaptive.schedule.budget_end(self.compute.rollouts))
        self._step_ns = []
        return out

    # -- checkpoints ---------------------------------------------------------------------------------
    def _save_checkpoint(self):
        if self.adaptive is not None:
            folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
            os.makedirs(folder, exist_ok=True)
            atomic.write_json(os.path.join(folder, STATE_FILE), self.adaptive.state_dict())
        return super()._save_checkpoint()

    def _load_checkpoint(self):
        result = super()._load_checkpoint()
        if self.adaptive is None or not self.global_steps:
            return result
        trainer = self.config.trainer
        folder = (trainer.resume_from_path if trainer.resume_mode == "resume_path"
                  else os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}"))
        path = os.path.join(os.path.abspath(folder), STATE_FILE)
        if not os.path.isfile(path):
            raise ValueError(f"the checkpoint {folder} has no {STATE_FILE} (it was saved without isocompute.schedule / "
                             "per_prompt_n): resume with the settings it was saved with, or start a new run")
        with open(path) as f:
            self.adaptive.load_state_dict(json.load(f))
        self.n = self.adaptive.n
        return result
