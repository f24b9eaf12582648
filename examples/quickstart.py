"""Quickstart: produce records with callbacks and with blocking futures, and print where they landed.

    python examples/quickstart.py                         # on an embedded MockCluster (no broker needed)
    python examples/quickstart.py --bootstrap host:9092   # on a real cluster (the topic must exist or
                                                          # the broker must auto-create it)
"""
from __future__ import annotations

import argparse
import contextlib
import threading
from typing import Iterator, List, Optional

from kproducer import Producer, RecordMetadata
from kproducer.mock import MockCluster


@contextlib.contextmanager
def cluster_or(bootstrap: Optional[str], topic: str) -> Iterator[str]:
    """Yield bootstrap servers: the given ones, or those of a 3-broker in-process MockCluster."""
    if bootstrap:
        yield bootstrap
        return
    with MockCluster(num_brokers=3) as cluster:
        cluster.create_topic(topic, partitions=6)
        print(f"started an embedded MockCluster at {cluster.bootstrap_servers}")
        yield cluster.bootstrap_servers


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="host:port,... of a real cluster (default: embedded MockCluster)")
    parser.add_argument("--topic", default="quickstart")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args(argv)

    with cluster_or(args.bootstrap, args.topic) as servers:
        with Producer(bootstrap_servers=servers, linger_ms=5, acks="all") as producer:
            # 1. fire-and-forget with a callback (it runs on the producer's network thread)
            lock = threading.Lock()
            delivered: List[RecordMetadata] = []

            def on_delivery(metadata: Optional[RecordMetadata], error: Optional[BaseException]) -> None:
                with lock:
                    if error is not None:
                        print(f"delivery failed: {error}")
                    else:
                        assert metadata is not None
                        delivered.append(metadata)

            for i in range(args.count):
                producer.send(args.topic, value=f"hello {i}".encode(), key=f"user-{i % 3}".encode(),
                              headers=[("source", b"quickstart")], callback=on_delivery)
            producer.flush(timeout=30)
            for md in sorted(delivered, key=lambda m: (m.partition, m.offset)):
                print(f"callback: {md.topic}-{md.partition} @ offset {md.offset}")

            # 2. blocking: wait for each record's metadata
            future = producer.send(args.topic, value=b"a record we wait for", key=b"user-0")
            md = future.get(timeout=10)
            print(f"future.get(): {md.topic}-{md.partition} @ offset {md.offset} (timestamp {md.timestamp})")

            print(f"{len(delivered) + 1} records delivered; metrics: "
                  f"{producer.metrics()['record-ack-total']} acknowledged")
    return 0 if len(delivered) == args.count else 1


if __name__ == "__main__":
    raise SystemExit(main())
