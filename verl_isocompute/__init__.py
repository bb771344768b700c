"""verl-isocompute: the IsoCompute playbook (arXiv 2603.12151) as a verl plugin.

Importing this package is cheap and imports neither verl nor torch: the pure parts (metrics, LR rule,
scaling toolkit, allocation) are usable with only the logs. verl-facing code lives in ``plugin``,
``trainer``, ``regularizers``, ``cpu`` and ``main``.
"""

__version__ = "0.1.0"
