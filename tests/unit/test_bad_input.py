"""Bad input at the public API (issue 28 items 15 and 16), on the scripted transport (no sockets).

* A record's ``timestamp_ms`` outside Java's long range (or not an int) and a ``partition`` outside Java's int
  range: a ValueError naming the argument, raised by the call itself, on every path -- ``send()``'s compiled fast
  path and its Python path (``KPRODUCER_PURE_PYTHON=1`` runs this module on the pure-Python twins, as .ci/run
  does), ``send_batch()``, ``AsyncProducer.send()`` / ``send_batch()`` -- and the other records (of the same
  batch) are delivered as if nothing happened.
* A setting given as None: a ConfigError naming the setting as it was given, for every setting of the registry
  (and every other spelling) whose default is not None, except the two where None means what the setting's
  documentation says; ``request.timeout.ms=0`` and ``socket.connection.setup.timeout.ms=0`` (with which the
  producer never connects) are refused with the reason.
* A wait's ``timeout`` that is not a number (TypeError naming it), NaN (ValueError), or infinite (no limit,
  not an OverflowError from a lock), for ``future.get()``, ``BatchSendFuture.wait()``, ``flush()``, ``close()``.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any, Callable, Dict, Iterator, List

import pytest

from kproducer import Producer
from kproducer.aio import AsyncProducer
from kproducer.config import _ALIASES, SETTINGS, ProducerConfig
from kproducer.errors import ConfigError, KafkaTimeoutError
from kproducer.protocol import messages as m
from kproducer.protocol.accel import MODULES, load
from tests.unit.producer_env import ProducerEnv, producer_env
from tests.unit.scripted import HOLD

send_c = load(MODULES["producer"])

TOPIC = "t"
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
BAD_TIMESTAMPS = [2**63, 2**64, 2**100, -1, -(2**63) - 1, 1.5, 1e3, "x", b"1", True, False, [1]]
BAD_PARTITIONS = [2**31, 2**63, 2**64]


class Env(ProducerEnv):
    def __init__(self) -> None:
        super().__init__({TOPIC: [1, 1, 1]})


@pytest.fixture
def env() -> Iterator[Env]:
    yield from producer_env(Env())


def stored_timestamps(env: Env, partition: int) -> List[int]:
    out: List[int] = []
    for req in env.selector.sent(m.PRODUCE):
        batch = req.batches().get((TOPIC, partition))
        if batch is not None:
            out.extend(r.timestamp for r in batch.records)
    return out


# -- item 15: timestamp_ms and partition ---------------------------------------------------------------------


@pytest.mark.parametrize("headers", [None, {"h": b"x"}], ids=["plain", "headers"])
def test_send_refuses_a_timestamp_outside_javas_long_and_the_batch_is_unaffected(env: Env, headers: Any) -> None:
    # the plain record takes the compiled fast path (when built); one with headers the Python send()
    p = env.producer(linger_ms=200)  # (one batch: the good records around the bad ones share it)
    p.partitions_for(TOPIC, timeout=10)
    good = [p.send(TOPIC, b"a%d" % i, partition=0, headers=headers) for i in range(3)]
    for ts in BAD_TIMESTAMPS:
        with pytest.raises(ValueError, match="timestamp_ms") as info:
            p.send(TOPIC, b"bad", partition=0, headers=headers, timestamp_ms=ts)
        assert not isinstance(info.value, OverflowError), ts  # (the compiled path's unnamed error)
        assert repr(ts)[:20] in str(info.value)
    good += [p.send(TOPIC, b"b%d" % i, partition=0, headers=headers) for i in range(3)]
    edge = p.send(TOPIC, b"edge", partition=0, headers=headers, timestamp_ms=LONG_MAX)  # the largest is fine
    zero = p.send(TOPIC, b"zero", partition=0, headers=headers, timestamp_ms=0)
    p.flush(30)
    assert [f.get(0).offset for f in good + [edge, zero]] == list(range(8))
    assert env.selector.log_values((TOPIC, 0)) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2", b"edge", b"zero"]
    assert stored_timestamps(env, 0)[-2:] == [LONG_MAX, 0]
    assert edge.get(0).timestamp == LONG_MAX


def test_send_refuses_a_timestamp_with_serializers_and_interceptors(env: Env) -> None:
    seen: List[Any] = []

    class Interceptor:
        def on_send(self, record: Any) -> Any:
            return record

        def on_acknowledgement(self, metadata: Any, exception: Any) -> None:
            seen.append(type(exception).__name__ if exception is not None else None)

    p = env.producer(value_serializer="str", interceptors=[Interceptor()])
    p.partitions_for(TOPIC, timeout=10)
    with pytest.raises(ValueError, match="timestamp_ms"):
        p.send(TOPIC, "v", timestamp_ms=2**63)
    assert seen == ["ValueError"]  # the interceptors hear of it, as of any error send() raises
    assert p.send(TOPIC, "ok", timestamp_ms=LONG_MAX).get(30).timestamp == LONG_MAX


def test_send_refuses_a_partition_outside_javas_int_at_once(env: Env) -> None:
    # a partition at or above the known count may be a new one: send() waits for metadata up to max.block.ms,
    # but one above Java's int can never exist (it used to wait, then fail the future with a timeout)
    p = env.producer(max_block_ms=3000)
    p.partitions_for(TOPIC, timeout=10)
    for part in BAD_PARTITIONS:
        with pytest.raises(ValueError, match="partition") as info:
            p.send(TOPIC, b"v", partition=part)
        assert str(part) in str(info.value)
    with pytest.raises(ValueError, match="partition"):
        p.send_batch(TOPIC, [b"a", b"b"], partition=2**31)
    with pytest.raises(ValueError, match="record 1: partition") as info:
        p.send_batch(TOPIC, [b"a", b"b"], partition=[0, 2**31])
    assert str(2**31) in str(info.value)
    # INT_MAX itself is a partition number a topic could have: waited for, then a timeout in the future
    fut = p.send(TOPIC, b"v", partition=INT_MAX)
    with pytest.raises(KafkaTimeoutError, match=f"Partition {INT_MAX}"):
        fut.get(30)
    p.flush(30)
    assert env.selector.log_values((TOPIC, 0)) == []


def test_send_batch_refuses_a_bad_timestamp_and_queues_nothing(env: Env) -> None:
    p = env.producer()
    p.partitions_for(TOPIC, timeout=10)
    for ts in BAD_TIMESTAMPS:
        with pytest.raises(ValueError, match="timestamp_ms"):
            p.send_batch(TOPIC, [b"a", b"b"], timestamp_ms=ts)
        with pytest.raises(ValueError, match="timestamp_ms"):
            p.send_batch(TOPIC, [b"a", b"b"], keys=[b"k", b"l"], partition=[0, 1], timestamp_ms=ts)
    ok = p.send_batch(TOPIC, [b"a", b"b"], partition=0, timestamp_ms=LONG_MAX)
    assert [md.timestamp for md in ok.get(30)] == [LONG_MAX, LONG_MAX]
    assert env.selector.log_values((TOPIC, 0)) == [b"a", b"b"]


def test_async_producer_refuses_bad_timestamps_and_partitions(env: Env) -> None:
    async def main() -> None:
        async with AsyncProducer(producer=env.producer(max_block_ms=3000, linger_ms=50)) as ap:
            await ap.partitions_for(TOPIC)
            good = [await ap.send(TOPIC, b"g%d" % i, partition=1) for i in range(2)]
            for ts in BAD_TIMESTAMPS:
                with pytest.raises(ValueError, match="timestamp_ms"):
                    await ap.send(TOPIC, b"bad", partition=1, timestamp_ms=ts)
                with pytest.raises(ValueError, match="timestamp_ms"):
                    await ap.send(TOPIC, b"bad", timestamp_ms=ts)
                with pytest.raises(ValueError, match="timestamp_ms"):
                    await ap.send_batch(TOPIC, [b"bad"], timestamp_ms=ts)
            for part in BAD_PARTITIONS:
                with pytest.raises(ValueError, match="partition"):
                    await ap.send(TOPIC, b"bad", partition=part)
            good.append(await ap.send(TOPIC, b"edge", partition=1, timestamp_ms=LONG_MAX))
            await ap.flush(30)
            assert [(await f).offset for f in good] == [0, 1, 2]
            assert (await good[-1]).timestamp == LONG_MAX

    asyncio.run(asyncio.wait_for(main(), 60))
    assert env.selector.log_values((TOPIC, 1)) == [b"g0", b"g1", b"edge"]


@pytest.mark.skipif(send_c is None, reason="the compiled accelerator is not built (or is disabled)")
def test_the_compiled_fast_path_hands_out_of_range_timestamps_to_python(env: Env) -> None:
    # the fast path takes in-range ints itself and leaves everything else to the Python send() (which says
    # what is wrong): a timestamp that overflows C's long long must not raise OverflowError from C
    p = env.producer()
    p.partitions_for(TOPIC, timeout=10)
    p.send(TOPIC, b"warm", partition=2).get(30)  # the topic is touched: the next plain sends are fast
    assert p._fast is not None
    with pytest.raises(ValueError, match="timestamp_ms must be an int in"):
        p.send(TOPIC, b"v", partition=2, timestamp_ms=2**63)


# -- item 16: settings given as None, and zero timeouts that never connect --------------------------------------

#: settings whose None means something documented (in the setting's doc and docs/settings.md)
NONE_MEANS = {"compression.type": 0, "ssl.endpoint.identification.algorithm": ""}


def _names_of(java: str) -> List[str]:
    return [java, SETTINGS[java].alias] + sorted(n for n, j in _ALIASES.items() if j == java
                                                 and n != SETTINGS[java].alias)


@pytest.mark.parametrize("java", sorted(SETTINGS))
def test_none_for_a_setting_is_refused_naming_it_unless_none_is_its_default(java: str) -> None:
    setting = SETTINGS[java]
    for name in _names_of(java):
        if java == "bootstrap.servers":
            with pytest.raises(ConfigError, match="bootstrap.servers is required"):
                ProducerConfig(**{name: None}) if name.isidentifier() else ProducerConfig({name: None})
            continue
        given: Dict[str, Any] = {"bootstrap.servers": "127.0.0.1:9092", name: None}
        if setting.default is None:
            cfg = ProducerConfig(given)  # None is the default: "not set"
            assert getattr(cfg, setting.alias) is None, name
        elif java in NONE_MEANS:
            # the documented meaning; another project's spelling may refuse None instead (kafka-python's
            # ssl_check_hostname is a bool), naming that spelling
            assert "None" in setting.doc, f"{java}: what None means is not documented"
            try:
                cfg = ProducerConfig(given)
            except ConfigError as e:
                assert name not in (java, setting.alias) and name in str(e), (name, str(e))
            else:
                assert getattr(cfg, setting.alias) == NONE_MEANS[java], name
        else:
            with pytest.raises(ConfigError) as info:
                ProducerConfig(given)
            assert name in str(info.value) or name.replace("_", ".") in str(info.value), (name, str(info.value))


def test_none_refused_at_producer_construction() -> None:
    # the cases: accepted (and then nothing was delivered), a raw TypeError, or a failure in send()
    for name in ("acks", "metadata_max_age_ms", "linger_ms", "batch_size", "max_block_ms", "request_timeout_ms",
                 "delivery_timeout_ms", "retries", "buffer_memory", "enable_idempotence", "security_protocol"):
        with pytest.raises(ConfigError, match=name):
            Producer(bootstrap_servers="127.0.0.1:9", **{name: None})


@pytest.mark.parametrize("name", ["request_timeout_ms", "request.timeout.ms", "socket.timeout.ms",
                                  "socket_connection_setup_timeout_ms"])
def test_a_zero_timeout_that_never_lets_a_connection_work_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="at least 1") as info:
        ProducerConfig({"bootstrap.servers": "127.0.0.1:9092", name: 0})
    assert "0" in str(info.value) and "never" in str(info.value)
    assert ProducerConfig({"bootstrap.servers": "127.0.0.1:9092", name: 1})  # (1 ms is the user's choice)


# -- item 16: wait timeouts ----------------------------------------------------------------------------------


def _waits(env: Env) -> Dict[str, Callable[[Any], Any]]:
    """Every wait of a producer whose records are never acknowledged (the broker holds every Produce)."""
    env.selector.handlers[m.PRODUCE.key] = lambda req: HOLD
    p = env.producer()
    p.partitions_for(TOPIC, timeout=10)
    fut = p.send(TOPIC, b"v")
    batch = p.send_batch(TOPIC, [b"v"])
    return {"future.get": fut.get, "future.exception": fut.exception, "batch.wait": batch.wait,
            "batch.get": batch.get, "flush": p.flush, "partitions_for": lambda t: p.partitions_for(TOPIC, t),
            "close": p.close}


@pytest.mark.parametrize("bad", ["x", b"1", [1], True], ids=repr)
def test_a_timeout_that_is_not_a_number_is_a_type_error_naming_it(env: Env, bad: Any) -> None:
    for call, wait in _waits(env).items():
        with pytest.raises(TypeError, match="timeout") as info:
            wait(bad)
        assert repr(bad) in str(info.value), call


def test_a_nan_timeout_is_a_value_error_naming_it(env: Env) -> None:
    for call, wait in _waits(env).items():
        with pytest.raises(ValueError, match="timeout") as info:
            wait(math.nan)
        assert "nan" in str(info.value), call


@pytest.mark.parametrize("endless", [math.inf, 1e300, 2**70, 2**2000], ids=["inf", "1e300", "2**70", "2**2000"])
def test_an_infinite_timeout_waits_without_limit(endless: Any) -> None:
    # get(inf) raised OverflowError ("timestamp out of range for platform time_t") from the lock's wait: each
    # wait now goes on until the broker answers the held records, and ends with their success
    for call in ("future.get", "future.exception", "batch.wait", "batch.get", "flush", "partitions_for", "close"):
        env = Env()  # (a producer of its own for each wait: their records are held the same way)
        try:
            _wait_until_acknowledged(env, call, endless)
        finally:
            env.close()


def _wait_until_acknowledged(env: Env, call: str, endless: Any) -> None:
    wait = _waits(env)[call]
    outcome: List[Any] = []
    t = threading.Thread(target=lambda: outcome.append(_outcome(wait, endless)), daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while t.is_alive() and time.monotonic() < deadline:
        for req in env.selector.held(m.PRODUCE):
            env.selector.respond(req)
        t.join(0.02)
    assert not t.is_alive(), f"{call}({endless!r}) did not return after the records were acknowledged"
    assert outcome and outcome[0][0] == "returned", (call, outcome)


def _outcome(wait: Callable[[Any], Any], timeout: Any) -> Any:
    try:
        return ("returned", wait(timeout))
    except BaseException as e:  # noqa: B902 - what the wait ended with is the point
        return ("raised", e)


def test_negative_and_zero_timeouts_time_out_at_once(env: Env) -> None:
    waits = _waits(env)
    waits.pop("close")
    waits.pop("partitions_for")
    waits.pop("future.exception")
    for wait in waits.values():
        for t in (0, -1, -math.inf, 0.001, -(2**2000)):
            with pytest.raises(KafkaTimeoutError):
                wait(t)
