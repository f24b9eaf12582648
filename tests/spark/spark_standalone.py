"""A Spark standalone cluster on this machine: one master and two workers started with pyspark's own
``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), each worker
running its executors in their own JVM processes, all on 127.0.0.1 (a worker may be named ``localhost``).

Used by tests/spark/test_spark_standalone.py and benchmarks/bench_spark.py (``--standalone``). Every wait
is bounded; :meth:`StandaloneCluster.stop` ends only the processes it started (SIGTERM, then SIGKILL
after a grace period); the workers stop their executors themselves.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

HOST = "127.0.0.1"


class StandaloneError(RuntimeError):
    """The cluster could not be started (no Java, no spark-class, a process died, a wait ran out)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


class StandaloneCluster:
    """``with StandaloneCluster(repo) as c: ... c.master_url ...``"""

    def __init__(self, python_path: str, workers: int = 2, cores: int = 1, memory: str = "1g",
                 start_timeout: float = 90.0, hosts: Sequence[str] = (HOST,)) -> None:
        self.python_path = python_path
        self.workers = workers
        #: the host name of each worker (cycled): Spark never runs a speculative copy of a task on a host where
        #: an attempt of it runs, so with ("127.0.0.1", "localhost") the two workers count as two hosts
        self.hosts = tuple(hosts)
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.port = _free_port()
        self.master_url = f"spark://{HOST}:{self.port}"
        self.dir = tempfile.mkdtemp(prefix="kproducer-standalone-")
        self._procs: List[subprocess.Popen[bytes]] = []
        self._logs: List[str] = []

    # -- processes ---------------------------------------------------------------------------------

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["SPARK_HOME"] = spark_home()
        env["SPARK_LOCAL_IP"] = HOST  # also what the web UIs bind to
        env["SPARK_LOG_DIR"] = self.dir
        env["PYSPARK_PYTHON"] = sys.executable
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = self.python_path if not old else self.python_path + os.pathsep + old
        return env

    def _spawn(self, name: str, args: List[str]) -> None:
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        if not os.path.exists(spark_class):
            raise StandaloneError(f"{spark_class} not found (pyspark without its launcher scripts?)")
        log_path = os.path.join(self.dir, f"{name}.log")
        self._logs.append(log_path)
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(["bash", spark_class] + args, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.env(), cwd=self.dir)
        self._procs.append(proc)

    def _wait_for(self, log_path: str, text: str, count: int = 1) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise StandaloneError(f"a cluster process exited with {proc.returncode}: "
                                          f"{self.log_tail()}")
            try:
                with open(log_path, errors="replace") as f:
                    if f.read().count(text) >= count:
                        return
            except FileNotFoundError:
                pass
            time.sleep(0.2)
        raise StandaloneError(f"no {text!r} in {log_path} after {self.start_timeout:.0f} s: {self.log_tail()}")

    def start(self) -> "StandaloneCluster":
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise StandaloneError("no java on PATH and no JAVA_HOME: Spark needs Java 17")
        try:
            self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(self.port),
                                   "--webui-port", str(_free_port())])
            master_log = self._logs[0]
            self._wait_for(master_log, "I have been elected leader")
            for i in range(self.workers):
                work = os.path.join(self.dir, f"work-{i}")
                os.makedirs(work, exist_ok=True)
                self._spawn(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker",
                                            "--host", self.hosts[i % len(self.hosts)],
                                            "--port", str(_free_port()), "--webui-port", str(_free_port()),
                                            "--cores", str(self.cores), "--memory", self.memory,
                                            "--work-dir", work, self.master_url])
            self._wait_for(master_log, "Registering worker", self.workers)
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for path in self._logs:
            try:
                with open(path, errors="replace") as f:
                    tail = f.read().splitlines()[-lines:]
            except FileNotFoundError:
                continue
            out.append(f"--- {os.path.basename(path)}\n" + "\n".join(tail))
        return "\n".join(out)

    def executor_logs(self) -> str:
        """Every executor's stderr (under the workers' work dirs)."""
        out = []
        for root, _dirs, files in os.walk(self.dir):
            for name in files:
                if name == "stderr":
                    with open(os.path.join(root, name), errors="replace") as f:
                        out.append(f.read())
        return "\n".join(out)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM every process this object started (workers first, so they stop their executors),
        SIGKILL what is still alive after ``grace`` seconds."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in reversed(self._procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._procs = []

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()


def run_driver(script: str, args: List[str], env: Dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run a driver program (a Python script that builds its own SparkSession) to completion."""
    return subprocess.run([sys.executable, script] + args, env=env, capture_output=True, timeout=timeout, text=True)


__all__ = ["HOST", "StandaloneCluster", "StandaloneError", "run_driver", "spark_home"]


def _main() -> Optional[int]:  # pragma: no cover - manual check: python tests/spark/spark_standalone.py
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with StandaloneCluster(repo) as c:
        print(c.master_url, c.dir)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
