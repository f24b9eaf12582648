"""kproducer against librdkafka's mock cluster (issue 28 item 19): another project's idea of a Kafka broker.

The mock cluster is ``rd_kafka_mock_cluster_new`` of the librdkafka that the confluent-kafka wheel ships,
called through ctypes on an ``rd_kafka_t`` made for it (the library's own test harness; see librdkafka's
``rdkafka_mock.h``). It answers Metadata v12 with one byte after the last field and ApiVersions v3 with an
UNSUPPORTED_VERSION answer in neither v0's nor v3's shape: kproducer used to close the connection on the first
and never get metadata (send() blocked for max.block.ms). Here kproducer's idempotent producer delivers through
injected Produce errors (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS, a dropped connection)
and partition leader moves, and confluent-kafka's consumer on the same mock cluster reads every record back
exactly once, in order per partition.

Skipped, with the reason, when confluent-kafka, its librdkafka or the mock symbols are absent.
"""
from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from kproducer import Producer

pytestmark = [pytest.mark.timeout(180)]

TOPIC = "t"
PARTITIONS = 6
BROKERS = 3
WAIT = 60.0  # generous bound for event-driven waits on a loaded machine

# librdkafka's error codes (rd_kafka_resp_err_t): Kafka's codes, and its own negative ones
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19
TRANSPORT = -195  # RD_KAFKA_RESP_ERR__TRANSPORT: the mock broker drops the connection instead of answering
PRODUCE_KEY = 0

_SYMBOLS = ("rd_kafka_conf_new", "rd_kafka_new", "rd_kafka_destroy", "rd_kafka_mock_cluster_new",
            "rd_kafka_mock_cluster_destroy", "rd_kafka_mock_cluster_bootstraps", "rd_kafka_mock_topic_create",
            "rd_kafka_mock_push_request_errors_array", "rd_kafka_mock_partition_set_leader")


def _librdkafka() -> Tuple[Optional[ctypes.CDLL], str]:
    """The librdkafka shared library confluent-kafka loads (its wheel's copy), or None and why not."""
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations:
        return None, "confluent-kafka is not installed"
    package = list(spec.submodule_search_locations)[0]
    site = os.path.dirname(package)
    candidates = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*"))
                        + glob.glob(os.path.join(package, ".libs", "librdkafka*.so*"))
                        + glob.glob(os.path.join(package, "librdkafka*.so*")))
    if not candidates:
        return None, f"no librdkafka shared library next to confluent-kafka in {site}"
    try:
        lib = ctypes.CDLL(candidates[0])
    except OSError as e:
        return None, f"cannot load {candidates[0]}: {e}"
    missing = [s for s in _SYMBOLS if not hasattr(lib, s)]
    if missing:
        return None, f"{candidates[0]} lacks the mock cluster's symbols {missing}"
    return lib, ""


class LibrdkafkaMockCluster:
    """librdkafka's mock cluster: ``brokers`` brokers (ids 1..n) on 127.0.0.1, driven through ctypes."""

    def __init__(self, lib: ctypes.CDLL, brokers: int) -> None:
        self.lib = lib
        vp, cp = ctypes.c_void_p, ctypes.c_char_p
        lib.rd_kafka_conf_new.restype = vp
        lib.rd_kafka_conf_set.argtypes = [vp, cp, cp, cp, ctypes.c_size_t]
        lib.rd_kafka_new.restype = vp
        lib.rd_kafka_new.argtypes = [ctypes.c_int, vp, cp, ctypes.c_size_t]
        lib.rd_kafka_destroy.argtypes = [vp]
        lib.rd_kafka_mock_cluster_new.restype = vp
        lib.rd_kafka_mock_cluster_new.argtypes = [vp, ctypes.c_int]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [vp]
        lib.rd_kafka_mock_cluster_bootstraps.restype = cp
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [vp]
        lib.rd_kafka_mock_topic_create.argtypes = [vp, cp, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_mock_push_request_errors_array.argtypes = [vp, ctypes.c_int16, ctypes.c_size_t,
                                                                ctypes.POINTER(ctypes.c_int)]
        lib.rd_kafka_mock_partition_set_leader.argtypes = [vp, cp, ctypes.c_int32, ctypes.c_int32]
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))  # (errors only, on stderr)
        # the rd_kafka_t the mock cluster needs for its book keeping (a producer that never produces)
        self.rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))
        if not self.rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode(errors='replace')}")
        self.mcluster = lib.rd_kafka_mock_cluster_new(self.rk, brokers)
        if not self.mcluster:
            lib.rd_kafka_destroy(self.rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstrap_servers: str = lib.rd_kafka_mock_cluster_bootstraps(self.mcluster).decode()

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        err = self.lib.rd_kafka_mock_topic_create(self.mcluster, name.encode(), partitions, replication_factor)
        assert err == 0, f"rd_kafka_mock_topic_create: error {err}"

    def push_request_errors(self, api_key: int, errors: Sequence[int]) -> None:
        """The next ``len(errors)`` requests of ``api_key`` (to any broker) fail with these codes, in order."""
        array = (ctypes.c_int * len(errors))(*errors)
        self.lib.rd_kafka_mock_push_request_errors_array(self.mcluster, api_key, len(errors), array)

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        err = self.lib.rd_kafka_mock_partition_set_leader(self.mcluster, topic.encode(), partition, broker_id)
        assert err == 0, f"rd_kafka_mock_partition_set_leader: error {err}"

    def close(self) -> None:
        self.lib.rd_kafka_mock_cluster_destroy(self.mcluster)
        self.lib.rd_kafka_destroy(self.rk)


@pytest.fixture
def mock() -> Iterator[LibrdkafkaMockCluster]:
    lib, why = _librdkafka()
    if lib is None:
        pytest.skip(f"librdkafka's mock cluster is not available: {why}")
    cluster = LibrdkafkaMockCluster(lib, BROKERS)
    try:
        cluster.create_topic(TOPIC, PARTITIONS, BROKERS)
        yield cluster
    finally:
        cluster.close()


def read_back(bootstrap: str, expected: int) -> List[Tuple[int, int, Optional[bytes], Optional[bytes]]]:
    """Every record of the topic, read by confluent-kafka's consumer (and a little more, so extras show)."""
    from tests.third_party_clients import consume_confluent

    reads = consume_confluent({"bootstrap.servers": bootstrap}, TOPIC, PARTITIONS, expected, read_committed=False,
                              settle=1.0)
    return [(part, offset, key, value) for part, offset, key, value, _headers, _ts in reads]


def assert_exactly_once(reads: List[Tuple[int, int, Optional[bytes], Optional[bytes]]],
                        sent: Dict[bytes, Tuple[int, int]]) -> None:
    """Each sent value once, in the partition and at the offset its future said (so in send order)."""
    got: Dict[bytes, List[Tuple[int, int]]] = {}
    for part, offset, _key, value in reads:
        assert value is not None
        got.setdefault(value, []).append((part, offset))
    duplicated = {v: places for v, places in got.items() if len(places) > 1}
    assert not duplicated, f"stored more than once: {sorted(duplicated)[:10]}"
    missing = sorted(set(sent) - set(got))
    assert not missing, f"{len(missing)} records never stored, e.g. {missing[:10]}"
    extra = sorted(set(got) - set(sent))
    assert not extra, f"records nobody sent: {extra[:10]}"
    assert {v: places[0] for v, places in got.items()} == sent


def test_metadata_and_a_record_through_the_mock_cluster(mock: LibrdkafkaMockCluster) -> None:
    # (the trailing byte of its Metadata v12 answer closed the connection: no metadata within max.block.ms)
    with Producer(bootstrap_servers=mock.bootstrap_servers, max_block_ms=15000, linger_ms=0) as p:
        assert len(p.partitions_for(TOPIC, timeout=15)) == PARTITIONS
        md = p.send(TOPIC, b"v", key=b"k").get(WAIT)
    assert_exactly_once(read_back(mock.bootstrap_servers, 1), {b"v": (md.partition, md.offset)})


def test_idempotent_delivery_through_injected_errors_and_leader_moves_reads_back_exactly_once(
        mock: LibrdkafkaMockCluster) -> None:
    sent: Dict[bytes, Tuple[int, int]] = {}
    futures: List[Tuple[bytes, bytes, Any]] = []
    p = Producer(bootstrap_servers=mock.bootstrap_servers, max_block_ms=15000, linger_ms=5, batch_size=2048,
                 retry_backoff_ms=20, retry_backoff_max_ms=200, request_timeout_ms=10000, delivery_timeout_ms=90000)
    try:
        assert len(p.partitions_for(TOPIC, timeout=15)) == PARTITIONS

        def send_round(n: int, tag: str) -> None:
            for i in range(n):
                value, key = f"{tag}-{i}".encode(), b"key-%d" % (i % 12)
                futures.append((value, key, p.send(TOPIC, value, key=key)))

        send_round(120, "clean")
        p.flush(WAIT)
        # retriable errors on the next Produce requests, whichever broker they go to
        mock.push_request_errors(PRODUCE_KEY, [NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
                                               NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT])
        send_round(120, "errors")
        p.flush(WAIT)
        # every partition's leader moves to the next broker, then moves again while records are in flight
        for move in range(2):
            for part in range(PARTITIONS):
                mock.set_leader(TOPIC, part, (part + move + 1) % BROKERS + 1)
            send_round(120, f"moved{move}")
            if move == 0:
                p.flush(WAIT)
        # a dropped connection in the middle of a Produce request, and one more error
        mock.push_request_errors(PRODUCE_KEY, [TRANSPORT, NOT_LEADER_OR_FOLLOWER])
        send_round(120, "dropped")
        p.flush(WAIT)
        for value, _key, fut in futures:
            md = fut.get(WAIT)
            sent[value] = (md.partition, md.offset)
    finally:
        p.close(30)
    assert len(sent) == 600
    assert_exactly_once(read_back(mock.bootstrap_servers, len(sent)), sent)
    # per key (so per partition), the log holds the records in the order they were sent
    for key in {k for _v, k, _f in futures}:
        offsets = [sent[v][1] for v, k, _f in futures if k == key]
        assert offsets == sorted(offsets), key
