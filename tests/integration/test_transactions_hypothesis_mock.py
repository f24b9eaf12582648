"""Transactions as random programs on the MockCluster: a hypothesis property test (issue 28, "Done when").

Hypothesis generates *programs*, lists of steps (``Step``); ``run_program`` runs one on a fresh 3-broker
``MockCluster`` with one transactional ``Producer`` (and, after each ``close()``, a new one with the same
transactional.id). A program is ``init_transactions`` and then mostly transactions: ``begin``, 1-5 of ``send``
(1-4 keyed records to explicit partitions) or ``send_offsets_to_transaction`` (also ``{}``), ``commit`` or
``abort``; now and then something else. The faults come with the steps:

* before ``init_transactions``: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / CONCURRENT_TRANSACTIONS on
  FindCoordinator or InitProducerId, a lost response, TRANSACTIONAL_ID_AUTHORIZATION_FAILED or
  CLUSTER_AUTHORIZATION_FAILED on InitProducerId (then ``init_transactions`` again, as Java allows);
* before a ``send``: retriable (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS[_AFTER_APPEND],
  CORRUPT_MESSAGE) or non-retriable (INVALID_RECORD, INVALID_TIMESTAMP) produce errors, coordinator errors or
  UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_ID_MAPPING on AddPartitionsToTxn, a lost Produce/AddPartitionsToTxn response;
* before ``commit``/``abort``: coordinator errors on EndTxn or its response lost;
* ``inject``: coordinator errors or a lost response of any transactional API, for whatever comes next;
* a short timeout (``init``/``commit``/``abort`` with 0.05 s while every broker answers 250 ms late, so that a call
  that needs the cluster times out and completes in the background), then other calls (refused), ``wait`` (until
  the background call has completed), then the same call again (with or without a short timeout), or ``close``;
* ``fence``: a second producer with the same transactional.id calls ``init_transactions()``;
* ``close`` (no timeout, 5 s, 0 s), also with a transaction open or a call pending, then a new producer;
* calls the state does not allow (``send`` outside a transaction, ``begin`` in one, ``commit`` after an abortable
  error, anything after ProducerFencedError, anything but the timed-out call while it is pending).

A step means what the state makes of it: the call is made whatever the state, and its outcome is checked against
Java's KafkaProducer contract (its javadoc: which exception each call may raise in which state), using the model's
knowledge of the faults: which injected error codes the cluster has answered since the transaction began
(``MockCluster.pending_errors`` tells what is left; ``pending_drops`` which lost responses were taken), whether the
producer was fenced. So: a commit succeeds unless an abortable error was answered in its transaction (a
non-retriable produce error, UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_ID_MAPPING on AddPartitionsToTxn) or the
producer was fenced, and then every record's callback has run and the coordinator's state is CompleteCommit; after
an abortable error the commit raises and ``abort_transaction()`` succeeds; a call that timed out returns, when
called again, the outcome of the first call, and every other call raises IllegalStateError (PendingCallError)
naming it until then, also once it completed in the background; once a call raised ProducerFencedError every later
call raises it (``send()`` may fail its record with it instead, as Java's); ``init_transactions()`` refused by the
authorizer may be called again; ``send_offsets_to_transaction({})`` never raises; after ``close()`` calls raise
ProducerClosedError; no ``close()`` takes longer than 40 s.

At the end of every program: a pending call is called again, an uninitialised producer is initialised (it aborts
what a forced close left open), the producer is closed; then the log with its markers
(``cluster.records(include_control=True)``) and kafka-python's ``read_committed`` consumer must show exactly the
records of the transactions reported committed, each once, in send order, and of a transaction whose outcome the
program could not learn (its commit was pending at ``close()``) all records or none; no transaction is left open
(last stable offset = high watermark, coordinator state not Ongoing); the group's committed offsets are those of
the committed transactions; every record's callback ran exactly once and a committed record's metadata names its
place in the log; kproducer logged no internal error (a traceback).

Each program runs against ``MockCluster(transaction_version=0)`` and the default (2): the client uses transactions
v2 where the broker offers it. Examples are derandomized (the same programs every run, no example database):
``KPRODUCER_HYPOTHESIS_EXAMPLES`` (default 30 per transaction version; the file takes 30-60 s) and
``KPRODUCER_HYPOTHESIS_UNITS`` (transactions and other events per program, default 8) for longer runs,
``KPRODUCER_HYPOTHESIS_RANDOM=1`` for new random programs. A failure prints the shrunk program and, one line per
step, what each call did (hypothesis' notes). ``run_program(transaction_version, [Step(...), ...])`` replays one;
``FOUND`` holds the programs found violating, run first every time (explicit examples).

``test_a_retried_epoch_bump_gets_the_bumped_epoch`` runs one scenario the programs found the mock answering unlike
Apache Kafka (InitProducerId retried after a lost answer) as raw requests on both.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Set, Tuple

import pytest
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from kproducer import Producer
from kproducer.errors import (
    ClusterAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerIdMappingError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnknownProducerIdError,
)
from kproducer.mock import MockCluster
from kproducer.protocol.errors import error_class_for_code
from tests.integration.test_transactions_property_mock import (
    COORDINATOR_CODES,
    FATAL_PRODUCE,
    PRODUCER_CONFIG,
    RETRIABLE_PRODUCE,
    Violation,
    _chain,
    _log_view,
    _name,
    read_committed,
)

pytestmark = [
    pytest.mark.timeout(900),  # (a failure shrinks for a while; passing runs take well under 90 s)
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

EXAMPLES = int(os.environ.get("KPRODUCER_HYPOTHESIS_EXAMPLES", "30"))
UNITS = int(os.environ.get("KPRODUCER_HYPOTHESIS_UNITS", "8"))  # transactions and events per program, at most
RANDOM = os.environ.get("KPRODUCER_HYPOTHESIS_RANDOM", "") == "1"
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not RANDOM,
                    database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

BROKERS, PARTITIONS = 3, 3
TOPIC, GROUP, TXN_ID = "hyp", "hyp-group", "hyp-txn"
#: calls without a short timeout wait max.block.ms: long, so that a busy machine does not make them time out
CONFIG: Dict[str, Any] = {**PRODUCER_CONFIG, "max_block_ms": 30000}
LATENCY_MS = 250  # every broker answers this late while a short-timeout call runs ...
SHORT_S = 0.05  # ... so a call that needs an answer times out (one that does not time out is checked as any other)
WAIT_S = 30.0
CLOSE_LIMIT_S = 40.0  # a close() that takes longer is taken as hung (close(5.0) takes 5 s at most, then forces)

UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING = UnknownProducerIdError.code, InvalidProducerIdMappingError.code
AUTH_CODES = (TransactionalIdAuthorizationFailedError.code, ClusterAuthorizationFailedError.code)
#: answered to a transaction's Produce / AddPartitionsToTxn, these make it abortable (the commit must fail)
ABORTABLE = {"produce": set(FATAL_PRODUCE), "add_partitions_to_txn": {UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING}}
TRACKED_APIS = ("produce", "add_partitions_to_txn", "init_producer_id")


log = logging.getLogger(__name__)


def _note(text: str) -> None:
    """What a step did: a hypothesis note (printed with a failing program), or a debug log line outside a test
    (``run_program`` replaying a program)."""
    if currently_in_test_context():
        note(text)
    else:
        log.debug("%s", text)


# ------------------------------------------------------------------------------------------ faults


@dataclass(frozen=True)
class Fault:
    """Injected just before a call: error codes for an API's next responses, or its next response lost."""

    api: str = ""
    codes: Tuple[int, ...] = ()
    lost: bool = False

    def __repr__(self) -> str:
        if not self.api:
            return "no_fault"
        if self.lost:
            return f"drop_responses({self.api!r}, 1)"
        return f"inject_errors({self.api!r}, [{', '.join(error_class_for_code(c).name for c in self.codes)}])"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # (how hypothesis prints a failing program)
        printer.text(repr(self))


NO_FAULT = Fault()


def _errors(apis: Sequence[str], codes: Sequence[int], most: int = 3) -> st.SearchStrategy[Fault]:
    return st.tuples(st.sampled_from(list(apis)), st.lists(st.sampled_from(list(codes)), min_size=1, max_size=most)
                     ).map(lambda t: Fault(t[0], tuple(t[1])))


def _lost(apis: Sequence[str]) -> st.SearchStrategy[Fault]:
    return st.sampled_from([Fault(api, (), True) for api in apis])


def _none(weight: int) -> List[st.SearchStrategy[Fault]]:
    """``weight`` distinct strategies of no fault (hypothesis picks among distinct alternatives alike)."""
    return [st.just(Fault()) for _ in range(weight)]


INIT_FAULTS = st.one_of(
    *_none(4),
    _errors(("find_coordinator", "init_producer_id"), COORDINATOR_CODES),
    _lost(("find_coordinator", "init_producer_id")),
    _errors(("init_producer_id",), AUTH_CODES, most=1),
)
SEND_FAULTS = st.one_of(
    *_none(5),
    _errors(("produce",), RETRIABLE_PRODUCE),
    _errors(("produce",), FATAL_PRODUCE, most=1),
    _errors(("add_partitions_to_txn",), COORDINATOR_CODES),
    _errors(("add_partitions_to_txn",), (UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING), most=1),
    _lost(("produce", "add_partitions_to_txn")),
)
END_FAULTS = st.one_of(*_none(4), _errors(("end_txn",), COORDINATOR_CODES), _lost(("end_txn",)))
ANY_FAULT = st.one_of(
    _errors(("find_coordinator", "init_producer_id", "add_partitions_to_txn", "add_offsets_to_txn",
             "txn_offset_commit", "end_txn"), COORDINATOR_CODES),
    _lost(("produce", "find_coordinator", "init_producer_id", "add_partitions_to_txn", "add_offsets_to_txn",
           "txn_offset_commit", "end_txn")),
)
SHORT = st.sampled_from([False, False, False, True])  # a short timeout, one call in four
RECORDS = st.lists(st.tuples(st.integers(0, 5), st.integers(0, PARTITIONS - 1)), min_size=1, max_size=4)
OFFSETS = st.dictionaries(st.integers(0, PARTITIONS - 1), st.integers(0, 1000), max_size=2)
CALLS = ("init", "begin", "send", "send_offsets", "commit", "abort")

JAVA_NAMES = {"init": "init_transactions()", "commit": "commit_transaction()", "abort": "abort_transaction()"}


@dataclass(frozen=True)
class Step:
    """One step of a program: a call (init, begin, send, send_offsets, commit, abort), or inject (a fault for
    whatever comes next), fence, close, wait (until a timed-out call has completed in the background)."""

    kind: str
    fault: Fault = NO_FAULT
    short: bool = False  # init/commit/abort: with a short timeout, while every broker answers late
    records: Tuple[Tuple[int, int], ...] = ()  # send: (key, partition)
    offsets: Tuple[Tuple[int, int], ...] = ()  # send_offsets: (partition, offset)
    timeout: Optional[float] = None  # close

    def __repr__(self) -> str:
        fault = "" if self.fault is NO_FAULT or not self.fault.api else f"{self.fault!r}; "
        if self.kind == "send":
            return fault + f"send({', '.join(f'k{k}->p{p}' for k, p in self.records)})"
        if self.kind == "send_offsets":
            return f"send_offsets_to_transaction({ {(TOPIC, p): o for p, o in self.offsets} })"
        if self.kind in ("init", "commit", "abort"):
            return fault + f"{JAVA_NAMES[self.kind][:-1]}{SHORT_S if self.short else ''})"
        if self.kind == "inject":
            return repr(self.fault)
        if self.kind == "close":
            return f"close({'' if self.timeout is None else self.timeout})"
        return f"{self.kind}()"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def _step(kind: str, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Step]:
    return st.fixed_dictionaries(fields).map(lambda f: Step(kind, **f))


Steps = List[Step]


class Program(List[Step]):
    """A program as hypothesis prints it (a failing one, shrunk): one step per line."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("[\n    " + ",\n    ".join(map(repr, self)) + ",\n]")


def _flat(parts: Sequence[Any]) -> Steps:
    out: Steps = []
    for part in parts:
        out.extend(_flat(part) if isinstance(part, (list, tuple)) else [part])
    return out


def _init_unit(first: Step) -> Steps:
    """init_transactions(), called again after a timeout and again after an authorization error."""
    again = int(first.short) + int(any(c in AUTH_CODES for c in first.fault.codes))
    return [first] + [Step("init")] * again


def _end_unit(end: Step, between: Steps, then: str, close: Steps) -> Steps:
    """commit/abort; after a short (timed-out) one: other calls (refused), then the retry, or a close."""
    if not end.short:
        return [end]
    if then == "close":
        return [end, *between, *close]
    return [end, *between, Step(end.kind, short=then == "retry-short"), Step(end.kind)]


# Each factory below makes a new strategy object: alternatives of st.one_of are picked alike, and a repeated
# object counts once, so a repeated call weighs an alternative.
def _init() -> st.SearchStrategy[Steps]:
    return _step("init", fault=INIT_FAULTS, short=SHORT).map(lambda first: _init_unit(first))


def _close() -> st.SearchStrategy[Steps]:
    return st.tuples(_step("close", timeout=st.sampled_from([None, 5.0, 0.0])), _init()).map(lambda parts: _flat(parts))


def _send() -> st.SearchStrategy[Step]:
    return _step("send", records=RECORDS.map(tuple), fault=SEND_FAULTS)


def _rare() -> st.SearchStrategy[Steps]:
    """Fencing, a close (and the next producer's init), a fault for what comes next, a call the state refuses."""
    return st.one_of(st.just([Step("fence")]), _close(), _step("inject", fault=ANY_FAULT).map(lambda step: [step]),
                     st.sampled_from([Step(k) for k in CALLS]).map(lambda step: [step]))


def _end(kind: str) -> st.SearchStrategy[Step]:
    return _step(kind, fault=END_FAULTS, short=SHORT)


#: inside a transaction: mostly sends; offsets; now and then something else
BODY = st.one_of(*[_send() for _ in range(6)], _step("send_offsets", offsets=OFFSETS.map(lambda d: tuple(sorted(
    d.items())))).map(lambda step: [step]), _rare())
MISUSE_WHILE_PENDING = st.lists(st.sampled_from([Step(k) for k in ("begin", "send", "send_offsets", "commit", "abort",
                                                                     "init", "wait")]), max_size=2)
END_UNIT = st.tuples(st.one_of(_end("commit"), _end("commit"), _end("abort")), MISUSE_WHILE_PENDING,
                     st.sampled_from(["retry", "retry", "retry-short", "close"]), _close()).map(lambda t: _end_unit(*t))


def _txn() -> st.SearchStrategy[Steps]:
    return st.tuples(st.just(Step("begin")), st.lists(BODY, min_size=1, max_size=5), END_UNIT).map(
        lambda parts: _flat(parts))


#: a program: init_transactions(), then transactions (and now and then something else), as one list of steps
PROGRAMS = st.tuples(_init(), st.lists(st.one_of(*[_txn() for _ in range(5)], _rare()), min_size=max(1, UNITS // 2),
                                       max_size=UNITS)).map(lambda parts: Program(_flat(parts)))


# ------------------------------------------------------------------------------------------ the model


@dataclass
class Txn:
    number: int
    producer: int  # which producer (generation) ran it
    records: List[Tuple[bytes, int]] = field(default_factory=list)  # (value, partition), as send() accepted them
    futures: List[Any] = field(default_factory=list)
    offsets: Dict[Tuple[str, int], int] = field(default_factory=dict)
    touched: bool = False  # records or offsets went to the cluster: ending it needs the coordinator
    outcome: str = "open"  # open | committed | aborted | unknown (a commit pending when the producer closed)


def _fenced(err: Optional[BaseException]) -> bool:
    return err is not None and any(isinstance(e, ProducerFencedError) for e in _chain(err))


class _InternalErrors(logging.Handler):
    """kproducer's log records with a traceback at ERROR (an internal error; the mock's own logs aside)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and not record.name.startswith("kproducer.mock"):
            self.seen.append(f"{record.name}: {record.getMessage()} ({record.exc_info[1]!r})")


class TxnModel:
    """The producer under test (and its successors after ``close()``) on a fresh MockCluster, and what Java's
    contract lets each call do in the current state (see the module docstring)."""

    def __init__(self, transaction_version: int) -> None:
        self.cluster = MockCluster(BROKERS, transaction_version=transaction_version)
        self.cluster.start()
        self.cluster.create_topic(TOPIC, PARTITIONS)
        self.errors_log = _InternalErrors()
        logging.getLogger("kproducer").addHandler(self.errors_log)
        self.generation = 0
        self.producer = self._new_producer()
        self.phase = "uninit"  # uninit | ready | in_txn | abortable | fatal
        self.pending: Optional[str] = None  # the call that timed out and must be called again: init | commit | abort
        self.init_expects_auth = False  # an authorization error was pending when init_transactions() began
        self.fenced = False  # a second producer took the transactional.id after this one's init began
        self.txn: Optional[Txn] = None
        self.txns: List[Txn] = []
        self.injected: Dict[str, List[int]] = {api: [] for api in TRACKED_APIS}
        self.consumed_at_begin: Dict[str, int] = {}
        self.drops: Dict[str, int] = {}  # lost responses injected, per API
        self.drops_at_begin: Dict[str, int] = {}
        self.callbacks: Dict[bytes, List[Tuple[Any, Optional[BaseException]]]] = {}

    # -- helpers -----------------------------------------------------------------------------------

    def _new_producer(self) -> Producer:
        self.generation += 1
        return Producer(bootstrap_servers=self.cluster.bootstrap_servers, transactional_id=TXN_ID,
                        client_id=f"hyp-{self.generation}", **CONFIG)

    def _where(self) -> str:
        return (f"[producer {self.generation}, model phase {self.phase}, pending {self.pending}, fenced "
                f"{self.fenced}, transaction {self.txn.number if self.txn else None}]")

    def _fail(self, message: str) -> NoReturn:
        raise AssertionError(f"{message} {self._where()}")

    def _inject(self, fault: Fault, refused: bool = False) -> None:
        """``refused``: the step's call is refused (the state does not allow it); an authorization error meant for
        its InitProducerId is then left out (an epoch bump would get it: a different scenario)."""
        if not fault.api or (refused and any(c in AUTH_CODES for c in fault.codes)):
            return
        if fault.lost:
            self.cluster.drop_responses(fault.api, 1)
            self.drops[fault.api] = self.drops.get(fault.api, 0) + 1
            return
        self.cluster.inject_errors(fault.api, fault.codes)
        if fault.api in self.injected:
            self.injected[fault.api].extend(fault.codes)

    def _consumed(self, api: str) -> int:
        """How many of the codes injected for ``api`` the cluster has answered (it answers them in order)."""
        pending = self.cluster.pending_errors(api)
        injected = self.injected[api]
        assert injected[len(injected) - len(pending):] == pending, (api, injected, pending)
        return len(injected) - len(pending)

    def _drops_taken(self, api: str) -> int:
        """How many of the lost responses injected for ``api`` the cluster has lost."""
        return self.drops.get(api, 0) - self.cluster.pending_drops(api)

    def _abortable_answered(self, certain: bool = False) -> List[str]:
        """The errors answered since the transaction began that make it abortable. ``certain``: only those the
        producer must have seen: an answer of an API whose injected lost response was taken meanwhile may have
        been lost (a request that takes an injected error code may also be the one whose answer is lost; the
        producer then retries it and succeeds)."""
        out: List[str] = []
        for api, codes in ABORTABLE.items():
            answered = self.injected[api][self.consumed_at_begin.get(api, 0):self._consumed(api)]
            if certain and self._drops_taken(api) != self.drops_at_begin.get(api, 0):
                continue
            if certain and api == "add_partitions_to_txn" and any(c not in codes for c in answered):
                # one AddPartitionsToTxn answer for two partitions may say CONCURRENT_TRANSACTIONS for one and
                # UNKNOWN_PRODUCER_ID for the other (the mock answers one injected code per partition): the client
                # retries at the first retriable error, as Java's handler does, and never reads the other
                continue
            out.extend(f"{error_class_for_code(c).name} on {api}" for c in answered if c in codes)
        return out

    def _slow(self) -> None:
        for b in self.cluster.broker_ids:
            self.cluster.set_latency(b, LATENCY_MS)

    def _fast(self) -> None:
        for b in self.cluster.broker_ids:
            self.cluster.set_latency(b, 0)

    def _call(self, what: str, fn: Callable[[], Any]) -> Tuple[Any, Optional[KafkaError]]:
        try:
            value = fn()
        except KafkaError as e:
            _note(f"  {what} raised {_name(e)}")
            return None, e
        _note(f"  {what} returned")
        return value, None

    def _invoke(self, call: str, timeout: Optional[float] = None, offsets: Optional[Dict[int, int]] = None,
                ) -> Tuple[Any, Optional[KafkaError]]:
        p = self.producer
        if call == "init":
            return self._call("init_transactions()", lambda: p.init_transactions(timeout))
        if call == "begin":
            return self._call("begin_transaction()", p.begin_transaction)
        if call == "send":
            return self._call("send()", lambda: p.send(TOPIC, b"refused", key=b"k", partition=0))
        if call == "send_offsets":
            chosen = {(TOPIC, q): o for q, o in (offsets if offsets is not None else {0: 1}).items()}
            return self._call(f"send_offsets_to_transaction({chosen})",
                              lambda: p.send_offsets_to_transaction(chosen, GROUP, timeout))
        if call == "commit":
            return self._call("commit_transaction()", lambda: p.commit_transaction(timeout))
        assert call == "abort", call
        return self._call("abort_transaction()", lambda: p.abort_transaction(timeout))

    def _callback(self, value: bytes) -> Callable[[Any, Optional[BaseException]], None]:
        calls = self.callbacks.setdefault(value, [])

        def cb(md: Any, exc: Optional[BaseException]) -> None:
            calls.append((md, exc))
        return cb

    def _to_fatal(self, err: KafkaError, call: str) -> None:
        if not self.fenced:
            self._fail(f"{call} raised {_name(err)} although nothing fenced the producer")
        self.phase = "fatal"

    # -- outcomes --------------------------------------------------------------------------------------

    def _init_outcome(self, err: Optional[KafkaError]) -> None:
        if err is None:
            if self.init_expects_auth:
                self._fail("init_transactions() succeeded although InitProducerId was answered with an "
                           "authorization error")
            self.phase = "ready"
            return
        if isinstance(err, (TransactionalIdAuthorizationFailedError, ClusterAuthorizationFailedError)):
            if not self.init_expects_auth:
                self._fail(f"init_transactions() raised {_name(err)} but no authorization error was injected")
            self.phase = "uninit"  # Java: "User may retry this function call after fixing the permission"
            self.init_expects_auth = False
            return
        self._fail(f"init_transactions() raised {_name(err)}; expected "
                   f"{'an authorization error' if self.init_expects_auth else 'success'}")

    def _commit_outcome(self, err: Optional[KafkaError]) -> None:
        txn = self.txn
        assert txn is not None
        abortable = self._abortable_answered()
        if err is None:
            if self.phase == "abortable" or self._abortable_answered(certain=True):
                self._fail(f"commit_transaction() succeeded after an abortable error ({abortable})")
            if self.fenced and txn.touched:
                self._fail("commit_transaction() succeeded although the producer was fenced")
            # Java: "If the transaction is committed successfully and this method returns without throwing an
            # exception, it is guaranteed that all callbacks for records in the transaction will have been invoked"
            for (value, _p), fut in zip(txn.records, txn.futures):
                calls = self.callbacks.get(value, [])
                if len(calls) != 1 or calls[0][1] is not None:
                    self._fail(f"commit_transaction() returned but record {value!r} has callbacks {calls}")
                if not fut.done() or fut.exception(0) is not None:
                    self._fail(f"commit_transaction() returned but record {value!r}'s future is "
                               f"{'not done' if not fut.done() else _name(fut.exception(0))}")
            state = self.cluster.transaction_state(TXN_ID)
            if txn.touched and state != "CompleteCommit":
                self._fail(f"commit_transaction() returned but the coordinator's state is {state}")
            txn.outcome = "committed"
            self._txn_ended()
            return
        if isinstance(err, KafkaTimeoutError):
            self._fail(f"commit_transaction() without a short timeout raised {_name(err)}")
        if _fenced(err):
            self._to_fatal(err, "commit_transaction()")
            txn.outcome = "aborted"  # (the fencer's InitProducerId aborted it)
            return
        if not (self.phase == "abortable" or abortable or self.fenced):
            self._fail(f"commit_transaction() raised {_name(err)} but no abortable error was answered in the "
                       "transaction")
        self.phase = "abortable"  # Java: the application must abort now

    def _abort_outcome(self, err: Optional[KafkaError]) -> None:
        txn = self.txn
        assert txn is not None
        if err is None:
            state = self.cluster.transaction_state(TXN_ID)
            if state == "Ongoing" and not self.fenced:
                self._fail("abort_transaction() returned but the coordinator's transaction is still Ongoing")
            txn.outcome = "aborted"
            self._txn_ended()
            return
        if _fenced(err):
            self._to_fatal(err, "abort_transaction()")
            txn.outcome = "aborted"
            return
        self._fail(f"abort_transaction() raised {_name(err)}: after a non-fatal error it must succeed")

    def _txn_ended(self) -> None:
        self.phase = "ready"
        self.txn = None

    # -- steps -------------------------------------------------------------------------------------------

    def run(self, step: "Step") -> None:
        """One step of a program: the call it names, done as the current state makes it mean (a call the state
        does not allow must be refused; the timed-out call again is its retry)."""
        kind = step.kind
        if kind == "inject":
            self._inject(step.fault)
        elif kind == "fence":
            self.fence()
        elif kind == "close":
            self.close(step.timeout)
        elif kind == "wait":
            if self.pending is not None:
                self._await_background()
        elif kind == "send_offsets" and not step.offsets:
            _v, err = self._invoke("send_offsets", offsets={})
            if err is not None:  # Java: an empty map sends nothing and checks nothing (but a closed producer)
                self._fail(f"send_offsets_to_transaction({{}}) raised {_name(err)}")
        elif self.phase == "fatal":
            self._inject(step.fault, refused=True)
            self._refused(kind)
        elif self.pending is not None:
            self._inject(step.fault, refused=kind != self.pending)
            if kind == self.pending:
                self.retry(step.short)
            else:
                self._refused_while_pending(kind)
        elif kind == "init" and self.phase == "uninit":
            self.init_transactions(step.fault, step.short)
        elif kind == "begin" and self.phase == "ready":
            self.begin_transaction()
        elif kind == "send" and self.phase == "in_txn":
            self.send(step.records, step.fault)
        elif kind == "send_offsets" and self.phase == "in_txn":
            self.send_offsets_to_transaction(dict(step.offsets))
        elif kind == "commit" and self.phase in ("in_txn", "abortable"):
            self.commit_transaction(step.fault, step.short)
        elif kind == "abort" and self.phase in ("in_txn", "abortable"):
            self.abort_transaction(step.fault, step.short)
        else:
            self._inject(step.fault, refused=True)
            self._refused(kind)

    def _timed(self, call: str, short: bool, fault: Fault = NO_FAULT) -> Optional[KafkaError]:
        """``call`` (init, commit or abort) after ``fault``; with ``short``: with a timeout of SHORT_S while every
        broker answers LATENCY_MS late (the latency is lifted when the call returns)."""
        self._inject(fault)
        if short:
            self._slow()
        try:
            return self._invoke(call, SHORT_S if short else None)[1]
        finally:
            self._fast()

    def init_transactions(self, fault: Fault, short: bool) -> None:
        self._inject(fault)
        self.init_expects_auth = any(c in AUTH_CODES for c in self.cluster.pending_errors("init_producer_id"))
        err = self._timed("init", short)
        if short and isinstance(err, KafkaTimeoutError):
            self.pending = "init"
            return
        self._init_outcome(err)

    def begin_transaction(self) -> None:
        _v, err = self._invoke("begin")
        if err is not None:
            if _fenced(err):
                self._to_fatal(err, "begin_transaction()")
                return
            self._fail(f"begin_transaction() after a finished transaction raised {_name(err)}")
        self.txn = Txn(len(self.txns), self.generation)
        self.txns.append(self.txn)
        self.consumed_at_begin = {api: self._consumed(api) for api in ABORTABLE}
        self.drops_at_begin = {api: self._drops_taken(api) for api in ABORTABLE}
        self.phase = "in_txn"

    def send(self, records: Sequence[Tuple[int, int]], fault: Fault) -> None:
        txn = self.txn
        assert txn is not None
        self._inject(fault)
        sent: List[bytes] = []
        for key, partition in records:
            value = b"t%d-r%d" % (txn.number, len(txn.records))
            try:
                fut = self.producer.send(TOPIC, value, key=b"k%d" % key, partition=partition,
                                         callback=self._callback(value))
            except KafkaError as e:
                _note(f"  send({value!r}) raised {_name(e)}")
                self.callbacks.pop(value, None)
                if _fenced(e):
                    self._to_fatal(e, "send()")
                    return
                if isinstance(e, KafkaTimeoutError) or not (self._abortable_answered() or self.fenced):
                    self._fail(f"send() in a transaction raised {_name(e)} without an abortable error answered")
                self.phase = "abortable"
                return
            txn.records.append((value, partition))
            txn.futures.append(fut)
            txn.touched = True
            sent.append(value)
        _note(f"  sent {sent}")

    def send_offsets_to_transaction(self, offsets: Dict[int, int]) -> None:
        txn = self.txn
        assert txn is not None
        _v, err = self._invoke("send_offsets", offsets=offsets)
        if err is None:
            txn.offsets.update({(TOPIC, q): o for q, o in offsets.items()})
            txn.touched = True
            return
        if _fenced(err):
            self._to_fatal(err, "send_offsets_to_transaction()")
            return
        if isinstance(err, KafkaTimeoutError) or not (self._abortable_answered() or self.fenced):
            self._fail(f"send_offsets_to_transaction() raised {_name(err)} without an abortable error answered")
        self.phase = "abortable"

    def commit_transaction(self, fault: Fault, short: bool) -> None:
        txn = self.txn
        assert txn is not None
        err = self._timed("commit", short, fault)
        if short and isinstance(err, KafkaTimeoutError):
            self.pending = "commit"
            return
        self._commit_outcome(err)

    def abort_transaction(self, fault: Fault, short: bool) -> None:
        err = self._timed("abort", short, fault)
        if short and isinstance(err, KafkaTimeoutError):
            self.pending = "abort"
            return
        if isinstance(err, KafkaTimeoutError):
            self._fail(f"abort_transaction() without a short timeout raised {_name(err)}")
        self._abort_outcome(err)

    def retry(self, short: bool) -> None:
        """Java: a call that timed out "is safe to retry"; the retry gets the outcome of the first call (a short
        retry may time out again while that call still runs)."""
        call = self.pending
        assert call is not None
        err = self._timed(call, short)
        if isinstance(err, KafkaTimeoutError):
            if not short:
                self._fail(f"the retried {call} raised {_name(err)}")
            return
        self.pending = None
        {"init": self._init_outcome, "commit": self._commit_outcome, "abort": self._abort_outcome}[call](err)

    def _refused_while_pending(self, call: str) -> None:
        """Java: "it is not possible to attempt a different operation" until the timed-out call was retried
        (IllegalStateException), also when it completed in the background meanwhile."""
        pending = self.pending
        assert pending is not None
        _v, err = self._invoke(call, WAIT_S)
        if not isinstance(err, IllegalStateError):
            self._fail(f"{call} while the timed-out {pending} was not retried: {_name(err)}, expected "
                       "IllegalStateError (PendingCallError)")
        if JAVA_NAMES[pending] not in str(err):
            self._fail(f"{call} refused without naming the pending {JAVA_NAMES[pending]}: {err}")

    def _await_background(self) -> None:
        """Until the timed-out call has completed in the background (the producer's own result object)."""
        txn_manager = getattr(self.producer, "_txn", None)
        transition = getattr(txn_manager, "_pending", None)
        result = getattr(transition, "result", None)
        if result is None:
            return
        deadline = time.monotonic() + WAIT_S
        while not result.is_done() and time.monotonic() < deadline:
            time.sleep(0.005)
        _note(f"  the timed-out call {'completed' if result.is_done() else 'still runs'} in the background")

    def _refused(self, call: str) -> None:
        """A call the state does not allow: refused (Java's IllegalStateException / KafkaException), nothing
        changes; after ProducerFencedError every call raises it (Java's maybeFailWithError), but send()
        may fail its record with it instead, as Java's does."""
        value, err = self._invoke(call, WAIT_S)
        if self.phase == "fatal":
            if call == "send" and err is None:
                exc = value.exception(WAIT_S)
                if not _fenced(exc):
                    self._fail(f"send() after ProducerFencedError gave a record that ended with {_name(exc)}")
                return
            if not _fenced(err):
                self._fail(f"{call} after ProducerFencedError raised {_name(err)}, not ProducerFencedError")
            return
        if err is None:
            self._fail(f"{call} was accepted in phase {self.phase}")
        if isinstance(err, KafkaTimeoutError):
            self._fail(f"{call} refused with {_name(err)}: it is a state error, not a timeout")
        if _fenced(err):
            self._to_fatal(err, call)

    def fence(self) -> None:
        """A second producer with the same transactional.id: it aborts what is open and fences this one. (Not
        while a call is pending, nor before an authorization error meant for this producer's init.)"""
        if self.pending is not None or any(c in AUTH_CODES for c in self.cluster.pending_errors("init_producer_id")):
            _note("  (no fencing now)")
            return
        fencer = Producer(bootstrap_servers=self.cluster.bootstrap_servers, transactional_id=TXN_ID,
                          client_id="fencer", **CONFIG)
        try:
            fencer.init_transactions(WAIT_S)
        finally:
            fencer.close(10)
        _note("  a second producer called init_transactions()")
        if self.phase != "uninit":
            self.fenced = True

    def close(self, timeout: Optional[float]) -> None:
        """Java's close(): a transaction open is aborted (graceful) or left to the next producer's
        init_transactions() (forced); a new producer with the same transactional.id goes on."""
        old = self.producer
        self._close(old, timeout)
        _v, err = self._call("begin_transaction() after close()", old.begin_transaction)
        if not isinstance(err, ProducerClosedError):
            self._fail(f"begin_transaction() after close() gave {_name(err)}, not ProducerClosedError")
        if self.txn is not None:
            self.txn.outcome = "unknown" if self.pending == "commit" else "aborted"
        self._forget_producer()
        self.producer = self._new_producer()

    def _close(self, producer: Producer, timeout: Optional[float]) -> None:
        """``producer.close(timeout)``, from a helper thread so that a close that never returns fails the
        program (printed) instead of the whole test run."""
        outcome: List[BaseException] = []

        def run() -> None:
            try:
                producer.close(timeout)
            except BaseException as e:  # (reported below)
                outcome.append(e)

        closer = threading.Thread(target=run, name="close", daemon=True)
        closer.start()
        closer.join(CLOSE_LIMIT_S)
        if closer.is_alive():
            self._fail(f"close({timeout}) did not return within {CLOSE_LIMIT_S} s")
        if outcome:
            self._fail(f"close({timeout}) raised {_name(outcome[0])}")
        _note(f"  close({timeout}) returned")

    def _forget_producer(self) -> None:
        """After close(): wait until the cluster saw every connection of the closed producer end (so it has
        answered all its requests), and clear the faults it left (they were meant for it)."""
        deadline = time.monotonic() + WAIT_S
        while sum(self.cluster.connection_count(b) for b in self.cluster.broker_ids) and time.monotonic() < deadline:
            time.sleep(0.005)
        self.cluster.clear_faults()
        self.injected = {api: [] for api in TRACKED_APIS}
        self.drops = {}
        self.phase, self.pending, self.txn, self.fenced, self.init_expects_auth = "uninit", None, None, False, False

    # -- the end of a program ------------------------------------------------------------------------------

    def end(self) -> None:
        """The end of a program: finish as an application does, then check what the cluster holds."""
        self._finish()
        self._verify()

    def cleanup(self) -> None:
        logging.getLogger("kproducer").removeHandler(self.errors_log)
        try:
            self.producer.close(0)
        finally:
            self.cluster.stop()

    def _finish(self) -> None:
        """The application's last steps: collect a pending call's outcome, initialise a new producer (it ends
        what the last one left open), close."""
        self._fast()
        _note("teardown:")
        if self.pending is not None:
            self.retry(short=False)
        if self.phase == "uninit":
            self.cluster.clear_faults()
            self.injected = {api: [] for api in TRACKED_APIS}
            self.drops = {}
            self.init_expects_auth = False
            self._init_outcome(self._invoke("init")[1])
        left_open = self._close_leaves_open()
        self._close(self.producer, None)
        if self.txn is not None:
            self.txn.outcome = "aborted"
        self._forget_producer()
        if left_open:
            _note("  (the transaction the producer could not end: a new producer's init_transactions() aborts it)")
            self.producer = self._new_producer()
            self._init_outcome(self._invoke("init")[1])
            self._close(self.producer, None)

    def _close_leaves_open(self) -> bool:
        """Whether a graceful close() may leave the transaction open at the coordinator (a new producer's
        init_transactions() ends it): after INVALID_PRODUCER_ID_MAPPING the abort skips EndTxn and ends the
        transaction with an epoch bump, which close() does not send (as Java 3.x's Sender), and the injected error
        leaves the mock's coordinator with the transaction open, which Apache Kafka's would not have when it answers
        INVALID_PRODUCER_ID_MAPPING."""
        return self.phase in ("in_txn", "abortable") and any(
            e.startswith(InvalidProducerIdMappingError.name) for e in self._abortable_answered())

    def _verify(self) -> None:
        c = self.cluster
        deadline = time.monotonic() + WAIT_S
        while any(c.last_stable_offset(TOPIC, p) != c.high_watermark(TOPIC, p) for p in range(PARTITIONS)) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        for p in range(PARTITIONS):
            if c.last_stable_offset(TOPIC, p) != c.high_watermark(TOPIC, p):
                raise AssertionError(f"p{p}: a transaction is still open at the end (last stable offset "
                                     f"{c.last_stable_offset(TOPIC, p)}, high watermark {c.high_watermark(TOPIC, p)})")
        state = c.transaction_state(TXN_ID)
        assert state != "Ongoing", f"the coordinator still has a transaction Ongoing at the end ({state})"
        views = {p: _log_view(c, TOPIC, p) for p in range(PARTITIONS)}
        seen = {v for visible, _o, _open in views.values() for v in visible}
        # a transaction of unknown outcome counts as committed when any of its records is visible: then all must be
        included = [t for t in self.txns if t.outcome == "committed"
                    or (t.outcome == "unknown" and any(v in seen for v, _p in t.records))]
        expected: Dict[int, List[bytes]] = {p: [] for p in range(PARTITIONS)}
        for t in included:
            for value, p in t.records:
                expected[p].append(value)
        summary = "; ".join(f"t{t.number}(producer {t.producer}): {t.outcome} {[v for v, _p in t.records]}"
                            for t in self.txns)
        for p, (visible, _offsets, open_txn) in views.items():
            assert not open_txn, f"p{p}: the log has a transaction without its marker at the end"
            assert visible == expected[p], (f"p{p}: the log's committed records are {visible}, expected "
                                            f"{expected[p]}; transactions: {summary}")
        try:
            consumed = read_committed(c, TOPIC, PARTITIONS)
        except Violation as v:
            raise AssertionError(str(v)) from None
        assert consumed == expected, (f"kafka-python read_committed returned {consumed}, expected {expected}; "
                                      f"transactions: {summary}")
        for t in self.txns:
            for (value, p), fut in zip(t.records, t.futures):
                calls = self.callbacks.get(value, [])
                assert len(calls) == 1, f"record {value!r} (t{t.number}, {t.outcome}): {len(calls)} callbacks"
                if t in included:
                    md = fut.get(0)
                    offset = views[p][1].get(value)
                    assert (md.partition, md.offset) == (p, offset), \
                        f"record {value!r} acknowledged at p{md.partition}@{md.offset}, the log has it at p{p}@{offset}"
        possible: Dict[Tuple[str, int], Set[Optional[int]]] = {}
        for t in self.txns:
            for tp, offset in t.offsets.items():
                if t.outcome == "committed":
                    possible[tp] = {offset}
                elif t.outcome == "unknown":
                    possible.setdefault(tp, {None}).add(offset)
        committed = c.committed_offsets(GROUP)
        for tp, values in possible.items():
            assert committed.get(tp) in values, (f"group offset of {tp} is {committed.get(tp)}, expected one of "
                                                 f"{values}; transactions: {summary}")
        assert set(committed) <= set(possible), f"offsets of aborted transactions committed: {committed}"
        assert not self.errors_log.seen, f"kproducer logged internal errors: {self.errors_log.seen}"


# ------------------------------------------------------------------------------------------ tests


#: programs this test found violating the contract, run first every time
FOUND = [
    # the mock fenced the retry of an epoch bump (InitProducerId with the producer's id and epoch after the abort
    # of a transaction with a failed record) whose answer was lost; Apache Kafka answers the bumped epoch again
    Program([Step("init"), Step("begin"), Step("send", Fault("produce", (FATAL_PRODUCE[0],)), records=((0, 0),)),
             Step("commit"), Step("inject", Fault("init_producer_id", (), True)), Step("abort"), Step("begin"),
             Step("send", records=((0, 0),)), Step("commit")]),
    # an abort that timed out and failed in the background with PRODUCER_FENCED: its retry must return that
    # outcome (Java's cached result), after which every call raises ProducerFencedError, not PendingCallError
    Program([Step("init"), Step("begin"), Step("send", records=((0, 0),)), Step("fence"), Step("abort", short=True),
             Step("wait"), Step("abort"), Step("begin")]),
]


@pytest.mark.parametrize("transaction_version", [0, 2], ids=lambda v: f"transaction_version={v}")
@SETTINGS
@given(program=PROGRAMS)
@example(program=FOUND[0])
@example(program=FOUND[1])
def test_random_transaction_programs(transaction_version: int, program: List[Step]) -> None:
    run_program(transaction_version, program)


def run_program(transaction_version: int, program: Sequence[Step]) -> None:
    """Run one program on a fresh MockCluster and check it (AssertionError on the first violation)."""
    model = TxnModel(transaction_version)
    try:
        for i, step in enumerate(program):
            _note(f"step {i}: {step!r} {model._where()}")
            model.run(step)
        _note(f"end {model._where()}")
        model.end()
    finally:
        model.cleanup()


# ------------------------------------------------------------------------------------------ mock parity


@pytest.mark.parametrize("target", ["mock", pytest.param("apache_kafka", marks=pytest.mark.apache_kafka)])
def test_a_retried_epoch_bump_gets_the_bumped_epoch(target: str, request: pytest.FixtureRequest) -> None:
    """InitProducerId with the producer id and epoch (KIP-360's epoch bump, sent after an abort) whose answer was
    lost is sent again with the same epoch: Apache Kafka recognises the retry (the epoch is the previous one,
    ``lastProducerEpoch``) and answers the bumped epoch again; only an older epoch, or the previous one after a
    new producer's InitProducerId, is fenced. (The mock fenced the retry: the program above found it, a lost
    InitProducerId answer after an abort.) Raw requests, the same script on both; Apache Kafka's answers are the
    ones written down here."""
    from kproducer.mock.wire_client import WireClient
    from kproducer.protocol import messages as m

    cluster: Optional[MockCluster] = None
    if target == "mock":
        cluster = MockCluster(3).start()
        bootstrap = cluster.bootstrap_servers
    else:
        bootstrap = request.getfixturevalue("apache_kafka").bootstrap_servers
    tid = f"bump-retry-{time.monotonic_ns()}"
    boot = WireClient.connect(bootstrap.split(",")[0], timeout=30)
    clients = [boot]
    try:
        deadline = time.monotonic() + 60
        while True:  # (Apache Kafka creates __transaction_state first)
            found = boot.request(m.FIND_COORDINATOR, 1, {"key": tid, "key_type": 1})
            if found["error_code"] == 0:
                break
            assert time.monotonic() < deadline, f"no coordinator: {error_class_for_code(found['error_code']).name}"
            time.sleep(0.2)
        coordinator = WireClient(found["host"], found["port"], timeout=30)
        clients.append(coordinator)

        def init(producer_id: int = -1, epoch: int = -1) -> Tuple[str, int, int]:
            """InitProducerId (again while the coordinator is busy): (error name, producer id, epoch)."""
            give_up = time.monotonic() + 60
            while True:
                answer = coordinator.request(m.INIT_PRODUCER_ID, 5, {
                    "transactional_id": tid, "transaction_timeout_ms": 60000, "producer_id": producer_id,
                    "producer_epoch": epoch})
                code = answer["error_code"]
                name = "NONE" if code == 0 else error_class_for_code(code).name
                if name not in ("CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR",
                                "COORDINATOR_NOT_AVAILABLE") or time.monotonic() > give_up:
                    return name, answer["producer_id"], answer["producer_epoch"]
                time.sleep(0.1)

        name, pid, e = init()
        assert name == "NONE" and pid >= 0, name
        assert init(pid, e) == ("NONE", pid, e + 1), "the bump"
        assert init(pid, e) == ("NONE", pid, e + 1), "its retry: the same epoch again, not fenced"
        assert init(pid, e + 1) == ("NONE", pid, e + 2), "the next bump"
        assert init(pid, e)[0] == "PRODUCER_FENCED", "an epoch older than the previous one"
        assert init() == ("NONE", pid, e + 3), "a new producer's InitProducerId"
        assert init(pid, e + 2)[0] == "PRODUCER_FENCED", "the previous epoch after a new producer's InitProducerId"
        # the producer's own bump while its transaction is open (kproducer sends it so after INVALID_PRODUCER_ID_
        # MAPPING, as Java 3.x): Apache Kafka aborts the transaction (CONCURRENT_TRANSACTIONS meanwhile) and answers
        # the epoch + 1, and the same to its retry (the mock answered the epoch + 2, and fenced the retry)
        added = coordinator.request(m.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": tid, "producer_id": pid,
                                                               "producer_epoch": e + 3, "group_id": f"{tid}-g"})
        assert added["error_code"] == 0, added
        assert init(pid, e + 3) == ("NONE", pid, e + 4), "the bump while a transaction is open"
        assert init(pid, e + 3) == ("NONE", pid, e + 4), "its retry"
        assert init(pid, e + 2)[0] == "PRODUCER_FENCED", "an older epoch"
    finally:
        for c in clients:
            c.close()
        if cluster is not None:
            cluster.stop()
