"""A driver program for tests/spark/test_spark_standalone.py: the sink's fault scenarios on a standalone cluster.

    python standalone_job.py MASTER BOOTSTRAP SPEC_JSON

SPEC_JSON: ``{"speculation": bool, "steps": [step, ...]}``, the steps run in order, each printing one line
``RESULT {"name", "ok", "error"?, "seconds", ...}`` (flushed) as it ends; a failing step does not stop the next.

* ``{"kind": "stream", "name", "topic", "guarantee", "rows", "checkpoint", "kill_driver": bool}``: one availableNow
  query from a ``rate-micro-batch`` source (2 partitions, ``rows`` per micro-batch) over the checkpoint. With
  kill_driver the sink's commit of the first micro-batch SIGKILLs this program (kproducer.test.kill.driver), after
  writing the JVM's pid next to the checkpoint (jvm.pid), so that the test can make sure it is gone too.
* ``{"kind": "batch", "name", "topic", "guarantee", "rows", "partitions", "options": {...}, "slow": {...}?}``:
  ``spark.range(rows)`` in ``partitions`` Spark partitions (value = the id) written with the given ``kproducer.*`` /
  ``kafka.*`` options; ``slow`` = ``{"seconds": s}``: a Python UDF spreads ``s`` seconds of sleep over the rows of
  each task's attempt 0 (a slow task: its input comes slowly).

Run with speculation on (``spark.speculation``) when the spec says so. Bounded: every query waits at most 240 s.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, Dict, List


def _result(data: Dict[str, Any]) -> None:
    print("RESULT " + json.dumps(data), flush=True)


def _session(master: str, speculation: bool) -> Any:
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName("kproducer-standalone")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
               .config("spark.task.maxFailures", "4")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", "")))
    if speculation:
        # a copy of a task that runs 3x longer than the median of the finished ones (and at least 2 s), checked
        # every 200 ms; by run time alone (not by the rows processed so far)
        builder = (builder.config("spark.speculation", "true").config("spark.speculation.interval", "200ms")
                   .config("spark.speculation.multiplier", "3").config("spark.speculation.quantile", "0.5")
                   .config("spark.speculation.minTaskRuntime", "2s")
                   .config("spark.speculation.efficiency.enabled", "false"))
    return builder.getOrCreate()


def _stream(spark: Any, bootstrap: str, step: Dict[str, Any]) -> Dict[str, Any]:
    checkpoint = step["checkpoint"]
    writer = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", step["rows"])
              .option("numPartitions", 2).load().selectExpr("CAST(value AS STRING) AS value")
              .writeStream.format("kproducer").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", step["topic"]).option("kproducer.guarantee", step["guarantee"])
              .option("checkpointLocation", checkpoint))
    if step.get("kill_driver"):
        with open(os.path.join(os.path.dirname(checkpoint), "jvm.pid"), "w") as f:
            f.write(str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()))
        writer = writer.option("kproducer.test.kill.driver", str(os.getpid()))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(240)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return {"batches": [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0],
            "query_id": str(query.id)}


def _batch(spark: Any, bootstrap: str, step: Dict[str, Any]) -> Dict[str, Any]:
    n, partitions = int(step["rows"]), int(step["partitions"])
    df = spark.range(0, n, numPartitions=partitions)
    slow = step.get("slow")
    if slow:
        from pyspark.sql.functions import udf

        per_task = n // partitions
        pauses = 10
        pause = float(slow["seconds"]) / pauses

        def slowly(i: int) -> str:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            if (ctx is None or ctx.attemptNumber() == 0) and i % per_task % (per_task // pauses) == 0:
                time.sleep(pause)
            return str(i)

        df = df.select(udf(slowly, "string")("id").alias("value"))
    else:
        df = df.selectExpr("CAST(id AS STRING) AS value")
    writer = (df.write.format("kproducer").mode("append").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", step["topic"]).option("kproducer.guarantee", step["guarantee"]))
    for k, v in step.get("options", {}).items():
        writer = writer.option(k, str(v))
    writer.save()
    return {}


def main(argv: List[str]) -> int:
    master, bootstrap, spec_json = argv[:3]
    spec = json.loads(spec_json)
    import kproducer.spark

    spark = _session(master, bool(spec.get("speculation")))
    spark.sparkContext.setLogLevel("ERROR")
    kproducer.spark.register(spark)
    for step in spec["steps"]:
        started = time.monotonic()
        out: Dict[str, Any] = {"name": step["name"]}
        try:
            out.update(_stream(spark, bootstrap, step) if step["kind"] == "stream" else _batch(spark, bootstrap, step))
            out["ok"] = True
        except Exception as e:
            out["ok"] = False
            out["error"] = f"{type(e).__name__}: {e}"[-3000:]
            traceback.print_exc()
        out["seconds"] = round(time.monotonic() - started, 2)
        # executors that registered (the driver's own block manager is in the list too)
        out["executors"] = int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
        _result(out)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
