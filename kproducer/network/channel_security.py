"""What the network layer needs to secure a connection: a TLS context and a SASL mechanism factory.

:func:`kproducer.security.channel_security` builds one from the producer's settings; tests and other
entry points may build one directly. The network layer never reads settings itself.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, List, Optional

if TYPE_CHECKING:
    import ssl

    from ..protocol.sasl import SaslClient

log = logging.getLogger(__name__)

#: makes a fresh SASL mechanism client for one authentication with the broker at ``host``
SaslClientFactory = Callable[[str], "SaslClient"]


class ChannelSecurity:
    """TLS when ``ssl_context`` is set; SASL (SaslHandshake v1 + SaslAuthenticate) when
    ``sasl_mechanism`` is set. ``protocol`` is the security.protocol name, for messages."""

    __slots__ = ("ssl_context", "sasl_mechanism", "sasl_client_factory", "protocol", "_closeables")

    def __init__(
        self,
        ssl_context: Optional[ssl.SSLContext] = None,
        sasl_mechanism: Optional[str] = None,
        sasl_client_factory: Optional[SaslClientFactory] = None,
    ) -> None:
        if (sasl_mechanism is None) != (sasl_client_factory is None):
            raise ValueError("sasl_mechanism and sasl_client_factory go together")
        self.ssl_context = ssl_context
        self.sasl_mechanism = sasl_mechanism
        self.sasl_client_factory = sasl_client_factory
        if sasl_mechanism is None:
            self.protocol = "SSL" if ssl_context is not None else "PLAINTEXT"
        else:
            self.protocol = "SASL_SSL" if ssl_context is not None else "SASL_PLAINTEXT"
        self._closeables: List[Any] = []

    def add_closeable(self, resource: Any) -> None:
        """Close ``resource`` (e.g. the refresher of OAuth tokens) in :meth:`close`."""
        self._closeables.append(resource)

    def close(self) -> None:
        """Release what the SASL login holds (the network client calls it when it closes); idempotent."""
        resources, self._closeables = self._closeables, []
        for resource in resources:
            try:
                resource.close()
            except Exception:  # closing must go on
                log.exception("closing %r failed", resource)

    def __repr__(self) -> str:  # never the credentials: the factory holds them
        return f"ChannelSecurity({self.protocol}, mechanism={self.sasl_mechanism})"


PLAINTEXT = ChannelSecurity()
