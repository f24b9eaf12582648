"""Where kproducer's CPU goes in a burst, and A/B two checkouts (docs/design.md, "Performance budget").

    python benchmarks/profile_sender.py burst --pin --trials 10                  # this checkout, 10 processes
    python benchmarks/profile_sender.py burst --pin --trials 10 --ab /tmp/base   # against another checkout
    python benchmarks/profile_sender.py calls --pin                              # Python calls per iteration
    python benchmarks/profile_sender.py split --pin                              # CPU per part of a request
    python benchmarks/profile_sender.py paced --pin --rate 1000 --rate 10000     # CPU per record at a steady rate

Each burst sends ``-n`` keyless 100 B records (``--mode batch``: ``send_batch()`` of 10,000 at a time;
``--mode send``: one ``send()`` each) to a fresh 6-partition topic with compare.py's settings (acks=all,
linger.ms=5, batch.size=16384, idempotence on), then flushes. The broker is tansu (tests/tansu.py), or with
``--mock`` a MockCluster in this process (for a quick run anywhere; its figures are not comparable with
tansu's). ``--pin`` puts the broker on the last CPU and the client on the others, as compare.py does: without
it, the scheduler's moves hide changes of 5-10 %.

- ``burst``: one fresh Python process per burst, so that every burst pays what a new producer pays (new pool
  buffers' page faults, a cold cache). Prints per burst and the median and minimum per checkout: msg/s and CPU
  µs per record, split into the network thread (its own CPU clock) and the caller. With ``--ab DIR`` the
  bursts alternate between this checkout and DIR (a ``git worktree`` of another commit, its accelerator built:
  ``git worktree add --detach /tmp/base REV && (cd /tmp/base && python setup.py build_ext --inplace)``). Every
  burst checks that the producer acknowledged every record and failed none.
- ``calls``: counts the Python and C calls made by ``--iterations`` sender iterations (``sys.setprofile`` on
  the network thread, after one burst to warm up), per iteration. Counting calls finds the per-batch and
  per-request Python that a sampling profiler spreads too thin to see.
- ``paced``: sends ``--rate`` records a second of 100 B for ``--seconds`` (one ``send()`` each, paced by a loop
  that sleeps until the next record is due), then flushes, in one fresh process per run: a do-nothing run
  (``null``: the same loop calling a function that does nothing), kproducer (this checkout, and with ``--ab`` the
  other), confluent-kafka (its defaults, as in the issue; ``confluent-kafka-idem`` with idempotence on), in
  rotating order, ``--trials`` times. Prints each run's process CPU µs per record and the same net of the
  do-nothing loop's median, and for kproducer the network thread's CPU, produce requests and the network
  thread's voluntary context switches (its wakeups from epoll) per record; then the medians.
- ``split``: wraps the parts of a sender iteration in ``time.thread_time()`` deltas, each part's children
  subtracted, and prints each part's CPU per produce request. The wrappers cost ~1 µs a call, which is in the
  figures.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple
from unittest import mock

import compare  # benchmarks/compare.py, beside this file: the same pinning

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PARTITIONS = 6
CHUNK = 10_000
PAYLOAD = b"v" * 100
SETTINGS = {"acks": "all", "linger.ms": 5, "batch.size": 16384}


# -- the broker -----------------------------------------------------------------------------------

class Broker:
    """tansu in its own process, or a MockCluster in this one; ``topic()`` makes a fresh topic."""

    def __init__(self, mock: bool, pin_cpu: Optional[int]) -> None:
        self.mock = mock
        self.pin_cpu = pin_cpu
        self._count = 0
        self._impl: Any = None

    def __enter__(self) -> "Broker":
        if REPO not in sys.path:
            sys.path.insert(0, REPO)  # tests/tansu.py
        if self.mock:
            from kproducer.mock import MockCluster

            self._impl = MockCluster().start()
            self.bootstrap = self._impl.bootstrap_servers
        else:
            from tests.tansu import Tansu

            self._impl = Tansu().start()
            self.bootstrap = self._impl.bootstrap
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._impl is not None:
            self._impl.close()

    def topic(self) -> str:
        self._count += 1
        name = f"profile-{os.getpid()}-{self._count}"
        self._impl.create_topic(name, PARTITIONS)
        self.pin()
        return name

    def pin(self) -> None:
        """The broker's threads on ``pin_cpu`` (again before each burst: it may have started more)."""
        if self.pin_cpu is None:
            return
        if not self.mock:
            compare.pin_broker(self._impl, self.pin_cpu)
            return
        for tid in os.listdir("/proc/self/task"):  # the mock's threads, not this one (pinned to the client's CPUs)
            if int(tid) != threading.get_native_id():
                try:
                    os.sched_setaffinity(int(tid), {self.pin_cpu})
                except (ProcessLookupError, FileNotFoundError):  # the thread ended meanwhile
                    pass


def pin_plan(pin: bool) -> Tuple[Optional[Set[int]], Optional[int]]:
    """With ``--pin``: (the client's CPUs, the broker's CPU), as compare.py's (which exits when it cannot pin)."""
    plan = compare.pin_plan(pin)
    return (None, None) if plan is None else plan


def new_producer(bootstrap: str) -> Any:
    from kproducer import Producer

    return Producer(dict(SETTINGS, **{"bootstrap.servers": bootstrap}))


def send_burst(p: Any, topic: str, num: int, mode: str) -> None:
    if mode == "batch":
        values = [PAYLOAD] * CHUNK
        for start in range(0, num, CHUNK):
            p.send_batch(topic, values[:min(CHUNK, num - start)])
    else:
        send = p.send
        for _ in range(num):
            send(topic, PAYLOAD)
    p.flush()


def load(p: Any, topic: str, args: argparse.Namespace) -> None:
    """calls and split: a burst, or with ``--rate`` one ``send()`` per record paced for ``--seconds``, flushed."""
    if args.rate:
        send = p.send
        pace(lambda: send(topic, PAYLOAD), args.rate[0], args.seconds)
        p.flush()
    else:
        send_burst(p, topic, args.num, args.mode)


def check_acknowledged(p: Any, num: int) -> None:
    m = p.metrics()
    acked, failed = m.get("record-ack-total"), m.get("record-error-total")
    if acked != num or failed:
        raise RuntimeError(f"the producer acknowledged {acked} of {num} records and failed {failed}")


# -- burst: one fresh process per burst ---------------------------------------------------------

def child_burst(bootstrap: str, topic: str, num: int, mode: str) -> Dict[str, Any]:
    """One burst in this (fresh) process: msg/s, CPU µs per record (process, network thread)."""
    import kproducer

    p = new_producer(bootstrap)
    try:
        p.partitions_for(topic)  # metadata before the clock starts, as compare.py
        net_clock = time.pthread_getcpuclockid(p._sender.ident)
        c0, n0, w0 = time.process_time(), time.clock_gettime(net_clock), time.perf_counter()
        send_burst(p, topic, num, mode)
        c1, n1, w1 = time.process_time(), time.clock_gettime(net_clock), time.perf_counter()
        check_acknowledged(p, num)
        from kproducer.protocol import accel

        return {"msgs_per_s": num / (w1 - w0), "cpu_us": 1e6 * (c1 - c0) / num, "net_us": 1e6 * (n1 - n0) / num,
                "kproducer": os.path.dirname(os.path.dirname(os.path.abspath(kproducer.__file__))),
                "implementation": accel.IMPLEMENTATION, "pid": os.getpid()}
    finally:
        p.close()


def run_child(checkout: str, bootstrap: str, topic: str, num: int, mode: str,
              cpus: Optional[Set[int]]) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([checkout] + [x for x in [os.environ.get("PYTHONPATH")] if x]))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--bootstrap", bootstrap, "--topic", topic,
           "-n", str(num), "--mode", mode]
    if cpus:
        cmd += ["--cpus", ",".join(str(c) for c in sorted(cpus))]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"the burst in {checkout} failed (exit {out.returncode}): {out.stderr[-2000:]}")
    result: Dict[str, Any] = json.loads(lines[-1])
    if os.path.realpath(result["kproducer"]) != os.path.realpath(checkout):
        raise RuntimeError(f"the burst meant for {checkout} imported kproducer from {result['kproducer']}")
    return result


def burst(args: argparse.Namespace) -> Dict[str, List[Dict[str, Any]]]:
    cpus, broker_cpu = pin_plan(args.pin)
    sides = [("this", REPO)] + ([("ab", os.path.abspath(args.ab))] if args.ab else [])
    results: Dict[str, List[Dict[str, Any]]] = {name: [] for name, _ in sides}
    with Broker(args.mock, broker_cpu) as broker:
        for trial in range(args.trials):
            for name, checkout in sides if trial % 2 == 0 else sides[::-1]:
                r = run_child(checkout, broker.bootstrap, broker.topic(), args.num, args.mode, cpus)
                results[name].append(r)
                print(f"trial {trial + 1} {name:4s} {r['msgs_per_s']:>12,.0f} msg/s  CPU {r['cpu_us']:.3f} µs/record"
                      f"  (network thread {r['net_us']:.3f}, caller {r['cpu_us'] - r['net_us']:.3f})"
                      f"  [{r['implementation']}, {r['kproducer']}]", flush=True)
    for name, checkout in sides:
        rs = results[name]
        cpu, net = [r["cpu_us"] for r in rs], [r["net_us"] for r in rs]
        print(f"{name} ({checkout}), {len(rs)} bursts of {args.num:,} ({args.mode}): "
              f"msg/s median {statistics.median(r['msgs_per_s'] for r in rs):,.0f}; CPU µs/record median "
              f"{statistics.median(cpu):.3f} min {min(cpu):.3f}; network thread median {statistics.median(net):.3f}"
              f" min {min(net):.3f}; caller median {statistics.median(c - n for c, n in zip(cpu, net)):.3f}")
    return results


# -- paced: a steady rate, one fresh process per run --------------------------------------------------

#: the clients ``paced`` runs; "kproducer@ab" is kproducer from the --ab checkout
PACED_CLIENTS = ["null", "kproducer", "confluent-kafka", "confluent-kafka-idem"]


def pace(send: Callable[[], None], rate: float, seconds: float) -> int:
    """Calls ``send`` ``rate * seconds`` times, each when it is due (sleeping until then); returns the count."""
    total = max(1, int(rate * seconds))
    interval = 1.0 / rate
    clock, sleep = time.perf_counter, time.sleep
    start = clock()
    i = 0
    while i < total:  # every pass either sends (i grows) or sleeps until the next record is due
        wait = start + i * interval - clock()
        if wait > 0:
            sleep(wait)
            continue
        send()
        i += 1
    return total


def _ctx_switches(tid: int) -> Tuple[int, int]:
    """(voluntary, involuntary) context switches of thread ``tid`` of this process so far."""
    vol = invol = 0
    with open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                invol = int(line.split()[1])
    return vol, invol


def child_paced(client: str, bootstrap: str, topic: str, rate: float, seconds: float) -> Dict[str, Any]:
    """One paced run in this (fresh) process: process CPU µs per record over the pacing and the flush."""
    result: Dict[str, Any] = {"client": client, "pid": os.getpid()}
    if client == "null":
        def nothing(topic: str, value: bytes) -> None:
            return None

        c0 = time.process_time()
        n = pace(lambda: nothing(topic, PAYLOAD), rate, seconds)
        result["cpu_us"] = 1e6 * (time.process_time() - c0) / n
        return result
    if client.startswith("confluent-kafka"):
        from confluent_kafka import Producer as CProducer

        errors = [0]

        def on_error(err: Any, msg: Any) -> None:
            if err is not None:
                errors[0] += 1

        conf: Dict[str, Any] = dict(SETTINGS, **{"bootstrap.servers": bootstrap, "delivery.report.only.error": True,
                                                 "on_delivery": on_error})
        if client == "confluent-kafka-idem":
            conf["enable.idempotence"] = True
        cp = CProducer(conf)
        cp.list_topics(topic, timeout=10)
        produce = cp.produce
        c0 = time.process_time()
        n = pace(lambda: produce(topic, PAYLOAD), rate, seconds)
        left = cp.flush(60)
        result["cpu_us"] = 1e6 * (time.process_time() - c0) / n
        if left or errors[0]:
            raise RuntimeError(f"confluent-kafka left {left} records undelivered and failed {errors[0]}")
        return result
    import kproducer
    from kproducer.protocol import accel

    p = new_producer(bootstrap)
    try:
        p.partitions_for(topic)  # metadata before the clock starts
        tid = p._sender.native_id
        net_clock = time.pthread_getcpuclockid(p._sender.ident)
        send = p.send
        v0, i0 = _ctx_switches(tid)
        c0, n0 = time.process_time(), time.clock_gettime(net_clock)
        n = pace(lambda: send(topic, PAYLOAD), rate, seconds)
        p.flush()
        c1, n1 = time.process_time(), time.clock_gettime(net_clock)
        v1, i1 = _ctx_switches(tid)
        check_acknowledged(p, n)
        requests = p.metrics().get("request-total") or 0
        result.update({"cpu_us": 1e6 * (c1 - c0) / n, "net_us": 1e6 * (n1 - n0) / n,
                       "records_per_request": n / max(1, requests), "wakeups_per_record": (v1 - v0) / n,
                       "involuntary_per_record": (i1 - i0) / n,
                       "kproducer": os.path.dirname(os.path.dirname(os.path.abspath(kproducer.__file__))),
                       "implementation": accel.IMPLEMENTATION})
        return result
    finally:
        p.close()


def run_paced_child(client: str, checkout: str, bootstrap: str, topic: str, rate: float, seconds: float,
                    cpus: Optional[Set[int]]) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([checkout] + [x for x in [os.environ.get("PYTHONPATH")] if x]))
    cmd = [sys.executable, os.path.abspath(__file__), "--child-paced", client, "--bootstrap", bootstrap,
           "--topic", topic, "--rate", str(rate), "--seconds", str(seconds)]
    if cpus:
        cmd += ["--cpus", ",".join(str(c) for c in sorted(cpus))]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 120)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"the paced {client} run failed (exit {out.returncode}): {out.stderr[-2000:]}")
    result: Dict[str, Any] = json.loads(lines[-1])
    if "kproducer" in result and os.path.realpath(result["kproducer"]) != os.path.realpath(checkout):
        raise RuntimeError(f"the run meant for {checkout} imported kproducer from {result['kproducer']}")
    return result


def paced(args: argparse.Namespace) -> Dict[float, Dict[str, List[Dict[str, Any]]]]:
    """Every client at every ``--rate``, ``--trials`` times, rotating the order; the figures per record."""
    cpus, broker_cpu = pin_plan(args.pin)
    clients = args.clients.split(",") if args.clients else ["null", "kproducer", "confluent-kafka"]
    for c in clients:
        if c not in PACED_CLIENTS:
            raise SystemExit(f"--clients: unknown client {c!r} (known: {', '.join(PACED_CLIENTS)})")
    sides: List[Tuple[str, str, str]] = [(c, c, REPO) for c in clients]  # (label, client, checkout)
    if args.ab:
        sides.append(("kproducer@ab", "kproducer", os.path.abspath(args.ab)))
    rates = args.rate or [1000.0]
    results: Dict[float, Dict[str, List[Dict[str, Any]]]] = {r: {label: [] for label, _, _ in sides} for r in rates}
    with Broker(args.mock, broker_cpu) as broker:
        for trial in range(args.trials):
            for rate in rates:
                k = trial % len(sides)
                for label, client, checkout in sides[k:] + sides[:k]:
                    r = run_paced_child(client, checkout, broker.bootstrap, broker.topic(), rate, args.seconds, cpus)
                    results[rate][label].append(r)
                    extra = ""
                    if "net_us" in r:
                        extra = (f"  network thread {r['net_us']:.2f}, {r['records_per_request']:.1f} records/request,"
                                 f" {r['wakeups_per_record']:.2f} wakeups/record [{r['implementation']}]")
                    print(f"trial {trial + 1} {rate:>7,.0f}/s {label:20s} CPU {r['cpu_us']:7.2f} µs/record{extra}",
                          flush=True)
    for rate in rates:
        null = [r["cpu_us"] for r in results[rate].get("null", [])]
        base = statistics.median(null) if null else 0.0
        print(f"{rate:,.0f} records/s for {args.seconds:g} s, medians of {args.trials} runs"
              + (f", net of the do-nothing loop's {base:.2f} µs/record:" if null else " (no null run: gross):"))
        for label, _, _ in sides:
            rs = results[rate][label]
            if label == "null" or not rs:
                continue
            cpu = [r["cpu_us"] - base for r in rs]
            line = (f"  {label:20s} CPU {statistics.median(cpu):7.2f} µs/record net"
                    f" (runs {min(cpu):.2f}-{max(cpu):.2f})")
            if "net_us" in rs[0]:
                line += (f"; network thread {statistics.median(r['net_us'] for r in rs):.2f},"
                         f" {statistics.median(r['records_per_request'] for r in rs):.1f} records/request,"
                         f" {statistics.median(r['wakeups_per_record'] for r in rs):.2f} network-thread wakeups"
                         f"/record")
            print(line)
    return results


# -- in-process tools: calls, split ---------------------------------------------------------------

@contextmanager
def warm_producer(args: argparse.Namespace) -> Iterator[Tuple[Any, str, Callable[[], int]]]:
    """A producer that has sent one burst already, its topic, and a counter of produce requests sent."""
    from kproducer.producer import sender as sender_module

    cpus, broker_cpu = pin_plan(args.pin)
    requests = [0]
    original = sender_module.Sender._send_produce_request

    def counted(self: Any, *a: Any) -> None:
        requests[0] += 1
        original(self, *a)

    with Broker(args.mock, broker_cpu) as broker:
        topic = broker.topic()
        if cpus:
            os.sched_setaffinity(0, cpus)  # this thread, and so the producer's network thread it starts
        p = new_producer(broker.bootstrap)
        try:
            with mock.patch.object(sender_module.Sender, "_send_produce_request", counted):
                p.partitions_for(topic)
                send_burst(p, topic, args.num, args.mode)
                yield p, topic, lambda: requests[0]
        finally:
            p.close()


def _where(code: Any) -> str:
    name = code.co_filename
    marker = os.sep + "kproducer" + os.sep
    short = name.split(marker, 1)[1] if marker in name else os.path.basename(name)
    return f"{short}:{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name}"


def calls(args: argparse.Namespace) -> Dict[str, Any]:
    """Python calls (by function) and C calls (by name) per sender iteration, over ``--iterations`` of them."""
    from kproducer.producer import sender as sender_module

    py: collections.Counter[str] = collections.Counter()
    c: collections.Counter[str] = collections.Counter()
    state = {"on": False, "iterations": 0}

    this_file = __file__

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            if frame.f_code.co_filename != this_file:  # (not this script's request counter)
                py[_where(frame.f_code)] += 1
        elif event == "c_call":
            c[getattr(arg, "__qualname__", None) or str(arg)] += 1

    original = sender_module.Sender.run_once

    def run_once(self: Any) -> None:
        if not state["on"] or state["iterations"] >= args.iterations:
            return original(self)
        state["iterations"] += 1
        sys.setprofile(profile)
        try:
            return original(self)
        finally:
            sys.setprofile(None)

    with mock.patch.object(sender_module.Sender, "run_once", run_once), warm_producer(args) as (p, topic, requests):
        first = requests()
        state["on"] = True
        deadline = time.monotonic() + 120
        while state["iterations"] < args.iterations and time.monotonic() < deadline:
            load(p, topic, args)
        state["on"] = False
        sent = requests() - first
    n = max(1, state["iterations"])
    print(f"{state['iterations']} sender iterations profiled ({sent} produce requests sent in the bursts around "
          f"them): {sum(py.values()) / n:.1f} Python calls and {sum(c.values()) / n:.1f} C calls per iteration")
    for name, count in py.most_common(args.top):
        print(f"{count / n:8.2f}  {name}")
    print("C calls:")
    for name, count in c.most_common(args.top // 2):
        print(f"{count / n:8.2f}  {name}")
    return {"iterations": state["iterations"], "python": dict(py), "c": dict(c)}


#: the parts ``split`` times: (module, class, method); each part's own time has its timed children taken out
PARTS = [
    ("kproducer.producer.sender", "Sender", "run_once"),
    ("kproducer.producer.accumulator", "RecordAccumulator", "ready"),
    ("kproducer.producer.accumulator", "RecordAccumulator", "drain"),
    ("kproducer.producer.batch", "ProducerBatch", "request_records"),
    ("kproducer.producer.sender", "Sender", "_send_produce_request"),
    ("kproducer.network.client", "NetworkClient", "send"),
    ("kproducer.network.client", "NetworkClient", "poll"),
    ("kproducer.network.selector", "Selector", "poll"),
    ("kproducer.producer.sender", "Sender", "_handle_produce_response"),
    ("kproducer.producer.sender", "Sender", "_complete_acked"),
]


def split(args: argparse.Namespace) -> Dict[str, float]:
    """The network thread's CPU per produce request, by part (µs, children subtracted)."""
    import importlib

    own: collections.Counter[str] = collections.Counter()
    entered: collections.Counter[str] = collections.Counter()
    local = threading.local()
    originals: List[Tuple[Any, str, Any]] = []

    def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            stack = getattr(local, "stack", None)
            if stack is None:
                stack = local.stack = []
            stack.append(0.0)  # the children's time, added to as they return
            start = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                spent = time.thread_time() - start
                children = stack.pop()
                own[label] += spent - children
                entered[label] += 1
                if stack:
                    stack[-1] += spent
        return wrapper

    for module, cls_name, method in PARTS:
        cls = getattr(importlib.import_module(module), cls_name)
        originals.append((cls, method, cls.__dict__[method]))
        setattr(cls, method, timed(f"{cls_name}.{method}", cls.__dict__[method]))
    try:
        with warm_producer(args) as (p, topic, requests):
            own.clear()
            entered.clear()
            first = requests()
            net_clock = time.pthread_getcpuclockid(p._sender.ident)
            n0 = time.clock_gettime(net_clock)
            for _ in range(args.bursts):
                load(p, topic, args)
            net = time.clock_gettime(net_clock) - n0
            sent = requests() - first
    finally:
        for cls, method, fn in originals:
            setattr(cls, method, fn)
    per_request = {label: 1e6 * t / max(1, sent) for label, t in own.items()}
    per_request["(outside the sender iterations)"] = 1e6 * (net - sum(own.values())) / max(1, sent)
    print(f"{sent} produce requests, network thread {1e6 * net / max(1, sent):.1f} µs CPU per request "
          f"({args.bursts} bursts of {args.num:,} {args.mode}, after one to warm up), "
          f"{entered['Sender.run_once'] / max(1, sent):.2f} sender iterations per request; own time per part:")
    for label, us in sorted(per_request.items(), key=lambda kv: -kv[1]):
        print(f"{us:8.1f} µs  {label}")
    return per_request


# -- command line -----------------------------------------------------------------------------------

def parse(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tool", nargs="?", choices=["burst", "calls", "split", "paced"], default="burst")
    ap.add_argument("-n", "--num", type=int, default=200_000, help="records per burst (default 200,000)")
    ap.add_argument("--mode", choices=["batch", "send"], default="batch")
    ap.add_argument("--pin", action="store_true", help="the broker on the last CPU, the client on the others")
    ap.add_argument("--mock", action="store_true", help="a MockCluster in this process instead of tansu")
    ap.add_argument("--trials", type=int, default=10, help="burst: bursts per checkout (default 10)")
    ap.add_argument("--ab", metavar="DIR", help="burst: alternate with the checkout in DIR")
    ap.add_argument("--iterations", type=int, default=400, help="calls: sender iterations to profile")
    ap.add_argument("--top", type=int, default=40, help="calls: how many functions to list")
    ap.add_argument("--bursts", type=int, default=3, help="split: bursts to time after the warm-up one")
    ap.add_argument("--rate", type=float, action="append", help="paced: records a second (repeatable; 1000)")
    ap.add_argument("--seconds", type=float, default=10.0, help="paced: seconds per run (default 10)")
    ap.add_argument("--clients", help=f"paced: comma-separated, of {','.join(PACED_CLIENTS)} "
                                      "(default null,kproducer,confluent-kafka)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-paced", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--cpus", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.num <= 0 or args.trials <= 0 or args.iterations <= 0 or args.bursts <= 0:
        ap.error("-n, --trials, --iterations and --bursts must be positive")
    if any(r <= 0 for r in args.rate or []) or not 0 < args.seconds <= 600:
        ap.error("--rate must be positive and --seconds in (0, 600]")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse(argv)
    if args.child or args.child_paced:
        if args.cpus:
            os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})  # before the producer's thread starts
        if args.child_paced:
            result = child_paced(args.child_paced, args.bootstrap, args.topic, (args.rate or [1000.0])[0],
                                 args.seconds)
        else:
            result = child_burst(args.bootstrap, args.topic, args.num, args.mode)
        print(json.dumps(result), flush=True)
        return 0
    {"burst": burst, "calls": calls, "split": split, "paced": paced}[args.tool](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
