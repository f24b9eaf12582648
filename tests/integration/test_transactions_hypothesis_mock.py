"""Transactions as random programs on the MockCluster: a hypothesis stateful test (issue 28, "Done when").

``TxnProgram`` (a ``RuleBasedStateMachine``) drives one transactional ``Producer`` (and, after a ``close()``, a
new one with the same transactional.id) through random sequences of:

* ``init_transactions`` (with faults before it: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
  CONCURRENT_TRANSACTIONS on FindCoordinator or InitProducerId, a lost response,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED on InitProducerId; with or without a short
  timeout);
* ``begin_transaction``; ``send`` of 1-4 keyed records to explicit partitions (with retriable or non-retriable
  produce errors, coordinator errors or UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_ID_MAPPING on AddPartitionsToTxn,
  or a lost response injected first); ``send_offsets_to_transaction`` (also ``{}``);
* ``commit_transaction`` / ``abort_transaction`` (EndTxn errors or a lost response injected first), with or without
  a short timeout: a short-timeout call runs while every broker answers 250 ms late, so it times out
  (KafkaTimeoutError) and completes in the background; then ``retry_pending`` calls it again (it must return the
  cached outcome) and ``call_while_pending`` checks that every other call is refused (PendingCallError), also once
  the background call has completed;
* ``misuse``: a call the current state does not allow (e.g. ``send()`` outside a transaction, ``commit`` after an
  abortable error, anything after ProducerFencedError): it must be refused and change nothing;
* ``fence``: a second producer with the same transactional.id calls ``init_transactions()``;
* ``inject``: coordinator errors or a lost response of any transactional API, for whatever comes next;
* ``close`` (no timeout, 5 s, 0 s), also with a transaction open or a call pending: the producer must refuse calls
  afterwards, and a new producer with the same transactional.id continues.

After every call the outcome is checked against Java's KafkaProducer contract (its javadoc: which exception each
call may raise in which state), with the model's knowledge of the faults: which injected error codes the cluster
has answered since the transaction began (``MockCluster.pending_errors`` tells what is left), whether the
producer was fenced. A commit must succeed unless an abortable error was answered in its transaction (a
non-retriable produce error, UNKNOWN_PRODUCER_ID / INVALID_PRODUCER_ID_MAPPING on AddPartitionsToTxn) or the
producer was fenced; when it succeeds every record's callback has run; after an abortable error the commit raises
and ``abort_transaction()`` succeeds; once a call raised ProducerFencedError every later call raises it;
``init_transactions()`` refused by the authorizer may be called again.

At the end of every program (``teardown``): a pending call is retried, an uninitialised producer is initialised (it
aborts what a forced close left open), the producer is closed; then the log with its markers
(``cluster.records(include_control=True)``) and kafka-python's ``read_committed`` consumer must show exactly the
records of the transactions reported committed, each once, in send order, and of a transaction whose outcome the
program could not learn (its commit was pending at ``close()``) all records or none; no transaction is left open
(last stable offset = high watermark, coordinator state not Ongoing); offsets of committed transactions are the
group's committed offsets; every record's callback ran exactly once and a committed record's metadata names its
place in the log; kproducer logged no internal error (a traceback).

Every test runs against ``MockCluster(transaction_version=0)`` and the default (2): the client uses transactions v2
where the broker offers it. Examples are derandomized (the same programs every run, no example database):
``KPRODUCER_HYPOTHESIS_EXAMPLES`` (default 20 per cluster kind) and ``KPRODUCER_HYPOTHESIS_STEPS`` (default 30)
for longer runs, ``KPRODUCER_HYPOTHESIS_RANDOM=1`` for new random programs. A failure prints the shrunk program,
one call per line, with the faults as they were injected.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

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
    pytest.mark.integration,
    pytest.mark.timeout(900),  # (a failure shrinks for a while; passing runs take well under 90 s)
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

EXAMPLES = int(os.environ.get("KPRODUCER_HYPOTHESIS_EXAMPLES", "20"))
STEPS = int(os.environ.get("KPRODUCER_HYPOTHESIS_STEPS", "30"))
RANDOM = os.environ.get("KPRODUCER_HYPOTHESIS_RANDOM", "") == "1"
SETTINGS = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=not RANDOM,
                    database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

BROKERS, PARTITIONS = 3, 3
TOPIC, GROUP, TXN_ID = "hyp", "hyp-group", "hyp-txn"
#: calls without a short timeout wait max.block.ms: long, so that a busy machine does not make them time out
CONFIG: Dict[str, Any] = {**PRODUCER_CONFIG, "max_block_ms": 30000}
LATENCY_MS = 250  # every broker answers this late while a short-timeout call runs ...
SHORT_S = 0.05  # ... so a call that needs an answer certainly times out
WAIT_S = 30.0

UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING = UnknownProducerIdError.code, InvalidProducerIdMappingError.code
AUTH_CODES = (TransactionalIdAuthorizationFailedError.code, ClusterAuthorizationFailedError.code)
#: answered to a transaction's Produce / AddPartitionsToTxn, these make it abortable (the commit must fail)
ABORTABLE = {"produce": set(FATAL_PRODUCE), "add_partitions_to_txn": {UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING}}
TRACKED_APIS = ("produce", "add_partitions_to_txn", "init_producer_id")


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


NO_FAULT = Fault()


def _errors(apis: Sequence[str], codes: Sequence[int], most: int = 3) -> st.SearchStrategy[Fault]:
    return st.builds(Fault, st.sampled_from(list(apis)), st.lists(st.sampled_from(list(codes)), min_size=1,
                                                                   max_size=most).map(tuple))


def _lost(apis: Sequence[str]) -> st.SearchStrategy[Fault]:
    return st.builds(Fault, st.sampled_from(list(apis)), st.just(()), st.just(True))


INIT_FAULTS = st.one_of(
    st.just(NO_FAULT),
    _errors(("find_coordinator", "init_producer_id"), COORDINATOR_CODES),
    _lost(("find_coordinator", "init_producer_id")),
    _errors(("init_producer_id",), AUTH_CODES, most=1),
)
SEND_FAULTS = st.one_of(
    st.just(NO_FAULT),
    _errors(("produce",), RETRIABLE_PRODUCE),
    _errors(("produce",), FATAL_PRODUCE, most=1),
    _errors(("add_partitions_to_txn",), COORDINATOR_CODES),
    _errors(("add_partitions_to_txn",), (UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING), most=1),
    _lost(("produce", "add_partitions_to_txn")),
)
END_FAULTS = st.one_of(st.just(NO_FAULT), _errors(("end_txn",), COORDINATOR_CODES), _lost(("end_txn",)))
ANY_FAULT = st.one_of(
    _errors(("find_coordinator", "init_producer_id", "add_partitions_to_txn", "add_offsets_to_txn",
             "txn_offset_commit", "end_txn"), COORDINATOR_CODES),
    _lost(("produce", "find_coordinator", "init_producer_id", "add_partitions_to_txn", "add_offsets_to_txn",
           "txn_offset_commit", "end_txn")),
)
RECORDS = st.lists(st.tuples(st.integers(0, 5), st.integers(0, PARTITIONS - 1)), min_size=1, max_size=4)
OFFSETS = st.dictionaries(st.integers(0, PARTITIONS - 1), st.integers(0, 1000), max_size=2)
CALLS = ("init", "begin", "send", "send_offsets", "commit", "abort")


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


class TxnProgram(RuleBasedStateMachine):
    """The producer under test and what Java's contract lets it do next (see the module docstring)."""

    TRANSACTION_VERSION = 2

    def __init__(self) -> None:
        super().__init__()
        self.cluster = MockCluster(BROKERS, transaction_version=self.TRANSACTION_VERSION)
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
        self.callbacks: Dict[bytes, List[Tuple[Any, Optional[BaseException]]]] = {}

    # -- helpers -----------------------------------------------------------------------------------

    def _new_producer(self) -> Producer:
        self.generation += 1
        return Producer(bootstrap_servers=self.cluster.bootstrap_servers, transactional_id=TXN_ID,
                        client_id=f"hyp-{self.generation}", **CONFIG)

    def _where(self) -> str:
        return (f"[producer {self.generation}, model phase {self.phase}, pending {self.pending}, fenced "
                f"{self.fenced}, transaction {self.txn.number if self.txn else None}]")

    def _fail(self, message: str) -> None:
        raise AssertionError(f"{message} {self._where()}")

    def _inject(self, fault: Fault) -> None:
        if not fault.api:
            return
        if fault.lost:
            self.cluster.drop_responses(fault.api, 1)
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

    def _abortable_answered(self) -> List[str]:
        """The errors answered since the transaction began that make it abortable."""
        out: List[str] = []
        for api, codes in ABORTABLE.items():
            for c in self.injected[api][self.consumed_at_begin.get(api, 0):self._consumed(api)]:
                if c in codes:
                    out.append(f"{error_class_for_code(c).name} on {api}")
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
            note(f"  {what} raised {_name(e)}")
            return None, e
        note(f"  {what} returned")
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
            if self.phase == "abortable" or abortable:
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

    def _check_refused(self, call: str, err: Optional[KafkaError], value: Any) -> None:
        """``call`` is not allowed in this state: it must raise (or, for send() after fencing, fail its record
        with ProducerFencedError as Java does) and change nothing."""
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

    # -- rules -------------------------------------------------------------------------------------------

    @precondition(lambda self: self.phase == "uninit" and self.pending is None)
    @rule(fault=INIT_FAULTS, short=st.booleans())
    def init_transactions(self, fault: Fault, short: bool) -> None:
        self._inject(fault)
        self.init_expects_auth = any(c in AUTH_CODES for c in self.cluster.pending_errors("init_producer_id"))
        if short:
            self._slow()
        try:
            _v, err = self._invoke("init", SHORT_S if short else None)
        finally:
            self._fast()
        if short:
            if not isinstance(err, KafkaTimeoutError):
                self._fail(f"init_transactions({SHORT_S}) with every broker {LATENCY_MS} ms late did not time "
                           f"out: {_name(err)}")
            self.pending = "init"
            return
        self._init_outcome(err)

    @precondition(lambda self: self.phase == "ready" and self.pending is None)
    @rule()
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
        self.phase = "in_txn"

    @precondition(lambda self: self.phase == "in_txn" and self.pending is None)
    @rule(records=RECORDS, fault=SEND_FAULTS)
    def send(self, records: List[Tuple[int, int]], fault: Fault) -> None:
        txn = self.txn
        assert txn is not None
        self._inject(fault)
        for key, partition in records:
            value = b"t%d-r%d" % (txn.number, len(txn.records))
            try:
                fut = self.producer.send(TOPIC, value, key=b"k%d" % key, partition=partition,
                                         callback=self._callback(value))
            except KafkaError as e:
                note(f"  send({value!r}) raised {_name(e)}")
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
        note(f"  sent {[v for v, _p in txn.records[-len(records):]]}")

    @precondition(lambda self: self.phase == "in_txn" and self.pending is None)
    @rule(offsets=OFFSETS)
    def send_offsets_to_transaction(self, offsets: Dict[int, int]) -> None:
        txn = self.txn
        assert txn is not None
        _v, err = self._invoke("send_offsets", offsets=offsets)
        if not offsets:
            if err is not None:  # Java: an empty map sends nothing and checks nothing
                self._fail(f"send_offsets_to_transaction({{}}) raised {_name(err)}")
            return
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

    @precondition(lambda self: self.phase in ("in_txn", "abortable") and self.pending is None)
    @rule(fault=END_FAULTS, short=st.booleans())
    def commit_transaction(self, fault: Fault, short: bool) -> None:
        self._inject(fault)
        txn = self.txn
        assert txn is not None
        if short:
            self._slow()
        try:
            _v, err = self._invoke("commit", SHORT_S if short else None)
        finally:
            self._fast()
        if short and isinstance(err, KafkaTimeoutError):
            self.pending = "commit"
            return
        if short and txn.touched and self.phase == "in_txn" and not self.fenced and not self._abortable_answered():
            self._fail(f"commit_transaction({SHORT_S}) of a transaction that wrote to the cluster, with every "
                       f"broker {LATENCY_MS} ms late, did not time out: {_name(err)}")
        self._commit_outcome(err)

    @precondition(lambda self: self.phase in ("in_txn", "abortable") and self.pending is None)
    @rule(fault=END_FAULTS, short=st.booleans())
    def abort_transaction(self, fault: Fault, short: bool) -> None:
        self._inject(fault)
        if short:
            self._slow()
        try:
            _v, err = self._invoke("abort", SHORT_S if short else None)
        finally:
            self._fast()
        if short and isinstance(err, KafkaTimeoutError):
            self.pending = "abort"
            return
        if isinstance(err, KafkaTimeoutError):
            self._fail(f"abort_transaction() without a short timeout raised {_name(err)}")
        self._abort_outcome(err)

    @precondition(lambda self: self.pending is not None)
    @rule()
    def retry_pending(self) -> None:
        """Java: a call that timed out "is safe to retry"; the retry gets the outcome of the first call."""
        call, self.pending = self.pending, None
        assert call is not None
        _v, err = self._invoke(call)
        if isinstance(err, KafkaTimeoutError):
            self._fail(f"the retried {call} raised {_name(err)}")
        {"init": self._init_outcome, "commit": self._commit_outcome, "abort": self._abort_outcome}[call](err)

    @precondition(lambda self: self.pending is not None)
    @rule(data=st.data(), completed=st.booleans())
    def call_while_pending(self, data: st.DataObject, completed: bool) -> None:
        """Java: "it is not possible to attempt a different operation" until the timed-out call was retried
        (IllegalStateException), also when it completed in the background meanwhile."""
        pending = self.pending
        call = data.draw(st.sampled_from([c for c in CALLS if c != pending]), label="call")
        if completed:
            self._await_background()
        _v, err = self._invoke(call, WAIT_S)
        if not isinstance(err, IllegalStateError):
            self._fail(f"{call} while the timed-out {pending} was not retried: {_name(err)}, expected "
                       "IllegalStateError (PendingCallError)")
        java = {"init": "init_transactions()", "commit": "commit_transaction()", "abort": "abort_transaction()"}
        if pending is not None and java[pending] not in str(err):
            self._fail(f"{call} refused without naming the pending {java[pending]}: {err}")

    def _await_background(self) -> None:
        txn_manager = getattr(self.producer, "_txn", None)
        transition = getattr(txn_manager, "_pending", None)
        result = getattr(transition, "result", None)
        if result is None:
            return
        deadline = time.monotonic() + WAIT_S
        while not result.is_done() and time.monotonic() < deadline:
            time.sleep(0.005)
        note(f"  (the timed-out call {'completed' if result.is_done() else 'is still running'} in the background)")

    @precondition(lambda self: self.pending is None)
    @rule(data=st.data())
    def misuse(self, data: st.DataObject) -> None:
        """A call the state does not allow: refused (Java's IllegalStateException / KafkaException), nothing
        changes; after ProducerFencedError every call raises it (Java's maybeFailWithError)."""
        wrong = {"uninit": ("begin", "send", "send_offsets", "commit", "abort"),
                 "ready": ("init", "send", "send_offsets", "commit", "abort"),
                 "in_txn": ("init", "begin"),
                 "abortable": ("init", "begin", "send", "send_offsets", "commit"),
                 "fatal": CALLS}[self.phase]
        call = data.draw(st.sampled_from(wrong), label="call")
        value, err = self._invoke(call, WAIT_S)
        self._check_refused(call, err, value)

    @precondition(lambda self: self.pending is None
                  and not any(c in AUTH_CODES for c in self.cluster.pending_errors("init_producer_id")))
    @rule()
    def fence(self) -> None:
        """A second producer with the same transactional.id: it aborts what is open and fences this one."""
        fencer = Producer(bootstrap_servers=self.cluster.bootstrap_servers, transactional_id=TXN_ID,
                          client_id="fencer", **CONFIG)
        try:
            fencer.init_transactions(WAIT_S)
        finally:
            fencer.close(10)
        if self.phase != "uninit":
            self.fenced = True

    @rule(fault=ANY_FAULT)
    def inject(self, fault: Fault) -> None:
        self._inject(fault)

    @rule(timeout=st.sampled_from([None, 5.0, 0.0]))
    def close(self, timeout: Optional[float]) -> None:
        """Java's close(): a transaction open is aborted (graceful) or left to the next producer's
        init_transactions() (forced); a new producer with the same transactional.id goes on."""
        old = self.producer
        old.close(timeout)
        _v, err = self._call("begin_transaction() after close()", old.begin_transaction)
        if not isinstance(err, ProducerClosedError):
            self._fail(f"begin_transaction() after close() gave {_name(err)}, not ProducerClosedError")
        if self.txn is not None:
            self.txn.outcome = "unknown" if self.pending == "commit" else "aborted"
        self._forget_producer()
        self.producer = self._new_producer()

    def _forget_producer(self) -> None:
        """After close(): wait until the cluster saw every connection of the closed producer end (so it has
        answered all its requests), and clear the faults it left (they were meant for it)."""
        deadline = time.monotonic() + WAIT_S
        while sum(self.cluster.connection_count(b) for b in self.cluster.broker_ids) and time.monotonic() < deadline:
            time.sleep(0.005)
        self.cluster.clear_faults()
        self.injected = {api: [] for api in TRACKED_APIS}
        self.phase, self.pending, self.txn, self.fenced, self.init_expects_auth = "uninit", None, None, False, False

    # -- the end of a program ------------------------------------------------------------------------------

    def teardown(self) -> None:
        try:
            self._finish()
            self._verify()
        finally:
            logging.getLogger("kproducer").removeHandler(self.errors_log)
            try:
                self.producer.close(0)
            finally:
                self.cluster.stop()

    def _finish(self) -> None:
        """The application's last steps: collect a pending call's outcome, initialise a new producer (it ends
        what the last one left open), close."""
        self._fast()
        note("teardown:")
        if self.pending is not None:
            self.retry_pending()
        if self.phase == "uninit":
            self.cluster.clear_faults()
            self.injected = {api: [] for api in TRACKED_APIS}
            self.init_expects_auth = False
            self._init_outcome(self._invoke("init")[1])
        self.producer.close()
        if self.txn is not None:
            self.txn.outcome = "aborted"
        self._forget_producer()

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
        possible: Dict[Tuple[str, int], set] = {}
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


@pytest.mark.parametrize("transaction_version", [0, 2], ids=lambda v: f"transaction_version={v}")
def test_random_transaction_programs(transaction_version: int) -> None:
    program = type(f"TxnProgramTV{transaction_version}", (TxnProgram,), {"TRANSACTION_VERSION": transaction_version})
    run_state_machine_as_test(program, settings=SETTINGS)
