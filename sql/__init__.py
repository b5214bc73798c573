"""SQL used by spark_differential's kernels (installed as ``spark_differential._sql``)."""
