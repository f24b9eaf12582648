"""``kproducer mock-cluster``: run a MockCluster until Ctrl-C.

``main(argv)`` parses its own arguments; a parent CLI can instead call :func:`add_arguments` on its
sub-parser and pass the parsed namespace to :func:`serve_forever`.

Security: ``--tls`` serves SSL (a CA and server certificate made at start), ``--sasl-user USER:PASSWORD``
serves SASL_PLAINTEXT, both serve SASL_SSL. The first line printed is still the bootstrap servers; then
the security protocol, the CA certificate file and a ready-to-use ``client.properties`` (Java names,
for ``--command-config`` / Kafka's tools). Passwords are never printed: they are only in that file,
which is readable by its owner only. Files the command made itself are removed when it stops.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .apis import VersionSpec, restrict_versions
from .cluster import MockCluster
from .security import ALL_MECHANISMS

PASSWORD_ENV = "KPRODUCER_MOCK_SASL_PASSWORD"


def topic_spec(text: str) -> Tuple[str, int]:
    """``"name:partitions"`` (or just ``"name"``, one partition)."""
    name, sep, count = text.rpartition(":")
    if not sep:
        return text, 1
    try:
        partitions = int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad topic {text!r}: use NAME:PARTITIONS") from None
    if not name or partitions < 1:
        raise argparse.ArgumentTypeError(f"bad topic {text!r}: use NAME:PARTITIONS with PARTITIONS >= 1")
    return name, partitions


def sasl_user(text: str) -> Tuple[str, str]:
    """``"user:password"``, or ``"user"`` with the password in $KPRODUCER_MOCK_SASL_PASSWORD."""
    name, sep, password = text.partition(":")
    if not sep:
        password = os.environ.get(PASSWORD_ENV, "")
        if not password:
            raise argparse.ArgumentTypeError(f"bad --sasl-user {name!r}: use USER:PASSWORD, or set ${PASSWORD_ENV}")
    if not name or not password:
        raise argparse.ArgumentTypeError("bad --sasl-user: use USER:PASSWORD with both parts non-empty")
    return name, password


def mechanism(text: str) -> str:
    upper = text.upper()
    if upper not in ALL_MECHANISMS:
        raise argparse.ArgumentTypeError(f"unsupported SASL mechanism {text!r}: choose from {', '.join(ALL_MECHANISMS)}")
    return upper


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    parser.add_argument("--topic", dest="topics", action="append", type=topic_spec, default=[],
                        metavar="NAME:PARTITIONS", help="create a topic (repeatable)")
    parser.add_argument("--port", type=int, default=0,
                        help="first port; brokers use consecutive ports (default: free ports)")
    parser.add_argument("--auto-create-topics", action="store_true",
                        help="create unknown topics on Metadata requests")
    parser.add_argument("--default-partitions", type=int, default=1,
                        help="partitions of auto-created topics (default 1)")
    parser.add_argument("--processors", type=int, default=2, help="network threads per broker")
    parser.add_argument("--handlers", type=int, default=2, help="request handler threads per broker")
    parser.add_argument("--api-version", dest="api_versions", action="append", type=api_version_spec, default=[],
                        metavar="API=MAX|MIN-MAX|none",
                        help="play an older broker: serve this API only up to MAX (or MIN-MAX, or not at all), "
                             "e.g. --api-version Produce=7 --api-version ApiVersions=2 (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every connection and request")
    sec = parser.add_argument_group("security (--tls: SSL; --sasl-user: SASL_PLAINTEXT; both: SASL_SSL)")
    sec.add_argument("--tls", action="store_true",
                     help="serve TLS with a CA and a server certificate for localhost/127.0.0.1 made at start "
                          "(needs the cryptography package)")
    sec.add_argument("--ssl-client-auth", choices=["none", "requested", "required"], default="none",
                     help="ask clients for a certificate of the mock's CA (mutual TLS; default none)")
    sec.add_argument("--sasl-user", dest="sasl_users", action="append", type=sasl_user, default=[],
                     metavar="USER:PASSWORD",
                     help=f"enable SASL with this user (repeatable); USER alone takes the password from ${PASSWORD_ENV}")
    sec.add_argument("--sasl-mechanism", dest="sasl_mechanisms", action="append", type=mechanism, default=[],
                     metavar="MECHANISM",
                     help=f"SASL mechanism to enable (repeatable; default all: {', '.join(ALL_MECHANISMS)})")
    sec.add_argument("--session-lifetime-ms", type=int, default=0,
                     help="SASL session lifetime (KIP-368): clients must re-authenticate within it (default 0: never)")
    sec.add_argument("--ca-file", metavar="PATH",
                     help="write the CA certificate (PEM) here (default: a file in a temporary directory)")
    sec.add_argument("--client-config", metavar="PATH",
                     help="write the client settings (client.properties) here, readable by you only "
                          "(default: a file in a temporary directory)")


def api_version_spec(text: str) -> Tuple[str, Optional[Tuple[int, int]]]:
    """``"API=MAX"``, ``"API=MIN-MAX"`` or ``"API=none"`` (an older broker: see MockCluster's api_versions)."""
    name, sep, value = text.partition("=")
    value = value.strip().lower()
    if not sep or not name.strip() or not value:
        raise argparse.ArgumentTypeError(f"bad --api-version {text!r}: use API=MAX, API=MIN-MAX or API=none")
    if value == "none":
        return name.strip(), None
    lo_text, dash, hi_text = value.partition("-")
    try:
        hi = int(hi_text if dash else lo_text)
        lo = int(lo_text) if dash else -1
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad --api-version {text!r}: versions are integers") from None
    return name.strip(), (lo, hi)


def _api_versions(specs: Sequence[Tuple[str, Optional[Tuple[int, int]]]]) -> Dict[Union[str, int], VersionSpec]:
    out: Dict[Union[str, int], VersionSpec] = {}
    for name, rng in specs:
        out[name] = None if rng is None else (rng[1] if rng[0] < 0 else rng)
    return out


def build_cluster(args: argparse.Namespace) -> MockCluster:
    """A cluster from parsed arguments (a caller's namespace may lack the optional ones)."""
    brokers = int(getattr(args, "brokers", 3))
    first_port = int(getattr(args, "port", 0) or 0)
    ports: Optional[List[int]] = None
    if first_port:
        ports = [first_port + i for i in range(brokers)]
    tls = bool(getattr(args, "tls", False))
    users = dict(getattr(args, "sasl_users", None) or [])
    mechanisms = list(getattr(args, "sasl_mechanisms", None) or [])
    if mechanisms and not users:
        raise ValueError("--sasl-mechanism needs at least one --sasl-user")
    protocol = ("SASL_SSL" if tls else "SASL_PLAINTEXT") if users else ("SSL" if tls else "PLAINTEXT")
    security: Dict[str, Any] = {}
    if protocol != "PLAINTEXT":
        security["security_protocol"] = protocol
    if tls:
        security["ssl_client_auth"] = getattr(args, "ssl_client_auth", "none") or "none"
    if users:
        security.update(users=users, sasl_mechanisms=mechanisms or None,
                        session_lifetime_ms=int(getattr(args, "session_lifetime_ms", 0) or 0))
    return MockCluster(
        brokers,
        num_processors=int(getattr(args, "processors", 2)),
        num_handlers=int(getattr(args, "handlers", 2)),
        auto_create_topics=bool(getattr(args, "auto_create_topics", False)),
        default_partitions=int(getattr(args, "default_partitions", 1)),
        ports=ports,
        api_versions=_api_versions(getattr(args, "api_versions", None) or []) or None,
        **security,
    )


def _properties_value(value: str) -> str:
    """A value escaped for a Java .properties file."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + out if out.startswith(" ") else out


def _write_private(path: str, text: str) -> None:
    """Write ``text`` to ``path`` readable and writable by the owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    except OSError:  # not supported everywhere; the mode given to open() applies to new files
        pass
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def write_connection_files(cluster: MockCluster, args: argparse.Namespace) -> Tuple[List[str], Optional[str]]:
    """Write the CA file (TLS) and client.properties (any secured listener). Returns the lines to print
    and the temporary directory to remove at exit (None when the user named both paths)."""
    if cluster.security_protocol == "PLAINTEXT":
        return [], None
    temp_dir: Optional[str] = None

    def path_for(given: Optional[str], name: str) -> str:
        nonlocal temp_dir
        if given:
            return given
        if temp_dir is None:
            temp_dir = tempfile.mkdtemp(prefix="kproducer-mock-")
        return os.path.join(temp_dir, name)

    config = cluster.client_config()
    lines = [f"security.protocol={cluster.security_protocol}"]
    properties = {k: v for k, v in config.items() if not k.startswith("ssl.keystore.")}
    if "ssl.truststore.certificates" in config:
        ca_path = path_for(getattr(args, "ca_file", None), "ca.pem")
        with open(ca_path, "w", encoding="ascii") as f:
            f.write(cluster.ca_pem)
        del properties["ssl.truststore.certificates"]
        properties["ssl.truststore.location"] = ca_path
        lines.append(f"CA certificate (PEM): {ca_path}")
    if "ssl.keystore.key" in config:  # mutual TLS required: a client certificate for the properties file
        key_path = path_for(None, "client-keystore.pem")
        _write_private(key_path, config["ssl.keystore.key"] + config["ssl.keystore.certificate.chain"])
        properties.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": key_path})
        lines.append(f"client certificate and key (PEM): {key_path}")
    if "sasl.mechanism" in config:
        lines.append(f"sasl.mechanism={config['sasl.mechanism']} (enabled: {', '.join(cluster.sasl_mechanisms)})")
    props_path = path_for(getattr(args, "client_config", None), "client.properties")
    _write_private(props_path, "".join(f"{k}={_properties_value(str(v))}\n" for k, v in properties.items()))
    lines.append(f"client settings: {props_path}")
    return lines, temp_dir


def serve_forever(args: argparse.Namespace, stop: Optional[threading.Event] = None) -> int:
    """Start the cluster, print its bootstrap servers and serve until Ctrl-C (or ``stop`` is set)."""
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    topics = [topic_spec(t) if isinstance(t, str) else t for t in getattr(args, "topics", None) or []]
    cluster = build_cluster(args)
    waiter = stop or threading.Event()
    temp_dir: Optional[str] = None
    try:
        cluster.start()
        for name, partitions in topics:
            cluster.create_topic(name, partitions)
        lines, temp_dir = write_connection_files(cluster, args)
        print(cluster.bootstrap_servers, flush=True)
        for line in lines:
            print(line, flush=True)
        for name, partitions in topics:
            print(f"topic {name}: {partitions} partitions", flush=True)
        while not waiter.wait(0.5):
            pass
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr, flush=True)
    finally:
        cluster.close()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


def _exit_on_sigterm() -> None:
    """Stop cleanly on SIGTERM too (the files made for clients are removed), when in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, stop)
    except (ValueError, OSError):
        pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="kproducer mock-cluster",
                                     description="Run an in-process Kafka-protocol mock cluster.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.brokers < 1:
        parser.error("--brokers must be at least 1")
    if args.sasl_mechanisms and not args.sasl_users:
        parser.error("--sasl-mechanism needs at least one --sasl-user")
    if args.ssl_client_auth != "none" and not args.tls:
        parser.error("--ssl-client-auth needs --tls")
    if args.session_lifetime_ms < 0:
        parser.error("--session-lifetime-ms must be 0 or positive")
    if args.api_versions:
        try:
            restrict_versions(_api_versions(args.api_versions))
        except ValueError as e:
            parser.error(f"--api-version: {e}")
    _exit_on_sigterm()
    try:
        return serve_forever(args)
    except (OSError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
