"""Figures on matplotlib's object API with the Agg canvas: no pyplot, no display, and no global backend
switch (``matplotlib.use``), which would change the backend of a notebook or program importing us. Save
with :func:`verl_isocompute.atomic.save_figure`.
"""

from __future__ import annotations

from typing import Any


def agg_figure(**figure_kwargs: Any):
    """A new ``matplotlib.figure.Figure`` drawn by the Agg canvas (``figsize``, ``dpi``, ... as for ``Figure``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**figure_kwargs)
    FigureCanvasAgg(fig)
    return fig
