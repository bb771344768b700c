"""The healthy GRPO recipe of the IsoCompute playbook (arXiv 2603.12151), as pieces registered into verl.

Pure rules (no verl, no torch): ``lr`` (sqrt batch-size LR rule and warm-up), ``metrics`` (unbiased
avg@k / best@k / worst@k, pass-rate histogram). verl-facing: ``advantage`` (estimators),
``regularizers`` (the loss with KL / entropy masked to varying groups), ``trainer`` (the ``isocompute``
v1 trainer), ``reward`` (math-verify, safe in verl's reward threads), ``config`` (our ``isocompute:``
block resolved into plain verl settings).
"""
