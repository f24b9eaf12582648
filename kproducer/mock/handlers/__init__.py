"""The API handlers of a mock broker, one module per API (per family for the transaction, offset
and SASL APIs), all of one shape::

    def handle_x(ctx: BrokerContext, request: Request) -> Result

``ctx`` is the broker's :class:`~kproducer.mock.context.BrokerContext`, ``request`` the parsed
request, and the result a response body or a marker of :mod:`kproducer.mock.results`.
:data:`HANDLERS` maps each served API to its handler; the order is the order ApiVersions lists them.
"""
from __future__ import annotations

from typing import Callable, Tuple

from ...protocol.messages import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    API_VERSIONS,
    CREATE_TOPICS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    TXN_OFFSET_COMMIT,
)
from ...protocol.schema import Api
from ..context import BrokerContext
from ..request_channel import Request
from ..results import Result
from .api_versions import handle_api_versions
from .create_topics import handle_create_topics
from .fetch import handle_fetch
from .find_coordinator import handle_find_coordinator
from .list_offsets import handle_list_offsets
from .metadata import handle_metadata
from .offsets import handle_offset_commit, handle_offset_fetch
from .produce import handle_produce
from .sasl import handle_sasl_authenticate, handle_sasl_handshake
from .transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
    handle_init_producer_id,
    handle_txn_offset_commit,
)

Handler = Callable[[BrokerContext, Request], Result]

#: every API a mock broker serves (with the versions its codec implements) and its handler
HANDLERS: Tuple[Tuple[Api, Handler], ...] = (
    (PRODUCE, handle_produce),
    (FETCH, handle_fetch),
    (LIST_OFFSETS, handle_list_offsets),
    (METADATA, handle_metadata),
    (FIND_COORDINATOR, handle_find_coordinator),
    (CREATE_TOPICS, handle_create_topics),
    (INIT_PRODUCER_ID, handle_init_producer_id),
    (ADD_PARTITIONS_TO_TXN, handle_add_partitions_to_txn),
    (ADD_OFFSETS_TO_TXN, handle_add_offsets_to_txn),
    (END_TXN, handle_end_txn),
    (TXN_OFFSET_COMMIT, handle_txn_offset_commit),
    (OFFSET_COMMIT, handle_offset_commit),
    (OFFSET_FETCH, handle_offset_fetch),
    (API_VERSIONS, handle_api_versions),
    (SASL_HANDSHAKE, handle_sasl_handshake),
    (SASL_AUTHENTICATE, handle_sasl_authenticate),
)

__all__ = ["HANDLERS", "Handler"]
