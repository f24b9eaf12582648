"""kproducer: a fast, complete Kafka producer for Python.

>>> from kproducer import Producer
>>> with Producer(bootstrap_servers="127.0.0.1:9092") as p:      # doctest: +SKIP
...     p.send("topic", value=b"hello").get(timeout=10)
"""
__version__ = "0.1.0"

from . import errors  # noqa: E402
from .errors import KafkaError  # noqa: E402
from .network.metadata import PartitionInfo  # noqa: E402
from .producer.consumer_group import ConsumerGroupMetadata, OffsetAndMetadata  # noqa: E402
from .producer.future import FutureRecordMetadata, RecordMetadata  # noqa: E402
from .producer.kafka_producer import Producer  # noqa: E402
from .producer.transaction_handle import TransactionHandle  # noqa: E402

__all__ = ["ConsumerGroupMetadata", "FutureRecordMetadata", "KafkaError", "OffsetAndMetadata", "PartitionInfo",
           "Producer", "RecordMetadata", "TransactionHandle", "__version__", "errors"]
