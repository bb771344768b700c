"""Problem sources and dataset writers in verl's parquet format.

Layer: pure rules.
"""
