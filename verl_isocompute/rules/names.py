"""Every name this package registers into verl or passes through verl's data, spelled once.

verl looks our extensions up by name (``algorithm.adv_estimator``, ``trainer.v1.trainer_mode``), and our
trainer hands per-sample masks to the actor workers' loss as TransferQueue fields. A name written twice
can drift; these constants are the only spelling in Python code (the recipes' YAML names the estimator
and the trainer too, and ``tests/test_recipes.py`` checks they agree). Pure: no imports.
"""

from __future__ import annotations

# Advantage estimators (``algorithm.adv_estimator``), registered by :mod:`verl_isocompute.training.advantage`.
GRPO_ESTIMATOR = "isocompute_grpo"
DECOUPLED_ESTIMATOR = "isocompute_grpo_decoupled"  # the decoupled baseline of appendix C
ESTIMATORS = (GRPO_ESTIMATOR, DECOUPLED_ESTIMATOR)

# The v1 trainer (``trainer.v1.trainer_mode``), registered by :mod:`verl_isocompute.training.trainer`.
TRAINER = "isocompute"

# The CPU backend (:mod:`verl_isocompute.cpu`): verl's platform (``VERL_PLATFORM``) and rollout
# (``actor_rollout_ref.rollout.name``) names.
PLATFORM_NAME = "cpu"
DATA_SOURCES = ("arithmetic", "worked")  # generated sets of isocompute.data.source (files: the user's own)
ROLLOUT_NAME = "hf"

# The agent loop of the assistant placement (``agent_name`` column), registered by
# :mod:`verl_isocompute.training.guided_agent_loop`.
PREFIX_AGENT = "isocompute_prefix_continuation"

# Zero-variance filter modes (``isocompute.zero_variance.mode``, arXiv 2603.12151 section 2).
OFF = "off"  # train on every group, as verl does
GROUPS = "groups"  # all-correct / all-wrong groups leave every loss term
REGULARIZERS = "regularizers"  # KL and entropy only on groups whose accuracy varies
ZERO_VARIANCE_MODES = (OFF, GROUPS, REGULARIZERS)

# TransferQueue fields the trainer writes for the actor workers' loss (one value per sequence).
REG_MASK_FIELD = "isocompute_reg_mask"  # 1: KL and entropy act on this sequence (``regularizers`` mode)
SEQ_COUNT_FIELD = "isocompute_seq_count"  # sequences the step trains on: the seq-mean-* normaliser
ROW_ID_FIELD = "isocompute_row_id"  # a hash of the sample's key, so the loss can report which rows it saw
