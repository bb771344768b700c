"""Where verl keeps the settings we read and write, as dotted key paths of its config, spelled once.

The playbook's n (rollouts per problem) and B_problem (problems per step) are verl's ``rollout.n`` and
``data.train_batch_size``; the run's steps M are ``trainer.total_training_steps``. The fit reads them back
from a run's hydra config file or wandb config; the allocation writes them; the LR rule reads them. Pure: no
imports.
"""

from __future__ import annotations

N = "actor_rollout_ref.rollout.n"
B_PROBLEM = "data.train_batch_size"
STEPS = "trainer.total_training_steps"
EPOCHS = "trainer.total_epochs"
TRAIN_FILES = "data.train_files"
VAL_FILES = "data.val_files"
DATA_SEED = "data.seed"  # the order of the training set (verl's sampler shuffles with it)
ROLLOUT_SEED = "actor_rollout_ref.rollout.seed"  # the rollout's sampling
# The largest seed every sampler a run seeds takes: verl's sampler seeds a torch generator with data.seed (up to
# 2**64 - 1), vLLM seeds Python, numpy and torch with rollout.seed, and numpy's np.random.seed takes 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1
