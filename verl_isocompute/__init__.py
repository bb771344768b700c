"""verl-isocompute: the IsoCompute playbook (arXiv 2603.12151) as a verl plugin.

Where things live, by layer: a folder is one layer, and a module imports only from its own layer and the ones
before it here (``tests/test_layers.py`` holds this map and checks every import against it; README.md, Layout):

- **pure rules**: ``rules/`` (what verl-facing code applies: the LR rule, masks, metrics, the reward, names),
  ``scaling/`` (run logs -> frontier -> n*(C) curve; the allocation rule; the n schedule and per-prompt n),
  ``data/`` (problem sources in verl's parquet format), ``guided/`` (prefix tables, search rules and the
  dataset transform of POPE / PrefixRL), and the package's own modules: ``runlog`` (the run-log contract),
  ``atomic`` (the one way we write result files), ``jsonl``, ``errors``, ``numeric``, ``figures``,
  ``verl_keys`` (where verl keeps n, B_problem and steps), ``settings`` (settings fields with their help).
- **verl-facing**: ``training/`` (the recipe inside verl: estimators, the masked loss, the ``isocompute``
  trainer, our ``isocompute:`` block checked and resolved, the guided hooks), ``cpu/`` (the CPU backend),
  ``plugin`` (the ``verl.plugins`` entry point), ``registration_probes``.
- **workflow drivers**: ``workflow/`` (curation, the prefix search, pilot sweeps, launching a verl run).
- **commands**: ``commands/`` (the ``isocompute`` subcommands), ``main`` (``python -m verl_isocompute.main``).

Importing this package is cheap and imports neither verl nor torch.
"""

from verl_isocompute import _compat

__version__ = "0.2.0"

_compat.install()
