"""A topic the producer was refused (TOPIC_AUTHORIZATION_FAILED in a metadata response) becomes usable as soon
as the broker grants access: like Java's KafkaProducer.waitOnMetadata, a send() to a topic whose partitions are
not known asks for fresh metadata and raises the error of that answer, never one remembered from an earlier
answer. Before, send() raised the remembered error at once without asking again, so after an administrator
added the ACL the producer kept failing until the next periodic refresh (metadata.max.age.ms, 5 min).
Found against Apache Kafka (tests/apache_kafka/test_acl_quota_ak.py); here on the scripted broker."""
from __future__ import annotations

from typing import Any, Iterator, List

import pytest

from kproducer.errors import TopicAuthorizationFailedError
from kproducer.protocol import messages as m
from tests.unit.producer_env import ProducerEnv, producer_env


class Env(ProducerEnv):
    def __init__(self) -> None:
        super().__init__({"secret": [1, 1]})
        self.authorized = False
        self.metadata_requests: List[Any] = []
        default = self.selector.handlers[m.METADATA.key]

        def metadata(req: Any) -> Any:
            self.metadata_requests.append(req)
            body = default(req)
            if not self.authorized:
                for t in body["topics"]:
                    if t["name"] == "secret":
                        t["error_code"] = TopicAuthorizationFailedError.code
                        t["partitions"] = []
            return body

        self.selector.handlers[m.METADATA.key] = metadata


@pytest.fixture
def env() -> Iterator[Env]:
    yield from producer_env(Env())


def test_a_granted_topic_is_used_at_the_next_send(env: Env) -> None:
    p = env.producer(max_block_ms=30_000)
    for _ in range(2):  # refused each time, from a fresh answer each time
        before = len(env.metadata_requests)
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("secret", b"refused").get(10)
        assert len(env.metadata_requests) > before
    env.authorized = True  # the ACL was added
    md = p.send("secret", b"granted").get(10)
    assert md.topic == "secret" and md.offset >= 0
