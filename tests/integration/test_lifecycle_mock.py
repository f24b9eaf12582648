"""Issue 12, a producer's life on the MockCluster: fork() (a child refuses the parent's producer at once, a
new producer in the child works, the parent carries on untouched), a producer dropped without close()
(keeps delivering, ResourceWarning) and interpreter exit (open producers flush for a bounded time).

The fork tests fork the pytest process itself: the child only runs the test's function, reports a JSON
result over a pipe and leaves with os._exit; the parent waits for it with a deadline (and kills it then)."""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import traceback
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

import kproducer
from kproducer import Producer
from kproducer.mock import MockCluster
from kproducer.producer import lifecycle

pytestmark = [pytest.mark.timeout(180)]

TOPIC = "life"
WAIT = 60.0  # generous bound for event-driven waits on a loaded machine
REPO = os.path.dirname(os.path.dirname(os.path.abspath(kproducer.__file__)))
FORK_MESSAGE = "a producer cannot be used across fork(); create a new Producer in the child process"

needs_fork = pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "register_at_fork"),
                                reason="this platform has no fork()")



@pytest.fixture
def cluster() -> Iterator[MockCluster]:
    with MockCluster(1) as c:
        c.create_topic(TOPIC, 2)
        yield c


def values(cluster: MockCluster, partition: int) -> List[bytes]:
    return [r.value for r in cluster.records(TOPIC, partition)]


# -- fork ------------------------------------------------------------------------------------------

def run_in_child(body: Callable[[], Dict[str, Any]], timeout: float = WAIT) -> Tuple[int, Dict[str, Any]]:
    """Fork; the child runs ``body`` and sends its result (or its crash) back over a pipe, then leaves with
    os._exit (exit code 0 when ``body`` returned). Returns the child's exit code and result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 3
        try:
            os.close(r)
            try:
                report = body()
                code = 0
            except BaseException as e:
                report = {"crash": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
            data = json.dumps(report).encode()
            while data:
                data = data[os.write(w, data):]
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + timeout
    chunks: List[bytes] = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"the child did not report within {timeout} s (it hangs)")
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the child did not exit within {timeout} s")
            time.sleep(0.02)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(r)
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
    return code, json.loads(b"".join(chunks) or b"{}")


def outcome(call: Callable[[], Any]) -> Any:
    try:
        call()
    except Exception as e:
        return [type(e).__name__, str(e)]
    return "no error"


@needs_fork
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (3.12+: fork() of a multi-threaded process)
def test_a_forked_child_gets_a_clear_error_and_a_new_producer_in_it_works(cluster: MockCluster) -> None:
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=600_000)  # records wait until flush()
    p.send(TOPIC, b"before fork", partition=0)
    p.flush(WAIT)
    queued = [p.send(TOPIC, b"queued at fork %d" % i, partition=0) for i in range(20)]
    assert p.metrics()["queued-batches"] == 1
    channel = p._client.selector._channels[1]  # the parent's connection to the leader (must survive)

    def child() -> Dict[str, Any]:
        calls: Dict[str, Callable[[], Any]] = {
            "send": lambda: p.send(TOPIC, b"child via the parent's producer", partition=0),
            "send_batch": lambda: p.send_batch(TOPIC, [b"a", b"b"], partition=0),
            "flush": lambda: p.flush(),  # blocked for ever before issue 12
            "partitions_for": lambda: p.partitions_for(TOPIC),
            "metrics": p.metrics,
            "init_transactions": lambda: p.init_transactions(1.0),
            "begin_transaction": p.begin_transaction,
            "send_offsets_to_transaction": lambda: p.send_offsets_to_transaction({(TOPIC, 0): 1}, "group"),
            "commit_transaction": lambda: p.commit_transaction(1.0),
            "abort_transaction": lambda: p.abort_transaction(1.0),
        }
        report: Dict[str, Any] = {name: outcome(call) for name, call in calls.items()}
        report["close"] = [outcome(p.close), outcome(lambda: p.close(0))]  # drops the copy, twice
        report["repr"] = repr(p)
        lifecycle._close_at_exit()  # what the child's interpreter exit runs: nothing of the parent's
        with Producer(bootstrap_servers=cluster.bootstrap_servers) as mine:
            md = mine.send(TOPIC, b"from the child's own producer", partition=1).get(timeout=WAIT)
        report["own_producer"] = [md.partition, md.offset]
        return report

    code, report = run_in_child(child)
    assert code == 0, report
    for call in ("send", "send_batch", "flush", "partitions_for", "metrics", "init_transactions",
                 "begin_transaction", "send_offsets_to_transaction", "commit_transaction", "abort_transaction"):
        name, message = report[call]
        assert name == "ProducerForkedError", (call, report[call])
        assert FORK_MESSAGE in message and f"created in process {os.getpid()}" in message, (call, message)
    assert report["send"][1].startswith("send() on a producer inherited through fork()")
    assert report["close"] == ["no error", "no error"]
    assert "forked" in report["repr"]
    assert report["own_producer"] == [1, 0]

    # the parent's producer is untouched: same connection, its queued records go out once, it goes on
    later = p.send(TOPIC, b"after fork", partition=0)
    p.flush(WAIT)
    assert [f.get(0).offset for f in queued] == list(range(1, 21))
    assert later.get(0).offset == 21
    assert p._client.selector._channels.get(1) is channel
    p.close(WAIT)
    assert values(cluster, 0) == [b"before fork"] + [b"queued at fork %d" % i for i in range(20)] + [b"after fork"]
    assert values(cluster, 1) == [b"from the child's own producer"]


@needs_fork
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_producer_closed_before_fork_says_fork_in_the_child_and_the_parent_is_not_affected(
        cluster: MockCluster) -> None:
    p = Producer(bootstrap_servers=cluster.bootstrap_servers)
    p.send(TOPIC, b"one", partition=0).get(WAIT)
    open_one = Producer(bootstrap_servers=cluster.bootstrap_servers)
    p.close(WAIT)

    def child() -> Dict[str, Any]:
        return {"closed": outcome(lambda: p.send(TOPIC, b"x")), "open": outcome(lambda: open_one.flush())}

    code, report = run_in_child(child)
    assert code == 0, report
    assert report["closed"][0] == "ProducerForkedError" and report["open"][0] == "ProducerForkedError"
    # in the parent nothing changed: the closed one is closed, the open one works
    assert outcome(lambda: p.send(TOPIC, b"x"))[0] == "ProducerClosedError"
    assert open_one.send(TOPIC, b"two", partition=0).get(WAIT).offset == 1
    open_one.close(WAIT)


# -- dropped without close() -----------------------------------------------------------------------

def test_a_dropped_producer_delivers_its_queued_records_and_warns(cluster: MockCluster) -> None:
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=600_000)  # only closing sends them
    p.send(TOPIC, b"first", partition=0)
    p.flush(WAIT)  # (connected; the rest are queued)
    futures = [p.send(TOPIC, b"v%d" % i, partition=i % 2) for i in range(200)]
    assert p.metrics()["queued-batches"] == 2
    thread = p._sender
    ref = weakref.ref(p)
    with pytest.warns(ResourceWarning,
                      match="Producer was not closed; call close\\(\\) or use it as a context manager"):
        del p
        gc.collect()
    assert ref() is None  # nothing kept the Producer alive (its network thread holds no reference to it)
    for f in futures:
        f.get(WAIT)  # delivered, none failed
    thread.join(WAIT)
    assert not thread.is_alive()  # and then the thread ended
    thread_ref = weakref.ref(thread)
    del thread
    gc.collect()
    assert thread_ref() is None  # nothing is left behind (the exit registry forgets the ended thread)
    assert values(cluster, 0) == [b"first"] + [b"v%d" % i for i in range(0, 200, 2)]
    assert values(cluster, 1) == [b"v%d" % i for i in range(1, 200, 2)]


def test_a_closed_producer_does_not_warn_when_dropped(cluster: MockCluster) -> None:
    p = Producer(bootstrap_servers=cluster.bootstrap_servers)
    with p:
        p.send(TOPIC, b"x", partition=0).get(WAIT)
    refs = [weakref.ref(p), weakref.ref(p._sender)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        del p
        gc.collect()
    assert [w for w in seen if issubclass(w.category, ResourceWarning) and "Producer" in str(w.message)] == []
    assert [r() for r in refs] == [None, None]  # the lifecycle registry kept nothing


# -- interpreter exit ------------------------------------------------------------------------------

EXIT_SCRIPT = textwrap.dedent("""
    import gc, sys
    from kproducer import Producer
    mode, bootstrap, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    p = Producer(bootstrap_servers=bootstrap, linger_ms=600_000)  # records wait: only closing sends them
    p.send(topic, b"first", partition=0)
    p.flush(60)
    for i in range(n):
        p.send(topic, b"exit-%d" % i, partition=0)
    if mode == "dropped":
        del p
        gc.collect()
    # no close(): the interpreter exits with the records queued
""")


@pytest.mark.parametrize("mode", ["kept", "dropped"])
def test_records_of_an_unclosed_producer_are_delivered_at_interpreter_exit(cluster: MockCluster, mode: str) -> None:
    pytest.importorskip("kafka")
    from tests.readback import consume

    n = 500
    proc = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", EXIT_SCRIPT, mode, cluster.bootstrap_servers,
         TOPIC, str(n)],
        env={**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")},
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ("Producer was not closed" in proc.stderr) == (mode == "dropped"), proc.stderr
    read = consume(cluster.bootstrap_servers, TOPIC, [0], n + 1, timeout=WAIT)
    assert [r.value for r in read] == [b"first"] + [b"exit-%d" % i for i in range(n)]


BOUND_SCRIPT = textwrap.dedent("""
    import sys
    from kproducer import Producer
    from kproducer.mock import MockCluster
    from kproducer.producer import lifecycle
    lifecycle.EXIT_FLUSH_MAX_S = 1.0  # (instead of 30 s, to keep the test short)
    cluster = MockCluster(1).start()
    cluster.create_topic("t", 1)
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0)
    p.send("t", b"first").get(60)
    cluster.stop_broker(1)  # from now on nothing can be delivered
    def report(md, exc):
        print("failed" if exc is not None else "delivered", type(exc).__name__, flush=True)
    for i in range(5):
        p.send("t", b"lost-%d" % i, callback=report)
    cluster.stop()
    # no close(): at exit the producer flushes for min(delivery.timeout.ms (120 s), 1 s), then closes
""")


def test_the_exit_flush_is_bounded_and_then_the_records_fail() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", BOUND_SCRIPT],
        env={**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")},
        capture_output=True, text=True, timeout=100)  # (delivery.timeout.ms alone would take 120 s)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["failed ProducerClosedError"] * 5, (proc.stdout, proc.stderr)
