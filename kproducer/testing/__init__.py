"""kproducer.testing: the tools kproducer's own tests use, for testing code that produces to Kafka
(in the manner of trio.testing). See docs/testing.md.

* :class:`FakeClock` -- time that moves only when told (``advance``); waits advance it instead of sleeping.
* :class:`ScriptedTransport` -- an in-memory transport with a scripted broker behind it: it decodes every
  request, answers like a healthy broker by default, and lets a test script errors, held responses,
  disconnections or raw frames. ``Producer(..., transport=ScriptedTransport(real_wait=True))`` runs a real
  producer on it.
* :class:`Harness` -- the producer's parts wired on a FakeClock and a ScriptedTransport by
  :func:`wire_producer` (the same function :class:`kproducer.Producer` uses), driven step by step.
* :class:`MockCluster` -- an embedded Kafka-protocol cluster on 127.0.0.1 sockets, with fault injection,
  for tests that need real connections (and third-party clients).
* :class:`ApacheKafka` -- a real Apache Kafka cluster (KRaft, several brokers, TLS and SASL listeners) started
  from Apache Kafka's own jars on 127.0.0.1, without Docker; needs Java 17+ (and Maven the first time).
* :class:`Transport` -- the protocol that the socket Selector and ScriptedTransport implement.
"""
from __future__ import annotations

from ..clock import FakeClock
from ..mock import MockCluster
from ..network.transport import Transport
from ..producer.wiring import ProducerParts, wire_producer
from .apache_kafka import ApacheKafka, ApacheKafkaError, ApacheKafkaUnavailable
from .harness import Harness
from .scripted import (
    DISCONNECT,
    HOLD,
    Encoded,
    Frame,
    PollLimitExceeded,
    ScriptedSelector,
    ScriptedTransport,
    SentRequest,
)

__all__ = ["DISCONNECT", "HOLD", "ApacheKafka", "ApacheKafkaError", "ApacheKafkaUnavailable", "Encoded", "FakeClock", "Frame", "Harness", "MockCluster", "PollLimitExceeded",
           "ProducerParts", "ScriptedSelector", "ScriptedTransport", "SentRequest", "Transport", "wire_producer"]
