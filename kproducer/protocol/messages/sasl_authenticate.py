"""SaslAuthenticate (key 36): one round of the SASL exchange chosen by SaslHandshake v1 (KIP-152).

v1 adds ``session_lifetime_ms`` (KIP-368): when positive, the client must re-authenticate on the same
connection before that many milliseconds have passed, or the broker closes the connection.
"""
from __future__ import annotations

from ..schema import Api, Field

SASL_AUTHENTICATE = Api(
    36,
    "SaslAuthenticate",
    versions="0-2",
    flexible="2+",
    request=[
        Field("auth_bytes", "bytes"),
    ],
    response=[
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
        Field("auth_bytes", "bytes"),
        Field("session_lifetime_ms", "int64", "1+"),
    ],
)
