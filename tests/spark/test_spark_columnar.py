"""The sink's columnar path (keys and values encoded straight from the Arrow buffers) end to end: byte-exact
records read back with kafka-python, the same records as the per-row path (``kproducer.columnar=false``), and
rows with headers falling back to the per-row path. One Spark task per write (coalesce(1)): tansu 0.6 races when
two producers append to one partition at once (see test_spark_sink.py), and one task makes the order within a
partition the row order."""
from __future__ import annotations

import hashlib
import uuid
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from kproducer.producer.partitioner import murmur2

pytestmark = [pytest.mark.spark]

PARTITIONS = 6
Rec = Tuple[Optional[bytes], Optional[bytes], List[Tuple[str, bytes]]]


def _topic(tansu: Any, prefix: str) -> str:
    name = f"spark-col-{prefix}-{uuid.uuid4().hex[:10]}"
    tansu.create_topic(name, PARTITIONS)
    return name


def _write(df: Any, tansu: Any, topic: str, columnar: bool = True) -> None:
    (df.write.format("kproducer").mode("append")
       .option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", topic)
       .option("kproducer.columnar", str(columnar).lower())
       .option("kafka.max.in.flight.requests.per.connection", "1").save())


def _by_partition(got: List[Any]) -> Dict[int, List[Rec]]:
    out: Dict[int, List[Tuple[int, Rec]]] = defaultdict(list)
    for partition, offset, key, value, headers in got:
        out[partition].append((offset, (key, value, headers)))
    return {p: [r for _o, r in sorted(rows)] for p, rows in out.items()}


def _subsequence(part: List[Rec], whole: List[Rec]) -> bool:
    """``part`` appears in ``whole`` in its order."""
    it = iter(whole)
    return all(any(r == w for w in it) for r in part)


# row id -> what the DataFrame below holds
def _key(i: int) -> Optional[bytes]:
    return None if i % 5 == 0 else f"k{i % 97}".encode()


def _value(i: int) -> Optional[bytes]:
    if i % 7 == 0:
        return None
    if i % 11 == 0:
        return b""
    return hashlib.sha256(str(i).encode()).digest()  # any bytes, not UTF-8


def _partition(i: int) -> Optional[int]:
    return None if i % 4 == 0 and i % 5 != 0 else i % PARTITIONS  # null partition only where a key decides


def _frame(spark: Any, n: int) -> Any:
    return spark.range(0, n, numPartitions=2).selectExpr(
        "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('k', id % 97) END AS key",
        "CASE WHEN id % 7 = 0 THEN NULL WHEN id % 11 = 0 THEN X'' "
        "ELSE unhex(sha2(CAST(id AS STRING), 256)) END AS value",
        f"CASE WHEN id % 4 = 0 AND id % 5 != 0 THEN NULL ELSE CAST(id % {PARTITIONS} AS INT) END AS partition",
    ).coalesce(1)


def test_columnar_records_are_byte_exact_and_match_the_row_path(spark: Any, tansu: Any,
                                                               consume: Callable[..., Any]) -> None:
    n = 30_000
    df = _frame(spark, n)
    columnar, rows = _topic(tansu, "c"), _topic(tansu, "r")
    _write(df, tansu, columnar)
    _write(df, tansu, rows, columnar=False)
    got = _by_partition(consume(tansu.bootstrap, columnar, PARTITIONS, n))
    explicit: Dict[int, List[Rec]] = defaultdict(list)
    keyed: Dict[int, List[Rec]] = defaultdict(list)
    for i in range(n):
        key, part = _key(i), _partition(i)
        if part is None:
            assert key is not None
            keyed[(murmur2(key) & 0x7FFFFFFF) % PARTITIONS].append((key, _value(i), []))  # the Java client's choice
        else:
            explicit[part].append((key, _value(i), []))
    assert sum(len(v) for v in got.values()) == n
    for part in range(PARTITIONS):
        # each Arrow batch sends its rows with a partition before those the partitioner places: within a
        # partition, each kind keeps the row order
        recs = got[part]
        assert sorted(recs, key=repr) == sorted(explicit[part] + keyed[part], key=repr)
        assert _subsequence(explicit[part], recs)
        assert _subsequence(keyed[part], recs)
    # the per-row path writes the same records in the same order
    assert _by_partition(consume(tansu.bootstrap, rows, PARTITIONS, n)) == got


def test_columnar_keyless_rows_and_string_values(spark: Any, tansu: Any, consume: Callable[..., Any]) -> None:
    n = 20_000
    topic = _topic(tansu, "u")
    df = spark.range(0, n, numPartitions=2).selectExpr(
        "CASE WHEN id % 13 = 0 THEN NULL ELSE concat('v-', id, '-é') END AS value").coalesce(1)
    _write(df, tansu, topic)
    got = consume(tansu.bootstrap, topic, PARTITIONS, n)
    assert len(got) == n
    assert all(key is None and headers == [] for _p, _o, key, _v, headers in got)
    values = [v for _p, _o, _k, v, _h in got]
    expected = [None if i % 13 == 0 else f"v-{i}-é".encode() for i in range(n)]
    assert sorted(values, key=lambda v: (v is not None, v or b"")) == \
        sorted(expected, key=lambda v: (v is not None, v or b""))
    # sticky: runs of rows go to one partition, in row order within it
    for part, recs in _by_partition(got).items():
        ids = [int(v.split(b"-")[1]) for _k, v, _h in recs if v is not None]
        assert ids == sorted(ids), f"partition {part}: rows in order"


def test_rows_with_headers_take_the_row_path(spark: Any, tansu: Any, consume: Callable[..., Any]) -> None:
    n = 5_000
    topic = _topic(tansu, "h")
    df = spark.range(0, n, numPartitions=2).selectExpr(
        "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('k', id) END AS key",
        "CASE WHEN id % 7 = 0 THEN NULL ELSE CAST(concat('v', id) AS BINARY) END AS value",
        f"CAST(id % {PARTITIONS} AS INT) AS partition",
        "CASE WHEN id % 3 = 0 THEN NULL ELSE array(named_struct('key', 'id', 'value', "
        "CAST(CAST(id AS STRING) AS BINARY))) END AS headers",
    ).coalesce(1)
    _write(df, tansu, topic)
    got = _by_partition(consume(tansu.bootstrap, topic, PARTITIONS, n))
    expected: Dict[int, List[Rec]] = defaultdict(list)
    for i in range(n):
        expected[i % PARTITIONS].append((None if i % 5 == 0 else f"k{i}".encode(),
                                         None if i % 7 == 0 else f"v{i}".encode(),
                                         [] if i % 3 == 0 else [("id", str(i).encode())]))
    assert got == dict(expected)
