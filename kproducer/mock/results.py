"""What a mock broker's API handler returns: a response body, or a marker that is not one.

* :data:`NO_RESPONSE`: nothing is sent back, the connection is only unmuted (an acks=0 Produce).
* :data:`CLOSE_CONNECTION`: close the connection instead of answering.
* :data:`DEFERRED`: the handler (or the purgatory it parked the request in) answers later through
  :meth:`kproducer.mock.context.BrokerContext.respond`.
"""
from __future__ import annotations

from typing import Any, Dict, Union

#: a decoded request or response body, as kproducer.protocol's codecs take and give it
Body = Dict[str, Any]


class Marker:
    """A handler result that is not a response body."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NO_RESPONSE = Marker("NO_RESPONSE")
CLOSE_CONNECTION = Marker("CLOSE_CONNECTION")
DEFERRED = Marker("DEFERRED")

Result = Union[Body, Marker]
