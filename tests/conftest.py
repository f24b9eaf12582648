from __future__ import annotations

import os
import sys
from typing import Callable, Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from tansu import Tansu, topic_name  # noqa: E402


@pytest.fixture(scope="session")
def tansu() -> Iterator[Tansu]:
    """A real tansu broker for the whole session, on a free 127.0.0.1 port."""
    broker = Tansu().start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture
def new_topic(tansu: Tansu) -> Callable[..., str]:
    """Create a fresh topic on the session's tansu broker and return its name."""

    def make(partitions: int = 6, prefix: str = "t") -> str:
        name = topic_name(prefix)
        tansu.create_topic(name, partitions)
        return name

    return make
