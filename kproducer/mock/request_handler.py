"""Request handler threads: take requests from the RequestChannel and call the API layer."""
from __future__ import annotations

import logging
import threading
from typing import Callable, List

from .request_channel import Request, RequestChannel, Response

log = logging.getLogger(__name__)


class RequestHandlerPool:
    """``num_threads`` threads running ``handle(request)``; the API layer sends the response itself
    (possibly later, for a Fetch that waits for data)."""

    def __init__(
        self,
        broker_id: int,
        channel: RequestChannel,
        handle: Callable[[Request], None],
        num_threads: int = 2,
    ) -> None:
        if num_threads < 1:
            raise ValueError("num_handlers must be at least 1")
        self.broker_id = broker_id
        self._channel = channel
        self._handle = handle
        self._threads: List[threading.Thread] = [
            threading.Thread(target=self._run, name=f"mock-broker-{broker_id}-handler-{i}", daemon=True)
            for i in range(num_threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._channel.stop_handlers(len(self._threads))
        for thread in self._threads:
            thread.join(timeout)

    def _run(self) -> None:
        channel = self._channel
        while True:
            request = channel.receive_request()
            if request is None:
                return
            try:
                self._handle(request)
            except Exception:
                log.exception("broker %d: error handling %r; closing its connection", self.broker_id, request)
                channel.send_response(Response(request, None, close=True))
