"""From problems to a compute-optimal run: difficulty curation (``curate``, sampling through verl's
rollout servers in ``rollouts``), pilot sweeps (``sweep``), and starting / stopping verl runs (``launch``).

Layer: workflow drivers.
"""
