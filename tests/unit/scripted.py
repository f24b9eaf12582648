"""The scripted transport and harness of the unit tests now live in :mod:`kproducer.testing` (public, see
docs/testing.md); this module keeps the names the tests import."""
from __future__ import annotations

from kproducer.testing import (  # noqa: F401
    DISCONNECT,
    HOLD,
    Encoded,
    FakeClock,
    Frame,
    Harness,
    PollLimitExceeded,
    ScriptedSelector,
    ScriptedTransport,
    SentRequest,
)
from kproducer.testing.scripted import Address, Handler, Result, TopicPartition  # noqa: F401

__all__ = ["DISCONNECT", "HOLD", "Address", "Encoded", "FakeClock", "Frame", "Handler", "Harness",
           "PollLimitExceeded", "Result", "ScriptedSelector", "ScriptedTransport", "SentRequest", "TopicPartition"]
