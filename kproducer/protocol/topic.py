"""Kafka's rules for topic names (as the brokers check them): 1 to 249 characters of ASCII letters,
digits, ``.``, ``_`` and ``-``, and neither ``.`` nor ``..``."""
from __future__ import annotations

import re

from .errors import InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_problem(name: str) -> str:
    """Why ``name`` is not a legal topic name ("" when it is)."""
    if not name:
        return "a topic name cannot be empty"
    if name in (".", ".."):
        return f"a topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"a topic name has at most {MAX_TOPIC_NAME_LENGTH} characters; this one has {len(name)}"
    if _LEGAL.fullmatch(name) is None:
        bad = sorted({c for c in name if _LEGAL.fullmatch(c) is None})
        return (f"a topic name may only contain ASCII letters, digits, '.', '_' and '-'; "
                f"{''.join(bad)!r} {'is' if len(bad) == 1 else 'are'} not allowed")
    return ""


def check_topic_name(name: str) -> None:
    """Raise :class:`~kproducer.errors.InvalidTopicError` saying what is wrong with an illegal name."""
    problem = topic_name_problem(name)
    if problem:
        raise InvalidTopicError(f"invalid topic {name[:60]!r}{'...' if len(name) > 60 else ''}: {problem}")
