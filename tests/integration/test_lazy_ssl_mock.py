"""Issue 16 (memory): ``import kproducer`` and a PLAINTEXT producer never import the ``ssl`` module nor
``_hashlib`` (OpenSSL's libssl and libcrypto: about 5 MiB of RSS together). The MockCluster itself imports ssl, so it runs in this process and the producer runs in a
fresh child process, which reports what it had imported; the records are read back independently."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Iterator

import pytest

from kproducer.mock import MockCluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPIC = "lazy-ssl"
N = 200

CHILD = textwrap.dedent("""
    import json, sys
    import kproducer
    after_import = sorted(m for m in ("ssl", "_ssl", "_hashlib", "kproducer.mock") if m in sys.modules)
    from kproducer import Producer
    bootstrap, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with Producer(bootstrap_servers=bootstrap, security_protocol="PLAINTEXT") as p:
        futures = [p.send(topic, b"v-%d" % i, partition=0) for i in range(n // 2)]
        p.send_batch(topic, [b"v-%d" % i for i in range(n // 2, n)], partition=0)
        p.flush(60)
        acked = sum(1 for f in futures if f.get(60).offset >= 0)
    after_send = sorted(m for m in ("ssl", "_ssl", "_hashlib", "kproducer.mock") if m in sys.modules)
    print(json.dumps({"after_import": after_import, "after_send": after_send, "acked": acked}))
""")


@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(1) as c:
        c.create_topic(TOPIC, 1)
        yield c


def _python(code: str, *args: str) -> str:
    """What a fresh interpreter running ``code`` (this checkout first on its path) prints."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")},
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_plaintext_producer_never_imports_ssl(cluster: MockCluster) -> None:
    pytest.importorskip("kafka")
    from tests.readback import consume

    got = json.loads(_python(CHILD, cluster.bootstrap_servers, TOPIC, str(N)).strip().splitlines()[-1])
    assert got == {"after_import": [], "after_send": [], "acked": N // 2}
    read = consume(cluster.bootstrap_servers, TOPIC, [0], N, timeout=60)
    assert [r.value for r in read] == [b"v-%d" % i for i in range(N)]


def test_import_alone_does_not_load_ssl() -> None:
    code = ("import sys, kproducer, kproducer.security, kproducer.config, kproducer.network.selector; "
            "print(sorted(m for m in ('ssl', '_ssl', '_hashlib', 'kproducer.mock') if m in sys.modules))")
    assert _python(code).strip() == "[]"


def test_a_tls_setting_loads_ssl_when_it_is_used() -> None:
    code = textwrap.dedent("""
        import sys
        from kproducer.config import ProducerConfig
        from kproducer.security import channel_security
        plain = channel_security(ProducerConfig({"bootstrap.servers": "127.0.0.1:9"}))
        before = "ssl" in sys.modules
        tls = channel_security(ProducerConfig({"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SSL"}))
        print(plain.ssl_context is None, before, type(tls.ssl_context).__name__, "ssl" in sys.modules)
    """)
    assert _python(code).split() == ["True", "False", "SSLContext", "True"]


def test_sasl_plain_needs_no_openssl_and_scram_loads_hashlib() -> None:
    code = textwrap.dedent("""
        import sys
        from kproducer.config import ProducerConfig
        from kproducer.security import channel_security
        def client(mechanism):
            cs = channel_security(ProducerConfig({"bootstrap.servers": "127.0.0.1:9",
                                                  "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                                  "sasl.username": "u", "sasl.password": "p"}))
            c = cs.sasl_client_factory("127.0.0.1")
            c.initial_response()
            return type(c).__name__ + ":" + ",".join(m for m in ("ssl", "_hashlib") if m in sys.modules)
        print(client("PLAIN"), client("SCRAM-SHA-256"))
    """)
    assert _python(code).split() == ["PlainClient:", "ScramClient:_hashlib"]
