"""Lets PySpark find the kproducer data source by itself: Spark imports top-level ``pyspark_*`` modules
that define ``DefaultSource`` and registers them, so ``df.write.format("kproducer")`` works without
calling ``kproducer.spark.register(spark)``."""
from kproducer.spark import DefaultSource  # noqa: F401
