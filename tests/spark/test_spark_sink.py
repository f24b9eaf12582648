"""The ``kproducer`` Spark sink end to end: a local SparkSession writing to a real broker (tansu), read
back with kafka-python. One session for the module (see conftest.py); keep the whole file well under
three minutes."""
from __future__ import annotations

import socket
import tempfile
import uuid
from collections import Counter, defaultdict
from typing import Any, Callable, Dict, List

import pytest

from kproducer.producer.partitioner import murmur2

pytestmark = [pytest.mark.spark]

PARTITIONS = 6


def _topic(tansu: Any, prefix: str, partitions: int = PARTITIONS) -> str:
    name = f"spark-{prefix}-{uuid.uuid4().hex[:10]}"
    tansu.create_topic(name, partitions)
    return name


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_batch_write_100k_rows_keys_headers_partitions(spark: Any, tansu: Any, consume: Callable[..., Any]) -> None:
    topic = _topic(tansu, "batch")
    n = 100_000
    # repartition by the partition column: two tasks write concurrently, but never to the same Kafka
    # partition, because tansu 0.6 (memory storage) races when two producers append to one partition at
    # once and answers UNKNOWN_SERVER_ERROR ("AlreadyExists ... .batch" in its log) -- a broker bug
    df = spark.range(0, n, numPartitions=4).selectExpr(
        "concat('key-', id) AS key",
        "CAST(concat('{\"id\":', id, ',\"pad\":\"', repeat('x', 40), '\"}') AS BINARY) AS value",
        "CAST((id * 7) % 6 AS INT) AS partition",
        "array(named_struct('key', 'id', 'value', CAST(CAST(id AS STRING) AS BINARY)),"
        "      named_struct('key', 'source', 'value', CAST(NULL AS BINARY))) AS headers",
        "id AS extra_column_is_ignored",
    ).repartition(2, "partition")
    (df.write.format("kproducer").mode("append")
       .option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", topic)
       .option("kafka.linger.ms", "10")
       # tansu also (rarely) fails pipelined appends to one partition from a single producer
       .option("kafka.max.in.flight.requests.per.connection", "1").save())

    got = consume(tansu.bootstrap, topic, PARTITIONS, n)
    assert len(got) == n
    ids = []
    per_partition: Dict[int, List[int]] = defaultdict(list)
    for partition, offset, key, value, headers in got:
        assert value is not None and key is not None
        rid = int(value[6:value.index(b",")])
        ids.append(rid)
        assert partition == (rid * 7) % 6, "the partition column is honoured"
        assert key == f"key-{rid}".encode()
        assert value == b'{"id":%d,"pad":"%s"}' % (rid, b"x" * 40)
        assert headers == [("id", str(rid).encode()), ("source", None)]
        per_partition[partition].append(offset)
    assert sorted(ids) == list(range(n)), "every row exactly once"
    # within a partition the rows of one task keep their order (here: one task per partition)
    for partition, offsets in per_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {partition}: no gaps, no extra records"
    assert set(per_partition) == set(range(PARTITIONS))


def test_stream_three_micro_batches(spark: Any, tansu: Any, consume: Callable[..., Any]) -> None:
    """Three availableNow runs over one checkpoint = micro-batches 0, 1, 2 of a rate-micro-batch source;
    topic from a column, keyed records partitioned by murmur2 like the Java client."""
    topic = _topic(tansu, "stream")
    rows_per_batch = 1000
    checkpoint = tempfile.mkdtemp(prefix="kproducer-stream-ck-")
    stream = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
              .option("numPartitions", 1).load()  # one writer per micro-batch: see the tansu race above
              .selectExpr(f"'{topic}' AS topic", "CAST(value % 50 AS STRING) AS key",
                          "concat('tick-', value) AS value"))
    batch_ids: List[int] = []
    for _ in range(3):
        query = (stream.writeStream.format("kproducer").option("kafka.bootstrap.servers", tansu.bootstrap)
                 .option("kafka.max.in.flight.requests.per.connection", "1")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        batch_ids.extend(p["batchId"] for p in progress)
    assert batch_ids == [0, 1, 2]

    expected = 3 * rows_per_batch
    got = consume(tansu.bootstrap, topic, PARTITIONS, expected)
    assert len(got) == expected
    values = sorted(int(v[len(b"tick-"):]) for _p, _o, _k, v, _h in got)
    assert values == list(range(expected))
    for partition, _offset, key, value, headers in got:
        assert int(key) == int(value[len(b"tick-"):]) % 50
        assert partition == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
        assert headers == []


def test_unreachable_broker_fails_the_job_naming_the_cause(spark: Any) -> None:
    port = _closed_port()
    df = spark.range(0, 20, numPartitions=1).selectExpr("CAST(id AS STRING) AS value")
    writer = (df.write.format("kproducer").mode("append")
              .option("kafka.bootstrap.servers", f"127.0.0.1:{port}").option("topic", "nowhere")
              .option("kafka.max.block.ms", "1500").option("kafka.request.timeout.ms", "1000")
              .option("kafka.delivery.timeout.ms", "2000").option("kafka.reconnect.backoff.max.ms", "200"))
    with pytest.raises(Exception) as info:
        writer.save()
    text = str(info.value)
    assert "SinkWriteError" in text and "NoBrokersAvailableError" in text, text[-3000:]  # a KafkaTimeoutError
    assert f"127.0.0.1:{port}" in text
    assert "not present in metadata" in text and "no broker is reachable" in text


def test_bad_partition_mid_write_fails_after_earlier_rows_were_written(spark: Any, tansu: Any,
                                                                       consume: Callable[..., Any]) -> None:
    """A task that fails half-way (at-least-once): before it reports the failure, the sink delivers every
    row it queued (the first two Arrow batches, 10,000 rows each), so what a failed task leaves in Kafka
    does not depend on timing. local[2,2] retries the task once, which delivers the same rows again and
    fails the same way; the job fails naming the bad partition."""
    topic = _topic(tansu, "midway", partitions=2)
    df = spark.range(0, 25_000, numPartitions=1).selectExpr(
        "CAST(id AS STRING) AS value", "CAST(IF(id < 20000, id % 2, 9) AS INT) AS partition")
    with pytest.raises(Exception) as info:
        (df.write.format("kproducer").mode("append").option("kafka.bootstrap.servers", tansu.bootstrap)
           .option("kafka.max.in.flight.requests.per.connection", "1").option("topic", topic)
           .option("kafka.max.block.ms", "1000").save())
    text = str(info.value)
    # a partition beyond the known count may be new: like send() (and Java), send_batch() waits max.block.ms
    assert "SinkWriteError" in text and "Partition 9 of topic" in text and "partition count 2" in text, text[-3000:]
    assert "20000 rows queued, 20000 of them acknowledged before the task failed" in text, text[-3000:]
    got = consume(tansu.bootstrap, topic, 2, 40_000)
    assert len(got) == 40_000  # two attempts x the 20,000 rows each queued before the bad partition
    assert Counter(int(v) for _p, _o, _k, v, _h in got) == {i: 2 for i in range(20_000)}
    assert Counter(p for p, *_ in got) == {0: 20_000, 1: 20_000}


def test_automatic_registration_through_a_pyspark_module(spark: Any, tansu: Any,
                                                         consume: Callable[..., Any]) -> None:
    topic = _topic(tansu, "auto", partitions=1)
    # "kproducer_autotest" is registered by PySpark itself from conftest's pyspark_kproducer_autotest module
    (spark.range(5).selectExpr("CAST(id AS STRING) AS value").write.format("kproducer_autotest").mode("append")
        .option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", topic).save())
    assert sorted(v for _p, _o, _k, v, _h in consume(tansu.bootstrap, topic, 1, 5)) == [b"0", b"1", b"2", b"3", b"4"]


# -- driver-side validation: the write fails during planning, before any Spark job runs ------------------
# (every other message of the option and schema checks is covered without Spark in test_spark_units.py)

VALID = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t"}


def _no_job_ran(spark: Any, group: str) -> bool:
    return not spark.sparkContext.statusTracker().getJobIdsForGroup(group)


@pytest.mark.parametrize("select, options, mode, message", [
    (["CAST(id AS STRING) AS payload"], VALID, "append", "required column 'value' (string or binary) not found"),
    (["id AS value"], VALID, "append", "column 'value' must be string or binary, not bigint"),
    (["'v' AS value", "array('a') AS headers"], VALID, "append",
     "column 'headers' must be array<struct<key:string,value:binary>>, not array<string>"),
    (["'v' AS value"], {"topic": "t"}, "append", "option 'kafka.bootstrap.servers' is required"),
    (["'v' AS value"], dict(VALID, **{"kafka.linger.msx": "5"}), "append",
     "unknown option 'kafka.linger.msx': 'linger.msx' is not a kproducer producer setting; did you mean "
     "'kafka.linger.ms'?"),
    (["'v' AS value"], VALID, "overwrite", "save mode 'overwrite' is not supported"),
    (["'v' AS value"], VALID, "errorifexists", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
    (["'v' AS value"], VALID, "ignore", "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
], ids=["no-value", "value-type", "headers-type", "no-bootstrap", "unknown-setting", "overwrite", "errorifexists",
        "ignore"])
def test_driver_side_validation(spark: Any, select: List[str], options: Dict[str, str], mode: str,
                                message: str) -> None:
    from pyspark.errors import AnalysisException

    group = f"validation-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "validation")
    try:
        writer = spark.range(3).selectExpr(*select).write.format("kproducer").mode(mode).options(**options)
        with pytest.raises(AnalysisException) as info:
            writer.save()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert message in str(info.value), str(info.value)
    assert _no_job_ran(spark, group)


def test_stream_validation_error_before_the_first_batch(spark: Any) -> None:
    stream = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
    query = (stream.selectExpr("value").writeStream.format("kproducer")  # value is bigint
             .option("kafka.bootstrap.servers", "127.0.0.1:9").option("topic", "t")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="kproducer-stream-bad-"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception) as info:
        query.awaitTermination(60)
    assert "column 'value' must be string or binary, not bigint" in str(info.value)


SPARK_SECRET = "spark-Pa55word-never-shown"


def _secured_writer(df: Any, cluster: Any, ca_file: str, password: str) -> Any:
    """Spark's kafka-sink option names for a SASL_SSL cluster (as users of Spark's own sink pass them)."""
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="alice" password="{password}";')
    return (df.write.format("kproducer").mode("append")
            .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
            .option("kafka.security.protocol", "SASL_SSL")
            .option("kafka.ssl.truststore.type", "PEM").option("kafka.ssl.truststore.location", ca_file)
            .option("kafka.sasl.mechanism", "SCRAM-SHA-512").option("kafka.sasl.jaas.config", jaas)
            .option("topic", "secure"))


@pytest.fixture
def secured_cluster(tmp_path: Any) -> Any:
    pytest.importorskip("cryptography", reason="the mock cluster makes its TLS certificate with cryptography")
    from kproducer.mock import MockCluster

    with MockCluster(2, security_protocol="SASL_SSL", sasl_mechanisms=["SCRAM-SHA-512"],
                     users={"alice": SPARK_SECRET}) as cluster:
        cluster.create_topic("secure", partitions=2)
        ca_file = tmp_path / "ca.pem"
        ca_file.write_text(cluster.ca_pem)
        yield cluster, str(ca_file)


def test_write_over_sasl_ssl_with_sparks_option_names(spark: Any, secured_cluster: Any) -> None:
    cluster, ca_file = secured_cluster
    n = 10_000
    df = spark.range(0, n, numPartitions=2).selectExpr("CAST(id AS STRING) AS value")
    _secured_writer(df, cluster, ca_file, SPARK_SECRET).save()
    stored = sorted(int(r.value) for part in range(2) for r in cluster.records("secure", part))
    assert stored == list(range(n))
    assert cluster.auth_stats["successes"] >= 2 and cluster.auth_stats["failures"] == 0


def test_wrong_password_fails_the_job_without_showing_the_secret(spark: Any, secured_cluster: Any) -> None:
    cluster, ca_file = secured_cluster
    wrong = "not-" + SPARK_SECRET
    df = spark.range(0, 20, numPartitions=1).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(Exception) as info:
        _secured_writer(df, cluster, ca_file, wrong).save()
    text = str(info.value)
    assert "SaslAuthenticationFailedError" in text and "SCRAM-SHA-512" in text, text[-3000:]
    assert SPARK_SECRET not in text
    assert cluster.records("secure", 0) == [] and cluster.records("secure", 1) == []
