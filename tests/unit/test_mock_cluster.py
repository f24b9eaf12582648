"""MockCluster's public API: lifecycle, topics, stored records, fault injection, leader moves, broker
stops and restarts, the request log, and the mock-cluster command line."""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Iterator

import pytest

import kproducer
from kproducer.mock import MockCluster
from kproducer.mock.cli import add_arguments, main, topic_spec
from kproducer.mock.faults import api_name
from kproducer.mock.wire_client import WireClient
from kproducer.protocol.errors import (
    NO_ERROR,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)
from kproducer.protocol.messages import API_VERSIONS, METADATA
from tests.mock_cli import ServeInBackground
from tests.unit.mock_wire import batch, fetch, produce


def mock_threads() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("mock-broker-")]


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(3) as c:
        c.create_topic("t", 6)
        yield c


def test_lifecycle_and_addresses() -> None:
    before = len(mock_threads())
    cluster = MockCluster(3, num_processors=2, num_handlers=3)
    with pytest.raises(RuntimeError):
        _ = cluster.bootstrap_servers
    with cluster:
        servers = cluster.bootstrap_servers.split(",")
        assert len(servers) == 3 and all(s.startswith("127.0.0.1:") for s in servers)
        assert len({s.split(":")[1] for s in servers}) == 3
        assert cluster.broker_ids == [1, 2, 3]
        # per broker: acceptor + 2 processors + 3 handlers + fetch purgatory
        assert len(mock_threads()) - before == 3 * 7
        cluster.start()  # idempotent
    assert len(mock_threads()) == before
    cluster.close()  # idempotent
    for server in servers:
        host, port = server.split(":")
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=1).close()


def test_constructor_validation() -> None:
    with pytest.raises(ValueError):
        MockCluster(0)
    with pytest.raises(ValueError):
        MockCluster(2, ports=[1])
    with pytest.raises(ValueError):
        MockCluster(1, default_partitions=0)


def test_create_topic(cluster: MockCluster) -> None:
    assert [cluster.leader("t", i) for i in range(6)] == [1, 2, 3, 1, 2, 3]
    cluster.create_topic("pinned", leaders=[3, 3])
    assert cluster.partition_count("pinned") == 2 and cluster.leader("pinned", 1) == 3
    with pytest.raises(ValueError, match="already exists"):
        cluster.create_topic("t", 1)
    with pytest.raises(ValueError, match="invalid topic name"):
        cluster.create_topic("no spaces", 1)
    with pytest.raises(ValueError):
        cluster.create_topic("zero", 0)
    with pytest.raises(ValueError):
        cluster.create_topic("unknown-broker", leaders=[7])
    assert cluster.topics() == ["pinned", "t"]
    with pytest.raises(KeyError):
        cluster.records("nope", 0)


def test_records_and_request_log(cluster: MockCluster) -> None:
    with WireClient(*cluster.broker_address(2)) as c:
        c.client_id = "tester"
        result = produce(c, batch([b"one", b"two"], ts=1234, producer_id=9, epoch=0, seq=0), partition=1)
        assert result["error_code"] == NO_ERROR
        c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    records = cluster.records("t", 1)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers, r.producer_id, r.sequence) for r in records] == [
        (0, 1234, b"kone", b"one", [("h", b"one")], 9, 0), (1, 1235, b"ktwo", b"two", [("h", b"two")], 9, 1)]
    assert not records[0].is_control and not records[0].is_transactional
    assert cluster.high_watermark("t", 1) == 2
    assert cluster.request_counts["produce"] == 1 and cluster.request_counts["api_versions"] == 1
    last = cluster.request_log[-1]
    assert (last.broker_id, last.api, last.version, last.client_id) == (2, "api_versions", 3, "tester")
    cluster.reset_request_log()
    assert cluster.request_counts == {} and cluster.request_log == []


def test_fault_api_names(cluster: MockCluster) -> None:
    assert api_name("InitProducerId") == api_name("init-producer-id") == api_name(22) == "init_producer_id"
    cluster.inject_errors("Produce", [NotLeaderOrFollowerError.code])
    cluster.inject_errors(0, [RequestTimedOutError.code])
    assert cluster.pending_errors("produce") == [NotLeaderOrFollowerError.code, RequestTimedOutError.code]
    with pytest.raises(ValueError, match="unknown or unserved API"):
        cluster.inject_errors("join_group", [OffsetOutOfRangeError.code])
    with pytest.raises(KeyError):
        cluster.set_latency(9, 10)
    cluster.clear_faults()
    assert cluster.pending_errors("produce") == []


def test_move_leader(cluster: MockCluster) -> None:
    with WireClient(*cluster.broker_address(1)) as one, WireClient(*cluster.broker_address(3)) as three:
        assert produce(one, batch([b"a"]))["base_offset"] == 0
        cluster.move_leader("t", 0, broker_id=3)
        assert cluster.leader("t", 0) == 3 and cluster.leader_epoch("t", 0) == 1
        assert produce(one, batch([b"b"]))["error_code"] == NotLeaderOrFollowerError.code
        assert produce(three, batch([b"b"]))["base_offset"] == 1
        partitions = one.request(METADATA, 12, {"topics": [{"name": "t"}]})["topics"][0]["partitions"]
        assert (partitions[0]["leader_id"], partitions[0]["leader_epoch"]) == (3, 1)
        assert fetch(three, 0)["high_watermark"] == 2
    with pytest.raises(KeyError):
        cluster.move_leader("t", 0, broker_id=8)


def test_stop_and_start_broker_keeps_port_and_data(cluster: MockCluster) -> None:
    host, port = cluster.broker_address(2)
    with WireClient(host, port) as c:
        assert produce(c, batch([b"before"]), partition=1)["base_offset"] == 0
        cluster.stop_broker(2)
        assert c.is_closed_by_peer()
    assert not cluster.is_running(2)
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=1).close()
    # its partitions moved to live brokers
    assert cluster.leader("t", 1) in (1, 3) and cluster.leader_epoch("t", 1) == 1
    with WireClient(*cluster.broker_address(cluster.leader("t", 1))) as c:
        assert produce(c, batch([b"during"]), partition=1)["base_offset"] == 1
    cluster.start_broker(2)
    assert cluster.broker_address(2) == (host, port)
    cluster.move_leader("t", 1, 2)
    with WireClient(host, port) as c:
        assert produce(c, batch([b"after"]), partition=1)["base_offset"] == 2
        brokers = c.request(METADATA, 12, {"topics": None})["brokers"]
        assert sorted(b["node_id"] for b in brokers) == [1, 2, 3]
    assert [r.value for r in cluster.records("t", 1)] == [b"before", b"during", b"after"]


def test_whole_cluster_restart_keeps_ports_and_data(cluster: MockCluster) -> None:
    servers = cluster.bootstrap_servers
    with WireClient(*cluster.broker_address(1)) as c:
        produce(c, batch([b"x"]))
    cluster.stop()
    cluster.start()
    assert cluster.bootstrap_servers == servers
    assert [cluster.leader("t", i) for i in range(6)] == [1, 2, 3, 1, 2, 3]
    with WireClient(*cluster.broker_address(cluster.leader("t", 0))) as c:
        assert fetch(c, 0)["high_watermark"] == 1


def test_fixed_ports() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with MockCluster(1, ports=[port]) as cluster:
        assert cluster.bootstrap_servers == f"127.0.0.1:{port}"


# ------------------------------------------------------------------------------------ command line


def test_topic_spec() -> None:
    assert topic_spec("t:6") == ("t", 6)
    assert topic_spec("plain") == ("plain", 1)
    with pytest.raises(argparse.ArgumentTypeError):
        topic_spec("t:x")
    with pytest.raises(argparse.ArgumentTypeError):
        topic_spec("t:0")


def test_serve_forever_prints_bootstrap_and_stops() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--brokers", "2", "--topic", "t:3", "--topic", "u:1"])
    with ServeInBackground(args, join_timeout=5) as serving:
        lines = serving.wait_for("topic u", timeout=5).splitlines()
        bootstrap = lines[0]
        assert len(bootstrap.split(",")) == 2
        host, port = bootstrap.split(",")[0].split(":")
        with WireClient(host, int(port)) as c:
            topics = c.request(METADATA, 12, {"topics": None})["topics"]
            assert sorted((t["name"], len(t["partitions"])) for t in topics) == [("t", 3), ("u", 1)]
    assert serving.result == [0]


def test_main_rejects_bad_arguments() -> None:
    with pytest.raises(SystemExit):
        main(["--brokers", "0"])
    with pytest.raises(SystemExit):
        main(["--topic", "t:zero"])


def test_python_dash_m_serves_until_ctrl_c() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(kproducer.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [root, os.environ.get("PYTHONPATH", "")] if p))
    # Ctrl-C's default action in the child even when this process was started with SIGINT ignored (a
    # background job of a non-interactive shell): Python turns SIGINT into KeyboardInterrupt only then
    proc = subprocess.Popen([sys.executable, "-m", "kproducer.mock", "--brokers", "1", "--topic", "t:2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        bootstrap = proc.stdout.readline().strip()
        host, port = bootstrap.split(":")
        with WireClient(host, int(port)) as c:
            assert c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"] == NO_ERROR
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
