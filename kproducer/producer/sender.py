"""The sender thread: metadata -> ready -> drain -> expire -> send -> poll -> complete or retry."""
from __future__ import annotations

import logging
import threading
from functools import partial
from typing import Any, Dict, List, Optional, Set, Tuple

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import (
    DuplicateSequenceNumberError,
    FencedLeaderEpochError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    NetworkError,
    NetworkThreadDiedError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    ProducerClosedError,
    RequestTimedOutError,
    TransactionAbortedError,
    UnknownProducerIdError,
    UnsupportedVersionError,
    error_for_code,
)
from ..network.client import ClientRequest, ClientResponse, NetworkClient
from ..network.metadata import Cluster, Metadata, Node
from ..protocol import messages as m
from ..protocol.errors import NO_ERROR, error_class_for_code
from .accumulator import ReadyCheckResult, RecordAccumulator
from .batch import ProducerBatch
from .expiry_log import ExpiryLog, expiry_reason
from .metrics import ProducerMetrics
from .transaction_manager import (
    CoordinatorType,
    Outcome,
    TransactionManager,
    TxnRequestHandler,
)

log = logging.getLogger(__name__)

TopicPartition = Tuple[str, int]

# what a produce response's error code means comes from its error class (kproducer.protocol.errors)
_SEQUENCE_ERRORS = (OutOfOrderSequenceNumberError, UnknownProducerIdError)
# errors whose partition response may name the current leader (KIP-951, Produce v10+)
_LEADER_HINT_ERRORS = (NotLeaderOrFollowerError.code, FencedLeaderEpochError.code)

#: an unexpected error that recurs in every sender iteration is logged the first time (with its traceback), then
#: at most once per this many seconds, with how often it recurred meanwhile
REPEATED_ERROR_LOG_INTERVAL_S = 10.0
#: how long the sender pauses after an unexpected error in an iteration (no hot loop on a persistent bug)
_ERROR_PAUSE_MS = 10.0


class Sender(threading.Thread):
    """Moves batches from the accumulator to the brokers and completes them."""

    #: marks the thread on which send callbacks run (kproducer.producer.future.on_network_thread): nothing run
    #: there may wait for this thread
    kproducer_network_thread = True

    def __init__(
        self,
        client: NetworkClient,
        metadata: Metadata,
        accumulator: RecordAccumulator,
        *,
        acks: int,
        retries: int,
        max_request_size: int,
        request_timeout_ms: float,
        guarantee_message_order: bool = False,
        transaction_manager: Optional[TransactionManager] = None,
        metrics: Optional[ProducerMetrics] = None,
        retry_backoff_ms: float = 100,
        clock: Clock = SYSTEM_CLOCK,
        name: str = "kproducer-network-thread",
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.client = client
        self.metadata = metadata
        self.accumulator = accumulator
        self.acks = acks
        self.retries = retries
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.guarantee_message_order = guarantee_message_order
        self.txn = transaction_manager
        if transaction_manager is not None:
            # the transaction version (KIP-890) is the cluster's finalized feature, as this client's ApiVersions
            # answers report it
            transaction_manager.finalized_features = lambda: client.finalized_features
        self.metrics = metrics or ProducerMetrics(clock)
        self.metrics.watch(client, accumulator, metadata)
        #: expired records, logged counted and rate-limited (issue 30)
        self.expiry_log = ExpiryLog(accumulator.delivery_timeout_ms)
        self._fatal_reported = False  # (the transaction manager's fatal error was reported: error_cb)
        self.retry_backoff_ms = retry_backoff_ms
        self.clock = clock
        self.running = True
        self.force_close = False
        self._in_flight_batches: Dict[TopicPartition, List[ProducerBatch]] = {}
        #: no in-flight batch reaches delivery.timeout.ms before this; earlier than the true next expiry once the
        #: batch it came from is acknowledged (the in-flight lists are scanned then), never later
        self._next_in_flight_expiry = float("inf")
        #: the latest time (the clock's monotonic ms) at which the network thread's current wait for I/O in
        #: run_once() ends; inf while it runs an iteration or waits in any other poll (wakeup_for_new_batch)
        self.poll_until_ms = float("inf")
        #: a new batch arms a timer on time.monotonic() instead of waking the thread (wakeup_for_new_batch): the
        #: transport has one (Linux) and this clock's monotonic_ms() is time.monotonic()'s, in ms
        self._timed_wakeup = type(clock) is Clock and client.has_timed_wakeup()
        self._fatal_error: Optional[BaseException] = None
        #: how many times queued batches were failed because a broker refused our credentials, and why
        self.authentication_failures = 0
        self.last_authentication_error: Optional[KafkaError] = None
        #: why the thread ended early (an error escaped its loop); also its fatal_error. None while it runs
        self.died_error: Optional[NetworkThreadDiedError] = None
        # the last unexpected error of an iteration (type, message, where), when it was last logged, and how
        # often it recurred since (logged with backoff: REPEATED_ERROR_LOG_INTERVAL_S)
        self._loop_error_key: Optional[Tuple[Any, ...]] = None
        self._loop_error_logged_ms = 0.0
        self._loop_error_repeats = 0

    # -- thread ----------------------------------------------------------------------------------

    @property
    def fatal_error(self) -> Optional[BaseException]:
        """The error that ended this producer (no producer id can be had, say); None while it works."""
        return self._fatal_error

    @fatal_error.setter
    def fatal_error(self, exc: Optional[BaseException]) -> None:
        self._fatal_error = exc
        if exc is not None:
            self.accumulator.gate.close()  # the compiled send() hands records to the Python one, which raises it
            if isinstance(exc, KafkaError):
                self.client.report_error(exc)  # (error_cb)

    def run(self) -> None:
        log.debug("sender thread started")
        try:
            while self.running:
                self._run_once_safely()
            # stopped accepting records: finish what is queued, in flight, or owed to the coordinator
            while not self.force_close and (
                self.accumulator.has_undrained() or self.client.has_in_flight() or self._txn_pending()
            ):
                self._run_once_safely()
            txn = self.txn
            # Java: an open transaction is aborted at close; one being committed or aborted finishes
            if not self.force_close and txn is not None and txn.is_transactional and txn.abort_at_close():
                log.info("aborting the open transaction because the producer is closing")
                self.accumulator.abort_undrained_batches(TransactionAbortedError(
                    "the producer was closed before this record of an open transaction was sent"),
                    keep_sequenced=txn.abort_keeps_sent_batches())
                while not self.force_close and (self._txn_pending() or self.client.has_in_flight()):
                    self._run_once_safely()
            if self.force_close:
                self.accumulator.abort_incomplete_batches(
                    ProducerClosedError("the producer was closed forcefully before these records were sent")
                )
            if txn is not None and txn.is_transactional:
                # nothing is sent any more: no transactional call may wait for it (e.g. an InitProducerId
                # being retried, which a close does not wait for, as in Java)
                txn.close(forced=self.force_close)
        except BaseException as e:  # noqa: B902 - whatever ends the thread must not end it silently
            self._die(e)
        finally:
            self.expiry_log.flush()
            self.client.close()
            log.debug("sender thread stopped")

    def _die(self, cause: BaseException) -> None:
        """An error escaped the loop (``_run_once_safely`` carries on after an Exception; this is anything
        else, or a failure outside an iteration): the thread ends, so the producer turns fatal. send(),
        flush() and close() raise NetworkThreadDiedError (``fatal_error``), every record not acknowledged fails
        with it, a transactional call waiting for its result ends with it, a send() waiting for metadata too."""
        error = NetworkThreadDiedError(
            f"the producer's network thread died of {type(cause).__name__}: {cause}; the producer cannot send "
            "any more: close it and create a new one")
        error.__cause__ = cause
        log.error("the producer's network thread died; records not yet acknowledged fail, and the producer can "
                  "only be closed", exc_info=cause)
        self.died_error = error
        self.running = False
        self.fatal_error = error  # (send() raises it; the compiled send()'s gate closes)
        steps = (
            self.accumulator.close,  # no record is queued from now on (appends check under the lock)
            lambda: self.accumulator.abort_incomplete_batches(error),  # queued and in flight
            self._fail_transaction_calls,
            self.metadata.close,  # wakes send()s waiting for metadata: they find fatal_error
        )
        for step in steps:
            try:
                step()
            except BaseException:  # noqa: B902 - each step is tried: nothing may be left waiting
                log.error("while failing the records of the dead network thread", exc_info=True)

    def _fail_transaction_calls(self) -> None:
        txn = self.txn
        error = self.died_error
        if txn is not None and txn.is_transactional and error is not None and not txn.has_fatal_error():
            txn._transition_to_fatal_error(error)  # (the waiting commit/abort/init call ends with it)

    def _txn_pending(self) -> bool:
        """What a closing producer still owes the coordinator: the requests of an ongoing transaction."""
        return self.txn is not None and self.txn.is_transactional and self.txn.has_pending_transaction_requests()

    def _run_once_safely(self) -> None:
        try:
            self.run_once()
        except Exception as e:
            self._log_loop_error(e)
            # the iteration did not get to it: records still fail at delivery.timeout.ms (an error that
            # recurs in every iteration must not keep them pending for ever)
            try:
                self._fail_expired_batches(self.clock.monotonic_ms())
            except Exception as expiry_error:
                self._log_loop_error(expiry_error)
            # avoid a hot loop on a persistent bug (Condition.wait needs its lock held)
            pause = threading.Condition()
            with pause:
                self.clock.wait(pause, _ERROR_PAUSE_MS)

    def _log_loop_error(self, e: Exception) -> None:
        """Log an unexpected error of a sender iteration: with its traceback the first time; the same error
        (type, message and where it was raised) again only once per REPEATED_ERROR_LOG_INTERVAL_S, with how
        often it recurred meanwhile (a persistent bug would otherwise write a traceback per iteration)."""
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = (tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb is not None else None
        key = (type(e), str(e), where)
        now = self.clock.monotonic_ms()
        if key == self._loop_error_key:
            self._loop_error_repeats += 1
            if now - self._loop_error_logged_ms < REPEATED_ERROR_LOG_INTERVAL_S * 1000.0:
                return
            log.error("unexpected error in the kproducer sender thread (%s: %s), %d times in the last %.0f s; "
                      "it carries on", type(e).__name__, e, self._loop_error_repeats,
                      (now - self._loop_error_logged_ms) / 1000.0, exc_info=e)
        else:
            log.error("unexpected error in the kproducer sender thread; it carries on (the same error again is "
                      "logged at most once per %.0f s)", REPEATED_ERROR_LOG_INTERVAL_S, exc_info=e)
            self._loop_error_key = key
        self._loop_error_logged_ms = now
        self._loop_error_repeats = 0

    def initiate_close(self) -> None:
        """Stop accepting records and drain what is queued."""
        self.accumulator.close()
        self.running = False
        self.wakeup()

    def force_stop(self) -> None:
        self.force_close = True
        txn = self.txn
        if txn is not None and txn.is_transactional:
            txn.close(forced=True)  # a thread waiting in commit_transaction() fails now, not at max.block.ms
        self.initiate_close()

    def wakeup(self) -> None:
        self.client.wakeup()

    # -- one iteration ---------------------------------------------------------------------------

    def run_once(self) -> None:
        # (each step's cheap test is made here, not in a call: at a low rate every iteration is mostly these
        # tests, and each call the network thread makes costs it a cache-cold frame, docs/design.md, "Cold calls")
        if self.client.pending_authentication_failures:
            self._fail_batches_on_authentication_failure()
        clock = self.clock
        now = clock.monotonic_ms()
        metrics = self.metrics
        if now >= metrics.next_report_ms:  # statistics.interval.ms (inf without a stats_cb)
            metrics.maybe_report(now)
            now = clock.monotonic_ms()
        txn = self.txn
        # (the idempotent producer with its producer id and no reset pending has no coordinator business)
        if txn is not None and (txn.is_transactional or txn.reset_required or not txn.has_producer_id()):
            if self._maybe_handle_producer_id():
                # still bound every record's wait by delivery.timeout.ms (e.g. no broker gives us an id)
                self._fail_expired_batches(clock.monotonic_ms())
                return
            now = clock.monotonic_ms()
        timeout = min(self.send_producer_data(now), max(0.0, metrics.next_report_ms - now))
        # published before the wait and withdrawn after it, before the next iteration looks at the queues: a
        # batch opened meanwhile is either seen by that iteration or woken for (wakeup_for_new_batch)
        self.poll_until_ms = now + timeout
        try:
            self.client.poll(timeout, now)
        finally:
            self.poll_until_ms = float("inf")

    def wakeup_for_new_batch(self, created_ms: float, full: bool) -> None:
        """An append opened a batch at ``created_ms`` (``full``: its partition has a sendable batch now). Java
        wakes the sender for every new batch, so that it learns when the batch is due; the wakeup costs an
        iteration that only finds out when to wake up next. When nothing makes the batch sendable before its
        linger.ms is up, the thread's current wait (``poll_until_ms``) is left alone if it ends no later than
        that (the iteration after it finds the batch), else made to end then (a timer, Linux) or, without a
        timer, ended now as in Java."""
        acc = self.accumulator
        linger = acc.linger_ms
        if full or linger <= 0 or acc.sends_at_once():
            self.client.wakeup()
        elif created_ms + linger < self.poll_until_ms:
            if self._timed_wakeup:  # the wait ends when the batch is due, not now
                self.client.wakeup_at(created_ms + linger)
            else:
                self.client.wakeup()

    def _maybe_handle_producer_id(self) -> bool:
        """Idempotence/transactions housekeeping before producing. True when this iteration was spent
        on a producer-id or transactional request."""
        txn = self.txn
        assert txn is not None
        if txn.reset_required:
            queued = self.accumulator.queued_batches_list()
            if txn.maybe_reset(not self._has_in_flight_produce(), queued):
                log.info("idempotent producer id reset; %d queued batches will be re-sequenced", len(queued))
        if not txn.is_transactional:
            if txn.has_producer_id():
                return False  # (InitProducerId is the idempotent producer's only coordinator request)
            if txn.has_abortable_error():
                self._handle_refused_producer_id(txn)
            txn.request_producer_id_if_needed()
        return self._maybe_send_and_poll_transactional_request(txn)

    def _handle_refused_producer_id(self, txn: TransactionManager) -> None:
        """The idempotent producer's InitProducerId was refused (CLUSTER_AUTHORIZATION_FAILED: KIP-679, a principal
        that may Write no topic; or TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as Java's
        ``Sender.shouldHandleAuthorizationError``: the queued records fail with that error, the manager goes back to
        UNINITIALIZED and asks again, so that the same producer delivers once the ACL is added. Unlike Java, which
        asks again at once, the next InitProducerId waits out the KIP-580 backoff (retry.backoff.ms doubling per
        refusal up to retry.backoff.max.ms) as its retries do: no loop at the broker's round trip."""
        error = txn.last_error or KafkaError("InitProducerId was refused")
        refusals = txn.init_refusals
        now = self.clock.monotonic_ms()
        delay = self.accumulator.retry_backoff.backoff(max(0, refusals - 1))

        def tell(batches: List[ProducerBatch]) -> None:
            txn.handle_aborted_batches(batches, error)  # (as every failed batch, through the manager)

        # (nothing is in flight: a producer without a producer id sends no records)
        aborted = self.accumulator.abort_undrained_batches(error, before_failing=tell)
        if refusals <= 1:
            log.warning("the broker refused the idempotent producer a producer id: %s; %d queued batches fail, and "
                        "it asks again after retry.backoff.ms, doubling up to retry.backoff.max.ms (the principal "
                        "needs IdempotentWrite on the cluster or Write on a topic)", error, len(aborted))
            if isinstance(error, KafkaError):
                self.client.report_error(error)  # (error_cb: once per run of refusals)
        else:
            log.debug("InitProducerId refused again (%d times): %s; %d queued batches fail; asking again in "
                      "%.0f ms", refusals, error, len(aborted), delay)
        txn.transition_to_uninitialized(now + delay)

    # -- coordinator requests (transactions) ----------------------------------------------------------

    def _maybe_send_and_poll_transactional_request(self, txn: TransactionManager) -> bool:
        """Send the next coordinator request if one is due (Java's Sender.maybeSendAndPollTransactionalRequest),
        for a transactional producer, and the idempotent producer's InitProducerId. True when this sender
        iteration was spent on it."""
        client = self.client
        acc = self.accumulator
        now = self.clock.monotonic_ms()
        if txn.has_in_flight_request():
            client.poll(self.retry_backoff_ms, now)
            return True
        if txn.has_fatal_error():
            error = txn.last_error or KafkaError("fatal transaction error")
            if not self._fatal_reported:
                self._fatal_reported = True
                if not txn.is_transactional:
                    self.fatal_error = error  # the idempotent producer ends: send() raises it (error_cb hears it)
                elif isinstance(error, KafkaError):
                    client.report_error(error)  # (error_cb)
            if acc.has_undrained():
                acc.abort_undrained_batches(error)
            client.poll(self.retry_backoff_ms, now)
            return True
        if (txn.has_abortable_error() or txn.is_aborting()) and acc.has_undrained():
            # nothing more of this transaction is sent: fail what is still queued (without an epoch bump,
            # a batch awaiting its retry is sent still, before EndTxn)
            acc.abort_undrained_batches(txn.last_error or TransactionAbortedError(
                "the transaction is being aborted; this record was not sent"),
                keep_sequenced=txn.abort_keeps_sent_batches())
        retry_at = txn.peek_retry_at()
        if retry_at > now:
            # back off (as Java's sender sleeps), but wake up when the retry is due: nothing else may
            # (with no records queued, the sender's own poll could sleep for request.timeout.ms); and in time to
            # expire queued records (run_once does)
            client.poll(min(retry_at - now, max(0.0, acc.next_batch_expiry_ms - now)), now)
            return True
        handler = txn.next_request(acc.has_incomplete())
        if handler is None:
            return False
        key = handler.coordinator_key()
        node: Optional[int]
        if key is None:
            node = client.least_loaded_node(now)
        else:
            node = txn.coordinator(key)
            if node is None:
                txn.lookup_coordinator(key)
                txn.retry(handler, 0.0)
                return True
            address = txn.coordinator_address(node)
            if address is not None:
                client.learn_node_address(node, *address)
        if node is None or not client.ready(node, now):
            if key is not None and node is not None and client.states.is_blacked_out(node, now):
                # the coordinator cannot be reached (Java's maybeFindCoordinatorAndRetry): it may have moved
                log.debug("%s: coordinator %s unreachable; looking it up again", handler.name, node)
                txn.forget_coordinator(key)
                txn.lookup_coordinator(key)
            txn.retry(handler, 0.0)
            client.poll(self.retry_backoff_ms if node is None else min(50.0, self.retry_backoff_ms), now)
            return True
        if key is not None and key.type is CoordinatorType.TRANSACTION and client.supports(node, m.INIT_PRODUCER_ID):
            # KIP-360: can the transaction coordinator bump our epoch (InitProducerId v3+)?
            txn.note_init_producer_id_version(client.api_version(node, m.INIT_PRODUCER_ID))
        try:
            # (the manager decides how high: transactions v2 needs EndTxn v5 / TxnOffsetCommit v5)
            version = client.api_version(node, handler.api, handler.max_version())
        except UnsupportedVersionError as e:
            # an older broker without this API (or a version of it we speak): fatal, as in Java
            log.error("%s cannot be sent to node %s: %s", handler.name, node, e)
            txn.fail_request(handler, e if txn.is_transactional else UnsupportedVersionError(
                f"the idempotent producer needs a producer id, but {e.message}; set enable.idempotence=false "
                "to produce to this broker"))
            return True
        txn.set_in_flight(handler)
        handler.attempts += 1
        log.debug("sending %s to node %s (attempt %d)", handler.name, node, handler.attempts)
        client.send(ClientRequest(node, handler.api, handler.build(),
                                  lambda resp: self._handle_transactional_response(txn, handler, resp), now,
                                  self.request_timeout_ms, version=version), now)
        client.poll(self.request_timeout_ms, now)
        return True

    def _handle_transactional_response(self, txn: TransactionManager, handler: TxnRequestHandler,
                                       resp: ClientResponse) -> None:
        txn.set_in_flight(None)
        if handler.api is m.INIT_PRODUCER_ID:
            # KIP-580: retry.backoff.ms doubling per attempt up to retry.backoff.max.ms, with jitter
            retry_at = resp.received_ms + self.accumulator.retry_backoff.backoff(handler.attempts - 1)
        else:
            retry_at = resp.received_ms + self.retry_backoff_ms
        if resp.disconnected or resp.body is None:
            log.debug("%s: no answer (%s); retrying", handler.name,
                      "timed out" if resp.timed_out else "disconnected")
            key = handler.coordinator_key()
            if key is not None:
                txn.forget_coordinator(key)
            txn.retry(handler, retry_at)
            return
        try:
            outcome = txn.handle_response(handler, resp.body)
        except Exception as e:  # a bug must not wedge the transaction: fail it visibly
            log.exception("error handling the %s response", handler.name)
            txn.fail_request(handler, e)
            return
        log.debug("%s answered: %s", handler.name, outcome.value)
        if outcome is Outcome.RETRY or outcome is Outcome.FIND_COORDINATOR:
            if handler.api is m.INIT_PRODUCER_ID and not txn.is_transactional:  # (records wait for it: say why)
                log.warning("InitProducerId failed with %s; retrying in %.0f ms", error_for_code(
                    resp.body["error_code"]), retry_at - resp.received_ms)
            else:
                log.debug("%s: %s; retrying", handler.name, outcome.value)
            txn.retry(handler, retry_at)
        self.wakeup()

    def _fail_batches_on_authentication_failure(self) -> None:
        """A broker refused our credentials or TLS settings: its queued batches cannot be delivered with
        these settings, so fail them now rather than at delivery.timeout.ms (every batch, while the
        idempotent producer still waits for a producer id)."""
        failures = self.client.take_authentication_failures()
        if not failures:
            return
        error = next(iter(failures.values()))
        txn = self.txn

        def tell(batches: List[ProducerBatch]) -> None:
            # (as every failed batch, through the transaction manager: an open transaction becomes abortable)
            if txn is not None:
                txn.handle_aborted_batches(batches, error)

        if txn is not None and not txn.is_transactional and not txn.has_producer_id():
            aborted = self.accumulator.abort_undrained_batches(error, before_failing=tell)
        else:
            cluster = self.metadata.cluster
            partitions = {tp for node in failures for tp in cluster.partitions_for_node(node)}
            aborted = self.accumulator.abort_undrained_batches(error, partitions, before_failing=tell) \
                if partitions else []
        if aborted:
            self.authentication_failures += 1
            self.last_authentication_error = error
            log.error("failed %d queued batches: %s", len(aborted), error)

    def _has_in_flight_produce(self) -> bool:
        return any(self._in_flight_batches.values())

    def send_producer_data(self, now: float) -> float:
        """Send every sendable batch; returns how long the next poll may wait."""
        cluster = self.metadata.cluster
        acc = self.accumulator
        result = acc.ready(cluster, now)
        if result.ready_nodes or result.unknown_leader_topics:
            ready_nodes, not_ready_timeout = self._sendable_nodes(result, now)
        else:
            ready_nodes, not_ready_timeout = set(), float("inf")
        batches = acc.drain(cluster, ready_nodes, self.max_request_size, now) if ready_nodes else {}
        timeout_ms = acc.delivery_timeout_ms
        for node_batches in batches.values():
            for b in node_batches:
                self._in_flight_batches.setdefault(b.tp, []).append(b)
                if b.created_ms + timeout_ms < self._next_in_flight_expiry:
                    self._next_in_flight_expiry = b.created_ms + timeout_ms
                if self.guarantee_message_order:
                    acc.mute(b.tp)
        expired = now >= acc.next_batch_expiry_ms or now >= self._next_in_flight_expiry
        if expired or self.expiry_log.unlogged:
            self._fail_expired_batches(now)
        timeout = min(result.next_ready_check_delay_ms, not_ready_timeout, acc.next_batch_expiry_ms - now,
                      self._next_in_flight_expiry - now)
        for node, node_batches in batches.items():
            # a batch drained above may have just expired: it is complete, so it is not sent (nothing else
            # completes a batch between its drain and its request)
            live = [b for b in node_batches if not b.is_done()] if expired else node_batches
            if not live:
                continue
            try:
                self._send_produce_request(node, live, now)
            except Exception as e:  # e.g. the broker supports no usable Produce version
                if isinstance(e, UnsupportedVersionError):  # an older broker: expected, no traceback
                    log.error("cannot send a produce request to node %s: %s", node, e)
                else:
                    log.exception("could not send a produce request to node %s", node)
                for b in live:
                    if isinstance(e, KafkaError) and not e.retriable:
                        self._fail_batch(b, e, False)  # e.g. UnsupportedVersionError: retrying cannot help
                    else:
                        self._complete_batch(b, NetworkError.code, -1, -1, -1,
                                             f"could not send the request to node {node}: {e}", now)
        if ready_nodes and acc.left_behind:  # (else the drain emptied their partitions: see _after_send_timeout)
            timeout = min(timeout, self._after_send_timeout(cluster, now, ready_nodes))
        linger = acc.linger_ms
        if timeout > linger > 0 and not self._timed_wakeup and self.client.has_in_flight():
            # waiting for a response, with no timer for new batches: wake up after linger.ms at the latest, so
            # that a batch opened during the wait (due no sooner) needs no wakeup of its own
            # (wakeup_for_new_batch); the response usually comes first and ends the wait
            timeout = linger
        return max(0.0, timeout)

    def _after_send_timeout(self, cluster: Cluster, now: float, sent_to: Set[int]) -> float:
        """How long the poll after sending to ``sent_to`` may wait. Java polls with 0 here, so that the next
        iteration sends whatever else is ready at once; usually nothing is (the node is at max.in.flight, or the
        other batches are lingering), and that iteration cost about as much as the one that sent. So the
        accumulator is asked again now, as that iteration would first: 0 while a ready node can take another
        request; else until the next batch is due, a throttle ends, or a connection may be retried (a response,
        a new or full batch and a wakeup end the poll sooner). When none of ``sent_to`` can take another request
        now (each at max.in.flight: the usual case under load), the answer is known without asking: the
        partitions of those nodes wait for a response, which ends the poll, and for every other partition
        the timeout computed before sending stands (inf is returned)."""
        acc = self.accumulator
        if not acc.left_behind:
            # the drain emptied the partitions of ``sent_to``: none of them has a batch to time, and for every
            # other partition the timeout computed before sending stands (a batch opened since arms its own timer
            # or wakes the thread: wakeup_for_new_batch). (send_producer_data makes this test before the call.)
            return float("inf")
        is_ready = self.client.is_ready
        for node in sent_to:
            if is_ready(node, now):
                break
        else:
            return float("inf")
        again = acc.ready(cluster, now)
        nodes, not_ready_timeout = self._sendable_nodes(again, now)
        return 0.0 if nodes else min(again.next_ready_check_delay_ms, not_ready_timeout)

    def _sendable_nodes(self, result: ReadyCheckResult, now: float) -> Tuple[Set[int], float]:
        """Of an accumulator ready() result: the ready nodes that can take a request now (connecting to those
        that may connect), and how long until another of them may (a throttle, a reconnect backoff); metadata
        is requested for the topics whose leader is unknown (the network client's poll waits no longer)."""
        for topic in result.unknown_leader_topics:
            self.metadata.request_update_for_topic(topic)
        client = self.client
        nodes = set()
        wait = float("inf")
        for node in result.ready_nodes:
            if client.ready(node, now):
                nodes.add(node)
            else:
                wait = min(wait, client.poll_delay_ms(node, now))
        return nodes, wait

    def _fail_expired_batches(self, now: float) -> None:
        """Fail queued and in-flight batches older than delivery.timeout.ms."""
        acc = self.accumulator
        expired = acc.expired_batches(now)
        expired_in_flight = self._expired_in_flight_batches(now) if now >= self._next_in_flight_expiry else []
        expiry_log = self.expiry_log
        for b in expired:
            expiry_log.expired(b, expiry_reason(b, self.metadata, self.client, False))
            self._fail_batch(b, KafkaTimeoutError(
                f"Expiring {b.record_count} record(s) for {b.topic}-{b.partition}: "
                f"{now - b.created_ms:.0f} ms has passed since batch creation (delivery.timeout.ms="
                f"{acc.delivery_timeout_ms:.0f}); "
                + ("the batch was never sent" if b.attempts == 0 else
                   f"it was waiting to be retried after {b.attempts} failed attempt(s)")), b.attempts > 0)
        for b in expired_in_flight:
            expiry_log.expired(b, expiry_reason(b, self.metadata, self.client, True))
            self._fail_batch(b, KafkaTimeoutError(
                f"Expiring {b.record_count} record(s) for {b.topic}-{b.partition}: "
                f"{now - b.created_ms:.0f} ms has passed since batch creation (delivery.timeout.ms="
                f"{acc.delivery_timeout_ms:.0f}) while the batch was in flight"), True)
        expiry_log.maybe_log(now)

    def _expired_in_flight_batches(self, now: float) -> List[ProducerBatch]:
        """Take the in-flight batches past delivery.timeout.ms off the in-flight lists (those not done yet are
        returned, to be failed), and find when the next one is due."""
        timeout = self.accumulator.delivery_timeout_ms
        expired = []
        soonest = float("inf")
        for batches in self._in_flight_batches.values():
            while batches and batches[0].has_reached_delivery_timeout(timeout, now):
                b = batches.pop(0)
                if not b.is_done():
                    expired.append(b)
            if batches:
                soonest = min(soonest, batches[0].delivery_deadline(timeout))
        self._next_in_flight_expiry = soonest
        return expired

    # -- produce requests ------------------------------------------------------------------------

    def _send_produce_request(self, node: int, batches: List[ProducerBatch], now: float) -> None:
        by_topic: Dict[str, List[Dict[str, Any]]] = {}
        by_tp: Dict[TopicPartition, ProducerBatch] = {}
        for b in batches:
            by_topic.setdefault(b.topic, []).append({"index": b.partition, "records": b.request_records()})
            by_tp[b.tp] = b
        topic_data = []
        for t, parts in by_topic.items():  # (a loop, not a comprehension: one frame less per request)
            topic_data.append({"name": t, "partition_data": parts})
        txn = self.txn
        body = {
            "transactional_id": txn.transactional_id if txn is not None else None,
            "acks": self.acks,
            "timeout_ms": int(self.request_timeout_ms),
            "topic_data": topic_data,
        }
        # transactions v2: Produce v12, whose leader adds the partition to the transaction (the manager says;
        # only a transactional producer is asked)
        max_version = txn.produce_max_version() if txn is not None and txn.is_transactional else None
        version = self.client.api_version(node, m.PRODUCE, max_version) if max_version is not None else None
        req = ClientRequest(node, m.PRODUCE, body, partial(self._handle_produce_response, by_tp),
                            now, self.request_timeout_ms, expect_response=self.acks != 0, version=version)
        self.client.send(req, now)
        try:
            self.metrics.record_produce_request(node, batches, now)
        except Exception:  # the request is out: a failure here must not fail (and resend) its batches
            log.exception("could not record the metrics of a produce request to node %s", node)

    def _handle_produce_response(self, batches: Dict[TopicPartition, ProducerBatch], resp: ClientResponse) -> None:
        now = resp.received_ms
        if resp.disconnected:
            why = ("the request timed out (request.timeout.ms)" if resp.timed_out
                   else "the connection to the broker was lost")
            code = RequestTimedOutError.code if resp.timed_out else NetworkError.code
            for b in batches.values():
                self._complete_batch(b, code, -1, -1, -1, f"{why} (node {resp.request.node_id})", now)
            return
        if resp.body is None:  # acks=0: done once written
            self._complete_acked([(b, -1, -1) for b in batches.values()])
            return
        self.metrics.record_produce_response(resp.request.node_id, resp.latency_ms,
                                             resp.body.get("throttle_time_ms") or 0, now)
        seen = set()
        hints: Dict[TopicPartition, Tuple[int, int]] = {}
        # batches the broker wrote, completed together (in response order: before any error is handled)
        acked: List[Tuple[ProducerBatch, int, int]] = []
        for topic in resp.body["responses"]:
            name = topic["name"]
            for p in topic["partition_responses"]:
                tp = (name, p["index"])
                found = batches.get(tp)
                if found is None:
                    log.warning("produce response names %s-%s, which the request did not carry", *tp)
                    continue
                seen.add(tp)
                b = found
                if p["error_code"] == NO_ERROR:  # the common case
                    acked.append((b, p["base_offset"], p["log_append_time_ms"]))
                    continue
                if acked:
                    self._complete_acked(acked)
                    acked = []
                if p["error_code"] in _LEADER_HINT_ERRORS:
                    hint = p.get("current_leader")
                    if hint and hint["leader_id"] >= 0 and hint["leader_epoch"] >= 0:
                        hints[tp] = (hint["leader_id"], hint["leader_epoch"])
                msg = p.get("error_message")
                record_errors = p.get("record_errors")
                if record_errors and p["error_code"] != NO_ERROR and self._fail_invalid_records(
                        b, p["error_code"], msg, record_errors, now):
                    continue
                self._complete_batch(b, p["error_code"], p["base_offset"], p["log_append_time_ms"],
                                     p["log_start_offset"], msg, now)
        if acked:
            self._complete_acked(acked)
        if len(seen) != len(batches):
            for tp, b in batches.items():
                if tp not in seen:
                    self._complete_batch(b, NetworkError.code, -1, -1, -1,
                                         "the broker's produce response left this partition out", now)
        if hints:
            self._apply_leader_hints(resp.request.node_id, hints, resp.body.get("node_endpoints") or [], batches)

    def _apply_leader_hints(self, node: int, hints: Dict[TopicPartition, Tuple[int, int]],
                            endpoints: List[Dict[str, Any]], batches: Dict[TopicPartition, ProducerBatch]) -> None:
        """KIP-951 (Java's Sender.handleProduceResponse -> Metadata.updatePartitionLeadership): the broker
        named the partitions' new leaders; use them at once, without waiting for a metadata refresh (one
        is still requested, as in Java). A batch re-queued for a partition whose leader is now another
        broker than the one it was sent to is retried without the retry backoff (Java's
        ProducerBatch.hasLeaderChangedForTheOngoingRetry)."""
        nodes = [Node(e["node_id"], e["host"], e["port"], e.get("rack")) for e in endpoints]
        updated = self.metadata.update_partition_leadership(hints, nodes)
        leaders = self.metadata.cluster.leaders
        for tp, (leader, epoch) in hints.items():
            if tp in updated:
                log.debug("%s-%s: leader moved to broker %s (epoch %s, from the produce response); retrying "
                          "there", tp[0], tp[1], leader, epoch)
            b = batches[tp]
            # (also when an earlier response of the same move updated the leader already)
            if leader != node and leaders.get(tp) == leader and not b.is_done() and not b.in_flight:
                b.retry_backoff_ms = 0.0

    def _fail_invalid_records(self, batch: ProducerBatch, code: int, message: Optional[str],
                              record_errors: List[Dict[str, Any]], now: float) -> bool:
        """KIP-467 (Produce v8+): the broker named the records it refused. Only those fail, each with its
        own message; the batch's other records are retried in a new batch (when retries are left). False
        when this does not apply and the batch is completed as a whole."""
        if batch.is_done() or error_class_for_code(code).retriable:
            return False
        failed: Dict[int, BaseException] = {}
        for e in record_errors:
            index = e["batch_index"]
            if 0 <= index < batch.record_count:
                failed[index] = error_for_code(code, e.get("batch_index_error_message") or message)
        if not failed or len(failed) == batch.record_count or not self._can_retry_records(batch, now):
            return False
        if self.guarantee_message_order:
            self.accumulator.unmute(batch.tp)
        self._remove_in_flight(batch)
        log.warning("produce to %s-%s: the broker refused %d of %d record(s) (%s); retrying the others",
                    batch.topic, batch.partition, len(failed), batch.record_count, next(iter(failed.values())))
        kept = self.accumulator.split_out_failed_records(batch, failed, now)
        self.metrics.record_errors(batch.topic, len(failed))
        if self.txn is not None:
            self.txn.handle_record_errors(batch, kept, len(failed), next(iter(failed.values())),
                                          self.accumulator.queued_batches_list())
        self.metrics.record_retries(batch.topic, batch.record_count - len(failed))
        return True

    def _can_retry_records(self, batch: ProducerBatch, now: float) -> bool:
        return batch.attempts < self.retries and not batch.has_reached_delivery_timeout(
            self.accumulator.delivery_timeout_ms, now)

    def _complete_batch(self, batch: ProducerBatch, error: int, base_offset: int, log_append_time: int,
                        log_start_offset: int, message: Optional[str], now: float) -> None:
        if error == NO_ERROR or error == DuplicateSequenceNumberError.code:
            if error != NO_ERROR:
                # Apache Kafka acknowledges a duplicate with the original offset; some brokers answer 46
                log.debug("duplicate sequence for %s-%s counted as success", batch.topic, batch.partition)
            self._complete_acked([(batch, base_offset, log_append_time)])
            return
        if self.guarantee_message_order:
            self.accumulator.unmute(batch.tp)
        txn = self.txn
        if error == MessageTooLargeError.code and batch.record_count > 1 and not batch.is_done():
            # KIP-126: split and resend in smaller batches
            log.warning("batch of %d records for %s-%s was too large for the broker; splitting it",
                        batch.record_count, batch.topic, batch.partition)
            self._remove_in_flight(batch)
            parts_count = self.accumulator.split_and_reenqueue(batch, now)
            if txn is not None:
                parts = [p for p, _d in (batch.split_into or [])]
                unique = list({id(p): p for p in parts}.values())
                txn.add_split_batches(batch, unique)
            self.metrics.record_split(parts_count - 1)
            return
        exc = error_for_code(error, message)
        if self._can_retry(batch, exc, log_start_offset, now):
            log.warning("produce to %s-%s failed with %s; retrying (attempt %d)",
                        batch.topic, batch.partition, exc.name, batch.attempts + 1)
            self._remove_in_flight(batch)
            self.accumulator.reenqueue(batch, now)
            self.metrics.record_retries(batch.topic, batch.record_count)
        else:
            # a timeout or a lost connection leaves unknown whether the broker wrote the batch
            self._fail_batch(batch, exc, isinstance(exc, (RequestTimedOutError, NetworkError)),
                             adjust_sequences=batch.attempts < self.retries)
        if exc.invalid_metadata:
            self.metadata.request_update()

    def _complete_acked(self, acked: List[Tuple[ProducerBatch, int, int]]) -> None:
        """Complete batches the broker wrote: (batch, base offset, log append time), in response order. The
        transaction manager's, the accumulator's and the buffer pool's locks are taken once for all of them
        (not once per batch), and their successes recorded in one step. A batch done already (it expired
        while in flight) is released, not completed again."""
        unmute = self.accumulator.unmute if self.guarantee_message_order else None
        in_flight_by_tp = self._in_flight_batches
        # (lists built in this loop, not by comprehensions: a frame each, per response)
        batches: List[ProducerBatch] = []
        offsets: List[Tuple[ProducerBatch, int]] = []
        for batch, base, _t in acked:
            if unmute is not None:
                unmute(batch.tp)
            in_flight = in_flight_by_tp.get(batch.tp)
            if in_flight:
                if in_flight[0] is batch:
                    del in_flight[0]
                else:
                    try:
                        in_flight.remove(batch)
                    except ValueError:
                        pass
            batches.append(batch)
            offsets.append((batch, base))
        txn = self.txn
        if txn is not None:
            txn.handle_completed_batches(offsets)
        records = size = 0
        for batch, base, log_append_time in acked:
            if batch.done(base, log_append_time, None):
                records += batch.builder._count  # (batch.record_count, without the property's call)
                size += batch.estimated_size()
        self.accumulator.deallocate_batches(batches)
        if records:
            self.metrics.record_success(records, size)

    def _can_retry(self, batch: ProducerBatch, exc: KafkaError, log_start_offset: int, now: float) -> bool:
        if batch.is_done() or batch.attempts >= self.retries:
            return False
        if batch.has_reached_delivery_timeout(self.accumulator.delivery_timeout_ms, now):
            return False
        if self.txn is not None and batch.has_sequence() and isinstance(exc, _SEQUENCE_ERRORS):
            return self.txn.can_retry(type(exc), batch, log_start_offset)
        return bool(exc.retriable)

    def _remove_in_flight(self, batch: ProducerBatch) -> None:
        lst = self._in_flight_batches.get(batch.tp)
        if lst is not None:
            try:
                lst.remove(batch)
            except ValueError:
                pass

    def _fail_batch(self, batch: ProducerBatch, exc: BaseException, sequence_unknown: bool,
                    adjust_sequences: bool = True) -> None:
        """Complete every record of ``batch`` with ``exc`` and release it. ``sequence_unknown``: the broker
        may have written it; else, with ``adjust_sequences``, later batches of its partition take its
        sequence range."""
        self._remove_in_flight(batch)
        if self.guarantee_message_order:
            self.accumulator.unmute(batch.tp)
        if self.txn is not None:
            unknown = sequence_unknown or not adjust_sequences
            queued = self.accumulator.queued_batches_list() if not unknown else []
            self.txn.handle_failed_batch(batch, exc, unknown, queued)
        if batch.done(-1, -1, exc):
            self.metrics.record_errors(batch.topic, batch.record_count)
            log.debug("failed %d record(s) for %s-%s: %s", batch.record_count, batch.topic, batch.partition, exc)
        self.accumulator.deallocate(batch)
