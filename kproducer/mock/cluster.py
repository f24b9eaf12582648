"""MockCluster: an in-process Kafka-protocol cluster for tests, examples and benchmarks."""
from __future__ import annotations

import logging
import ssl
from collections import Counter
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, Union

from .acl import CLUSTER, CLUSTER_NAME, GROUP, TOPIC, TRANSACTIONAL_ID, AclBinding, Authorizer
from .apis import API_NAMES, SERVED_VERSIONS, VersionSpec, restrict_versions
from .broker import MockBroker
from .faults import FaultInjector, RequestLogEntry
from .log import StoredRecord, decode_batches
from .mock_clock import SYSTEM_CLOCK, MockClock
from .security import ALL_MECHANISMS, CLIENT_AUTH, SECURITY_PROTOCOLS, ListenerSecurity
from .state import ClusterConfig, ClusterState, PartitionState, TopicError
from .txn import TransactionCoordinator

log = logging.getLogger(__name__)


def jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes (backslash escapes for ``\\`` and ``"``)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class MockCluster:
    """``num_brokers`` Kafka-protocol brokers on 127.0.0.1 (ids 1..n), sharing one in-memory store.

    Usable as a context manager (``start()`` on enter, ``close()`` on exit). Every broker listens on
    a free port unless ``ports`` gives them; a stopped broker keeps its port for ``start_broker``.

    Options: ``num_processors`` network threads and ``num_handlers`` request handler threads per
    broker; ``auto_create_topics`` (Metadata for an unknown topic creates it with
    ``default_partitions``, else UNKNOWN_TOPIC_OR_PARTITION); ``max_message_bytes`` (a larger batch is
    refused with MESSAGE_TOO_LARGE); ``max_request_size`` (a larger request frame closes the
    connection); ``max_fetch_wait_ms`` (cap on a Fetch's wait for data); ``validate_records`` (decode
    every produced record, slower); ``move_leaders_on_stop`` (a stopped broker's partitions get a
    live leader, as with replication; otherwise they are leaderless until it restarts).

    Security (every broker's listener is the same): ``security_protocol`` PLAINTEXT, SSL,
    SASL_PLAINTEXT or SASL_SSL. TLS uses ``ssl_context`` (a server context) or, when None, a CA and a
    server certificate for ``localhost`` / 127.0.0.1 that the cluster makes itself (needs the
    ``cryptography`` package; :attr:`ca_pem` is the CA to trust); ``ssl_client_auth`` "requested" or
    "required" asks clients for a certificate of that CA (:meth:`issue_client_certificate`). SASL serves
    ``sasl_mechanisms`` (default: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER, which accepts
    unsecured JWTs, or with ``oauthbearer_validator`` signed ones: a
    :class:`kproducer.mock.security.JwtValidator` checks RS256 JWTs against a JWKS, as Apache Kafka's
    OAuthBearerValidatorCallbackHandler) for ``users`` (name -> password); ``session_lifetime_ms`` > 0 makes sessions expire
    (KIP-368): SaslAuthenticate v1+ tells clients, and a connection that has not re-authenticated in
    time is closed at its next request. ``ssl_ca_pem`` is the CA of a given ``ssl_context`` (for
    :attr:`ca_pem` and :meth:`client_config`); ``scram_iterations`` the SCRAM iteration count.
    :meth:`client_config` gives the client settings to connect; :attr:`auth_stats` and
    :attr:`connection_count_total` count authentications and connections.

    An older broker: ``api_versions`` limits what every broker advertises in ApiVersions and accepts,
    per API (name or key): a max version, a ``(min, max)`` pair, or None for an API the broker does not
    have, e.g. ``{"ApiVersions": 2, "Produce": 7, "Metadata": 8, "InitProducerId": None}`` (see
    :func:`kproducer.mock.apis.restrict_versions`). As Kafka, a request of a version not served closes
    the connection, except ApiVersions, which is answered UNSUPPORTED_VERSION encoded as v0 listing the
    ApiVersions versions served; ``unsupported_api_versions_reply="as_requested"`` answers it instead in
    the requested version's flexible shape, which parses as neither (as some Kafka-protocol servers do).
    :attr:`served_versions` is what the brokers serve.

    Time: ``clock`` (any object with ``monotonic_ms()`` and ``wall_ms()``, e.g.
    :class:`kproducer.clock.FakeClock`) is the time source of the cluster's timeouts (transaction
    timeouts, SASL session lifetimes, injected latency, a Fetch's wait for data, the close after a failed
    authentication) and of its transaction markers' timestamps, so a test can step time instead of
    sleeping (see :mod:`kproducer.mock.mock_clock`). Default: real time.

    Quotas: :meth:`set_quota` (``producer_byte_rate``), measured over ``quota_window_num`` samples of
    ``quota_window_ms`` (Kafka's quota.window.num / quota.window.size.seconds: 11 of 1 s); see
    :mod:`kproducer.mock.quotas`. Replicas: ``create_topic(replication_factor=, config=)``.

    ACLs: ``authorizer=True`` authorizes requests as Apache Kafka's StandardAuthorizer does (see
    :mod:`kproducer.mock.acl` and :meth:`add_acl`); ``super_users`` (e.g. ``("User:admin",)``) may do
    anything. Default: off, everything is allowed.

    Transactions: ``transaction_version`` is the finalized ``transaction.version`` feature ApiVersions v3+
    advertises (0, 1 or 2; default 2, as a new Apache Kafka 4.x cluster); the brokers serve transactions v2
    (Produce v12, EndTxn v5, TxnOffsetCommit v5: KIP-890) at levels 1 and 2, as Apache Kafka 4.1 does, and
    refuse it with UNSUPPORTED_VERSION at 0. :meth:`set_transaction_version` changes it while running. See
    docs/mock.md.
    """

    def __init__(
        self,
        num_brokers: int = 1,
        *,
        num_processors: int = 2,
        num_handlers: int = 2,
        auto_create_topics: bool = False,
        default_partitions: int = 1,
        max_message_bytes: int = 1048588,
        max_request_size: int = 100 * 1024 * 1024,
        max_fetch_wait_ms: int = 500,
        validate_records: bool = False,
        move_leaders_on_stop: bool = True,
        host: str = "127.0.0.1",
        ports: Optional[Sequence[int]] = None,
        security_protocol: str = "PLAINTEXT",
        sasl_mechanisms: Optional[Sequence[str]] = None,
        users: Optional[Mapping[str, str]] = None,
        session_lifetime_ms: int = 0,
        ssl_context: Optional[ssl.SSLContext] = None,
        ssl_ca_pem: Optional[str] = None,
        ssl_client_auth: str = "none",
        scram_iterations: int = 4096,
        api_versions: Optional[Mapping[Union[str, int], VersionSpec]] = None,
        unsupported_api_versions_reply: str = "v0",
        clock: Optional[MockClock] = None,
        quota_window_ms: float = 1000.0,
        quota_window_num: int = 11,
        authorizer: bool = False,
        super_users: Sequence[str] = (),
        transaction_version: int = 2,
        oauthbearer_validator: Optional[Callable[[str], Tuple[str, float, Tuple[str, ...]]]] = None,
    ) -> None:
        if num_brokers < 1:
            raise ValueError("num_brokers must be at least 1")
        if ports is not None and len(ports) != num_brokers:
            raise ValueError(f"{len(ports)} ports given for {num_brokers} brokers")
        if default_partitions < 1:
            raise ValueError("default_partitions must be at least 1")
        if unsupported_api_versions_reply not in ("v0", "as_requested"):
            raise ValueError(f"unsupported_api_versions_reply must be 'v0' or 'as_requested', "
                             f"not {unsupported_api_versions_reply!r}")
        config = ClusterConfig(
            auto_create_topics=auto_create_topics,
            default_partitions=default_partitions,
            max_message_bytes=max_message_bytes,
            max_request_size=max_request_size,
            max_fetch_wait_ms=max_fetch_wait_ms,
            validate_records=validate_records,
            move_leaders_on_stop=move_leaders_on_stop,
            served_versions=restrict_versions(api_versions) if api_versions else None,
            unsupported_api_versions_reply=unsupported_api_versions_reply,
            quota_window_ms=quota_window_ms,
            quota_window_num=quota_window_num,
            transaction_version=transaction_version,
        )
        self._certs: Optional[Any] = None  # kproducer.mock.certs.Certificates when the cluster made them
        self._ca_pem = ssl_ca_pem
        self.clock: MockClock = clock if clock is not None else SYSTEM_CLOCK
        self._security = self._make_security(
            security_protocol, sasl_mechanisms, users, session_lifetime_ms, ssl_context, ssl_client_auth,
            scram_iterations, host,
        )
        self._security.oauth_validator = oauthbearer_validator
        self._faults = FaultInjector(API_NAMES.values(), clock=self.clock)
        self._state = ClusterState(config, self._faults, self.clock)
        self._state.authorizer = Authorizer(authorizer, super_users)
        self._txn = TransactionCoordinator(self._state)
        self._brokers: Dict[int, MockBroker] = {}
        for i in range(num_brokers):
            broker_id = i + 1
            port = ports[i] if ports is not None else 0
            self._brokers[broker_id] = MockBroker(
                broker_id, host, port, self._state, self._txn, num_processors, num_handlers, self._security
            )
        self._started = False

    def _make_security(
        self,
        protocol: str,
        mechanisms: Optional[Sequence[str]],
        users: Optional[Mapping[str, str]],
        session_lifetime_ms: int,
        ssl_context: Optional[ssl.SSLContext],
        client_auth: str,
        scram_iterations: int,
        host: str,
    ) -> ListenerSecurity:
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, not {protocol!r}")
        if client_auth not in CLIENT_AUTH:
            raise ValueError(f"ssl_client_auth must be one of {', '.join(CLIENT_AUTH)}, not {client_auth!r}")
        tls = protocol in ("SSL", "SASL_SSL")
        sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        if not tls and (ssl_context is not None or client_auth != "none"):
            raise ValueError(f"ssl_context and ssl_client_auth need security_protocol SSL or SASL_SSL, not {protocol}")
        if not sasl and (mechanisms or users):
            raise ValueError(f"sasl_mechanisms and users need security_protocol SASL_PLAINTEXT or SASL_SSL, "
                             f"not {protocol}")
        self._client_auth = client_auth
        if tls and ssl_context is None:
            from .certs import make_certificates, server_context

            names = ["localhost", "127.0.0.1"]
            if host not in names:
                names.append(host)
            self._certs = make_certificates(names)
            ssl_context = server_context(self._certs, client_auth)
            self._ca_pem = self._certs.ca_pem
        elif tls and ssl_context is not None and client_auth != "none":
            ssl_context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
        return ListenerSecurity(
            protocol,
            ssl_context=ssl_context,
            sasl_mechanisms=list(mechanisms) if mechanisms else list(ALL_MECHANISMS),
            users=users,
            session_lifetime_ms=session_lifetime_ms,
            scram_iterations=scram_iterations,
            clock=self.clock,
        )

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> "MockCluster":
        if self._started:
            return self
        try:
            for broker in self._brokers.values():
                broker.start()
        except BaseException:
            self.stop()
            raise
        self._started = True
        log.info("mock cluster started: %s", self.bootstrap_servers)
        return self

    def stop(self) -> None:
        """Stop every broker and its threads. The data, the ports and the partition leaders stay: a
        later start() serves them again."""
        for broker in self._brokers.values():
            broker.stop(move_leaders=False)
        self._started = False

    close = stop

    def __enter__(self) -> "MockCluster":
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------- brokers

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:p1,127.0.0.1:p2,..."`` (every broker, running or not)."""
        if not self._started and not any(b.port for b in self._brokers.values()):
            raise RuntimeError("the mock cluster is not started: use start() or a with block")
        return ",".join(f"{b.info.host}:{b.port}" for b in self._brokers.values())

    @property
    def broker_ids(self) -> List[int]:
        return sorted(self._brokers)

    def broker_address(self, broker_id: int) -> Tuple[str, int]:
        b = self._broker(broker_id)
        return b.info.host, b.port

    def _broker(self, broker_id: int) -> MockBroker:
        try:
            return self._brokers[broker_id]
        except KeyError:
            raise KeyError(f"no broker {broker_id}; broker ids are {self.broker_ids}") from None

    def stop_broker(self, broker_id: int) -> None:
        """Stop one broker: its port closes, its connections drop; with ``move_leaders_on_stop`` its
        partitions move to live brokers (leader epoch + 1)."""
        self._broker(broker_id).stop()

    def start_broker(self, broker_id: int) -> None:
        """Restart a stopped broker on the same port. Leadership does not move back by itself."""
        self._broker(broker_id).start()

    def is_running(self, broker_id: int) -> bool:
        return self._broker(broker_id).running

    def drop_connections(self, broker_id: Optional[int] = None) -> None:
        """Close every client connection of a broker (of all brokers when None); it keeps serving."""
        targets = self._brokers.values() if broker_id is None else [self._broker(broker_id)]
        for broker in targets:
            broker.drop_connections()

    def connection_count(self, broker_id: int) -> int:
        return self._broker(broker_id).connection_count

    @property
    def connection_count_total(self) -> int:
        """Connections accepted since the cluster was created, all brokers together."""
        return sum(b.connections_accepted for b in self._brokers.values())

    # ------------------------------------------------------------------------------ security

    @property
    def security_protocol(self) -> str:
        return self._security.protocol

    @property
    def sasl_mechanisms(self) -> List[str]:
        return list(self._security.mechanisms)

    @property
    def ca_pem(self) -> str:
        """The PEM certificate of the CA clients must trust (TLS listeners)."""
        if not self._security.tls:
            raise RuntimeError(f"the mock cluster's listeners are {self._security.protocol}: no TLS, no CA")
        if self._ca_pem is None:
            raise RuntimeError("the mock cluster serves TLS with the ssl_context it was given: "
                               "pass ssl_ca_pem= too to get ca_pem and client_config()")
        return self._ca_pem

    def issue_client_certificate(self, name: str = "client") -> Tuple[str, str]:
        """A client certificate (PEM) and its key (PEM, unencrypted) issued by the cluster's own CA,
        for mutual TLS (``ssl_client_auth``)."""
        if self._certs is None:
            raise RuntimeError("only a mock cluster that made its own certificates (TLS, no ssl_context) "
                               "can issue client certificates")
        from .certs import issue_cert

        issued = issue_cert(self._certs.ca, [name], common_name=name, client=True)
        return issued.cert_pem, issued.key_pem

    @property
    def auth_stats(self) -> Dict[str, int]:
        """SASL counters, all brokers: "attempts" (SaslHandshake requests, re-authentications included),
        "successes", "failures", "reauthentications" and "expired_connections" (closed at a request
        after their session expired)."""
        return self._security.stats.snapshot()

    def client_config(self, user: Optional[str] = None, mechanism: Optional[str] = None) -> Dict[str, Any]:
        """The client settings (Java names) to reach this cluster: ``bootstrap.servers`` and
        ``security.protocol``; with TLS ``ssl.truststore.type`` PEM and ``ssl.truststore.certificates``
        (plus a client certificate in ``ssl.keystore.*`` when client certificates are required); with
        SASL ``sasl.mechanism`` (``mechanism`` or the first enabled) and ``sasl.jaas.config`` for
        ``user`` (or the first user; OAUTHBEARER: an unsecured token for that principal)."""
        sec = self._security
        config: Dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "security.protocol": sec.protocol}
        if sec.tls:
            config["ssl.truststore.type"] = "PEM"
            config["ssl.truststore.certificates"] = self.ca_pem
            if self._client_auth == "required" and self._certs is not None:
                cert, key = self.issue_client_certificate()
                config.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": cert,
                               "ssl.keystore.key": key})
        if sec.sasl:
            mech = (mechanism or sec.mechanisms[0]).upper()
            if mech not in sec.mechanisms:
                raise ValueError(f"SASL mechanism {mech} is not enabled; enabled: {', '.join(sec.mechanisms)}")
            name = user if user is not None else next(iter(sec.users), None)
            config["sasl.mechanism"] = mech
            if mech == "OAUTHBEARER":
                config["sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                    f"unsecuredLoginStringClaim_sub={jaas_quote(name or 'alice')};")
            else:
                if name is None:
                    raise ValueError("the mock cluster has no users: pass users={name: password}")
                if name not in sec.users:
                    raise KeyError(f"unknown user {name!r}")
                module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mech == "PLAIN"
                          else "org.apache.kafka.common.security.scram.ScramLoginModule")
                config["sasl.jaas.config"] = (f"{module} required username={jaas_quote(name)} "
                                              f"password={jaas_quote(sec.users[name])};")
        return config

    # ---------------------------------------------------------------------------------- ACLs

    def add_acl(self, principal: str, operation: str, *, topic: Optional[str] = None,
                group: Optional[str] = None, transactional_id: Optional[str] = None, cluster: bool = False,
                deny: bool = False) -> None:
        """Allow (or ``deny``) ``principal`` (``"User:alice"``, ``"User:CN=x,O=y"``, ``"User:*"``) an
        ``operation`` (Write, Describe, Read, Create, IdempotentWrite, All, ...) on one resource: a topic,
        group or transactional id (``"*"``: all of them), or the cluster. Takes effect at the next request
        (Apache Kafka: shortly after). Needs ``authorizer=True``."""
        if not self._state.authorizer.enabled:
            raise RuntimeError("the mock cluster's authorizer is off: MockCluster(authorizer=True)")
        given = [(TOPIC, topic), (GROUP, group), (TRANSACTIONAL_ID, transactional_id),
                 (CLUSTER, CLUSTER_NAME if cluster else None)]
        resources = [(kind, name) for kind, name in given if name is not None]
        if len(resources) != 1:
            raise ValueError("give exactly one of topic=, group=, transactional_id=, cluster=True")
        (kind, name), = resources
        self._state.authorizer.add(principal, operation, kind, name, deny=deny)

    def remove_acls(self, principal: Optional[str] = None) -> int:
        """Remove every ACL (of ``principal`` only, when given); returns how many were removed."""
        return self._state.authorizer.remove(principal)

    def acls(self) -> List[AclBinding]:
        return self._state.authorizer.acls()

    # -------------------------------------------------------------------------------- quotas

    def set_quota(self, *, client_id: Optional[str] = None, user: Optional[str] = None,
                  producer_byte_rate: Optional[float]) -> None:
        """Limit the Produce bytes per second of a client id and/or a (SASL) user, per broker, as Apache
        Kafka's ``producer_byte_rate`` quota (None removes it). Each broker measures the rate over
        ``quota_window_num`` samples of ``quota_window_ms`` (constructor options; Kafka: 11 of 1 s) and,
        above the quota, answers Produce at once with ``throttle_time_ms`` (how long until the rate is back
        at the quota) and reads nothing more from that connection until then (KIP-219)."""
        self._state.quotas.set(user, client_id, producer_byte_rate)

    # -------------------------------------------------------------------------------- topics

    def create_topic(self, name: str, partitions: Optional[int] = None,
                     leaders: Optional[Sequence[int]] = None, replication_factor: Optional[int] = None,
                     config: Optional[Mapping[str, Any]] = None) -> None:
        """Create a topic; partition i's leader is ``leaders[i]`` or the brokers in turn. Its replicas are
        the leader and the next ``replication_factor - 1`` brokers by id (None: every broker); the in-sync
        replicas are those whose broker runs, and an acks=all Produce to a partition with fewer than the
        topic's ``config["min.insync.replicas"]`` (default 1) is refused with NOT_ENOUGH_REPLICAS.
        Leadership moves only among the replicas: with all of them stopped, the partition is offline."""
        count = partitions if partitions is not None else (len(leaders) if leaders else
                                                           self._state.config.default_partitions)
        configs = {k: None if v is None else str(v) for k, v in (config or {}).items()}
        try:
            self._state.create_topic(name, count, leaders, configs, replication_factor=replication_factor)
        except TopicError as e:
            raise ValueError(e.message) from None

    def topics(self) -> List[str]:
        with self._state.lock:
            return sorted(self._state.topics)

    def partition_count(self, topic: str) -> int:
        t = self._state.topic(topic)
        if t is None:
            raise KeyError(f"unknown topic {topic!r}")
        return len(t.partitions)

    def _partition(self, topic: str, partition: int) -> PartitionState:
        p = self._state.partition(topic, partition)
        if p is None:
            raise KeyError(f"unknown partition {topic}-{partition}")
        return p

    def leader(self, topic: str, partition: int) -> int:
        return self._partition(topic, partition).leader

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self._partition(topic, partition).leader_epoch

    def move_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make ``broker_id`` the partition's leader (leader epoch + 1); the old leader now answers
        NOT_LEADER_OR_FOLLOWER for it."""
        self._state.move_leader(topic, partition, broker_id)

    # ---------------------------------------------------------------------------------- data

    def records(self, topic: str, partition: int = 0, include_control: bool = False) -> List[StoredRecord]:
        """The stored records of a partition, decoded (transaction markers only with
        ``include_control``; aborted records are included: this is the log, not a consumer)."""
        p = self._partition(topic, partition)
        with p.log.lock:
            batches = p.log.raw_batches()
        found = decode_batches(batches)
        return found if include_control else [r for r in found if not r.is_control]

    def high_watermark(self, topic: str, partition: int = 0) -> int:
        return self._partition(topic, partition).log.end_offset

    def last_stable_offset(self, topic: str, partition: int = 0) -> int:
        p = self._partition(topic, partition)
        with p.log.lock:
            return p.log.last_stable_offset

    def batch_count(self, topic: str, partition: int = 0) -> int:
        return self._partition(topic, partition).log.batch_count()

    def producer_state(self, topic: str, partition: int = 0) -> Dict[int, Tuple[int, int]]:
        """Producer id -> (epoch, last sequence) as the partition knows it."""
        p = self._partition(topic, partition)
        with p.log.lock:
            return p.log.producers.snapshot()

    def expire_producer_state(self, topic: str, partition: int = 0, producer_id: Optional[int] = None) -> None:
        """Forget the idempotence state of one producer (all when None) on a partition, as retention
        would: its next batch with a sequence other than 0 gets UNKNOWN_PRODUCER_ID."""
        p = self._partition(topic, partition)
        with p.log.lock:
            p.log.producers.expire(producer_id)

    def committed_offsets(self, group: str) -> Dict[Tuple[str, int], int]:
        """Offsets committed for a group (through committed transactions)."""
        with self._state.lock:
            return {tp: value[0] for tp, value in self._state.group_offsets.get(group, {}).items()}

    @property
    def transaction_version(self) -> int:
        """The finalized ``transaction.version`` the brokers advertise (2: transactions v2, KIP-890)."""
        return self._state.transaction_version

    def set_transaction_version(self, level: int) -> None:
        """Finalize ``transaction.version`` ``level`` (0, 1 or 2), as ``kafka-features upgrade/downgrade`` does: the
        next ApiVersions answers carry it with a higher features epoch. Transactions already open go on."""
        self._state.set_transaction_version(level)

    def producer_id_and_epoch(self, transactional_id: str) -> Optional[Tuple[int, int]]:
        """The producer id and epoch the transaction coordinator holds for a transactional id (None: unknown)."""
        meta = self._txn.describe(transactional_id)
        return (meta.producer_id, meta.producer_epoch) if meta is not None else None

    def transaction_state(self, transactional_id: str) -> Optional[str]:
        """"Empty", "Ongoing", "CompleteCommit", "CompleteAbort", or None for an unknown id."""
        meta = self._txn.describe(transactional_id)
        return meta.state if meta is not None else None

    # -------------------------------------------------------------------------------- faults

    def inject_errors(self, api: Union[str, int], codes: Iterable[int]) -> None:
        """The next responses of ``api`` answer these error codes (see :mod:`kproducer.mock.faults`)."""
        self._faults.inject_errors(api, codes)

    def pending_errors(self, api: Union[str, int]) -> List[int]:
        return self._faults.pending_errors(api)

    def drop_responses(self, api: Union[str, int], count: int = 1) -> None:
        """Process the next ``count`` requests of ``api`` but close the connection instead of answering."""
        self._faults.drop_responses(api, count)

    def pending_drops(self, api: Union[str, int]) -> int:
        return self._faults.pending_drops(api)

    def fail_after_append(self, codes: Iterable[int]) -> None:
        """The next partition batches a Produce appends are written and then answered with these error codes
        (one per appended batch; 0 answers normally): "the broker wrote it but answered an error" (see
        :mod:`kproducer.mock.faults`)."""
        self._faults.fail_after_append(codes)

    def pending_after_append(self) -> List[int]:
        return self._faults.pending_after_append()

    def set_latency(self, broker_id: int, ms: float) -> None:
        """Delay every response of a broker by ``ms`` milliseconds (0 removes the delay)."""
        self._broker(broker_id)
        self._faults.set_latency(broker_id, ms)

    def corrupt_responses(self, api: Union[str, int], kind: str = "garbled", count: int = 1) -> None:
        """Process the next ``count`` requests of ``api`` but answer each with a broken response:
        ``"garbled"`` (a body no response version parses) or ``"oversized"`` (a frame size of 2^31-1)."""
        self._faults.corrupt_responses(api, kind, count)

    @property
    def served_versions(self) -> Dict[int, Tuple[int, int]]:
        """API key -> (min, max) version every broker advertises and accepts."""
        return dict(self._state.config.served_versions or SERVED_VERSIONS)

    def clear_faults(self) -> None:
        self._faults.clear()

    @property
    def request_counts(self) -> "Counter[str]":
        """API name (``"produce"``, ``"metadata"``...) -> requests received, all brokers together."""
        return Counter(self._faults.request_counts)

    @property
    def request_log(self) -> List[RequestLogEntry]:
        """The last requests received (broker id, api name, version, correlation id, client id, time)."""
        return list(self._faults.request_log)

    def reset_request_log(self) -> None:
        self._faults.reset_log()
