"""Guided exploration: oracle-solution prefixes as context (POPE arXiv 2601.18779, PrefixRL arXiv 2601.18795)."""
