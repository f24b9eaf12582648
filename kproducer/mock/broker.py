"""One mock broker: its SocketServer, RequestChannel, request handler threads, API layer and fetch
purgatory. The data it serves lives in the cluster's shared state, so a broker can stop and start
again (on the same port) without losing anything."""
from __future__ import annotations

import logging
from typing import Optional

from .apis import KafkaApis
from .request_channel import RequestChannel
from .request_handler import RequestHandlerPool
from .security import ListenerSecurity
from .socket_server import SocketServer
from .state import BrokerInfo, ClusterState
from .txn import TransactionCoordinator

log = logging.getLogger(__name__)


class MockBroker:
    def __init__(
        self,
        broker_id: int,
        host: str,
        port: int,
        state: ClusterState,
        txn: TransactionCoordinator,
        num_processors: int = 2,
        num_handlers: int = 2,
        security: Optional[ListenerSecurity] = None,
    ) -> None:
        self.info = BrokerInfo(broker_id, host, port)
        self._state = state
        self._txn = txn
        self._num_processors = num_processors
        self._num_handlers = num_handlers
        self._security = security
        #: connections accepted by earlier runs (a stopped broker's count is kept)
        self._accepted_before = 0
        self._server: Optional[SocketServer] = None
        self._handlers: Optional[RequestHandlerPool] = None
        self._apis: Optional[KafkaApis] = None
        state.add_broker(self.info)

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def port(self) -> int:
        return self.info.port

    @property
    def running(self) -> bool:
        return self._server is not None

    def bind(self) -> None:
        """Start listening (a free port the first time, the same port afterwards)."""
        channel = RequestChannel()
        apis = KafkaApis(self.info.id, self._state, self._txn, channel)
        server = SocketServer(
            self.info.id, self.info.host, self.info.port, channel, apis.served,
            self._num_processors, self._state.config.max_request_size, self._security, self._state.clock,
        )
        server.start()
        self.info.port = server.port
        handlers = RequestHandlerPool(self.info.id, channel, apis.handle, self._num_handlers)
        handlers.start()
        apis.purgatory.start()
        self._server, self._handlers, self._apis = server, handlers, apis

    def start(self) -> None:
        if self._server is None:
            self.bind()
        self._state.set_broker_alive(self.info.id, True)
        log.info("mock broker %d serving on %s:%d", self.info.id, self.info.host, self.info.port)

    def stop(self, move_leaders: bool = True) -> None:
        if self._server is None:
            return
        self._state.set_broker_alive(self.info.id, False, move_leaders)
        server, handlers, apis = self._server, self._handlers, self._apis
        self._server = self._handlers = self._apis = None
        server.stop()
        self._accepted_before += server.accepted
        if handlers is not None:
            handlers.stop()
        if apis is not None:
            apis.purgatory.stop()
        log.info("mock broker %d stopped", self.info.id)

    def drop_connections(self) -> None:
        if self._server is not None:
            self._server.close_connections()

    @property
    def connections_accepted(self) -> int:
        """Connections accepted since the broker was created (restarts included)."""
        return self._accepted_before + (self._server.accepted if self._server is not None else 0)

    @property
    def connection_count(self) -> int:
        return self._server.connection_count if self._server is not None else 0
