"""An embedded Kafka-protocol cluster for tests: ``from kproducer.mock import MockCluster``.

Each broker is built like Kafka's: an Acceptor thread, Processor threads running selector loops, a
RequestChannel, request handler threads and an API layer, over in-memory partition logs shared by
the cluster, with fault injection (error codes, lost responses, latency, dropped connections, leader
moves, broker stops and restarts). Listeners may serve TLS (a certificate made at start, with the
optional ``cryptography`` package) and SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER; KIP-368 session
lifetimes): ``MockCluster(security_protocol="SASL_SSL", users={"alice": "secret"})``. It can play an
older broker, serving each API only up to a version (``MockCluster(api_versions={"ApiVersions": 2,
"Produce": 7})``), and answer with broken responses (``corrupt_responses``).
"""
from __future__ import annotations

import argparse

from .apis import SERVED_VERSIONS
from .cluster import MockCluster
from .faults import RequestLogEntry
from .log import StoredRecord

__all__ = ["MockCluster", "RequestLogEntry", "SERVED_VERSIONS", "StoredRecord", "serve_forever"]


def serve_forever(args: argparse.Namespace) -> int:
    """Run a cluster from parsed ``kproducer mock-cluster`` arguments until Ctrl-C (see cli.py)."""
    from .cli import serve_forever as _serve

    return _serve(args)
