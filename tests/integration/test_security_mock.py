"""kproducer over TLS and SASL against the MockCluster's secured listeners, end to end: every
security.protocol and mechanism delivers 10,000 records exactly; wrong credentials, an untrusted CA and
a protocol mismatch fail fast with the named cause and no retry storm; SASL sessions are renewed on the
same connection (KIP-368); no secret reaches a log line, a repr or an exception."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

pytest.importorskip("cryptography")

from kproducer import Producer  # noqa: E402
from kproducer.errors import (  # noqa: E402
    SaslAuthenticationFailedError,
    SecurityProtocolMismatchError,
    SslAuthenticationError,
)
from kproducer.mock import MockCluster  # noqa: E402
from kproducer.protocol.sasl import unsecured_jwt  # noqa: E402

PASSWORD = "s3cret-Pa55word"
N = 10_000

CASES: List[Tuple[str, Optional[str]]] = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_PLAINTEXT", "OAUTHBEARER"),
    ("SASL_SSL", "PLAIN"),
    ("SASL_SSL", "SCRAM-SHA-512"),
]


def cluster_for(protocol: str, mechanism: Optional[str], **kw: Any) -> MockCluster:
    if mechanism is None:
        return MockCluster(2, security_protocol=protocol, **kw)
    return MockCluster(2, security_protocol=protocol, sasl_mechanisms=[mechanism], users={"alice": PASSWORD}, **kw)


def settings_for(cluster: MockCluster, mechanism: Optional[str] = None, **extra: Any) -> Dict[str, Any]:
    cfg: Dict[str, Any] = dict(cluster.client_config())
    if mechanism == "OAUTHBEARER":
        cfg.pop("sasl.jaas.config", None)
        cfg["sasl.mechanism"] = "OAUTHBEARER"
        cfg["sasl_oauth_token_provider"] = lambda: (unsecured_jwt("alice", 3600), time.time() + 3600)
    cfg.update(extra)
    return cfg


@pytest.fixture
def no_secrets_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="kproducer")
    yield
    for r in caplog.records:
        text = r.getMessage() + (str(r.exc_info[1]) if r.exc_info else "")
        assert PASSWORD not in text, f"secret in a log line: {r.name}"


@pytest.mark.parametrize("protocol,mechanism", CASES, ids=[f"{p}-{m}" for p, m in CASES])
def test_delivers_ten_thousand_records_exactly(protocol: str, mechanism: Optional[str],
                                               no_secrets_logged: None) -> None:
    with cluster_for(protocol, mechanism) as cluster:
        cluster.create_topic("secure", partitions=3)
        with Producer(settings_for(cluster, mechanism, linger_ms=5)) as p:
            assert PASSWORD not in repr(p.config.as_dict())
            futs = [p.send("secure", b"value-%d" % i, key=b"k%d" % (i % 50)) for i in range(N)]
            p.flush(60)
            offsets = [f.get(0) for f in futs]
        assert len(offsets) == N
        stored = sorted((r.value for part in range(3) for r in cluster.records("secure", part)))
        assert stored == sorted(b"value-%d" % i for i in range(N))
        # per key, the order of sends is the order stored
        for part in range(3):
            seen: Dict[bytes, int] = {}
            for r in cluster.records("secure", part):
                i = int(r.value.split(b"-")[1])
                assert seen.get(r.key, -1) < i
                seen[r.key] = i


def test_wrong_password_fails_within_two_seconds_without_a_retry_storm(no_secrets_logged: None) -> None:
    with cluster_for("SASL_PLAINTEXT", "SCRAM-SHA-256") as cluster:
        cluster.create_topic("t", partitions=1)
        cfg = settings_for(cluster, "SCRAM-SHA-256")
        cfg["sasl.jaas.config"] = cfg["sasl.jaas.config"].replace(PASSWORD, "not-the-" + PASSWORD[:4])
        with Producer(cfg, reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000) as p:
            start = time.monotonic()
            with pytest.raises(SaslAuthenticationFailedError) as info:
                p.send("t", b"v").get(30)
            assert time.monotonic() - start < 2.0
            assert "SCRAM-SHA-256" in str(info.value)
            assert PASSWORD[:4] not in str(info.value) or PASSWORD not in str(info.value)
            with pytest.raises(SaslAuthenticationFailedError):
                p.partitions_for("t")
            before = cluster.connection_count_total
            time.sleep(1.0)
            # each broker has its own backoff (as in Java), starting at 50 ms and doubling after each failed
            # attempt: at most 4 attempts per broker in any second from here (one more may straddle the
            # start); a storm, reconnecting every 50 ms, would make 20 per broker
            brokers = len(cluster.broker_ids)
            assert cluster.connection_count_total - before <= 5 * brokers
        assert cluster.auth_stats["failures"] >= 1


def test_untrusted_ca_fails_fast_naming_the_broker_and_the_reason() -> None:
    with cluster_for("SSL", None) as cluster:
        cluster.create_topic("t", partitions=1)
        cfg = settings_for(cluster)
        del cfg["ssl.truststore.certificates"]  # the system CAs do not know the mock's CA
        with Producer(cfg) as p:
            start = time.monotonic()
            with pytest.raises(SslAuthenticationError) as info:
                p.send("t", b"v").get(30)
            assert time.monotonic() - start < 15
            assert "certificate verify failed" in str(info.value)
            assert "127.0.0.1:" in str(info.value)


def test_plaintext_client_to_a_tls_listener_names_security_protocol() -> None:
    with cluster_for("SSL", None) as cluster:
        cluster.create_topic("t", partitions=1)
        with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
            with pytest.raises(SecurityProtocolMismatchError) as info:
                p.send("t", b"v").get(30)
            assert "security.protocol" in str(info.value)


def test_tls_client_to_a_plaintext_listener_names_security_protocol() -> None:
    with MockCluster(1) as plain, cluster_for("SSL", None) as tls:
        plain.create_topic("t", partitions=1)
        cfg = settings_for(tls)
        cfg["bootstrap.servers"] = plain.bootstrap_servers
        with Producer(cfg) as p:
            with pytest.raises(SslAuthenticationError) as info:
                p.send("t", b"v").get(30)
            assert "security.protocol" in str(info.value)


def test_sasl_sessions_are_renewed_on_the_same_connections() -> None:
    with cluster_for("SASL_SSL", "SCRAM-SHA-512", session_lifetime_ms=1500) as cluster:
        cluster.create_topic("t", partitions=2)
        with Producer(settings_for(cluster, "SCRAM-SHA-512", linger_ms=1)) as p:
            # connect to both partitions' leaders first, so that any later connection would be a reconnection
            for part in range(2):
                p.send("t", b"warm-up", partition=part).get(30)
            connections = cluster.connection_count_total
            attempts = cluster.auth_stats["attempts"]
            sent = 0
            deadline = time.monotonic() + 60
            # keep producing until every connection has re-authenticated at least once
            while cluster.auth_stats["attempts"] < attempts + 2 * 2 and time.monotonic() < deadline:
                futs = [p.send("t", b"v%d" % (sent + i)) for i in range(50)]
                for f in futs:
                    f.get(30)
                sent += 50
                time.sleep(0.05)
            assert cluster.auth_stats["attempts"] >= attempts + 2 * 2, "no re-authentication happened"
            assert cluster.connection_count_total == connections  # renewed in place, not reconnected
            assert cluster.auth_stats["failures"] == 0
        values = [r.value for part in range(2) for r in cluster.records("t", part)]
        assert len(values) == sent + 2


def test_the_token_provider_is_asked_at_each_authentication() -> None:
    calls: List[float] = []
    lock = threading.Lock()

    def provider() -> Tuple[str, float]:
        with lock:
            calls.append(time.time())
        return unsecured_jwt("alice", 3600), time.time() + 3600

    with cluster_for("SASL_PLAINTEXT", "OAUTHBEARER") as cluster:
        cluster.create_topic("t", partitions=2)
        cfg = settings_for(cluster, "OAUTHBEARER")
        cfg["sasl_oauth_token_provider"] = provider
        with Producer(cfg) as p:
            for i in range(20):
                p.send("t", b"v%d" % i)
            p.flush(30)
        assert len(calls) >= 2  # the bootstrap connection and at least one leader's
