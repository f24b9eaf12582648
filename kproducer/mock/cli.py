"""``kproducer mock-cluster``: run a MockCluster until Ctrl-C.

``main(argv)`` parses its own arguments; a parent CLI can instead call :func:`add_arguments` on its
sub-parser and pass the parsed namespace to :func:`serve_forever`.
"""
from __future__ import annotations

import argparse
import logging
import sys
import threading
from typing import List, Optional, Sequence, Tuple

from .cluster import MockCluster


def topic_spec(text: str) -> Tuple[str, int]:
    """``"name:partitions"`` (or just ``"name"``, one partition)."""
    name, sep, count = text.rpartition(":")
    if not sep:
        return text, 1
    try:
        partitions = int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad topic {text!r}: use NAME:PARTITIONS") from None
    if not name or partitions < 1:
        raise argparse.ArgumentTypeError(f"bad topic {text!r}: use NAME:PARTITIONS with PARTITIONS >= 1")
    return name, partitions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    parser.add_argument("--topic", dest="topics", action="append", type=topic_spec, default=[],
                        metavar="NAME:PARTITIONS", help="create a topic (repeatable)")
    parser.add_argument("--port", type=int, default=0,
                        help="first port; brokers use consecutive ports (default: free ports)")
    parser.add_argument("--auto-create-topics", action="store_true",
                        help="create unknown topics on Metadata requests")
    parser.add_argument("--default-partitions", type=int, default=1,
                        help="partitions of auto-created topics (default 1)")
    parser.add_argument("--processors", type=int, default=2, help="network threads per broker")
    parser.add_argument("--handlers", type=int, default=2, help="request handler threads per broker")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every connection and request")


def build_cluster(args: argparse.Namespace) -> MockCluster:
    """A cluster from parsed arguments (a caller's namespace may lack the optional ones)."""
    brokers = int(getattr(args, "brokers", 3))
    first_port = int(getattr(args, "port", 0) or 0)
    ports: Optional[List[int]] = None
    if first_port:
        ports = [first_port + i for i in range(brokers)]
    return MockCluster(
        brokers,
        num_processors=int(getattr(args, "processors", 2)),
        num_handlers=int(getattr(args, "handlers", 2)),
        auto_create_topics=bool(getattr(args, "auto_create_topics", False)),
        default_partitions=int(getattr(args, "default_partitions", 1)),
        ports=ports,
    )


def serve_forever(args: argparse.Namespace, stop: Optional[threading.Event] = None) -> int:
    """Start the cluster, print its bootstrap servers and serve until Ctrl-C (or ``stop`` is set)."""
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    topics = [topic_spec(t) if isinstance(t, str) else t for t in getattr(args, "topics", None) or []]
    cluster = build_cluster(args)
    waiter = stop or threading.Event()
    try:
        cluster.start()
        for name, partitions in topics:
            cluster.create_topic(name, partitions)
        print(cluster.bootstrap_servers, flush=True)
        for name, partitions in topics:
            print(f"topic {name}: {partitions} partitions", flush=True)
        while not waiter.wait(0.5):
            pass
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr, flush=True)
    finally:
        cluster.close()
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="kproducer mock-cluster",
                                     description="Run an in-process Kafka-protocol mock cluster.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.brokers < 1:
        parser.error("--brokers must be at least 1")
    try:
        return serve_forever(args)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
