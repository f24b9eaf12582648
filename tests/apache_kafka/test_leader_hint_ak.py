"""KIP-951 against Apache Kafka: a partition's leadership moves while kproducer produces to it (Kafka's own
ReassignPartitionsCommand reorders the replicas, LeaderElectionCommand elects the new preferred leader; no
broker stops, so the session's shared cluster serves). The old leader refuses the next Produce with
NOT_LEADER_OR_FOLLOWER and names the new leader (current_leader + node_endpoints, Produce v10+); kproducer
moves the partition there from that hint and retries at once, before any metadata answer, and loses nor
duplicates nothing (read back with kafka-python)."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Callable, List, Tuple

import pytest

from kproducer import Producer
from tests.readback import consume

pytestmark = pytest.mark.apache_kafka


def move_leadership(kafka: Any, topic: str, partition: int, new_leader: int) -> None:
    """Make ``new_leader`` (a replica in sync) the preferred replica, then elect it."""
    replicas = kafka.partitions(topic)[partition].replicas
    order = [new_leader] + [b for b in replicas if b != new_leader]
    path = os.path.join(kafka.directory, f"reassign-{topic}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "partitions": [{"topic": topic, "partition": partition, "replicas": order}]}, f)
    kafka.run_tool("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "--bootstrap-server",
                   kafka.bootstrap_servers, "--reassignment-json-file", path, "--execute")
    kafka.run_tool("org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", kafka.bootstrap_servers,
                   "--election-type", "PREFERRED", "--topic", topic, "--partition", str(partition))
    deadline = time.monotonic() + 60
    while kafka.leader(topic, partition) != new_leader:
        assert time.monotonic() < deadline, f"{topic}-{partition}: leadership did not move to {new_leader}"
        time.sleep(0.1)


def test_leader_hint_moves_the_partition_without_waiting_for_metadata(
        apache_kafka: Any, ak_topic: Callable[..., str], caplog: pytest.LogCaptureFixture) -> None:
    # three partitions, whose leaders are the three brokers (as Kafka spreads them): the producer is connected
    # to each, so the retry on the new leader needs no new connection (that would take a round trip in which
    # the metadata answer could come first); only partition 0 moves, and only it is produced to meanwhile
    topic = ak_topic(partitions=3)
    parts = apache_kafka.partitions(topic)
    old_leader = parts[0].leader
    others = [parts[i].leader for i in (1, 2) if parts[i].leader != old_leader and parts[i].leader in parts[0].isr]
    assert others, f"Kafka placed every leader of {topic} on broker {old_leader}: {parts}"
    new_leader = others[0]
    caplog.set_level(logging.DEBUG, logger="kproducer.network.metadata")
    events: List[Tuple[str, int]] = []  # in the network thread's order: ("Produce"|"Metadata", node), ("hint"|..)
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers, linger_ms=5, enable_idempotence=True,
                  acks="all") as p:
        client, md = p._client, p._metadata
        send, update, hint = client.send, md.update, md.update_partition_leadership

        def traced_send(request: Any, now_ms: float) -> None:
            events.append((request.api.name, request.node_id))
            send(request, now_ms)

        def traced_update(*args: Any, **kwargs: Any) -> None:
            events.append(("metadata-update", -1))
            update(*args, **kwargs)

        def traced_hint(*args: Any, **kwargs: Any) -> Any:
            updated = hint(*args, **kwargs)
            events.append(("hint-applied" if updated else "hint-ignored", -1))
            return updated

        client.send = traced_send  # type: ignore[method-assign]
        md.update = traced_update  # type: ignore[method-assign]
        md.update_partition_leadership = traced_hint  # type: ignore[method-assign]

        for part in range(3):
            p.send(topic, b"before", partition=part).get(30)
        assert md.cluster.leaders[(topic, 0)] == old_leader
        # keep producing while the leadership moves (bounded), then once more after it moved
        sent: List[Any] = []
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set() and i < 20000:
                sent.append(p.send(topic, b"v%d" % i, partition=0))
                i += 1
                time.sleep(0.005)

        producer = threading.Thread(target=produce)
        producer.start()
        try:
            move_leadership(apache_kafka, topic, 0, new_leader)
            after = len(sent)
            deadline = time.monotonic() + 60
            while len(sent) < after + 50 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            producer.join(30)
        p.flush(60)
        offsets = [f.get(0).offset for f in sent]
        assert md.cluster.leaders[(topic, 0)] == new_leader
    hints = [r.getMessage() for r in caplog.records if "from a produce response" in r.getMessage()]
    assert any(f"leader is now broker {new_leader}" in h for h in hints), hints
    # the retry went to the new leader before any metadata answer came back
    applied = events.index(("hint-applied", -1))
    first_to_new = events.index(("Produce", new_leader), applied)
    assert ("metadata-update", -1) not in events[applied:first_to_new], events[applied:first_to_new + 1]
    # nothing lost, nothing written twice
    assert len(set(offsets)) == len(sent)
    got = consume(apache_kafka.bootstrap_servers, topic, [0], expected=len(sent) + 1)
    assert sorted(m.value for m in got) == sorted([b"before"] + [b"v%d" % i for i in range(len(sent))])
