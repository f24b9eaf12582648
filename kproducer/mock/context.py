"""What every API handler of one mock broker works with: :class:`BrokerContext`.

A handler is ``handle(ctx: BrokerContext, request: Request) -> Result`` (see
:mod:`kproducer.mock.handlers`); it reads and changes the cluster's shared state through ``ctx`` and
returns a response body or a marker (:mod:`kproducer.mock.results`). :meth:`BrokerContext.respond`
applies the response faults (dropped responses, latency, corruption) and hands the encoded response
to the RequestChannel; a handler that answers later (a parked Fetch, a response that closes the
connection after it is written) calls it itself and returns DEFERRED.
"""
from __future__ import annotations

import logging
import struct
from typing import Dict, List, Optional, Tuple

from ..protocol.errors import (
    NO_ERROR,
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from ..protocol.messages import API_VERSIONS, encode_response
from .faults import snake
from .purgatory import Purgatory
from .quotas import ProduceQuotas
from .request_channel import Request, RequestChannel, Response
from .results import CLOSE_CONNECTION, NO_RESPONSE, Body, Result
from .state import (
    MAX_MESSAGE_BYTES,
    TIMESTAMP_AFTER_MAX_MS,
    TIMESTAMP_AFTER_MAX_MS_DEFAULT,
    ClusterState,
    PartitionState,
)
from .txn import TransactionCoordinator

log = logging.getLogger(__name__)

#: how long the answer to a failed authentication (and the close after it) is held back: Kafka's
#: connection.failed.authentication.delay.ms, 100 by default
FAILED_AUTHENTICATION_DELAY_MS = 100.0

INT32 = struct.Struct(">i")

#: a response no version of any response parses: a count of 2^31-1 elements with nothing after it
_GARBLED_BODY = b"\x00\x00" + INT32.pack(0x7FFFFFFF)
#: a frame size no client accepts (2^31-1 bytes announced)
_OVERSIZED_FRAME = INT32.pack(0x7FFFFFFF)
#: "no leader" in a KIP-951 leader hint, a metadata partition or a node id
NO_NODE = -1
NO_EPOCH = -1
#: "no offset" in a response (unknown watermark, no committed offset)
NO_OFFSET = -1


_API_NAMES: Dict[int, str] = {}


def leader_epoch_error(p: PartitionState, requested: int) -> int:
    """KIP-320 fencing: a client's current leader epoch older or newer than the partition's."""
    if requested < 0 or requested == p.leader_epoch:
        return NO_ERROR
    return FencedLeaderEpochError.code if requested < p.leader_epoch else UnknownLeaderEpochError.code


class BrokerContext:
    """One broker's view of the cluster, given to each of its API handlers."""

    def __init__(
        self,
        broker_id: int,
        state: ClusterState,
        txn: TransactionCoordinator,
        channel: RequestChannel,
        served: Dict[int, Tuple[int, int]],
    ) -> None:
        self.broker_id = broker_id
        self.state = state
        self.faults = state.faults
        self.config = state.config
        self.clock = state.clock
        self.txn = txn
        self.channel = channel
        #: api key -> (min, max): what this broker advertises and accepts
        self.served = served
        self.purgatory = Purgatory(broker_id, state, state.clock, self.respond)
        #: this broker's produce byte-rate sensors (the quotas themselves are the cluster's)
        self.quotas = ProduceQuotas(state.quotas, state.clock)

    # ------------------------------------------------------------------------- responding

    def respond(self, request: Request, result: Result, close_after_send: bool = False,
                throttle_ms: int = 0, client_throttles: bool = True) -> None:
        """Send a handler's result; ``close_after_send`` closes the connection once it is written.
        ``throttle_ms`` (a quota): the connection reads no further request for that long (KIP-219); when
        the client does not throttle itself (``client_throttles`` False: an older request version), the
        response is also held back that long, as Kafka does."""
        name = _API_NAMES.get(request.api.key) or _API_NAMES.setdefault(request.api.key, snake(request.api.name))
        if result is CLOSE_CONNECTION or self.faults.take_drop(name):
            self.channel.send_response(Response(request, None, close=True))
            return
        latency = self.faults.latency(self.broker_id)
        send_at_ms = self.clock.monotonic_ms() + latency * 1000.0 if latency else 0.0
        if close_after_send:
            # as Kafka (connection.failed.authentication.delay.ms): the answer to a failed authentication is
            # held back, then written with the close right behind it (a client gets both in one read)
            send_at_ms = max(send_at_ms, self.clock.monotonic_ms() + FAILED_AUTHENTICATION_DELAY_MS)
        muted_until_ms = self.clock.monotonic_ms() + throttle_ms if throttle_ms > 0 else 0.0
        if muted_until_ms and not client_throttles:
            send_at_ms = max(send_at_ms, muted_until_ms)
        if result is NO_RESPONSE:
            self.channel.send_response(Response(request, None, send_at_ms=send_at_ms, muted_until_ms=muted_until_ms))
            return
        assert isinstance(result, dict)
        corruption = self.faults.take_corruption(name)
        correlation_id = INT32.pack(request.header.correlation_id)
        if corruption == "garbled":
            # the right correlation id, then a body no version of any response parses
            data = correlation_id + _GARBLED_BODY
        elif corruption == "oversized":
            data = _OVERSIZED_FRAME + correlation_id
            self.channel.send_response(Response(request, data, send_at_ms=send_at_ms, raw=True))
            return
        elif request.body is None:
            # an ApiVersions request of a version we do not serve is answered as v0 (Kafka), or, as a
            # fault, in the requested version's flexible shape (a server that does not special-case it)
            data = self._unsupported_api_versions_reply(request, result)
        else:
            data = encode_response(request.api, request.version, request.header.correlation_id, result)
        self.channel.send_response(
            Response(request, data, send_at_ms=send_at_ms, close_after_send=close_after_send,
                     muted_until_ms=muted_until_ms)
        )

    def _unsupported_api_versions_reply(self, request: Request, result: Body) -> bytes:
        correlation_id = request.header.correlation_id
        if self.config.unsupported_api_versions_reply != "as_requested":
            return encode_response(request.api, 0, correlation_id, result)
        version = min(request.version, API_VERSIONS.max_version)
        body = API_VERSIONS.encode_response(version, result)
        if API_VERSIONS.is_flexible(version):
            # a flexible response header (an empty tagged-field section), which ApiVersions never has
            return INT32.pack(correlation_id) + b"\x00" + body
        return INT32.pack(correlation_id) + body

    # ---------------------------------------------------------------------------- helpers

    def partition_error(self, topic: str, index: int) -> Tuple[int, Optional[PartitionState]]:
        """The partition if this broker leads it; else the error to answer."""
        p = self.state.partition(topic, index)
        if p is None:
            return UnknownTopicOrPartitionError.code, None
        if p.leader != self.broker_id:
            return NotLeaderOrFollowerError.code, p
        return NO_ERROR, p

    def max_message_bytes(self, topic: str) -> Tuple[int, bool]:
        """The largest batch a topic takes: its ``max.message.bytes`` config (True) if it has one, else the
        cluster's ``max_message_bytes`` (False)."""
        t = self.state.topic(topic)
        value = t.configs.get(MAX_MESSAGE_BYTES) if t is not None else None
        return (int(value), True) if value else (self.config.max_message_bytes, False)

    def timestamp_after_max_ms(self, topic: str) -> int:
        """How far ahead of the broker's clock a record's CreateTime may be: the topic's
        ``message.timestamp.after.max.ms``, else Kafka 4.x's default of one hour."""
        t = self.state.topic(topic)
        value = t.configs.get(TIMESTAMP_AFTER_MAX_MS) if t is not None else None
        return int(value) if value else TIMESTAMP_AFTER_MAX_MS_DEFAULT

    def leader_info(self, p: Optional[PartitionState]) -> Body:
        """KIP-951's leader hint: the partition's leader and epoch (-1, -1 when unknown or not alive)."""
        if p is None:
            return {"leader_id": NO_NODE, "leader_epoch": NO_EPOCH}
        with self.state.lock:
            leader, epoch = p.leader, p.leader_epoch
            broker = self.state.brokers.get(leader)
            if broker is None or not broker.alive:
                return {"leader_id": NO_NODE, "leader_epoch": NO_EPOCH}
        return {"leader_id": leader, "leader_epoch": epoch}

    def node_endpoints(self, broker_ids: List[int]) -> List[Body]:
        out = []
        for b in self.state.live_brokers():
            if b.id in broker_ids:
                out.append({"node_id": b.id, "host": b.host, "port": b.port, "rack": None})
        return out

    def is_coordinator(self, key: str) -> bool:
        broker = self.state.coordinator_for(key)
        return broker is not None and broker.id == self.broker_id
