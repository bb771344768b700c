"""The actor worker with one more method: set the peak learning rate between updates (the n schedule's lr_t).

verl builds the actor's LR scheduler once, from ``optim.lr`` (``FSDPEngine._build_lr_scheduler``): a
``LambdaLR`` whose rate for update k is base_lr * f(k), f the warm-up factor min(1, k / W) under the recipe's
schedule (:data:`verl_isocompute.rules.lr.VERL_WARMUP_SCHEDULE`). The n schedule changes B_t = b_problem * n_t
and so the LR rule's peak between steps. :meth:`IsoComputeActorWorker.set_peak_lr` replaces base_lr by the new
peak and sets the rate of the coming update to peak * f(k) with the scheduler's own f and step count, so the
warm-up stays counted in updates and the scheduler's saved state (its base_lrs) is the current peak on resume.

The isocompute trainer uses this worker class only when ``isocompute.schedule`` is on
(:func:`use_lr_worker`); every other run keeps verl's own ``ActorRolloutRefWorker``.
"""

from __future__ import annotations

from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import ActorRolloutRefWorker


class IsoComputeActorWorker(ActorRolloutRefWorker):
    """verl's actor/rollout/ref worker plus :meth:`set_peak_lr`."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_peak_lr(self, peak_lr: float) -> float:
        """Make ``peak_lr`` the scheduler's base rate; returns the rate the next update will run at."""
        scheduler = self.actor.engine.lr_scheduler
        scheduler.base_lrs = [float(peak_lr)] * len(scheduler.base_lrs)
        for group, lam in zip(scheduler.optimizer.param_groups, scheduler.lr_lambdas, strict=True):
            group["initial_lr"] = float(peak_lr)
            group["lr"] = float(peak_lr) * lam(scheduler.last_epoch)
        return scheduler.optimizer.param_groups[0]["lr"]


def use_lr_worker(role_worker_mapping: dict) -> None:
    """Swap verl's actor worker class for :class:`IsoComputeActorWorker` in the trainer's role -> class mapping."""
    import ray
    from verl.trainer.ppo.utils import Role

    for role in (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef):
        if role in role_worker_mapping:
            role_worker_mapping[role] = ray.remote(IsoComputeActorWorker)
