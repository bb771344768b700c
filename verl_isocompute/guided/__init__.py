"""Guided exploration: oracle-solution prefixes as context (POPE arXiv 2601.18779, PrefixRL arXiv 2601.18795).

Layer: pure rules (the prefix tables, search rules and dataset transform; the hooks verl runs are
``training/guided_*``).
"""
