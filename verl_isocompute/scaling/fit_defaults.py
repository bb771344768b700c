"""The fit's numeric defaults, written once (arXiv 2603.12151, section 4).

:class:`~verl_isocompute.scaling.pipeline.FitConfig` (``isocompute fit``'s flags and a sweep plan's
``fit:`` block) takes its defaults from here, and so do the keyword defaults of the functions that do
the work (the record-breaking buckets, the envelope's running average, the sigmoid fit, the bootstrap).
A module of constants only, so the fit command imports it without numpy, pandas or scipy.
"""

DEFAULT_BUCKET = 0.01  # reward bucket width for record-breaking points (0 = exact records)
DEFAULT_WINDOW = 5  # running-average window over the n*(C) grid, in grid points (1/4 decade)
K_MAX = 50.0  # upper bound on the sigmoid's k
DEFAULT_BOOTSTRAP = 200  # bootstrap resamples (0 = no confidence intervals)
# What the bootstrap resamples: each group's runs among its own (seeds), or all runs together (runs).
BOOTSTRAP_OVER = ("seeds", "runs")
DEFAULT_BOOTSTRAP_OVER = "seeds"
