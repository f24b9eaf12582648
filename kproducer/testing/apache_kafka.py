"""A real Apache Kafka cluster for tests, on loopback, without Docker.

:class:`ApacheKafka` starts Apache Kafka's own broker (the ``kafka.Kafka`` main class from the official jars) in
KRaft mode: one dedicated controller and ``brokers`` brokers (ids 1..N), each a JVM child process, with data,
configuration and logs in a temporary directory. Every port is a free 127.0.0.1 port. The listeners asked for
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) are served by every broker; brokers replicate over PLAINTEXT.

The jars come from ``$KAFKA_HOME/libs`` (an unpacked Kafka distribution) when that is set, otherwise Maven
resolves ``org.apache.kafka:kafka_2.13`` and ``kafka-tools`` of the asked version once into a cache directory
(``$KPRODUCER_KAFKA_CACHE`` or ``~/.cache/kproducer``). It needs Java 17+ (``java``) and, for that first
resolution, Maven (``mvn``); a missing one is an :class:`ApacheKafkaUnavailable` that says what to install.

Example::

    from kproducer.testing import ApacheKafka

    with ApacheKafka(brokers=3) as kafka:
        kafka.create_topic("t", partitions=6, replication_factor=3, config={"min.insync.replicas": "2"})
        with Producer(bootstrap_servers=kafka.bootstrap_servers) as p:
            p.send("t", b"v").get(30)

See docs/testing.md.
"""
from __future__ import annotations

import glob
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..mock.wire_client import WireClient
from ..protocol.errors import NO_ERROR, error_for_code
from ..protocol.messages import CREATE_TOPICS, METADATA

logger = logging.getLogger(__name__)

#: The Apache Kafka version used when none is asked for (``$KPRODUCER_KAFKA_VERSION`` overrides it).
DEFAULT_VERSION = "4.1.0"
#: The listener names (each is also its security protocol) a cluster can serve to clients.
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: SASL mechanisms every SASL listener enables.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: The SASL user that is always there (a super user when the authorizer is on), with its password.
ADMIN_USER = ("admin", "admin-secret")
CONTROLLER_ID = 100
_START_ATTEMPTS = 3
_LOG4J_SLF4J = "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3"


class ApacheKafkaUnavailable(RuntimeError):
    """Apache Kafka cannot be started here: Java or Maven is missing, or the jars could not be resolved.
    The message says what to install or set. Test suites usually turn this into a skip."""


class ApacheKafkaError(RuntimeError):
    """The cluster did something unexpected (a broker exited, an admin request failed); the message has the
    end of the broker's log."""


# --------------------------------------------------------------------------------------------- the jars


def _cache_root() -> str:
    env = os.environ.get("KPRODUCER_KAFKA_CACHE")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "kproducer")


def java_binary() -> str:
    """The ``java`` to run (``$JAVA_HOME/bin/java``, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if found is None:
        raise ApacheKafkaUnavailable(
            "Apache Kafka needs Java 17 or newer, and no 'java' is on PATH (nor in $JAVA_HOME): install a JDK, "
            "e.g. 'apt-get install openjdk-17-jre-headless'")
    return found


def _pom(version: str) -> str:
    deps = [("org.apache.kafka", "kafka_2.13", version), ("org.apache.kafka", "kafka-tools", version),
            tuple(_LOG4J_SLF4J.split(":"))]
    body = "".join(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
                   "</dependency>" for g, a, v in deps)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>kproducer.testing</groupId><artifactId>apache-kafka-jars</artifactId><version>1</version>"
            f"<packaging>pom</packaging><dependencies>{body}</dependencies></project>\n")


_resolve_lock = threading.Lock()


def kafka_libs(version: Optional[str] = None) -> str:
    """The directory of Apache Kafka's jars: ``$KAFKA_HOME/libs`` when ``KAFKA_HOME`` is set, else the cache
    directory for ``version``, resolved by Maven on first use."""
    home = os.environ.get("KAFKA_HOME")
    if home:
        libs = os.path.join(home, "libs")
        if not glob.glob(os.path.join(libs, "kafka_2.13-*.jar")):
            raise ApacheKafkaUnavailable(f"KAFKA_HOME={home} has no libs/kafka_2.13-*.jar: point it at an "
                                         "unpacked Apache Kafka distribution, or unset it to use Maven")
        return libs
    version = version or os.environ.get("KPRODUCER_KAFKA_VERSION") or DEFAULT_VERSION
    target = os.path.join(_cache_root(), f"apache-kafka-{version}", "libs")
    if os.path.exists(os.path.join(target, ".complete")):
        return target
    with _resolve_lock:
        if os.path.exists(os.path.join(target, ".complete")):
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise ApacheKafkaUnavailable(
                f"Apache Kafka {version}'s jars are not cached in {target} and Maven ('mvn') is not on PATH to "
                "resolve them: install Maven (e.g. 'apt-get install maven'), or set KAFKA_HOME to an unpacked "
                "Apache Kafka distribution")
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        work = tempfile.mkdtemp(prefix="resolve-", dir=parent)
        try:
            with open(os.path.join(work, "pom.xml"), "w", encoding="ascii") as f:
                f.write(_pom(version))
            out = os.path.join(work, "libs")
            logger.info("resolving Apache Kafka %s's jars with Maven into %s (once)", version, target)
            proc = subprocess.run(
                [mvn, "-q", "-B", "-f", os.path.join(work, "pom.xml"), "dependency:copy-dependencies",
                 f"-DoutputDirectory={out}", "-DincludeScope=runtime"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900, check=False)
            if proc.returncode != 0 or not glob.glob(os.path.join(out, "kafka_2.13-*.jar")):
                tail = proc.stdout.decode("utf-8", "replace")[-3000:]
                raise ApacheKafkaUnavailable(
                    f"Maven could not resolve Apache Kafka {version} (org.apache.kafka:kafka_2.13); is Maven "
                    f"Central reachable? mvn said:\n{tail}")
            open(os.path.join(out, ".complete"), "w").close()
            if os.path.exists(target):
                shutil.rmtree(target)
            os.replace(out, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def _version_of(libs: str) -> str:
    jars = glob.glob(os.path.join(libs, "kafka-clients-*.jar"))
    for jar in jars:
        name = os.path.basename(jar)[len("kafka-clients-"):-len(".jar")]
        if name and name[0].isdigit() and not name.endswith(("-test", "-tests")):
            return name
    return "unknown"


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (free when asked: another process may take it afterwards)."""
    return free_ports(1)[0]


def free_ports(count: int) -> List[int]:
    """``count`` distinct free TCP ports on 127.0.0.1, all bound at once while they are chosen (asked one at a
    time, the kernel may hand out a port again once its probe socket is closed)."""
    sockets: List[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _lost_port_race(message: str) -> bool:
    """Whether a failed start lost a race for its free ports: another process bound one before the JVM did
    (BindException), or two of the ports asked one after the other came out the same (Kafka's listener check)."""
    return "Address already in use" in message or "must have a different port" in message


def _quote(value: str) -> str:
    """A value for a JAAS option (inside double quotes)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _props(settings: Mapping[str, str]) -> str:
    """A Java ``.properties`` file's text (a backslash is written doubled)."""
    return "".join(f"{k}={v}\n".replace("\\", "\\\\") for k, v in settings.items())


#: log4j2 configuration of Kafka's command-line tools: warnings and errors only, on standard error
TOOLS_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kproducer.log.file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


# --------------------------------------------------------------------------------------------- the cluster


@dataclass
class PartitionState:
    """One partition as the brokers' metadata describes it."""
    partition: int
    leader: int
    leader_epoch: int
    replicas: List[int]
    isr: List[int]


class _Node:
    def __init__(self, node_id: int, directory: str, properties: Dict[str, str]) -> None:
        self.node_id = node_id
        self.directory = directory
        self.properties = properties
        self.config_path = os.path.join(directory, "server.properties")
        self.log_path = os.path.join(directory, "server.log")
        self.out_path = os.path.join(directory, "stdout.log")
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ApacheKafka:
    """A real Apache Kafka cluster (KRaft: one controller, ``brokers`` brokers) on 127.0.0.1.

    ``listeners``: the client listeners every broker serves, from :data:`LISTENERS`; PLAINTEXT is always
    there (the brokers replicate over it and :attr:`bootstrap_servers` names it). ``users``: SASL users and
    their passwords, for PLAIN and SCRAM-SHA-256/512 (the user ``admin`` / ``admin-secret`` is always added);
    OAUTHBEARER accepts Kafka's unsecured JWS tokens (``alg: none``) whose ``sub`` is the user.
    ``authorizer``: turn on Kafka's ``StandardAuthorizer`` (ACLs); ANONYMOUS (the PLAINTEXT listener, so the
    brokers themselves and :meth:`create_topic`) and ``admin`` are super users, anyone else needs ACLs
    (:meth:`add_acl`). ``ssl_client_auth``: ``"none"``, ``"requested"`` or ``"required"`` on the SSL
    listeners (mutual TLS: :meth:`client_certificate`). ``broker_config``: more broker settings, or
    replacements of ours (e.g. ``{"connections.max.reauth.ms": "5000"}``); ``controller_config`` the same for
    the controller (e.g. ``{"broker.session.timeout.ms": "3000"}``: how long a killed broker stays leader of
    its partitions, 9 s by default). ``version``: the Apache Kafka
    version to resolve with Maven (ignored with ``KAFKA_HOME``). ``heap``: each JVM's ``-Xmx``. ``jvm_options``:
    more options of every node's JVM, e.g. the system property Kafka 4.x needs before a broker fetches a JWKS
    (``-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=http://127.0.0.1:8080/jwks``); settings of one listener are
    ``broker_config`` entries with the listener prefix (``listener.name.sasl_plaintext.oauthbearer.sasl.server.
    callback.handler.class``).

    Use it as a context manager (or :meth:`start` / :meth:`close`). ``kill``, ``stop`` and ``restart`` take a
    broker id. The directory (:attr:`directory`) keeps every node's ``server.properties`` and ``server.log``
    until :meth:`close`; :meth:`log_tail` shows the end of them.
    """

    def __init__(self, brokers: int = 1, listeners: Sequence[str] = ("PLAINTEXT",), *,
                 users: Optional[Mapping[str, str]] = None, authorizer: bool = False,
                 ssl_client_auth: str = "none", broker_config: Optional[Mapping[str, str]] = None,
                 controller_config: Optional[Mapping[str, str]] = None,
                 version: Optional[str] = None, heap: str = "768m", start_timeout: float = 180.0,
                 keep_directory: bool = False, jvm_options: Sequence[str] = ()) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be 1 or more, got {brokers}")
        unknown = [name for name in listeners if name not in LISTENERS]
        if unknown:
            raise ValueError(f"unknown listener {unknown[0]!r}: choose among {', '.join(LISTENERS)}")
        if ssl_client_auth not in ("none", "requested", "required"):
            raise ValueError(f"ssl_client_auth must be 'none', 'requested' or 'required', got {ssl_client_auth!r}")
        self.broker_count = brokers
        self.listeners: Tuple[str, ...] = tuple(["PLAINTEXT"] + [n for n in LISTENERS if n in listeners
                                                                  and n != "PLAINTEXT"])
        self.users: Dict[str, str] = {ADMIN_USER[0]: ADMIN_USER[1], **(users or {})}
        self.authorizer = authorizer
        self.ssl_client_auth = ssl_client_auth
        self.broker_config = dict(broker_config or {})
        self.controller_config = dict(controller_config or {})
        self.jvm_options: Tuple[str, ...] = tuple(jvm_options)
        self._asked_version = version
        self.heap = heap
        self.start_timeout = start_timeout
        self.keep_directory = keep_directory
        self.libs = ""
        self.version = ""
        self.directory = ""
        self.cluster_id = ""
        self._ca: Any = None
        self._ca_path = ""
        self._controller: Optional[_Node] = None
        self._brokers: Dict[int, _Node] = {}
        self._ports: Dict[Tuple[int, str], int] = {}
        self._started = False

    # ------------------------------------------------------------------ public read-only facts

    @property
    def class_path(self) -> str:
        """The JVM class path of the cluster's jars (also runs Kafka's tools: :meth:`run_tool`)."""
        return os.path.join(self.libs, "*")

    @property
    def broker_ids(self) -> List[int]:
        return sorted(self._brokers)

    @property
    def bootstrap_servers(self) -> str:
        """The PLAINTEXT listener of every broker, ``host:port,...``."""
        return self.bootstrap_servers_for("PLAINTEXT")

    def bootstrap_servers_for(self, listener: str) -> str:
        """``host:port,...`` of ``listener`` (one of the listeners the cluster was started with) on every
        broker."""
        if listener not in self.listeners:
            raise ValueError(f"this cluster has no {listener} listener (it has: {', '.join(self.listeners)}); "
                             f"start it with listeners=({listener!r},)")
        return ",".join(f"127.0.0.1:{self._ports[(b, listener)]}" for b in self.broker_ids)

    def port(self, broker_id: int, listener: str = "PLAINTEXT") -> int:
        return self._ports[(broker_id, listener)]

    @property
    def ssl_ca_location(self) -> str:
        """PEM file of the test CA that signed the brokers' certificates (for ``ssl.truststore.location`` /
        ``ssl_cafile``)."""
        if not self._ca_path:
            raise ValueError("this cluster has no SSL or SASL_SSL listener, so no CA")
        return self._ca_path

    def client_certificate(self, common_name: str = "client") -> Tuple[str, str]:
        """A client certificate signed by the test CA, for mutual TLS: (certificate PEM file, key PEM file).
        The broker sees the principal ``User:CN=<common_name>,O=kproducer mock cluster``."""
        from ..mock.certs import issue_cert

        if self._ca is None:
            raise ValueError("this cluster has no SSL or SASL_SSL listener, so no CA")
        cert = issue_cert(self._ca, [], common_name=common_name, client=True)
        base = os.path.join(self.directory, f"client-{uuid.uuid4().hex[:8]}")
        _write_private(base + ".crt", cert.cert_pem)
        _write_private(base + ".key", cert.key_pem)
        return base + ".crt", base + ".key"

    def producer_config(self, listener: str = "PLAINTEXT", mechanism: str = "PLAIN", user: str = "admin",
                        password: Optional[str] = None) -> Dict[str, Any]:
        """kproducer settings (Java's names) that connect to ``listener``: the bootstrap servers, the security
        protocol, the CA for TLS listeners and ``user``'s credentials for SASL ones (``mechanism`` PLAIN,
        SCRAM-SHA-256 or SCRAM-SHA-512; OAUTHBEARER needs a token provider of your own)."""
        conf: Dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers_for(listener),
                                "security.protocol": listener}
        if "SSL" in listener:
            conf["ssl.truststore.location"] = self.ssl_ca_location
        if listener.startswith("SASL"):
            conf["sasl.mechanism"] = mechanism
            conf["sasl.username"] = user
            conf["sasl.password"] = self.users[user] if password is None else password
        return conf

    def pids(self) -> Dict[int, int]:
        """Process id of each running broker."""
        return {b: n.proc.pid for b, n in self._brokers.items() if n.proc is not None and n.alive}

    def controller_pid(self) -> Optional[int]:
        """Process id of the controller (:data:`CONTROLLER_ID`), None when it does not run."""
        node = self._controller
        return node.proc.pid if node is not None and node.proc is not None and node.alive else None

    def alive(self, broker_id: int) -> bool:
        return self._brokers[broker_id].alive

    # ------------------------------------------------------------------ start and stop

    def __enter__(self) -> "ApacheKafka":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> "ApacheKafka":
        """Resolve the jars, write each node's configuration, format the storage and start the controller
        and the brokers; returns once every broker is registered and unfenced."""
        if self._started:
            return self
        java_binary()
        self.libs = kafka_libs(self._asked_version)
        self.version = _version_of(self.libs)
        for attempt in range(1, _START_ATTEMPTS + 1):
            self.directory = tempfile.mkdtemp(prefix="kproducer-apache-kafka-")
            self.cluster_id = _cluster_id()
            self._brokers, self._ports, self._controller = {}, {}, None
            self._started = True
            try:
                self._configure()
                self._format()
                self._launch(self._controller)  # type: ignore[arg-type]
                for node in self._brokers.values():
                    self._launch(node)
                self.wait_for_brokers(self.broker_ids, timeout=self.start_timeout)
                break
            except ApacheKafkaError as e:
                self.close()
                # a free port is only free when asked: another process may bind it before the JVM does
                if not _lost_port_race(str(e)) or attempt == _START_ATTEMPTS:
                    raise
                logger.warning("another process took one of the cluster's ports while it started: starting again "
                               "on new ports")
            except BaseException:
                self.close()
                raise
        logger.info("Apache Kafka %s started: %d broker(s), PLAINTEXT %s, files in %s", self.version,
                    self.broker_count, self.bootstrap_servers, self.directory)
        return self

    def close(self) -> None:
        """Stop every process and remove the directory. The data goes with the directory, so the processes are
        killed at once (SIGKILL); with ``keep_directory`` they get a SIGTERM first and a few seconds to stop."""
        nodes = list(self._brokers.values()) + ([self._controller] if self._controller else [])
        for node in nodes:
            if node.alive:
                if self.keep_directory:
                    node.proc.terminate()  # type: ignore[union-attr]
                else:
                    node.proc.kill()  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        for node in nodes:
            if node.proc is None:
                continue
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(10)
        if self.directory and not self.keep_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        self._started = False

    def kill(self, broker_id: int) -> None:
        """SIGKILL broker ``broker_id`` (no controlled shutdown) and wait for it to end."""
        node = self._broker(broker_id)
        if node.alive:
            node.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            node.proc.wait(30)  # type: ignore[union-attr]

    def stop(self, broker_id: int, timeout: float = 90.0) -> None:
        """Controlled shutdown of ``broker_id`` (SIGTERM: it hands its leaderships over first), waiting up to
        ``timeout`` seconds before a SIGKILL."""
        node = self._broker(broker_id)
        if node.alive:
            node.proc.terminate()  # type: ignore[union-attr]
            try:
                node.proc.wait(timeout)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                logger.warning("broker %d did not stop within %.0f s: killing it", broker_id, timeout)
                node.proc.kill()  # type: ignore[union-attr]
                node.proc.wait(30)  # type: ignore[union-attr]

    def restart(self, broker_id: int, wait: bool = True) -> None:
        """Start ``broker_id`` again (stopping it first if it runs) on the same ports and data; with ``wait``,
        return once it is registered and unfenced again."""
        if self._broker(broker_id).alive:
            self.stop(broker_id)
        self._launch(self._brokers[broker_id])
        if wait:
            self.wait_for_brokers([broker_id], timeout=self.start_timeout)

    start_broker = restart

    def _broker(self, broker_id: int) -> _Node:
        try:
            return self._brokers[broker_id]
        except KeyError:
            raise ValueError(f"no broker {broker_id}: the brokers are {self.broker_ids}") from None

    # ------------------------------------------------------------------ admin

    def _client(self, timeout: float = 10.0) -> WireClient:
        last: Optional[BaseException] = None
        for b in self.broker_ids:
            if not self._brokers[b].alive:
                continue
            try:
                return WireClient("127.0.0.1", self._ports[(b, "PLAINTEXT")], timeout=timeout,
                                  client_id="kproducer-apache-kafka-admin")
            except OSError as e:
                last = e
        raise ApacheKafkaError(f"no broker of the cluster accepts connections ({last})")

    def metadata(self, topics: Optional[Iterable[str]] = None, broker_id: Optional[int] = None
                 ) -> Dict[str, Any]:
        """A Metadata (v12) answer from ``broker_id`` (any live broker by default) for ``topics`` (all when
        None)."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
        if broker_id is None:
            with self._client() as client:
                return client.request(METADATA, 12, body)
        with WireClient("127.0.0.1", self._ports[(broker_id, "PLAINTEXT")], timeout=10,
                        client_id="kproducer-apache-kafka-admin") as client:
            return client.request(METADATA, 12, body)

    def partitions(self, topic: str, broker_id: Optional[int] = None) -> Dict[int, PartitionState]:
        """The partitions of ``topic`` as a broker's metadata describes them (empty if the topic is unknown)."""
        md = self.metadata([topic], broker_id)
        out: Dict[int, PartitionState] = {}
        for t in md["topics"]:
            if t["error_code"] != NO_ERROR:
                continue
            for p in t["partitions"]:
                out[p["partition_index"]] = PartitionState(p["partition_index"], p["leader_id"],
                                                           p["leader_epoch"], list(p["replica_nodes"]),
                                                           list(p["isr_nodes"]))
        return out

    def leader(self, topic: str, partition: int) -> int:
        """The broker id that leads ``topic``-``partition`` now (-1 while it has none)."""
        state = self.partitions(topic).get(partition)
        if state is None:
            raise ValueError(f"{topic}-{partition} does not exist")
        return state.leader

    def create_topic(self, name: str, partitions: int = 1, replication_factor: Optional[int] = None,
                     config: Optional[Mapping[str, str]] = None, timeout: float = 60.0) -> None:
        """Create ``name`` and wait until every live broker knows a leader for each partition.
        ``replication_factor`` defaults to the number of brokers, at most 3."""
        rf = min(3, self.broker_count) if replication_factor is None else replication_factor
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                            "assignments": [], "configs": [{"name": k, "value": str(v)}
                                                           for k, v in (config or {}).items()]}],
                "timeout_ms": int(timeout * 1000), "validate_only": False}
        with self._client(timeout=timeout + 5) as client:
            resp = client.request(CREATE_TOPICS, 7, body)
        (result,) = resp["topics"]
        if result["error_code"] != NO_ERROR:
            error = error_for_code(result["error_code"], result.get("error_message"))
            raise ApacheKafkaError(f"creating topic {name!r} failed: {type(error).__name__}: {error}")
        self.wait_for_topic(name, partitions, timeout)

    def wait_for_topic(self, name: str, partitions: int, timeout: float = 60.0) -> None:
        """Wait until every live broker's metadata has ``partitions`` partitions of ``name``, each with a
        leader."""
        deadline = time.monotonic() + timeout
        pending = [b for b in self.broker_ids if self._brokers[b].alive]
        while pending:
            b = pending[0]
            try:
                state = self.partitions(name, broker_id=b)
            except OSError:
                state = {}
            if len(state) == partitions and all(p.leader >= 0 for p in state.values()):
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise ApacheKafkaError(f"topic {name!r} has no leader for every partition on broker {b} after "
                                       f"{timeout:.0f} s: {state}")
            time.sleep(0.05)

    def wait_for_brokers(self, broker_ids: Iterable[int], timeout: float = 120.0) -> None:
        """Wait until the cluster's metadata lists every broker of ``broker_ids`` (registered, unfenced)."""
        wanted = set(broker_ids)
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            for node in list(self._brokers.values()) + [self._controller]:  # type: ignore[list-item]
                if node is not None and node.proc is not None and node.proc.poll() is not None:
                    raise ApacheKafkaError(f"node {node.node_id} exited with {node.proc.returncode}\n"
                                           f"{self.log_tail(node.node_id)}")
            try:
                md = self.metadata([], broker_id=min(wanted))
                last = {br["node_id"] for br in md["brokers"]}
                if wanted <= last:
                    return
            except OSError as e:
                last = e
            if time.monotonic() > deadline:
                raise ApacheKafkaError(f"brokers {sorted(wanted)} were not all up after {timeout:.0f} s (last "
                                       f"seen: {last})\n" + "\n".join(self.log_tail(b) for b in sorted(wanted)))
            time.sleep(0.1)

    def run_tool(self, main_class: str, *args: str, timeout: float = 120.0, check: bool = True
                 ) -> "subprocess.CompletedProcess[str]":
        """Run one of Kafka's command-line tools (``main_class``, e.g. ``org.apache.kafka.tools.AclCommand``)
        with the cluster's jars; returns the finished process (output as text)."""
        proc = subprocess.run(self._tool_command(main_class, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise ApacheKafkaError(f"{main_class} {' '.join(args)} exited with {proc.returncode}:\n"
                                   f"{proc.stdout[-3000:]}")
        return proc

    def _tool_command(self, main_class: str, *args: str) -> List[str]:
        """The command line of a short JVM run of one of Kafka's tools: a small heap, the quick JIT tier, warnings
        only."""
        return [java_binary(), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                f"-Dlog4j2.configurationFile={os.path.join(self.directory, 'log4j2-tools.properties')}",
                "-cp", self.class_path, main_class, *args]

    def add_acl(self, principal: str, operation: str, *, topic: Optional[str] = None,
                group: Optional[str] = None, transactional_id: Optional[str] = None, cluster: bool = False,
                deny: bool = False) -> None:
        """Allow (or ``deny``) ``principal`` (e.g. ``"User:alice"``) ``operation`` (Write, Describe,
        IdempotentWrite, ...) on a topic, group, transactional id or the cluster (Kafka's AclCommand)."""
        args = ["--bootstrap-server", self.bootstrap_servers, "--add",
                "--deny-principal" if deny else "--allow-principal", principal, "--operation", operation]
        if topic is not None:
            args += ["--topic", topic]
        if group is not None:
            args += ["--group", group]
        if transactional_id is not None:
            args += ["--transactional-id", transactional_id]
        if cluster:
            args.append("--cluster")
        self.run_tool("org.apache.kafka.tools.AclCommand", *args)

    def set_quota(self, *, user: Optional[str] = None, client_id: Optional[str] = None,
                  producer_byte_rate: Optional[int] = None, **quotas: float) -> None:
        """Set client quotas (e.g. ``producer_byte_rate``) for a user and/or client id (Kafka's
        ConfigCommand)."""
        if producer_byte_rate is not None:
            quotas["producer_byte_rate"] = producer_byte_rate
        args = ["--bootstrap-server", self.bootstrap_servers, "--alter", "--add-config",
                ",".join(f"{k}={v}" for k, v in quotas.items())]
        if user is not None:
            args += ["--entity-type", "users", "--entity-name", user]
        if client_id is not None:
            args += ["--entity-type", "clients", "--entity-name", client_id]
        self.run_tool("kafka.admin.ConfigCommand", *args)

    def log_tail(self, node_id: int, lines: int = 40) -> str:
        """The last ``lines`` of node ``node_id``'s server log and console output (the controller is
        :data:`CONTROLLER_ID`)."""
        node = self._controller if node_id == CONTROLLER_ID else self._brokers.get(node_id)
        if node is None:
            return f"(no node {node_id})"
        parts = []
        for path in (node.log_path, node.out_path):
            try:
                with open(path, "r", encoding="utf-8", errors="replace") as f:
                    text = f.readlines()[-lines:]
            except OSError:
                continue
            parts.append(f"--- {path} (last {len(text)} lines)\n" + "".join(text))
        return "\n".join(parts) or f"(node {node_id} wrote no log yet)"

    def logs(self, lines: int = 40) -> str:
        """:meth:`log_tail` of every node."""
        return "\n".join(self.log_tail(n, lines) for n in [CONTROLLER_ID] + self.broker_ids)

    # ------------------------------------------------------------------ setup

    def _configure(self) -> None:
        wanted = [(b, listener) for b in range(1, self.broker_count + 1) for listener in self.listeners]
        controller_port, *ports = free_ports(1 + len(wanted))
        self._ports.update(zip(wanted, ports))
        with open(os.path.join(self.directory, "log4j2-tools.properties"), "w", encoding="ascii") as f:
            f.write(TOOLS_LOG4J2)
        with open(os.path.join(self.directory, "log4j2.properties"), "w", encoding="ascii") as f:
            f.write(_LOG4J2)
        tls = any("SSL" in n for n in self.listeners)
        keystore = ""
        if tls:
            from ..mock.certs import issue_cert, make_ca

            self._ca = make_ca("kproducer Apache Kafka test CA")
            server = issue_cert(self._ca, ["localhost", "127.0.0.1"], common_name="localhost")
            self._ca_path = os.path.join(self.directory, "ca.pem")
            _write_private(self._ca_path, self._ca.cert_pem)
            keystore = os.path.join(self.directory, "broker-keystore.pem")
            _write_private(keystore, server.key_pem + server.cert_pem)
        voters = f"{CONTROLLER_ID}@127.0.0.1:{controller_port}"
        common: Dict[str, str] = {
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "log.flush.interval.messages": str(2**62),
        }
        if self.authorizer:
            common["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            common["super.users"] = f"User:ANONYMOUS;User:{ADMIN_USER[0]}"
        cdir = os.path.join(self.directory, "controller")
        os.makedirs(cdir)
        self._controller = _Node(CONTROLLER_ID, cdir, {
            **common,
            "process.roles": "controller",
            "node.id": str(CONTROLLER_ID),
            "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            "log.dirs": os.path.join(cdir, "data"),
        })
        self._controller.properties.update({k: str(v) for k, v in self.controller_config.items()})
        rf = str(min(3, self.broker_count))
        for b in range(1, self.broker_count + 1):
            bdir = os.path.join(self.directory, f"broker-{b}")
            os.makedirs(bdir)
            endpoints = ",".join(f"{n}://127.0.0.1:{self._ports[(b, n)]}" for n in self.listeners)
            props: Dict[str, str] = {
                **common,
                "process.roles": "broker",
                "node.id": str(b),
                "listeners": endpoints,
                "advertised.listeners": endpoints,
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
                                                  "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
                "inter.broker.listener.name": "PLAINTEXT",
                "log.dirs": os.path.join(bdir, "data"),
                "offsets.topic.replication.factor": rf,
                "offsets.topic.num.partitions": "5",
                "transaction.state.log.replication.factor": rf,
                "transaction.state.log.min.isr": str(min(2, self.broker_count)),
                "transaction.state.log.num.partitions": "5",
                "share.coordinator.state.topic.replication.factor": rf,
                "share.coordinator.state.topic.min.isr": "1",
                "group.initial.rebalance.delay.ms": "0",
                "num.partitions": "1",
                "default.replication.factor": "1",
                "auto.create.topics.enable": "false",
            }
            if tls:
                props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": keystore,
                              "ssl.truststore.type": "PEM", "ssl.truststore.location": self._ca_path,
                              "ssl.client.auth": self.ssl_client_auth,
                              "ssl.endpoint.identification.algorithm": "https"})
            sasl = [n for n in self.listeners if n.startswith("SASL")]
            if sasl:
                props["sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
                plain_users = " ".join(f'user_{u}="{_quote(p)}"' for u, p in self.users.items())
                for n in sasl:
                    prefix = f"listener.name.{n.lower()}"
                    props[f"{prefix}.plain.sasl.jaas.config"] = (
                        f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};")
                    for mech in ("scram-sha-256", "scram-sha-512"):
                        props[f"{prefix}.{mech}.sasl.jaas.config"] = (
                            "org.apache.kafka.common.security.scram.ScramLoginModule required;")
                    props[f"{prefix}.oauthbearer.sasl.jaas.config"] = (
                        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                        'unsecuredLoginStringClaim_sub="admin";')
            props.update({k: str(v) for k, v in self.broker_config.items()})
            self._brokers[b] = _Node(b, bdir, props)
        for node in [self._controller, *self._brokers.values()]:
            with open(node.config_path, "w", encoding="utf-8") as f:
                f.write(_props(node.properties))
            os.chmod(node.config_path, 0o600)

    def _format(self) -> None:
        """Format every node's storage with the cluster id (in parallel: each is a short JVM run); the
        controller's also holds the SCRAM credentials of :attr:`users`."""
        scram: List[str] = []
        for user, password in self.users.items():
            for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                scram += ["--add-scram", f'{mech}=[name={user},password="{_quote(password)}"]']
        procs = []
        for node in [self._controller, *self._brokers.values()]:
            assert node is not None
            args = ["format", "-t", self.cluster_id, "-c", node.config_path, "--ignore-formatted"]
            if node is self._controller:
                args += scram
            procs.append((node, subprocess.Popen(self._tool_command("kafka.tools.StorageTool", *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        for node, proc in procs:
            out, _ = proc.communicate(timeout=180)
            if proc.returncode != 0:
                text = out.decode("utf-8", "replace").replace(self.cluster_id, "<cluster id>")
                for password in self.users.values():
                    text = text.replace(password, "****")
                raise ApacheKafkaError(f"formatting node {node.node_id}'s storage failed ({proc.returncode}):\n"
                                       f"{text[-3000:]}")

    def _launch(self, node: _Node) -> None:
        cmd = [java_binary(), f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-Djava.awt.headless=true", f"-Dkproducer.log.file={node.log_path}",
               f"-Dlog4j2.configurationFile={os.path.join(self.directory, 'log4j2.properties')}",
               *self.jvm_options, "-cp", self.class_path, "kafka.Kafka", node.config_path]
        out = open(node.out_path, "ab")
        try:
            node.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            out.close()


def _cluster_id() -> str:
    """A random cluster id in Kafka's form (a UUID in base64url). Never one that starts with '-', which the
    storage tool's argument parser would read as an option (as Kafka's own ``Uuid.randomUuid()`` avoids)."""
    import base64

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)


__all__ = ["ADMIN_USER", "TOOLS_LOG4J2", "ApacheKafka", "ApacheKafkaError", "ApacheKafkaUnavailable", "DEFAULT_VERSION",
           "LISTENERS", "PartitionState", "SASL_MECHANISMS", "free_port", "java_binary", "kafka_libs"]
