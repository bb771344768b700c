"""The healthy GRPO recipe of the IsoCompute playbook (arXiv 2603.12151), as pieces registered into verl.

Layer: verl-facing (imports verl; its rules are in ``rules/``, ``scaling/`` and ``guided/``).

``advantage`` (estimators), ``regularizers`` (the loss with KL / entropy masked to varying groups),
``trainer`` (the ``isocompute`` v1 trainer), ``config`` / ``schema`` / ``resolvers`` (our ``isocompute:``
block, checked and resolved into plain verl settings), ``prepare`` (our entry point's run before Ray),
``allocation_hook`` and ``adaptive_config`` / ``adaptive_trainer`` (n from a budget, per step or per prompt),
``guided_mixture`` / ``guided_training_set`` / ``guided_agent_loop`` (guided data as verl reads it).
"""
