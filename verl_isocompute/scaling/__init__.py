"""Scaling toolkit: from run logs to the compute-optimal frontier and the n*(C) sigmoid.

Pure Python on numpy/scipy/pandas/matplotlib: nothing here imports verl or torch.
"""
