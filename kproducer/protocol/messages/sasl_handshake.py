"""SaslHandshake (key 17): choose the SASL mechanism for this connection.

v0 carried the mechanism's tokens as raw size-prefixed frames after the handshake; v1 (KIP-152) wraps
them in SaslAuthenticate requests, which is the only way this client authenticates.
"""
from __future__ import annotations

from ..schema import Api, Field

SASL_HANDSHAKE = Api(
    17,
    "SaslHandshake",
    versions="0-1",
    flexible="none",
    request=[
        Field("mechanism", "string"),
    ],
    response=[
        Field("error_code", "int16"),
        Field("mechanisms", "[]string"),
    ],
)
