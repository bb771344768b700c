"""Pilot sweeps: a grid of real verl runs (B_problem x n under B_max, one budget each), resumable, then the fit.

``plan`` is pure arithmetic (no verl); ``runner`` executes the cells locally or as Ray jobs and keeps the
sweep state; ``isocompute sweep`` is :mod:`verl_isocompute.commands.sweep`.
"""
