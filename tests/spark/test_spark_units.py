"""The sink's pieces without a SparkSession: option and schema checks, Arrow -> send_batch groups, the
per-process producer cache, and a writer's write() called directly against tansu."""
from __future__ import annotations

import uuid
from typing import Any, Dict, List

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from kproducer.errors import ConfigError
from kproducer.spark import (
    ColumnPlan,
    KafkaBatchWriter,
    SinkCommitMessage,
    SinkDataError,
    SinkSchemaError,
    SinkWriteError,
    _producers,
    check_schema,
    parse_options,
    summarize,
)
from kproducer.spark._arrow import groups
from kproducer.spark._sink import KafkaStreamWriter, _rows_to_batches

pytestmark = [pytest.mark.spark]

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
HEADERS_T = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
ARROW_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


# -- options -------------------------------------------------------------------------------------------

def test_options_split_into_topic_and_producer_settings() -> None:
    opts = parse_options({"kafka.bootstrap.servers": "h:1,h:2", "topic": "events", "kafka.linger.ms": "20",
                          "kafka.compression.type": "gzip", "kafka.enable.idempotence": "false",
                          "checkpointLocation": "/tmp/x"})
    assert opts.topic == "events"
    assert opts.settings == {"bootstrap.servers": "h:1,h:2", "linger.ms": "20", "compression.type": "gzip",
                             "enable.idempotence": "false", "batch.size": "262144"}
    assert opts.bootstrap_servers == "h:1,h:2"


def test_option_names_are_case_insensitive_and_aliases_work() -> None:
    opts = parse_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Kafka.Linger_Ms": "3", "kafka.batch_size": "999"})
    assert opts.settings == {"bootstrap.servers": "h:1", "linger.ms": "3", "batch.size": "999"}
    assert opts.topic is None


@pytest.mark.parametrize("options, message", [
    ({}, "option 'kafka.bootstrap.servers' is required"),
    ({"kafka.bootstrap.servers": " "}, "option 'kafka.bootstrap.servers' is required"),
    ({"kafka.bootstrap.servers": "nohostport"}, "bootstrap.servers entry 'nohostport' is not host:port"),
    (dict(BOOT, **{"kafka.batch.sise": "1"}), "did you mean 'kafka.batch.size'?"),
    (dict(BOOT, **{"kafka.nonsense": "1"}), "unknown option 'kafka.nonsense'"),
    (dict(BOOT, **{"kafka.linger.ms": "soon"}), "linger.ms must be an integer, got 'soon'"),
    (dict(BOOT, **{"kafka.acks": "2"}), "acks must be 0, 1 or 'all'"),
    (dict(BOOT, **{"kafka.value.serializer": "x"}), "option 'kafka.value.serializer' is not supported"),
    (dict(BOOT, **{"kafka.partitioner": "x"}), "compute a 'partition' column instead"),
    (dict(BOOT, **{"kafka.transactional.id": "x"}), "use .option('kproducer.guarantee', 'exactly_once')"),
    (dict(BOOT, **{"kafka.enable.idempotence": "true", "kafka.acks": "1"}), "requires acks to be all"),
    (dict(BOOT, **{"bootstrap.servers": "h:1"}), "e.g. 'kafka.bootstrap.servers'"),
    (dict(BOOT, topik="t"), "unknown option 'topik'; did you mean 'topic'?"),
    (dict(BOOT, topic=""), "option 'topic' is empty"),
    (dict(BOOT, path="events"), "the kproducer sink takes no path"),
])
def test_bad_options(options: Dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(options)
    assert message in str(info.value)


def test_unrelated_unknown_options_are_ignored() -> None:
    assert parse_options(dict(BOOT, includeHeaders="true")).settings == {"bootstrap.servers": "127.0.0.1:9092",
                                                                         "batch.size": "262144"}


# -- security options ----------------------------------------------------------------------------------

SECRET = "spark-S3cret-pw"
JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
        f'password="{SECRET}";')


def test_security_options_as_sparks_kafka_sink_takes_them(tmp_path: Any) -> None:
    opts = parse_options(dict(BOOT, **{
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": JAAS,
        "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    }))
    assert opts.settings["sasl.jaas.config"] == JAAS  # as Spark passed it, for the workers' producers
    assert opts.settings["ssl.truststore.location"] == "/etc/kafka/ca.pem"
    assert SECRET not in repr(opts) and "[hidden]" in repr(opts)
    # librdkafka's and kafka-python's names work too (Spark lower-cases option names)
    opts = parse_options(dict(BOOT, **{"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanisms": "PLAIN",
                                       "kafka.sasl.username": "alice", "kafka.sasl.password": SECRET,
                                       "kafka.ssl_check_hostname": "false"}))
    assert opts.settings["sasl.mechanism"] == "PLAIN" and opts.settings["sasl.password"] == SECRET
    assert opts.settings["ssl.endpoint.identification.algorithm"] == ""
    assert SECRET not in repr(opts) and SECRET not in str(opts)


def test_producers_are_keyed_by_the_secret_values() -> None:
    a = _producers._key({"sasl.password": "one"})
    b = _producers._key({"sasl.password": "two"})
    assert a != b


@pytest.mark.parametrize("options, message", [
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": JAAS[:-2]}, "sasl.jaas.config is malformed"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": JAAS}, "set sasl.mechanism to SCRAM-SHA-256"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"}, "Kerberos is not supported"),
    ({"kafka.sasl.password": SECRET, "kafka.sasl_plain_password": "x" + SECRET},
     "options 'kafka.sasl.password' and 'kafka.sasl_plain_password' are the same producer setting"),
    ({"kafka.ssl.keystore.type": "JKS"}, "keytool -importkeystore"),
    ({"kafka.ssl_context": "x"}, "a Spark option (a string) cannot carry"),
    ({"kafka.ssl.context": "x"}, "give the TLS settings as kafka.ssl.* options"),
    ({"kafka.sasl_oauth_token_provider": "x"}, "it needs a Python callable"),
    ({"kafka.ssl_check_hostname": "maybe"}, "invalid option 'kafka.ssl_check_hostname'"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "alice"},
     "sasl.username needs sasl.password"),
])
def test_security_option_errors_never_show_the_secret(options: Dict[str, str], message: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(dict(BOOT, **options))
    assert message in str(info.value)
    assert SECRET not in str(info.value) and SECRET[:-3] not in str(info.value)
    assert all(SECRET not in r.getMessage() for r in caplog.records)


# -- schema --------------------------------------------------------------------------------------------

def _schema(**cols: Any) -> StructType:
    return StructType([StructField(n, t) for n, t in cols.items()])


def test_schema_plan() -> None:
    full = _schema(key=StringType(), value=BinaryType(), topic=StringType(), partition=IntegerType(),
                   headers=HEADERS_T, other=DoubleType())
    assert check_schema(full, None) == ColumnPlan(True, True, True, True, None)
    # the option topic wins over the column
    assert check_schema(full, "t") == ColumnPlan(True, False, True, True, "t")
    assert check_schema(_schema(value=StringType(), partition=LongType()), "t") == \
        ColumnPlan(False, False, True, False, "t")


@pytest.mark.parametrize("schema, topic, message", [
    (_schema(payload=StringType()), "t", "required column 'value' (string or binary) not found"),
    (_schema(Value=StringType()), "t", "there is a column 'Value'"),
    (_schema(value=LongType()), "t", "column 'value' must be string or binary, not bigint"),
    (_schema(value=StringType(), key=IntegerType()), "t", "column 'key' must be string or binary, not int"),
    (_schema(value=StringType(), topic=IntegerType()), None, "column 'topic' must be string, not int"),
    (_schema(value=StringType(), partition=StringType()), "t", "column 'partition' must be int, not string"),
    (_schema(value=StringType(), headers=ArrayType(StringType())), "t",
     "column 'headers' must be array<struct<key:string,value:binary>>, not array<string>"),
    (_schema(value=StringType(), headers=ArrayType(StructType([StructField("key", BinaryType()),
                                                                StructField("value", BinaryType())]))), "t",
     "column 'headers' must be"),
    (_schema(value=StringType()), None, "no topic: set .option('topic', 'name') or add a string column 'topic'"),
])
def test_bad_schemas(schema: StructType, topic: Any, message: str) -> None:
    with pytest.raises(SinkSchemaError) as info:
        check_schema(schema, topic)
    assert message in str(info.value)


def test_all_schema_problems_in_one_message() -> None:
    with pytest.raises(SinkSchemaError) as info:
        check_schema(_schema(value=LongType(), key=LongType()), "t")
    assert "column 'value' must be" in str(info.value) and "column 'key' must be" in str(info.value)


# -- Arrow -> groups -----------------------------------------------------------------------------------

def _batch(**cols: Any) -> Any:
    return pa.RecordBatch.from_pydict(cols)


def test_groups_single_topic_and_partition_column() -> None:
    rb = pa.RecordBatch.from_arrays(
        [pa.array(["a", "b", "c", "d", "e"]), pa.array([b"k1", None, b"k3", b"k4", b"k5"]),
         pa.array([1, 0, 1, None, 0], pa.int32()),
         pa.array([[("h", b"1")], None, [], [("x", None), ("y", b"2")], None], ARROW_HEADERS)],
        names=["value", "key", "partition", "headers"])
    got = list(groups(rb, ColumnPlan(True, False, True, True, "t")))
    assert [(g.topic, g.partition, g.values, g.keys, g.headers) for g in got] == [
        ("t", 0, [b"b", b"e"], [None, b"k5"], None),
        ("t", 1, [b"a", b"c"], [b"k1", b"k3"], [[("h", b"1")], None]),
        ("t", None, [b"d"], [b"k4"], [[("x", None), ("y", b"2")]]),
    ]
    assert sum(g.nbytes for g in got) == 5 + 8 + (1 + 1) + (1 + 1 + 1)


def test_groups_by_topic_column_keep_row_order() -> None:
    rb = _batch(value=[f"v{i}".encode() for i in range(6)], topic=["x", "y", "x", "z", "y", "x"])
    got = {g.topic: g.values for g in groups(rb, ColumnPlan(False, True, False, False, None))}
    assert got == {"x": [b"v0", b"v2", b"v5"], "y": [b"v1", b"v4"], "z": [b"v3"]}


def test_groups_one_partition_value_and_all_null_partitions() -> None:
    plan = ColumnPlan(False, False, True, False, "t")
    one = list(groups(_batch(value=["a", "b"], partition=pa.array([3, 3], pa.int64())), plan))
    assert [(g.partition, g.values) for g in one] == [(3, [b"a", b"b"])]
    none = list(groups(_batch(value=["a", None], partition=pa.array([None, None], pa.int32())), plan))
    assert [(g.partition, g.values) for g in none] == [(None, [b"a", None])]


def test_groups_of_a_sliced_batch() -> None:
    rb = pa.RecordBatch.from_arrays(
        [pa.array([f"v{i}" for i in range(10)]),
         pa.array([[("i", str(i).encode())] if i % 3 else None for i in range(10)], ARROW_HEADERS),
         pa.array([i % 2 for i in range(10)], pa.int32())],
        names=["value", "headers", "partition"]).slice(3, 5)
    got = {g.partition: (g.values, g.headers) for g in groups(rb, ColumnPlan(False, False, True, True, "t"))}
    assert got == {
        0: ([b"v4", b"v6"], [[("i", b"4")], None]),
        1: ([b"v3", b"v5", b"v7"], [None, [("i", b"5")], [("i", b"7")]]),
    }


def test_null_topic_without_topic_option_is_an_error() -> None:
    with pytest.raises(SinkDataError, match="1 row\\(s\\) have a null topic"):
        list(groups(_batch(value=["a", "b"], topic=["x", None]), ColumnPlan(False, True, False, False, None)))


def test_rows_to_batches_for_pyspark_4_0_stream_writers() -> None:
    from pyspark.sql import Row

    schema = _schema(value=StringType(), key=BinaryType(), headers=HEADERS_T, other=DoubleType())
    rows = [Row(value="a", key=b"k", headers=[Row(key="h", value=b"1")], other=1.0),
            Row(value=None, key=None, headers=None, other=2.0)]
    (rb,) = list(_rows_to_batches(iter(rows), schema))
    assert rb.schema.names == ["value", "key", "headers"]
    assert rb.to_pylist() == [{"value": "a", "key": b"k", "headers": [{"key": "h", "value": b"1"}]},
                              {"value": None, "key": None, "headers": None}]


# -- producers and writers, without Spark ----------------------------------------------------------------

def test_summarize_commit_messages() -> None:
    a = SinkCommitMessage(3, 30, {("t", 0): (0, 2)}, 0)
    b = SinkCommitMessage(2, 20, {("t", 0): (3, 4), ("t", 1): (0, 1)}, 1)
    assert summarize([a, None, b]) == (5, 50, {("t", 0): (0, 4), ("t", 1): (0, 1)})


def test_writer_write_returns_rows_bytes_and_offsets(tansu: Any) -> None:
    topic = f"spark-unit-{uuid.uuid4().hex[:8]}"
    tansu.create_topic(topic, 3)
    opts = parse_options(dict(BOOT, **{"kafka.bootstrap.servers": tansu.bootstrap}))
    plan = ColumnPlan(True, True, True, False, None)
    writer = KafkaBatchWriter(opts, plan)
    n = 25_000
    batches = [_batch(value=[b"v%06d" % i for i in range(s, min(n, s + 10_000))],
                      key=[b"k%d" % i for i in range(s, min(n, s + 10_000))],
                      topic=[topic] * (min(n, s + 10_000) - s),
                      partition=pa.array([i % 3 for i in range(s, min(n, s + 10_000))], pa.int32()))
               for s in range(0, n, 10_000)]
    before = _producers.cached_count()
    msg = writer.write(iter(batches))
    assert isinstance(msg, SinkCommitMessage)
    assert msg.rows == n
    assert msg.bytes == sum(len(b"v%06d" % i) + len(b"k%d" % i) for i in range(n))
    per_partition = {p: len(range(p, n, 3)) for p in range(3)}
    assert msg.offsets == {(topic, p): (0, c - 1) for p, c in per_partition.items()}
    # a second task in the same process reuses the producer and continues the offsets
    msg2 = KafkaStreamWriter(opts, plan, _schema(value=BinaryType())).write(iter(batches[:1]))
    assert msg2.rows == 10_000
    assert msg2.offsets[(topic, 0)][0] == per_partition[0]
    assert _producers.cached_count() == before + 1
    _producers.close_all()
    assert _producers.cached_count() == 0


def test_writer_failure_names_the_cause_and_drops_the_producer(tansu: Any) -> None:
    opts = parse_options({"kafka.bootstrap.servers": tansu.bootstrap, "topic": f"no-such-{uuid.uuid4().hex[:6]}",
                          "kafka.allow.auto.create.topics": "false", "kafka.max.block.ms": "1000"})
    writer = KafkaBatchWriter(opts, ColumnPlan(False, False, False, False, opts.topic))
    with pytest.raises(SinkWriteError) as info:
        writer.write(iter([_batch(value=[b"x"])]))
    text = str(info.value)
    assert "KafkaTimeoutError" in text or "UnknownTopicOrPartition" in text, text
    assert str(opts.topic) in text and tansu.bootstrap in text
    assert _producers.cached_count() == 0


def test_producer_cache_is_keyed_by_settings() -> None:
    a: List[Any] = []
    try:
        a.append(_producers.get_producer({"bootstrap.servers": "127.0.0.1:9", "linger.ms": "1"}))
        a.append(_producers.get_producer({"linger.ms": "1", "bootstrap.servers": "127.0.0.1:9"}))
        a.append(_producers.get_producer({"bootstrap.servers": "127.0.0.1:9", "linger.ms": "2"}))
        assert a[0] is a[1] and a[0] is not a[2]
        assert _producers.cached_count() == 2
        _producers.discard_producer({"bootstrap.servers": "127.0.0.1:9", "linger.ms": "2"})
        assert _producers.cached_count() == 1
    finally:
        _producers.close_all(0)
    assert _producers.cached_count() == 0


# -- the columnar path ---------------------------------------------------------------------------------

def _column_rows(col: Any) -> Any:
    from kproducer.protocol.columns import column_item

    return None if col is None else [column_item(col, i) for i in range(col.length)]


@pytest.mark.parametrize("sliced", [False, True])
def test_column_groups_hold_what_groups_hold(sliced: bool) -> None:
    from kproducer.spark._arrow import column_groups

    n = 40
    rb = pa.RecordBatch.from_arrays(
        [pa.array([None if i % 7 == 0 else f"v{i}" for i in range(n)]),
         pa.array([None if i % 3 == 0 else b"k%d" % i for i in range(n)], pa.large_binary()),
         pa.array([None if i % 5 == 0 else i % 4 for i in range(n)], pa.int64()),
         pa.array(["x" if i % 2 else "y" for i in range(n)])],
        names=["value", "key", "partition", "topic"])
    if sliced:
        rb = rb.slice(3, 30)
    for plan in (ColumnPlan(True, True, True, False, None), ColumnPlan(False, False, False, False, "t"),
                 ColumnPlan(True, False, True, False, "t")):
        rows = [(g.topic, g.partition, g.values, g.keys, g.nbytes) for g in groups(rb, plan)]
        cols = [(c.topic, c.partition, _column_rows(c.values), _column_rows(c.keys), c.nbytes)
                for c in column_groups(rb, plan)]
        assert cols == rows
        assert len(rows) == (1 if plan.topic == "t" and not plan.has_partition else len({(r[0], r[1]) for r in rows}))
        assert plan.topic == "t" and not plan.has_partition or len(rows) > 1


def test_column_groups_all_null_keys_mean_no_keys() -> None:
    from kproducer.spark._arrow import column_groups

    rb = _batch(value=["a", "b"], key=pa.array([None, None], pa.binary()))
    (g,) = column_groups(rb, ColumnPlan(True, False, False, False, "t"))
    assert g.keys is None and _column_rows(g.values) == [b"a", b"b"] and g.rows == 2 and g.nbytes == 2


@pytest.mark.parametrize("headers", [False, True])
def test_writer_takes_the_columnar_path_unless_there_are_headers(tansu: Any, monkeypatch: Any,
                                                                 headers: bool) -> None:
    from kproducer.producer.columnar import send_columns as real

    calls: List[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("kproducer.spark._sink.send_columns", counting)
    topic = f"spark-unit-{uuid.uuid4().hex[:8]}"
    tansu.create_topic(topic, 1)
    opts = parse_options({"kafka.bootstrap.servers": tansu.bootstrap, "topic": topic})
    cols: Dict[str, Any] = {"value": [b"a", None, b"c"]}
    if headers:
        cols["headers"] = pa.array([[("h", b"1")], None, []], ARROW_HEADERS)
    msg = KafkaBatchWriter(opts, ColumnPlan(False, False, False, headers, topic)).write(iter([_batch(**cols)]))
    assert msg.rows == 3 and msg.offsets == {(topic, 0): (0, 2)}
    assert calls == ([] if headers else [1])
    off = parse_options({"kafka.bootstrap.servers": tansu.bootstrap, "topic": topic, "kproducer.columnar": "false"})
    calls.clear()
    KafkaBatchWriter(off, ColumnPlan(False, False, False, False, topic)).write(iter([_batch(value=[b"z"])]))
    assert calls == []
    _producers.close_all()


def test_columnar_option() -> None:
    assert parse_options(dict(BOOT)).columnar is True
    assert parse_options(dict(BOOT, **{"kproducer.columnar": "False"})).columnar is False
    assert parse_options(dict(BOOT, **{"kproducer.columnar": " true "})).columnar is True
    with pytest.raises(ConfigError, match="'kproducer.columnar' must be true or false, got 'maybe'"):
        parse_options(dict(BOOT, **{"kproducer.columnar": "maybe"}))
