"""Kernels: plain functions over Arrow tables that run inside Spark tasks.

Each kernel processes one bucket of keys (many keys per call) of one or two
collections whose columns have positional internal names (see :mod:`.common`),
with DuckDB doing consolidation and accumulation.  They import nothing from
Spark and are unit-tested directly.
"""
