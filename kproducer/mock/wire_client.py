"""A minimal blocking Kafka-protocol client for poking a broker from tests: send requests (pipelined
if you like), read responses, or write raw bytes. Not a producer: no retries, no metadata."""
from __future__ import annotations

import itertools
import socket
import ssl
import struct
from typing import Any, Dict, Optional, Tuple, Union

from ..protocol.messages import API_VERSIONS, APIS, decode_response, encode_request
from ..protocol.messages.api_versions import decode_api_versions
from ..protocol.schema import Api

_SIZE = struct.Struct(">i")


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 5.0, client_id: Optional[str] = "wire-client",
                 ssl_context: Optional[ssl.SSLContext] = None, server_hostname: Optional[str] = None) -> None:
        """``ssl_context``: speak TLS (a blocking handshake here; ``server_hostname`` defaults to ``host``)."""
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
            except BaseException:
                sock.close()
                raise
        self.sock = sock
        self.client_id = client_id
        self._correlation = itertools.count(1)

    @classmethod
    def connect(cls, address: Union[str, Tuple[str, int]], timeout: float = 5.0) -> "WireClient":
        """From ``"host:port"`` or ``(host, port)``."""
        if isinstance(address, str):
            host, _, port = address.rpartition(":")
            return cls(host, int(port), timeout)
        return cls(address[0], address[1], timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _api(api: Union[Api, int]) -> Api:
        return api if isinstance(api, Api) else APIS[api]

    def encode(self, api: Union[Api, int], version: int, body: Dict[str, Any],
               correlation_id: Optional[int] = None) -> Tuple[int, bytes]:
        """(correlation id, the whole frame with its size prefix)."""
        cid = next(self._correlation) if correlation_id is None else correlation_id
        payload = encode_request(self._api(api), version, cid, self.client_id, body)
        return cid, _SIZE.pack(len(payload)) + payload

    def send(self, api: Union[Api, int], version: int, body: Dict[str, Any]) -> int:
        cid, frame = self.encode(api, version, body)
        self.sock.sendall(frame)
        return cid

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        """One response frame's payload; raises ConnectionError when the broker closed the socket."""
        size = _SIZE.unpack(self._read_exact(4))[0]
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            data = self.sock.recv(min(n, 1 << 20))
            if not data:
                raise ConnectionError("the broker closed the connection")
            chunks.append(data)
            n -= len(data)
        return b"".join(chunks)

    def receive(self, api: Union[Api, int], version: int) -> Tuple[int, Dict[str, Any]]:
        """(correlation id, body) of the next response, decoded as ``api`` at ``version``."""
        the_api = self._api(api)
        frame = self.read_frame()
        if the_api.key == API_VERSIONS.key:  # maybe the v0 UNSUPPORTED_VERSION fallback
            cid = _SIZE.unpack_from(frame)[0]
            return cid, decode_api_versions(version, frame, 4)[1]
        return decode_response(the_api, version, frame)

    def request(self, api: Union[Api, int], version: int, body: Dict[str, Any]) -> Dict[str, Any]:
        cid = self.send(api, version, body)
        got, response = self.receive(api, version)
        if got != cid:
            raise AssertionError(f"correlation id {got} answered request {cid}")
        return response

    def is_closed_by_peer(self, timeout: float = 2.0) -> bool:
        """True if the broker closes the connection (EOF or reset) within ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except socket.timeout:
            return False
        except OSError:
            return True
