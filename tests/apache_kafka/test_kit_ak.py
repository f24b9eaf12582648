"""kproducer.testing.ApacheKafka itself: the cluster starts, serves every listener it was asked for, creates
topics, reports leaders, and its admin helpers work. Read back with kafka-python and confluent-kafka."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from kproducer import Producer
from tests.readback import consume

pytestmark = pytest.mark.apache_kafka


def test_cluster_facts(apache_kafka: Any) -> None:
    assert apache_kafka.broker_ids == [1, 2, 3]
    assert apache_kafka.version.startswith("4.")
    assert len(apache_kafka.bootstrap_servers.split(",")) == 3
    assert set(apache_kafka.pids()) == {1, 2, 3}
    md = apache_kafka.metadata([])
    assert sorted(b["node_id"] for b in md["brokers"]) == [1, 2, 3]
    with pytest.raises(ValueError, match="no broker 7"):
        apache_kafka.kill(7)


def test_create_topic_and_leader(apache_kafka: Any, ak_topic: Callable[..., str]) -> None:
    topic = ak_topic(partitions=4, replication_factor=3, config={"min.insync.replicas": "2"})
    parts = apache_kafka.partitions(topic)
    assert sorted(parts) == [0, 1, 2, 3]
    for state in parts.values():
        assert sorted(state.replicas) == [1, 2, 3]
        assert state.leader in (1, 2, 3)
        assert apache_kafka.leader(topic, state.partition) == state.leader


def test_produce_and_read_back_with_kafka_python(apache_kafka: Any, ak_topic: Callable[..., str]) -> None:
    topic = ak_topic(partitions=3)
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers) as p:
        futures = [p.send(topic, f"v{i}".encode(), key=f"k{i % 5}".encode()) for i in range(200)]
        p.flush(30)
        offsets = {(f.get(0).partition, f.get(0).offset) for f in futures}
    assert len(offsets) == 200
    got = consume(apache_kafka.bootstrap_servers, topic, [0, 1, 2], expected=200)
    assert sorted(m.value for m in got) == sorted(f"v{i}".encode() for i in range(200))


def test_command_line_runs_a_cluster_until_interrupted(tmp_path: Any) -> None:
    """``kproducer apache-kafka --brokers 1 --topic t:2``: the first line is the bootstrap servers; the topic is
    there; Ctrl-C (SIGINT) stops it with status 0 and removes its directory."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import require_apache_kafka

    require_apache_kafka()
    # started with SIGINT ignored, as a shell's background job is (CI ran it so once and Ctrl-C did nothing)
    proc = subprocess.Popen([sys.executable, "-m", "kproducer", "apache-kafka", "--brokers", "1", "--topic", "cli:2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().strip()
        lines = [proc.stdout.readline().strip() for _ in range(4)]
        assert bootstrap.startswith("127.0.0.1:"), (bootstrap, proc.stderr.read() if proc.poll() is not None else "")
        assert lines[0].startswith("Apache Kafka 4.") and lines[1] == f"PLAINTEXT: {bootstrap}"
        assert lines[2] == "topic cli: 2 partitions"
        directory = lines[3].split(": ", 1)[1]
        assert os.path.isdir(directory)
        with Producer(bootstrap_servers=bootstrap) as p:
            md = p.send("cli", b"v", partition=1).get(60)
        assert (md.topic, md.partition, md.offset) == ("cli", 1, 0)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(120) == 0
        assert not os.path.exists(directory)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
