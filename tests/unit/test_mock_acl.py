"""kproducer.mock.acl: the rules of Kafka's StandardAuthorizer the mock follows (super users, implied
operations, DENY over ALLOW, wildcards, KIP-679's any-topic Write) and the TLS principal's DN format."""
from __future__ import annotations

import pytest

from kproducer.mock.acl import ANONYMOUS, TOPIC, TRANSACTIONAL_ID, Authorizer, tls_principal


def test_off_allows_everything_and_super_users_anything() -> None:
    assert Authorizer().authorize("User:bob", "Write", TOPIC, "t")
    acl = Authorizer(True, ["User:admin"])
    assert acl.authorize("User:admin", "Write", TOPIC, "t")
    assert not acl.authorize("User:bob", "Describe", TOPIC, "t")
    assert not acl.authorize_any("User:bob", "Write", TOPIC)


def test_implied_operations_deny_and_wildcards() -> None:
    acl = Authorizer(True)
    acl.add("User:bob", "write", TOPIC, "t")
    assert acl.authorize("User:bob", "Write", TOPIC, "t") and acl.authorize("User:bob", "Describe", TOPIC, "t")
    assert not acl.authorize("User:bob", "Read", TOPIC, "t")
    assert not acl.authorize("User:bob", "Write", TOPIC, "u")
    assert not acl.authorize("User:bob", "Write", TRANSACTIONAL_ID, "t")
    assert acl.authorize_any("User:bob", "Write", TOPIC)
    acl.add("User:*", "Describe", TOPIC, "*")
    assert acl.authorize("User:carol", "Describe", TOPIC, "x") and not acl.authorize("User:carol", "Write", TOPIC, "x")
    acl.add("User:bob", "Write", TOPIC, "t", deny=True)
    assert not acl.authorize("User:bob", "Write", TOPIC, "t")
    assert acl.authorize("User:bob", "Describe", TOPIC, "t")  # a DENY of Write does not deny Describe
    assert not acl.authorize_any("User:bob", "Write", TOPIC)
    assert acl.remove("User:bob") == 2 and len(acl.acls()) == 1
    with pytest.raises(ValueError):
        acl.add("bob", "Write", TOPIC, "t")
    with pytest.raises(ValueError):
        acl.add("User:bob", "Scribble", TOPIC, "t")


def test_tls_principal_is_the_subject_dn_as_kafka_writes_it() -> None:
    assert tls_principal(None) == ANONYMOUS and tls_principal({}) == ANONYMOUS
    subject = ((("organizationName", "kproducer mock cluster"),), (("commonName", "alice"),))
    assert tls_principal({"subject": subject}) == "User:CN=alice,O=kproducer mock cluster"
    odd = ((("countryName", "DE"),), (("organizationalUnitName", "a,b"),), (("commonName", " x+y "),))
    assert tls_principal({"subject": odd}) == "User:CN=\\ x\\+y\\ ,OU=a\\,b,C=DE"


def test_cluster_acl_calls() -> None:
    from kproducer.testing import MockCluster

    with MockCluster(1, authorizer=True, super_users=("User:admin",)) as cluster:
        cluster.add_acl("User:bob", "Write", topic="t")
        cluster.add_acl("User:alice", "Write", transactional_id="tx")
        with pytest.raises(ValueError, match="exactly one"):
            cluster.add_acl("User:bob", "Write", topic="t", group="g")
        assert len(cluster.acls()) == 2
        assert cluster.remove_acls("User:bob") == 1 and len(cluster.acls()) == 1
        assert cluster.remove_acls() == 1 and cluster.acls() == []
