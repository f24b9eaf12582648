"""Apache Kafka's authorizer on the session's ``apache_kafka`` cluster (StandardAuthorizer on): bob without
Write on a topic is refused at once with TopicAuthorizationFailedError, whether the refusal comes with the
metadata (no ACL at all) or in the Produce response (Describe only), and the same producer delivers once the ACL
is there. (Quotas: tests/apache_kafka/test_mock_parity_produce_ak.py, on Apache Kafka and the mock; the
MockCluster's ACLs: test_mock_parity_acl_ak.py.)"""
from __future__ import annotations

import time
from typing import Any, Callable

import pytest

from kproducer import Producer
from kproducer.errors import TopicAuthorizationFailedError
from tests.readback import consume

pytestmark = pytest.mark.apache_kafka


def bob(apache_kafka: Any, **settings: Any) -> Producer:
    # idempotence off: an idempotent producer whose principal may Write no topic at all is refused a producer
    # id (CLUSTER_AUTHORIZATION_FAILED: its records fail until it may); whether bob may write elsewhere depends on
    # other tests sharing the cluster
    return Producer(apache_kafka.producer_config("SASL_PLAINTEXT", "PLAIN", user="bob"), enable_idempotence=False,
                    max_block_ms=60000, delivery_timeout_ms=120000, request_timeout_ms=30000, **settings)


def send_until_authorized(p: Producer, topic: str, value: bytes, timeout: float = 60.0) -> Any:
    """Send ``value`` again until it is written: a new ACL reaches the brokers shortly after AclCommand ends."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return p.send(topic, value).get(60)
        except TopicAuthorizationFailedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("acl", ["none", "Describe"])
def test_no_write_acl_is_refused_at_once_and_the_acl_makes_it_work(apache_kafka: Any, ak_topic: Callable[..., str],
                                                                   acl: str) -> None:
    topic = ak_topic(partitions=2)
    if acl != "none":
        # bob sees the topic's metadata, so the refusal comes in the Produce response
        apache_kafka.add_acl("User:bob", acl, topic=topic)
    with bob(apache_kafka) as p:
        started = time.monotonic()
        futures = [p.send(topic, b"refused-%d" % i) for i in range(5)]
        for f in futures:
            with pytest.raises(TopicAuthorizationFailedError):
                f.get(90)
        elapsed = time.monotonic() - started
        # not after max.block.ms (60 s) nor delivery.timeout.ms (120 s): the broker's answer, at once
        assert elapsed < 50, f"refused only after {elapsed:.1f} s"
        assert p.metrics()["record-error-total"] >= 5
        apache_kafka.add_acl("User:bob", "Write", topic=topic)
        send_until_authorized(p, topic, b"first")
        futures = [p.send(topic, b"v%d" % i) for i in range(100)]
        p.flush(60)
        for f in futures:
            f.get(0)
    got = consume(apache_kafka.bootstrap_servers, topic, [0, 1], expected=101)
    values = sorted(m.value for m in got)
    assert values == sorted([b"first"] + [b"v%d" % i for i in range(100)])  # no refused record was written
