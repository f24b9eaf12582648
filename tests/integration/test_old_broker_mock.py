"""kproducer against a MockCluster that plays an older broker (``MockCluster(api_versions=...)``), broken
responses (``corrupt_responses``), and KIP-951 leader hints when leaders move (issue 12).

* Every API is used at the highest version both sides speak; records go through Produce v3..v7 and are
  read back with kafka-python's consumer.
* A broker that lacks what kproducer needs (Produce before v3, no InitProducerId with idempotence,
  Metadata before v1) fails the records or send() at once with UnsupportedVersionError naming the API
  and both version ranges, not after max.block.ms / delivery.timeout.ms.
* The old-broker mode itself is checked with third-party producers (librdkafka, kafka-python).
"""
from __future__ import annotations

import argparse
import logging
import time
from typing import Any, Dict, List, Optional, Set, Tuple

import pytest

from kproducer import Producer
from kproducer.errors import KafkaError, KafkaTimeoutError, UnsupportedVersionError
from kproducer.mock import MockCluster
from kproducer.protocol import messages as m
from tests.readback import consume

pytestmark = [pytest.mark.timeout(120)]

TOPIC = "t"
PARTITIONS = 3
WAIT = 30.0
OLD = {"ApiVersions": 2, "Produce": 7, "Metadata": 8}



CLIENT_ID = "kproducer-old-broker-test"


def producer_for(cluster: MockCluster, **config: Any) -> Producer:
    config.setdefault("client_id", CLIENT_ID)
    config.setdefault("linger_ms", 5)
    config.setdefault("retry_backoff_ms", 20)
    config.setdefault("reconnect_backoff_ms", 20)
    config.setdefault("reconnect_backoff_max_ms", 200)
    return Producer(bootstrap_servers=cluster.bootstrap_servers, **config)


def versions_used(cluster: MockCluster, client_id: Optional[str] = CLIENT_ID) -> Dict[str, Set[int]]:
    """API name -> the versions the client (all clients when ``client_id`` is None) sent."""
    out: Dict[str, Set[int]] = {}
    for e in cluster.request_log:
        if client_id is None or e.client_id == client_id:
            out.setdefault(e.api, set()).add(e.version)
    return out


def produce_and_read_back(cluster: MockCluster, count: int = 60, read_back: bool = True,
                          **config: Any) -> List[bytes]:
    """Send ``count`` records, all acknowledged; read back with kafka-python (or, when the cluster is one
    kafka-python cannot talk to, from the cluster's log): each exactly once."""
    values = [b"value-%d" % i for i in range(count)]
    producer = producer_for(cluster, **config)
    try:
        futures = [producer.send(TOPIC, v, key=b"k%d" % (i % 7)) for i, v in enumerate(values)]
        producer.flush(WAIT)
        for f in futures:
            assert f.exception(0) is None, f.exception(0)
    finally:
        producer.close(10)
    if read_back:
        got = [r.value for r in consume(cluster.bootstrap_servers, TOPIC, range(PARTITIONS), count)]
    else:
        got = [r.value for p in range(PARTITIONS) for r in cluster.records(TOPIC, p)]
    assert sorted(got) == sorted(values)  # each exactly once
    return values


# -- negotiation with an older broker ------------------------------------------------------------


@pytest.mark.parametrize("produce_max", [3, 4, 5, 6, 7])
@pytest.mark.parametrize("idempotent", [True, False])
def test_every_api_at_the_highest_common_version(produce_max: int, idempotent: bool) -> None:
    with MockCluster(2, api_versions={**OLD, "Produce": produce_max}) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        produce_and_read_back(cluster, enable_idempotence=idempotent)
        used = versions_used(cluster)
    assert used["produce"] == {produce_max}
    assert used["metadata"] == {8}
    # v3 is refused as v0 (UNSUPPORTED_VERSION listing v0-v2), then every connection asks again with v2
    assert used["api_versions"] == {3, 2}
    if idempotent:
        assert used["init_producer_id"] == {m.INIT_PRODUCER_ID.max_version}
    else:
        assert "init_producer_id" not in used


def test_transactions_use_each_api_at_the_highest_common_version() -> None:
    """An older broker's transaction APIs (FindCoordinator before batching, InitProducerId before KIP-360,
    ...): each request at the broker's max, and a committed transaction with offsets is read back."""
    old_txn = {**OLD, "FindCoordinator": 2, "InitProducerId": 1, "AddPartitionsToTxn": 1, "EndTxn": 1,
               "AddOffsetsToTxn": 1, "TxnOffsetCommit": 2}
    with MockCluster(2, api_versions=old_txn) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        producer = producer_for(cluster, transactional_id="old-txn")
        values = [b"txn-%d" % i for i in range(20)]
        try:
            producer.init_transactions()
            producer.begin_transaction()
            for v in values:
                producer.send(TOPIC, v)
            producer.send_offsets_to_transaction({(TOPIC, 0): 5}, "old-group")
            producer.commit_transaction()
        finally:
            producer.close(10)
        used = versions_used(cluster)
        got = consume(cluster.bootstrap_servers, TOPIC, range(PARTITIONS), len(values),
                      isolation_level="read_committed")
        assert cluster.committed_offsets("old-group") == {(TOPIC, 0): 5}
    assert sorted(r.value for r in got) == sorted(values)
    expected = {"produce": 7, "metadata": 8, "find_coordinator": 2, "init_producer_id": 1,
                "add_partitions_to_txn": 1, "end_txn": 1, "add_offsets_to_txn": 1, "txn_offset_commit": 2}
    assert {api: used[api] for api in expected} == {api: {v} for api, v in expected.items()}


def test_served_versions_are_what_api_versions_advertises() -> None:
    with MockCluster(1, api_versions={**OLD, "InitProducerId": None, "Fetch": (4, 11)}) as cluster:
        served = cluster.served_versions
    assert served[m.PRODUCE.key] == (3, 7) and served[m.METADATA.key] == (1, 8)
    assert served[m.API_VERSIONS.key] == (0, 2) and served[m.FETCH.key] == (4, 11)
    assert m.INIT_PRODUCER_ID.key not in served


@pytest.mark.parametrize("bad,match", [
    ({"Produce": 13}, "up to v12"),
    ({"NoSuchApi": 1}, "unknown or unserved API"),
    ({"ApiVersions": None}, "cannot be left out"),
    ({"Produce": (5, 4)}, "not a range"),
    ({"Produce": "7"}, "max version"),
])
def test_bad_api_versions_are_refused(bad: Dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MockCluster(1, api_versions=bad)


def test_an_api_versions_answer_that_parses_as_nothing_is_asked_again_with_v0() -> None:
    """As the server in issue 12: ApiVersions up to v2, and a v3 request answered in the v3 (flexible)
    shape. The client asks again with v0 on the same connection and goes on. (kafka-python 3.0 cannot:
    it reconnects forever, so the records are read back from the mock's log.)"""
    with MockCluster(1, api_versions=OLD, unsupported_api_versions_reply="as_requested") as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        produce_and_read_back(cluster, count=20, read_back=False)
        log = [(e.api, e.version) for e in cluster.request_log if e.client_id == CLIENT_ID]
    assert log[:2] == [("api_versions", 3), ("api_versions", 0)]
    # every connection: refused at v3 (the answer parses as nothing), then v0
    asked = [v for api, v in log if api == "api_versions"]
    assert asked == [3, 0] * (len(asked) // 2)
    assert {v for api, v in log if api == "produce"} == {7}


def _metadata_body() -> Dict[str, Any]:
    return {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False}


def test_the_old_broker_mode_on_the_wire() -> None:
    """What a client sees, request by request: ApiVersions above v2 gets UNSUPPORTED_VERSION as v0 with
    the ApiVersions range and the connection stays; v2 lists the limited ranges; a Metadata or Produce
    version above the served max closes the connection (Kafka's SocketServer: "... which is not
    enabled"); an advertised version the mock has no codec for closes it too."""
    from kproducer.mock.wire_client import WireClient

    with MockCluster(1, api_versions={**OLD, "Metadata": (0, 8)}) as cluster:
        cluster.create_topic(TOPIC, 1)
        address = cluster.broker_address(1)
        with WireClient(*address) as c:
            c.send(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
            frame = c.read_frame()
            answer = m.API_VERSIONS.decode_response(0, frame, 4)
            assert answer["error_code"] == UnsupportedVersionError.code
            assert answer["api_keys"] == [{"api_key": m.API_VERSIONS.key, "min_version": 0, "max_version": 2}]
            body = c.request(m.API_VERSIONS, 2, {})
            got = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
            assert got == cluster.served_versions
            assert got[m.PRODUCE.key] == (3, 7) and got[m.METADATA.key] == (0, 8)
            assert c.request(m.METADATA, 8, _metadata_body())["topics"][0]["name"] == TOPIC
        with WireClient(*address) as c:
            c.send(m.METADATA, 9, _metadata_body())
            assert c.is_closed_by_peer()
        with WireClient(*address) as c:
            c.send(m.PRODUCE, 8, {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": []})
            assert c.is_closed_by_peer()
        with WireClient(*address) as c:  # Metadata v0 is advertised, but the mock cannot decode it
            c.send_raw(b"\x00\x00\x00\x0e" + b"\x00\x03\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00")
            assert c.is_closed_by_peer()


@pytest.mark.parametrize("kind", ["garbled", "oversized"])
def test_corrupt_responses_on_the_wire(kind: str) -> None:
    from kproducer.mock.wire_client import WireClient

    with MockCluster(1) as cluster:
        cluster.create_topic(TOPIC, 1)
        cluster.corrupt_responses("metadata", kind)
        with WireClient(*cluster.broker_address(1)) as c:
            cid = c.send(m.METADATA, 12, _metadata_body())
            size = int.from_bytes(c._read_exact(4), "big")
            if kind == "oversized":
                assert size == 2**31 - 1
                assert int.from_bytes(c._read_exact(4), "big") == cid
            else:
                frame = c._read_exact(size)
                assert int.from_bytes(frame[:4], "big") == cid
                for version in (1, 8, 12):
                    with pytest.raises(Exception):
                        m.decode_response(m.METADATA, version, frame)
        with WireClient(*cluster.broker_address(1)) as c:  # one corruption only: the next answer is normal
            assert c.request(m.METADATA, 12, _metadata_body())["topics"][0]["name"] == TOPIC


def test_the_mock_cli_plays_an_older_broker(capsys: pytest.CaptureFixture[str]) -> None:
    from kproducer.mock import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--brokers", "1", "--api-version", "Produce=7", "--api-version", "metadata=1-8",
                              "--api-version", "InitProducerId=none"])
    cluster = cli.build_cluster(args)
    served = cluster.served_versions
    assert served[m.PRODUCE.key] == (3, 7) and served[m.METADATA.key] == (1, 8)
    assert m.INIT_PRODUCER_ID.key not in served
    for bad in (["--api-version", "Produce"], ["--api-version", "Produce=x"], ["--api-version", "Produce=99"]):
        with pytest.raises(SystemExit) as info:
            cli.main(bad)
        assert info.value.code == 2
        assert "--api-version" in capsys.readouterr().err


# -- fail fast when the broker lacks what kproducer needs -------------------------------------------


def test_produce_before_v3_fails_the_records_at_once() -> None:
    with MockCluster(1, api_versions={"Produce": (0, 2)}) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        producer = producer_for(cluster, delivery_timeout_ms=120_000)
        try:
            futures = [producer.send(TOPIC, b"v%d" % i) for i in range(5)]
            producer.flush(WAIT)  # returns: every record has failed
            for f in futures:
                exc = f.exception(0)
                assert isinstance(exc, UnsupportedVersionError), exc
                text = str(exc)
                assert "Produce" in text and "v0-v2" in text and f"v3-v{m.PRODUCE.max_version}" in text
        finally:
            producer.close(10)
        assert "produce" not in versions_used(cluster)


def test_no_init_producer_id_fails_the_idempotent_producer_at_once() -> None:
    with MockCluster(1, api_versions={"InitProducerId": None}) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        producer = producer_for(cluster, delivery_timeout_ms=120_000)
        try:
            exc: Optional[BaseException]
            try:
                fut = producer.send(TOPIC, b"v")
            except UnsupportedVersionError as e:  # the network thread met the broker first (a busy machine)
                exc = e
            else:  # or the record was queued first, and fails with the producer
                producer.flush(WAIT)
                exc = fut.exception(0)
            assert isinstance(exc, UnsupportedVersionError), exc
            assert "InitProducerId" in str(exc) and "enable.idempotence=false" in str(exc)
            assert f"v0-v{m.INIT_PRODUCER_ID.max_version}" in str(exc)
            with pytest.raises(UnsupportedVersionError):  # the producer is unusable from now on
                producer.send(TOPIC, b"again")
        finally:
            producer.close(10)
        # without idempotence the same broker takes the records
        produce_and_read_back(cluster, count=10, enable_idempotence=False)


@pytest.mark.parametrize("missing", ["InitProducerId", "AddPartitionsToTxn"])
def test_a_transactional_api_the_broker_lacks_fails_the_transaction_at_once(missing: str) -> None:
    # (an old broker: no transaction.version finalized, so the client speaks transactions v1, AddPartitionsToTxn)
    with MockCluster(1, api_versions={missing: None}, transaction_version=0) as cluster:
        cluster.create_topic(TOPIC, 1)
        producer = producer_for(cluster, transactional_id="old-broker-txn", max_block_ms=120_000,
                                transaction_timeout_ms=60_000)
        try:
            # raised by the call that meets it: the UnsupportedVersionError itself, or (once the producer
            # is in its fatal state) the TransactionError it caused
            with pytest.raises(KafkaError, match=missing) as info:
                producer.init_transactions()
                producer.begin_transaction()
                producer.send(TOPIC, b"v")
                producer.commit_transaction()
        finally:
            producer.close(10)
        assert isinstance(info.value, UnsupportedVersionError) or \
            isinstance(info.value.__cause__, UnsupportedVersionError), repr(info.value)
        assert cluster.records(TOPIC, 0) == []


def test_metadata_versions_kproducer_cannot_speak_fail_send_at_once() -> None:
    with MockCluster(1, api_versions={"Metadata": (0, 0)}) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        producer = producer_for(cluster, max_block_ms=120_000)
        try:
            try:
                fut = producer.send(TOPIC, b"v")
                exc: Optional[BaseException] = fut.exception(WAIT)
            except KafkaError as e:
                exc = e
            assert isinstance(exc, UnsupportedVersionError), exc
            assert "Metadata" in str(exc) and "v0-v0" in str(exc)
        finally:
            producer.close(10)


# -- broken responses --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["garbled", "oversized"])
def test_a_broken_produce_response_closes_the_connection_and_the_retry_is_deduplicated(kind: str) -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic(TOPIC, 1)
        cluster.corrupt_responses("produce", kind, 2)
        values = [b"v%d" % i for i in range(20)]
        producer = producer_for(cluster)
        try:
            futures = [producer.send(TOPIC, v, partition=0) for v in values]
            producer.flush(WAIT)
            assert all(f.exception(0) is None for f in futures)
        finally:
            producer.close(10)
        assert [r.value for r in cluster.records(TOPIC, 0)] == values  # written once, in order
        assert cluster.connection_count_total >= 3  # each broken answer cost a connection


@pytest.mark.parametrize("kind,reason", [("garbled", "Metadata"), ("oversized", "invalid frame size")])
def test_a_metadata_wait_names_why_the_broker_failed(kind: str, reason: str) -> None:
    with MockCluster(1) as cluster:
        cluster.create_topic(TOPIC, 1)
        cluster.corrupt_responses("metadata", kind, 10_000)
        producer = producer_for(cluster, max_block_ms=2000)
        try:
            with pytest.raises(KafkaTimeoutError) as info:
                producer.send(TOPIC, b"v").get(WAIT)
        finally:
            producer.close(10)
    assert "last connection errors" in str(info.value) and reason in str(info.value), str(info.value)


# -- the old-broker mode checked with third-party producers ----------------------------------------------


def test_confluent_kafka_negotiates_with_the_old_broker_mode() -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    pytest.importorskip("kafka")
    with MockCluster(2, api_versions=OLD) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5,
                                             "enable.idempotence": True})
        errors: List[Any] = []
        values = [b"ck-%d" % i for i in range(50)]
        for v in values:
            producer.produce(TOPIC, v, on_delivery=lambda err, msg: errors.append(err) if err else None)
        assert producer.flush(WAIT) == 0
        assert errors == []
        used = versions_used(cluster, None)
        got = consume(cluster.bootstrap_servers, TOPIC, range(PARTITIONS), len(values))
    assert sorted(r.value for r in got) == sorted(values)
    # librdkafka asks ApiVersions v3, is told UNSUPPORTED_VERSION in a v0 answer, asks again (with v0)
    assert max(used["api_versions"]) > 2 and min(used["api_versions"]) <= 2
    assert used["produce"] == {7}
    assert max(used["metadata"]) <= 8


def test_kafka_python_negotiates_with_the_old_broker_mode() -> None:
    pytest.importorskip("kafka")
    from kafka import KafkaProducer  # type: ignore[import-untyped]

    with MockCluster(1, api_versions=OLD) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5)
        values = [b"kp-%d" % i for i in range(50)]
        try:
            futures = [producer.send(TOPIC, v) for v in values]
            producer.flush(WAIT)
            for f in futures:
                f.get(WAIT)
        finally:
            producer.close(10)
        used = versions_used(cluster, None)
        got = consume(cluster.bootstrap_servers, TOPIC, range(PARTITIONS), len(values))
    assert sorted(r.value for r in got) == sorted(values)
    # kafka-python asks ApiVersions v4, is told v0-v2, asks again with v2, then uses Produce v7
    assert max(used["api_versions"]) > 2 and 2 in used["api_versions"]
    assert used["produce"] == {7} and max(used["metadata"]) <= 8


# -- KIP-951: leader hints when leaders move --------------------------------------------------------------


def test_leaders_moving_mid_stream_are_followed_from_the_produce_hints(caplog: pytest.LogCaptureFixture) -> None:
    """Leaders move while records flow: the old leaders' NOT_LEADER_OR_FOLLOWER answers (Produce v11) name
    the new leaders, which the producer uses at once. Every record is delivered exactly once, in order per
    partition (read back with kafka-python), and the hints were used."""
    pytest.importorskip("kafka")
    caplog.set_level(logging.DEBUG, logger="kproducer.producer.sender")
    partitions = 6
    with MockCluster(3) as cluster:
        cluster.create_topic(TOPIC, partitions)
        producer = producer_for(cluster, linger_ms=2, metadata_max_age_ms=300_000)
        sent: List[Tuple[int, bytes]] = []
        futures = []
        moves = 0
        try:
            deadline = time.monotonic() + 60
            for i in range(1200):
                if time.monotonic() > deadline:
                    break
                p = i % partitions
                value = b"r-%d" % i
                sent.append((p, value))
                futures.append(producer.send(TOPIC, value, partition=p))
                if i % 100 == 50 and moves < 10:
                    q = moves % partitions
                    cluster.move_leader(TOPIC, q, cluster.leader(TOPIC, q) % 3 + 1)
                    moves += 1
                if i % 20 == 0:
                    time.sleep(0.002)  # let the stream spread over the moves
            producer.flush(WAIT)
            for f in futures:
                assert f.exception(0) is None, f.exception(0)
        finally:
            producer.close(10)
        stored = {p: [r.value for r in cluster.records(TOPIC, p)] for p in range(partitions)}
        got = consume(cluster.bootstrap_servers, TOPIC, range(partitions), len(sent))
    expected = {p: [v for q, v in sent if q == p] for p in range(partitions)}
    assert stored == expected  # exactly once, in send order per partition
    by_partition: Dict[int, List[bytes]] = {}
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        by_partition.setdefault(r.partition, []).append(r.value)
    assert by_partition == expected
    assert moves == 10
    followed = [r for r in caplog.records if "from the produce response" in r.getMessage()]
    assert followed, "no produce response hint was used"
