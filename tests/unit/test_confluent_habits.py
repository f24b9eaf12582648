"""Issue 30 item 6: confluent-kafka's habits. Headers as a dict or pairs with str values (UTF-8, as
confluent-kafka encodes them), a hint towards value_serializer="json" for a dict value, and librdkafka's
socket.keepalive.enable."""
from __future__ import annotations

import socket
from typing import Iterator

import pytest

from kproducer import Producer
from kproducer.mock import MockCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(num_brokers=1) as c:
        c.create_topic("t", partitions=1)
        yield c


def test_str_header_values_are_utf8_in_a_dict_or_in_pairs(cluster: MockCluster) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        a = p.send("t", b"v1", headers={"source": "svc", "é": "ü", "raw": b"\x00", "none": None}).get(30)
        b = p.send("t", b"v2", headers=[("source", "svc"), ("source", b"again")]).get(30)
        c = p.send_batch("t", [b"v3"], headers=[{"source": "batch"}]).get(30)[0]
    stored = {r.offset: r.headers for r in cluster.records("t", 0)}
    assert stored[a.offset] == [("source", b"svc"), ("é", "ü".encode()), ("raw", b"\x00"), ("none", None)]
    assert stored[b.offset] == [("source", b"svc"), ("source", b"again")]
    assert stored[c.offset] == [("source", b"batch")]


def test_other_header_values_are_still_refused_with_what_is_accepted(cluster: MockCluster) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        with pytest.raises(TypeError, match=r"header 'n': value must be bytes, str or None, got int"):
            p.send("t", b"v", headers={"n": 5})


def test_a_dict_value_without_a_serializer_hints_at_json(cluster: MockCluster) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        with pytest.raises(TypeError) as info:
            p.send("t", {"a": 1})
        assert 'value_serializer="json"' in str(info.value)
        with pytest.raises(TypeError) as info:
            p.send("t", b"v", key=[1, 2])
        assert 'key_serializer="json"' in str(info.value)
        with pytest.raises(TypeError) as info:
            p.send_batch("t", [{"a": 1}])
        assert 'value_serializer="json"' in str(info.value)


def _keepalive_of_connections(p: Producer) -> set:  # type: ignore[type-arg]
    selector = p._client.selector
    return {ch.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
            for ch in selector._channels.values()}  # type: ignore[attr-defined]


@pytest.mark.parametrize("given, expected", [(None, True), (True, True), ("true", True), (False, False)])
def test_socket_keepalive_enable_is_librdkafkas_so_keepalive(cluster: MockCluster, given: object,
                                                             expected: bool) -> None:
    settings = {"bootstrap.servers": cluster.bootstrap_servers}
    if given is not None:
        settings["socket.keepalive.enable"] = given  # type: ignore[assignment]
    with Producer(settings) as p:
        p.send("t", b"v").get(30)
        assert _keepalive_of_connections(p) == {expected}
    if given is not None:
        with Producer(bootstrap_servers=cluster.bootstrap_servers, socket_keepalive_enable=given) as p:
            assert p.config.socket_keepalive_enable is expected
