"""The RequestChannel between a broker's network threads and its request handler threads.

Processors put parsed requests on the one shared request queue; handler threads take them, call the
API layer and put the response on the queue of the processor that owns the connection, then wake
that processor. A response may also be a no-op (acks=0 Produce: nothing to send, only unmute the
connection) or an order to close the connection instead of answering.
"""
from __future__ import annotations

import queue
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional

from ..protocol.messages import RequestHeader
from ..protocol.schema import Api
from .mock_clock import SYSTEM_CLOCK
from .security import SaslSession


class Request:
    """One parsed request, as a handler thread sees it."""

    __slots__ = (
        "processor_id",
        "connection_id",
        "header",
        "api",
        "body",
        "size",
        "received_at_ms",
        "peer",
        "session",
        "principal",
    )

    def __init__(
        self,
        processor_id: int,
        connection_id: int,
        header: RequestHeader,
        api: Api,
        body: Optional[Dict[str, Any]],
        size: int,
        peer: str,
        session: Optional[SaslSession] = None,
        received_at_ms: Optional[float] = None,
        principal: str = "User:ANONYMOUS",
    ) -> None:
        self.processor_id = processor_id
        self.connection_id = connection_id
        self.header = header
        self.api = api
        #: the decoded body; None for an ApiVersions request of a version we do not know
        self.body = body
        self.size = size
        #: the cluster clock's monotonic_ms() when the request was read
        self.received_at_ms = SYSTEM_CLOCK.monotonic_ms() if received_at_ms is None else received_at_ms
        self.peer = peer
        #: the connection's SASL session (SASL listeners only)
        self.session = session
        #: the connection's principal before SASL: its TLS client certificate's, else User:ANONYMOUS
        self.principal = principal

    @property
    def version(self) -> int:
        return self.header.api_version

    def __repr__(self) -> str:
        return (
            f"Request({self.api.name} v{self.version}, correlation_id={self.header.correlation_id}, "
            f"connection={self.connection_id}, peer={self.peer})"
        )


class Response:
    """What a processor should do for a request: send ``data``, do nothing (``data`` None), or close."""

    __slots__ = ("request", "data", "close", "send_at_ms", "close_after_send", "raw", "muted_until_ms")

    def __init__(
        self,
        request: Request,
        data: Optional[bytes],
        close: bool = False,
        send_at_ms: float = 0.0,
        close_after_send: bool = False,
        raw: bool = False,
        muted_until_ms: float = 0.0,
    ) -> None:
        self.request = request
        #: the response frame without its size prefix; None for a no-op response
        self.data = data
        #: close the connection instead of answering (a fault, or a request we could not serve)
        self.close = close
        #: the cluster clock's monotonic_ms() before which the response must not be sent (injected
        #: latency); 0: now
        self.send_at_ms = send_at_ms
        #: send ``data``, then close the connection (a failed authentication)
        self.close_after_send = close_after_send
        #: ``data`` goes on the wire as it is, without a size prefix (a fault: a hostile frame size)
        self.raw = raw
        #: a quota throttle (KIP-219): the connection reads no further request before this clock
        #: monotonic_ms(), even once the response is sent; 0: none
        self.muted_until_ms = muted_until_ms


_STOP = object()


class RequestChannel:
    """One request queue shared by the handlers; one response queue per processor."""

    def __init__(self) -> None:
        self._requests: "queue.Queue[Any]" = queue.Queue()
        self._responses: Dict[int, Deque[Response]] = {}
        self._wakeups: Dict[int, Callable[[], None]] = {}

    def add_processor(self, processor_id: int, wakeup: Callable[[], None]) -> None:
        self._responses[processor_id] = deque()
        self._wakeups[processor_id] = wakeup

    def send_request(self, request: Request) -> None:
        self._requests.put(request)

    def receive_request(self, timeout: Optional[float] = None) -> Optional[Request]:
        """The next request; None on timeout or when the channel is shutting down."""
        try:
            item = self._requests.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _STOP:
            return None
        assert isinstance(item, Request)
        return item

    def stop_handlers(self, count: int) -> None:
        """Wake ``count`` handler threads blocked in receive_request so they can exit."""
        for _ in range(count):
            self._requests.put(_STOP)

    def send_response(self, response: Response) -> None:
        pid = response.request.processor_id
        responses = self._responses.get(pid)
        if responses is None:  # the processor is gone (broker stopped)
            return
        responses.append(response)
        self._wakeups[pid]()

    def take_responses(self, processor_id: int) -> List[Response]:
        """Every response queued for a processor, oldest first."""
        responses = self._responses[processor_id]
        out: List[Response] = []
        while responses:
            out.append(responses.popleft())
        return out

    def pending_requests(self) -> int:
        return self._requests.qsize()
