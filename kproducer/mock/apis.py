"""The API layer of a mock broker (Kafka's KafkaApis): the table of served APIs and the dispatch.

:class:`KafkaApis` looks each request's handler up in :data:`kproducer.mock.handlers.HANDLERS`
(api key -> ``handle(ctx, request) -> Result``) and sends what it returns through
:meth:`kproducer.mock.context.BrokerContext.respond`, unless it is DEFERRED (the handler, or the
purgatory it parked the request in, answers later). :func:`restrict_versions` makes an older broker.
"""
from __future__ import annotations

import logging
from typing import Dict, List, Mapping, Tuple, Union

from ..protocol.messages import API_VERSIONS
from ..protocol.schema import Api
from .context import BrokerContext
from .faults import api_name, snake
from .handlers import HANDLERS, Handler
from .request_channel import Request, RequestChannel
from .results import DEFERRED
from .state import ClusterState
from .txn import TransactionCoordinator

log = logging.getLogger(__name__)

#: every API a mock broker serves, with the versions it advertises
SERVED_APIS: List[Api] = [api for api, _ in HANDLERS]
SERVED_VERSIONS: Dict[int, Tuple[int, int]] = {a.key: (a.min_version, a.max_version) for a in SERVED_APIS}
API_NAMES: Dict[int, str] = {a.key: snake(a.name) for a in SERVED_APIS}
_KEYS_BY_NAME: Dict[str, int] = {name: key for key, name in API_NAMES.items()}

VersionSpec = Union[None, int, Tuple[int, int]]


def restrict_versions(api_versions: Mapping[Union[str, int], VersionSpec]) -> Dict[int, Tuple[int, int]]:
    """The versions an older broker serves: :data:`SERVED_VERSIONS` with each API named in
    ``api_versions`` (by name, ``"Produce"`` / ``"produce"``, or key, ``0``) limited to a max version
    (an int: the range becomes ``min(implemented min, max)..max``), to a ``(min, max)`` range, or left
    out (None: the API is not served, as a broker that predates it). ApiVersions itself is always served.

    The mock cannot advertise a version above what it implements (ValueError); it may advertise
    versions below (an old broker's v0-v2 Produce, for instance): a request at one of those is refused
    by closing the connection, as no Kafka client sends it without a codec for it."""
    served = dict(SERVED_VERSIONS)
    for name, spec in api_versions.items():
        try:
            key = name if isinstance(name, int) and name in API_NAMES else _KEYS_BY_NAME[api_name(name)]
        except (KeyError, ValueError):
            raise ValueError(f"api_versions: unknown or unserved API {name!r}; served: "
                             f"{', '.join(sorted(API_NAMES.values()))}") from None
        impl_lo, impl_hi = SERVED_VERSIONS[key]
        label = API_NAMES[key]
        if spec is None:
            if key == API_VERSIONS.key:
                raise ValueError("api_versions: ApiVersions cannot be left out (every broker since 0.10 serves it)")
            del served[key]
            continue
        if isinstance(spec, bool) or not isinstance(spec, (int, tuple, list)):
            raise ValueError(f"api_versions[{name!r}]: give a max version, a (min, max) pair or None, not {spec!r}")
        if isinstance(spec, int):
            lo, hi = min(impl_lo, spec), spec
        else:
            if len(spec) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in spec):
                raise ValueError(f"api_versions[{name!r}]: a (min, max) pair of ints, not {spec!r}")
            lo, hi = spec[0], spec[1]
        if not 0 <= lo <= hi:
            raise ValueError(f"api_versions[{name!r}]: versions {lo}..{hi} are not a range of versions >= 0")
        if hi > impl_hi:
            raise ValueError(f"api_versions[{name!r}]: the mock implements {label} up to v{impl_hi}, not v{hi}")
        if key == API_VERSIONS.key and lo > 0:
            raise ValueError("api_versions: ApiVersions must serve v0 (clients fall back to it)")
        served[key] = (lo, hi)
    return served


class KafkaApis:
    """One broker's request dispatch: the handler table applied to a :class:`BrokerContext`."""

    def __init__(
        self,
        broker_id: int,
        state: ClusterState,
        txn: TransactionCoordinator,
        channel: RequestChannel,
    ) -> None:
        self.broker_id = broker_id
        self.faults = state.faults
        #: api key -> (min, max): what this broker advertises and accepts
        self.served: Dict[int, Tuple[int, int]] = state.config.served_versions or SERVED_VERSIONS
        self.ctx = BrokerContext(broker_id, state, txn, channel, self.served)
        self.purgatory = self.ctx.purgatory
        self._handlers: Dict[int, Handler] = {api.key: handler for api, handler in HANDLERS}

    def handle(self, request: Request) -> None:
        key = request.api.key
        header = request.header
        self.faults.record(self.broker_id, API_NAMES[key], header.api_version, header.correlation_id,
                           header.client_id)
        result = self._handlers[key](self.ctx, request)
        if result is not DEFERRED:
            self.ctx.respond(request, result)
