"""A driver program for tests/spark/test_spark_standalone.py: exactly-once writes on a standalone cluster.

    python standalone_job.py MASTER BOOTSTRAP SPEC_JSON

SPEC_JSON: ``{"stream": {"topic", "rows", "checkpoint", "kill_after_commits"?}, "batch": {"topic", "rows"}}``
(either part optional; the stream runs first). ``stream`` runs one availableNow query (2 partitions, rows
per micro-batch) over the checkpoint; with kill_after_commits the driver's commit kills this process
(SIGKILL) after that many tasks' transactions were committed, and the JVM's pid is written next to the
checkpoint (jvm.pid) first. ``batch`` writes rows with 4 tasks whose attempt 0 fails half-way (Spark
retries them). Prints one line ``RESULT {...}``.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, List


def main(argv: List[str]) -> int:
    master, bootstrap, spec_json = argv[:3]
    spec = json.loads(spec_json)
    from pyspark.sql import SparkSession

    import kproducer.spark

    spark = (SparkSession.builder.master(master).appName("kproducer-standalone")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
             .config("spark.task.maxFailures", "4")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kproducer.spark.register(spark)
    started = time.monotonic()
    result: Dict[str, Any] = {}
    stream = spec.get("stream")
    if stream:
        checkpoint = stream["checkpoint"]
        if stream.get("kill_after_commits"):
            with open(os.path.join(os.path.dirname(checkpoint), "jvm.pid"), "w") as f:
                f.write(str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()))
        writer = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", stream["rows"])
                  .option("numPartitions", 2).load().selectExpr("CAST(value AS STRING) AS value")
                  .writeStream.format("kproducer").option("kafka.bootstrap.servers", bootstrap)
                  .option("topic", stream["topic"]).option("kproducer.guarantee", "exactly_once")
                  .option("checkpointLocation", checkpoint))
        if stream.get("kill_after_commits"):
            writer = writer.option("kproducer.test.kill.driver.after.commits",
                                   f"{stream['kill_after_commits']}:{os.getpid()}")
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination(240)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        result["batches"] = [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]
        result["query_id"] = str(query.id)
    batch = spec.get("batch")
    if batch:
        n = int(batch["rows"])
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
        df = spark.range(0, n, numPartitions=4).selectExpr("CAST(id AS STRING) AS value")
        (df.write.format("kproducer").mode("append").option("kafka.bootstrap.servers", bootstrap)
           .option("topic", batch["topic"]).option("kproducer.guarantee", "exactly_once")
           .option("kproducer.test.fail.after.rows", str(n // 8)).save())
    result["seconds"] = round(time.monotonic() - started, 2)
    # executors that registered (the driver's own block manager is in the list too)
    result["executors"] = int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
