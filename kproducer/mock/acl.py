"""The mock cluster's authorizer: a small model of Apache Kafka's StandardAuthorizer.

Off by default (every request is allowed). On (``MockCluster(authorizer=True, super_users=(...))``), a
request is allowed when its principal is a super user, or when an ALLOW ACL matches it and no DENY ACL
does, as in Kafka:

* the principal: ``User:<name>`` after SASL (the SASL user; OAUTHBEARER: the token's subject); on TLS
  with a verified client certificate ``User:<subject DN>`` as Kafka writes it (RFC 2253, the last RDN
  first: ``User:CN=alice,O=kproducer mock cluster``); otherwise ``User:ANONYMOUS``;
* an ACL is (principal, operation, resource type, resource name, allow or deny); ``User:*`` matches any
  principal and the name ``*`` any resource of its type; the host is always ``*``;
* implied operations (ALLOW only): ``All`` implies everything; ``Read``, ``Write``, ``Delete`` and
  ``Alter`` imply ``Describe``; ``AlterConfigs`` implies ``DescribeConfigs``. A DENY matches only its
  own operation or ``All``.

:meth:`Authorizer.allows_any` is Kafka's ``authorizeByResourceType`` (KIP-679: an idempotent producer
may have a producer id when it may Write to some topic).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Tuple

from ..protocol.errors import (
    NO_ERROR,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    OperationNotAttemptedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from .request_channel import Request

log = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"

# resource types (Kafka's names)
TOPIC = "Topic"
GROUP = "Group"
TRANSACTIONAL_ID = "TransactionalId"
CLUSTER = "Cluster"
#: the one name of the cluster resource
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"

# operations (Kafka's names)
ALL = "All"
READ = "Read"
WRITE = "Write"
CREATE = "Create"
DELETE = "Delete"
ALTER = "Alter"
DESCRIBE = "Describe"
CLUSTER_ACTION = "ClusterAction"
DESCRIBE_CONFIGS = "DescribeConfigs"
ALTER_CONFIGS = "AlterConfigs"
IDEMPOTENT_WRITE = "IdempotentWrite"
OPERATIONS: Tuple[str, ...] = (ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION,
                               DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE)
_BY_LOWER: Dict[str, str] = {op.lower(): op for op in OPERATIONS}

#: operation -> the operations whose ALLOW also allows it (besides itself and All)
_IMPLIED_BY: Dict[str, FrozenSet[str]] = {
    DESCRIBE: frozenset({READ, WRITE, DELETE, ALTER}),
    DESCRIBE_CONFIGS: frozenset({ALTER_CONFIGS}),
}

#: getpeercert() attribute names -> the keywords of X500Principal.getName() (RFC 2253)
_DN_KEYWORDS: Dict[str, str] = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}


def operation_name(operation: str) -> str:
    """Kafka's spelling of an operation given in any case ("write" -> "Write")."""
    try:
        return _BY_LOWER[operation.lower()]
    except KeyError:
        raise ValueError(f"unknown ACL operation {operation!r}; one of {', '.join(OPERATIONS)}") from None


@dataclass(frozen=True)
class AclBinding:
    principal: str
    operation: str
    resource_type: str
    name: str
    allow: bool = True

    def matches(self, principal: str, resource_type: str, name: str) -> bool:
        return (self.resource_type == resource_type and self.principal in (principal, "User:*")
                and self.name in (name, WILDCARD))


def _rdn_value(value: str) -> str:
    """An attribute value escaped as RFC 2253 (and Java's X500Principal) writes it."""
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def tls_principal(peer_certificate: Optional[Dict[str, Any]]) -> str:
    """The principal of a TLS connection: ``User:<subject DN>`` of a verified client certificate (the
    dict of ``SSLSocket.getpeercert()``), else ``User:ANONYMOUS``."""
    subject = (peer_certificate or {}).get("subject")
    if not subject:
        return ANONYMOUS
    rdns = ["+".join(f"{_DN_KEYWORDS.get(k, k)}={_rdn_value(v)}" for k, v in rdn) for rdn in subject]
    return "User:" + ",".join(reversed(rdns))


def principal_of(request: Request) -> str:
    """The principal a request is authorized as: the SASL user, else the connection's (TLS) principal."""
    session = request.session
    if session is not None and session.principal is not None:
        return "User:" + session.principal
    return request.principal


class Authorizer:
    """The ACLs of a mock cluster and the decisions made with them (shared by every broker)."""

    def __init__(self, enabled: bool = False, super_users: Iterable[str] = ()) -> None:
        self.enabled = enabled
        self.super_users: FrozenSet[str] = frozenset(super_users)
        for p in self.super_users:
            _check_principal(p)
        self._lock = threading.Lock()
        self._acls: List[AclBinding] = []

    def add(self, principal: str, operation: str, resource_type: str, name: str, *, deny: bool = False) -> None:
        _check_principal(principal)
        binding = AclBinding(principal, operation_name(operation), resource_type, name, not deny)
        with self._lock:
            if binding not in self._acls:
                self._acls.append(binding)

    def remove(self, principal: Optional[str] = None) -> int:
        """Remove every ACL (of ``principal`` only, when given); returns how many were removed."""
        with self._lock:
            kept = [a for a in self._acls if principal is not None and a.principal != principal]
            removed = len(self._acls) - len(kept)
            self._acls = kept
            return removed

    def acls(self) -> List[AclBinding]:
        with self._lock:
            return list(self._acls)

    def authorize(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        if not self.enabled or principal in self.super_users:
            return True
        with self._lock:
            matching = [a for a in self._acls if a.matches(principal, resource_type, name)]
        if any(not a.allow and a.operation in (operation, ALL) for a in matching):
            allowed = False
        else:
            implied = _IMPLIED_BY.get(operation, frozenset())
            allowed = any(a.allow and (a.operation in (operation, ALL) or a.operation in implied) for a in matching)
        if not allowed:
            log.debug("denied: %s %s on %s %r", principal, operation, resource_type, name)
        return allowed

    def authorize_any(self, principal: str, operation: str, resource_type: str) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the type (Kafka's
        authorizeByResourceType): an ALLOW on some name that no DENY of the same name or ``*`` cancels."""
        if not self.enabled or principal in self.super_users:
            return True
        with self._lock:
            mine = [a for a in self._acls if a.resource_type == resource_type and a.principal in (principal, "User:*")]
        denied = {a.name for a in mine if not a.allow and a.operation in (operation, ALL)}
        if WILDCARD in denied:
            return False
        implied = _IMPLIED_BY.get(operation, frozenset())
        return any(a.allow and a.name not in denied and (a.operation in (operation, ALL) or a.operation in implied)
                   for a in mine)

    def allows(self, request: Request, operation: str, resource_type: str, name: str) -> bool:
        """Whether ``request``'s principal may do ``operation`` on the resource (always, when off)."""
        return not self.enabled or self.authorize(principal_of(request), operation, resource_type, name)

    def allows_any(self, request: Request, operation: str, resource_type: str) -> bool:
        return not self.enabled or self.authorize_any(principal_of(request), operation, resource_type)

    def __repr__(self) -> str:
        return f"Authorizer(enabled={self.enabled}, super_users={sorted(self.super_users)}, acls={len(self._acls)})"


# ------------------------------------------------------------------------ the handlers' checks (Kafka's KafkaApis)


def produce_refusal(authorizer: Authorizer, request: Request, topic: str, transactional_id: Optional[str]) -> int:
    """The error of every partition of ``topic`` in a Produce: TRANSACTIONAL_ID_AUTHORIZATION_FAILED without
    Write on the transactional id, TOPIC_AUTHORIZATION_FAILED without Write on the topic, else NO_ERROR."""
    if not authorizer.enabled:
        return NO_ERROR
    if transactional_id is not None and not authorizer.allows(request, WRITE, TRANSACTIONAL_ID, transactional_id):
        return TransactionalIdAuthorizationFailedError.code
    if not authorizer.allows(request, WRITE, TOPIC, topic):
        return TopicAuthorizationFailedError.code
    return NO_ERROR


def init_producer_id_refusal(authorizer: Authorizer, request: Request, transactional_id: Optional[str]) -> int:
    """InitProducerId: Write on the transactional id; without one (idempotence), IdempotentWrite on the
    cluster or Write on some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED."""
    if not authorizer.enabled:
        return NO_ERROR
    if transactional_id is not None:
        ok = authorizer.allows(request, WRITE, TRANSACTIONAL_ID, transactional_id)
        return NO_ERROR if ok else TransactionalIdAuthorizationFailedError.code
    if authorizer.allows(request, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME) or authorizer.allows_any(request, WRITE, TOPIC):
        return NO_ERROR
    return ClusterAuthorizationFailedError.code


def transaction_refusal(authorizer: Authorizer, request: Request, transactional_id: str,
                        group: Optional[str] = None) -> int:
    """AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit: Write on the transactional id
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then Read on ``group`` if given (GROUP_AUTHORIZATION_FAILED)."""
    if not authorizer.enabled:
        return NO_ERROR
    if not authorizer.allows(request, WRITE, TRANSACTIONAL_ID, transactional_id):
        return TransactionalIdAuthorizationFailedError.code
    if group is not None and not authorizer.allows(request, READ, GROUP, group):
        return GroupAuthorizationFailedError.code
    return NO_ERROR


def add_partitions_refusal(authorizer: Authorizer, request: Request, transactional_id: str,
                           partitions: List[Tuple[str, int]]) -> Optional[Dict[Tuple[str, int], int]]:
    """AddPartitionsToTxn: None when allowed; else each partition's error: all
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED without Write on the transactional id, or TOPIC_AUTHORIZATION_FAILED
    for those of topics without Write and OPERATION_NOT_ATTEMPTED for the others (Kafka adds none of them)."""
    refused = transaction_refusal(authorizer, request, transactional_id)
    if refused:
        return {tp: refused for tp in partitions}
    denied = {topic for topic, _ in partitions if not authorizer.allows(request, WRITE, TOPIC, topic)}
    if not denied:
        return None
    return {tp: TopicAuthorizationFailedError.code if tp[0] in denied else OperationNotAttemptedError.code
            for tp in partitions}


def txn_offset_commit_refusals(authorizer: Authorizer, request: Request, transactional_id: str, group: str,
                               partitions: Iterable[Tuple[str, int]]) -> Dict[Tuple[str, int], int]:
    """TxnOffsetCommit: the partitions refused and why: all of them without Write on the transactional id
    or Read on the group; those of topics without Read (the others are committed)."""
    refused = transaction_refusal(authorizer, request, transactional_id, group)
    if refused:
        return {tp: refused for tp in partitions}
    return {tp: TopicAuthorizationFailedError.code for tp in partitions
            if authorizer.enabled and not authorizer.allows(request, READ, TOPIC, tp[0])}


def coordinator_refusal(authorizer: Authorizer, request: Request, key: str, transaction: bool) -> int:
    """FindCoordinator: Describe on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) or the
    group (GROUP_AUTHORIZATION_FAILED)."""
    if not authorizer.enabled:
        return NO_ERROR
    if transaction:
        ok = authorizer.allows(request, DESCRIBE, TRANSACTIONAL_ID, key)
        return NO_ERROR if ok else TransactionalIdAuthorizationFailedError.code
    return NO_ERROR if authorizer.allows(request, DESCRIBE, GROUP, key) else GroupAuthorizationFailedError.code


def _check_principal(principal: str) -> None:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"a principal is 'Type:name' (e.g. 'User:alice'), not {principal!r}")
