"""Check a DataFrame's schema against the kafka-sink contract, on the driver."""
from __future__ import annotations

from typing import List, NamedTuple, Optional

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

VALUE, KEY, TOPIC, PARTITION, HEADERS = "value", "key", "topic", "partition", "headers"
HEADERS_TYPE = "array<struct<key:string,value:binary>>"


class SinkSchemaError(ValueError):
    """The DataFrame does not fit the kafka-sink contract (a missing value column, a column of the
    wrong type, no topic)."""


class ColumnPlan(NamedTuple):
    """Which contract columns the DataFrame has (their presence is all the writers need)."""

    has_key: bool
    has_topic: bool
    has_partition: bool
    has_headers: bool
    #: the option topic, which wins over the topic column
    topic: Optional[str]


def _bytes_like(t: DataType) -> bool:
    return isinstance(t, (StringType, BinaryType))


def _describe(t: DataType) -> str:
    return str(t.simpleString())


def check_schema(schema: StructType, option_topic: Optional[str]) -> ColumnPlan:
    """Validate ``schema``; raise :class:`SinkSchemaError` naming the column and what it should be.

    Columns other than value, key, topic, partition and headers are ignored (as Spark's kafka sink
    does) -- drop them before writing to save the work of shipping them to the sink."""
    fields = {f.name: f for f in schema.fields}
    present = ", ".join(f"{f.name}: {_describe(f.dataType)}" for f in schema.fields) or "none"
    if VALUE not in fields:
        hint = ""
        for name in fields:
            if name.lower() == VALUE:
                hint = f" (there is a column {name!r}: column names are case-sensitive here)"
        raise SinkSchemaError(f"required column 'value' (string or binary) not found{hint}; the DataFrame has "
                              f"columns: {present}. Select or alias one, e.g. df.selectExpr('to_json(struct(*)) "
                              "AS value')")
    problems: List[str] = []
    t = fields[VALUE].dataType
    if not _bytes_like(t):
        problems.append(f"column 'value' must be string or binary, not {_describe(t)} (cast it, or serialize it "
                        "with to_json/to_avro)")
    if KEY in fields and not _bytes_like(fields[KEY].dataType):
        problems.append(f"column 'key' must be string or binary, not {_describe(fields[KEY].dataType)}")
    if TOPIC in fields and not isinstance(fields[TOPIC].dataType, StringType) and option_topic is None:
        problems.append(f"column 'topic' must be string, not {_describe(fields[TOPIC].dataType)}")
    if PARTITION in fields and not isinstance(fields[PARTITION].dataType,
                                              (IntegerType, LongType, ShortType, ByteType)):
        problems.append(f"column 'partition' must be int, not {_describe(fields[PARTITION].dataType)}")
    if HEADERS in fields:
        h = fields[HEADERS].dataType
        ok = False
        if isinstance(h, ArrayType) and isinstance(h.elementType, StructType):
            inner = {f.name: f.dataType for f in h.elementType.fields}
            ok = (set(inner) == {"key", "value"} and isinstance(inner["key"], StringType)
                  and _bytes_like(inner["value"]))
        if not ok:
            problems.append(f"column 'headers' must be {HEADERS_TYPE}, not {_describe(h)}")
    if problems:
        raise SinkSchemaError("the DataFrame does not fit the kafka sink: " + "; ".join(problems))
    if option_topic is None and TOPIC not in fields:
        raise SinkSchemaError("no topic: set .option('topic', 'name') or add a string column 'topic'; the DataFrame "
                              f"has columns: {present}")
    return ColumnPlan(KEY in fields, TOPIC in fields and option_topic is None, PARTITION in fields,
                      HEADERS in fields, option_topic)


__all__ = ["ColumnPlan", "HEADERS_TYPE", "SinkSchemaError", "check_schema"]
