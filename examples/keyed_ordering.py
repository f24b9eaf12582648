"""Records with the same key go to the same partition, in the order they were sent — even with retries
(idempotence is on by default). This example sends numbered events for a few keys and checks the order
in which they were stored.

    python examples/keyed_ordering.py                         # embedded MockCluster
    python examples/keyed_ordering.py --bootstrap host:9092   # real cluster (checks futures' offsets)
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

from kproducer import Producer
from kproducer.mock import MockCluster
from kproducer.producer.partitioner import partition_for_key


def produce(servers: str, topic: str, keys: List[bytes], per_key: int) -> Dict[bytes, List[Tuple[int, int]]]:
    """Send ``per_key`` events per key; return each key's (partition, offset) in send order."""
    placed: Dict[bytes, List[Tuple[int, int]]] = defaultdict(list)
    with Producer(bootstrap_servers=servers, linger_ms=5) as producer:
        futures = []
        for seq in range(per_key):
            for key in keys:
                futures.append((key, producer.send(topic, value=b"%d" % seq, key=key)))
        for key, fut in futures:
            md = fut.get(timeout=30)
            placed[key].append((md.partition, md.offset))
    return placed


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--per-key", type=int, default=1000)
    args = parser.parse_args(argv)
    keys = [b"customer-%d" % i for i in range(8)]

    cluster = None
    if args.bootstrap:
        servers = args.bootstrap
    else:
        cluster = MockCluster(num_brokers=3).start()
        cluster.create_topic(args.topic, partitions=6)
        servers = cluster.bootstrap_servers
    try:
        placed = produce(servers, args.topic, keys, args.per_key)
        ok = True
        for key, spots in placed.items():
            partitions = {p for p, _ in spots}
            offsets = [o for _, o in spots]
            in_order = offsets == sorted(offsets)
            java_partition = partition_for_key(key, 6)
            ok &= in_order and partitions == {java_partition}
            print(f"{key.decode()}: partition {partitions} (Java's murmur2 says {java_partition}), "
                  f"{len(spots)} events {'in order' if in_order else 'OUT OF ORDER'}")
        if cluster is not None:
            # read back what the broker stored: values per key must be 0, 1, 2, ...
            for key in keys:
                stored = [int(r.value) for p in range(6) for r in cluster.records(args.topic, p) if r.key == key]
                ok &= stored == list(range(args.per_key))
        print("all keys kept their order" if ok else "ORDER BROKEN")
        return 0 if ok else 1
    finally:
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    raise SystemExit(main())
