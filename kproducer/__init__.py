"""kproducer: a fast, complete Kafka producer for Python.

>>> from kproducer import Producer
>>> with Producer(bootstrap_servers="127.0.0.1:9092") as p:      # doctest: +SKIP
...     p.send("topic", value=b"hello").get(timeout=10)
"""
from . import errors
from ._version import __version__
from .errors import KafkaError
from .network.metadata import PartitionInfo
from .producer.consumer_group import ConsumerGroupMetadata, OffsetAndMetadata
from .producer.future import FutureRecordMetadata, RecordMetadata
from .producer.kafka_producer import Producer
from .producer.transaction_handle import TransactionHandle

__all__ = ["ConsumerGroupMetadata", "FutureRecordMetadata", "KafkaError", "OffsetAndMetadata", "PartitionInfo",
           "Producer", "RecordMetadata", "TransactionHandle", "__version__", "errors"]
