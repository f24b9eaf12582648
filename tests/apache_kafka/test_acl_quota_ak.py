"""Apache Kafka's authorizer and client quotas, which the MockCluster does not have (it authorizes
everything and always answers throttle_time_ms=0): on the session's ``apache_kafka`` cluster
(StandardAuthorizer on), bob without Write on a topic is refused at once with TopicAuthorizationFailedError,
whether the refusal comes with the metadata (no ACL at all) or in the Produce response (Describe only), and
the same producer delivers once the ACL is there; a producer_byte_rate quota for a client id makes the broker
answer with throttle_time_ms, and kproducer sends that broker nothing until the throttle is over (KIP-219),
reports it in produce-throttle-time-avg/max, and loses nothing."""
from __future__ import annotations

import time
import uuid
from typing import Any, Callable

import pytest

from kproducer import Producer
from kproducer.errors import TopicAuthorizationFailedError
from tests.readback import consume
from tests.throttle_trace import ThrottleTrace

pytestmark = pytest.mark.apache_kafka


def bob(apache_kafka: Any, **settings: Any) -> Producer:
    # idempotence off: an idempotent producer whose principal may Write no topic at all is refused a producer
    # id (CLUSTER_AUTHORIZATION_FAILED, fatal, as in Java); whether bob may write elsewhere depends on
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


def test_a_producer_byte_rate_quota_is_honoured_and_nothing_is_lost(apache_kafka: Any,
                                                                     ak_topic: Callable[..., str]) -> None:
    # one partition: the quota is per broker, so all the bytes go to one
    topic = ak_topic(partitions=1)
    client_id = f"kproducer-quota-{uuid.uuid4().hex[:8]}"
    rate = 10 * 1024
    apache_kafka.set_quota(client_id=client_id, producer_byte_rate=rate)
    value = b"x" * 1000
    sent = 0
    with Producer(bootstrap_servers=apache_kafka.bootstrap_servers, client_id=client_id, linger_ms=50,
                  batch_size=256 * 1024) as p:
        trace = ThrottleTrace(p)
        # bursts of ~50 KB until the broker throttles us: it measures over at least 10 one-second samples
        # (quota.window.num=11), so it throttles once well over 10 s worth of the rate came in; bounded
        deadline = time.monotonic() + 120
        while not trace.throttles and sent < 600 and time.monotonic() < deadline:
            futures = [p.send(topic, value, key=b"%d" % (sent + i)) for i in range(50)]
            p.flush(120)
            for f in futures:
                f.get(0)
            sent += 50
        assert trace.throttles, f"no throttle_time_ms from the broker after {sent} KB"
        # what comes after the throttle waits for its end: one more burst
        futures = [p.send(topic, value, key=b"%d" % (sent + i)) for i in range(50)]
        p.flush(120)
        for f in futures:
            f.get(0)
        sent += 50
        metrics = p.metrics()
        throttles = list(trace.throttles)
        early = trace.early_sends()
    assert metrics["produce-throttle-time-max"] > 0
    assert metrics["produce-throttle-time-max"] == max(ms for _t, _n, ms in throttles)
    assert metrics["produce-throttle-time-avg"] > 0
    assert not early, f"requests sent while throttled (sent_ms, node, api, throttle end): {early[:5]}"
    # the burst after the throttle was sent only once the throttle was over
    start, node, ms = throttles[0]
    later = [t for t, n, api in trace.sends if n == node and api == "Produce" and t > start]
    assert later and min(later) >= start + ms - 1
    got = consume(apache_kafka.bootstrap_servers, topic, [0], expected=sent)
    assert sorted(int(m.key) for m in got) == list(range(sent))
