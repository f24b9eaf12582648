"""A Spark pipeline that publishes cleaned, enriched order lines to Kafka with the kproducer sink.

Reads examples/data/orders.csv (order lines in several currencies) and examples/data/fx_rates.json,
drops cancelled lines and lines without a customer, converts every amount to EUR, and writes one JSON
record per order line -- keyed by customer (so a customer's orders stay in one partition, in order),
with headers, routed by a topic column: lines of 500 EUR and more go to ``<topic>.large``.

    python examples/spark_pipeline.py                          # on an embedded MockCluster
    python examples/spark_pipeline.py --bootstrap host:9092    # on a real cluster (topics must exist
                                                               # or be auto-created by the broker)

Needs ``pip install 'kproducer[spark]'`` and Java 17.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections import Counter
from typing import Any, Iterator, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
PARTITIONS = 3
LARGE_EUR = 500.0


@contextlib.contextmanager
def cluster_or(bootstrap: Optional[str], topics: List[str]) -> Iterator[Any]:
    """Yield (bootstrap servers, MockCluster or None)."""
    if bootstrap:
        yield bootstrap, None
        return
    from kproducer.mock import MockCluster

    with MockCluster(num_brokers=1) as cluster:
        for t in topics:
            cluster.create_topic(t, partitions=PARTITIONS)
        print(f"started an embedded MockCluster at {cluster.bootstrap_servers}")
        yield cluster.bootstrap_servers, cluster


def build(spark: Any, topic: str) -> Any:
    """orders.csv + fx_rates.json -> the kafka-sink columns (key, value, topic, headers)."""
    from pyspark.sql import functions as F

    orders = (spark.read.option("header", True)
              .schema("order_id STRING, order_ts TIMESTAMP, customer_id STRING, country STRING, sku STRING, "
                      "product STRING, quantity INT, unit_price DOUBLE, currency STRING")
              .csv(os.path.join(DATA, "orders.csv")))
    rates = spark.read.schema("currency STRING, eur_per_unit DOUBLE").json(os.path.join(DATA, "fx_rates.json"))
    lines = (orders
             .where((F.col("quantity") > 0) & F.col("customer_id").isNotNull() & (F.col("customer_id") != ""))
             .join(F.broadcast(rates), "currency", "left")
             .withColumn("amount_eur", F.round(F.col("quantity") * F.col("unit_price") * F.col("eur_per_unit"), 2)))
    return lines.select(
        F.col("customer_id").alias("key"),
        F.to_json(F.struct("order_id", F.date_format("order_ts", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("ts"),
                           "customer_id", "country", "sku", "product", "quantity", "unit_price", "currency",
                           "amount_eur")).alias("value"),
        F.when(F.col("amount_eur") >= LARGE_EUR, F.lit(f"{topic}.large")).otherwise(F.lit(topic)).alias("topic"),
        F.array(F.struct(F.lit("source").alias("key"), F.lit(b"spark_pipeline.py").alias("value")),
                F.struct(F.lit("country").alias("key"), F.col("country").cast("binary").alias("value"))
                ).alias("headers"),
    )


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="host:port,... of a real cluster (default: embedded MockCluster)")
    parser.add_argument("--topic", default="orders", help="topic for normal orders (large ones: <topic>.large)")
    args = parser.parse_args(argv)

    # Spark's Python workers must run this interpreter (it has pyarrow and kproducer) and bind locally
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import kproducer.spark

    topics = [args.topic, f"{args.topic}.large"]
    with cluster_or(args.bootstrap, topics) as (servers, cluster):
        spark = (SparkSession.builder.master("local[2]").appName("kproducer-spark-pipeline")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            kproducer.spark.register(spark)
            out = build(spark, args.topic).cache()
            source_lines = spark.read.option("header", True).csv(os.path.join(DATA, "orders.csv")).count()
            print(f"writing {out.count()} order lines (of {source_lines} in orders.csv; cancelled lines and lines "
                  f"without a customer dropped) to {', '.join(topics)} via {servers}")
            (out.write.format("kproducer").mode("append")
                .option("kafka.bootstrap.servers", servers)
                .option("kafka.linger.ms", "10")
                .option("kafka.compression.type", "gzip")
                .save())
            if cluster is None:
                counts = Counter(r["topic"] for r in out.select("topic").collect())
                for t in topics:
                    print(f"  {t}: {counts.get(t, 0)} records written")
            else:
                for t in topics:
                    print(f"{t}:")
                    for p in range(PARTITIONS):
                        for rec in cluster.records(t, p):
                            order = json.loads(rec.value)
                            hdrs = ", ".join(f"{k}={v.decode() if v is not None else None}" for k, v in rec.headers)
                            print(f"  p{p}@{rec.offset:<3} key={rec.key.decode():<5} {order['order_id']} "
                                  f"{order['quantity']} x {order['product']:<28} {order['amount_eur']:>8.2f} EUR  "
                                  f"[{hdrs}]")
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
