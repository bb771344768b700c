"""verl-isocompute: the IsoCompute playbook (arXiv 2603.12151) as a verl plugin.

Where things live:

- ``training/``  the healthy GRPO recipe inside verl: estimators, the regulariser-masked loss, the
  ``isocompute`` trainer, the reward, and the pure rules they use (LR rule, unbiased metrics, masks);
  ``training.config`` checks our ``isocompute:`` config block, ``training.prepare`` turns it into plain verl settings.
- ``scaling/``   the scaling toolkit: run logs -> frontier -> n*(C) curve, and the allocation rule
  (budget -> n, B_problem, steps, lr). Pure numpy/scipy/pandas: no verl, no torch.
- ``workflow/``  from problems to a compute-optimal run: difficulty curation, the prefix search, pilot
  sweeps, launching and stopping a verl run.
- ``guided/``    oracle-solution and trace prefixes as context (POPE, PrefixRL): the prefix tables, search
  rules and dataset transform (pure), and the hooks verl runs (``isocompute.guided``, the agent loop).
- ``cpu/``       the CPU backend (platform + HF-transformers rollout) so verl runs without a GPU.
- ``commands/``  the ``isocompute`` subcommands, thin doors over the above.
- ``data/``      problem sources in verl's parquet format (the demo's arithmetic, worked solutions) and a
  problem's identity.
- ``plugin``     the ``verl.plugins`` entry point; ``main`` the recipe entry point
  (``python -m verl_isocompute.main``); ``runlog`` the run-log contract between training and fitting;
  ``atomic`` the one way we write result files; ``verl_keys`` where verl keeps n, B_problem and steps;
  ``settings`` the fields of settings dataclasses (default and help), from which the commands' options are built.

The layers (pure rules -> verl-facing -> workflow drivers -> commands) and what each may import: README.md,
Layout; ``tests/test_layers.py`` checks them.

Importing this package is cheap and imports neither verl nor torch.
"""

from verl_isocompute import _compat

__version__ = "0.2.0"

_compat.install()
