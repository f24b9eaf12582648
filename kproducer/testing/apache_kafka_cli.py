"""``kproducer apache-kafka``: start a real Apache Kafka cluster on 127.0.0.1 (:class:`ApacheKafka`), print how
to reach it and keep it running until Ctrl-C (or SIGTERM).

The first line printed is the PLAINTEXT bootstrap servers; then one ``LISTENER: host:port,...`` line per
listener, the CA file for TLS listeners and the directory that holds the brokers' configuration and logs.
Passwords are never printed (the users are given on the command line, so the caller knows them).
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .apache_kafka import DEFAULT_VERSION, LISTENERS, ApacheKafka, ApacheKafkaError, ApacheKafkaUnavailable


def _pair(text: str) -> Tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _topic(text: str) -> Tuple[str, int]:
    name, sep, count = text.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME or NAME:PARTITIONS, got {text!r}")
    try:
        return name, int(count) if sep else 1
    except ValueError:
        raise argparse.ArgumentTypeError(f"the partition count of {text!r} is not a whole number") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kproducer apache-kafka",
        description="Run a real Apache Kafka cluster (KRaft, from Apache Kafka's jars; needs Java 17+, and Maven "
                    "once to resolve the jars) on 127.0.0.1 until Ctrl-C.")
    p.add_argument("--brokers", type=int, default=1, help="number of brokers (default 1)")
    p.add_argument("--listener", dest="listeners", action="append", choices=LISTENERS, default=[],
                   help="a client listener to serve besides PLAINTEXT (repeatable)")
    p.add_argument("--user", dest="users", action="append", type=_pair, default=[], metavar="NAME=PASSWORD",
                   help="a SASL user for PLAIN and SCRAM (repeatable; admin/admin-secret is always there)")
    p.add_argument("--authorizer", action="store_true",
                   help="turn ACLs on (StandardAuthorizer; ANONYMOUS and admin are super users)")
    p.add_argument("--ssl-client-auth", choices=["none", "requested", "required"], default="none",
                   help="ssl.client.auth of the TLS listeners (default none)")
    p.add_argument("--broker-config", action="append", type=_pair, default=[], metavar="NAME=VALUE",
                   help="a broker setting (repeatable)")
    p.add_argument("--topic", dest="topics", action="append", type=_topic, default=[], metavar="NAME[:PARTITIONS]",
                   help="create this topic at start (repeatable)")
    p.add_argument("--kafka-version", default=None,
                   help=f"Apache Kafka version to resolve with Maven (default {DEFAULT_VERSION}; KAFKA_HOME wins)")
    p.add_argument("--keep-directory", action="store_true", help="keep the data and logs directory at exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    return p


def serve(args: argparse.Namespace, stop: Optional[threading.Event] = None) -> int:
    """Start the cluster, print how to reach it and wait until Ctrl-C (or ``stop`` is set)."""
    users: Dict[str, str] = dict(args.users)
    kafka = ApacheKafka(brokers=args.brokers, listeners=tuple(args.listeners) or ("PLAINTEXT",), users=users,
                        authorizer=args.authorizer, ssl_client_auth=args.ssl_client_auth,
                        broker_config=dict(args.broker_config), version=args.kafka_version,
                        keep_directory=args.keep_directory)
    waiter = stop or threading.Event()
    try:
        kafka.start()
        for name, partitions in args.topics:
            kafka.create_topic(name, partitions)
        lines: List[str] = [kafka.bootstrap_servers, f"Apache Kafka {kafka.version}, brokers {kafka.broker_ids}"]
        lines += [f"{name}: {kafka.bootstrap_servers_for(name)}" for name in kafka.listeners]
        if any("SSL" in name for name in kafka.listeners):
            lines.append(f"CA: {kafka.ssl_ca_location}")
        lines += [f"topic {name}: {partitions} partitions" for name, partitions in args.topics]
        lines.append(f"directory: {kafka.directory}")
        for line in lines:
            print(line, flush=True)
        while not waiter.wait(0.5):
            pass
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr, flush=True)
    finally:
        kafka.close()
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.brokers < 1:
        parser.error("--brokers must be at least 1")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if threading.current_thread() is threading.main_thread():
        def on_term(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_term)
        # Ctrl-C stops the cluster even when this process was started with SIGINT ignored (a shell's background
        # job without job control, nohup): Python keeps an inherited SIG_IGN
        signal.signal(signal.SIGINT, on_term)
    try:
        return serve(args)
    except ApacheKafkaUnavailable as e:
        print(f"kproducer apache-kafka: cannot start Apache Kafka: {e}", file=sys.stderr)
        return 1
    except (ApacheKafkaError, OSError, ValueError) as e:
        print(f"kproducer apache-kafka: error: {e}", file=sys.stderr)
        return 1


__all__ = ["build_parser", "main", "serve"]
