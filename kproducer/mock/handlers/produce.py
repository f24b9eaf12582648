"""Produce (key 0) on a mock broker.

Each partition's records must be exactly one RecordBatch v2. The batch header and the CRC are checked
(records are decoded only when the cluster validates records), then the producer's sequence and
epoch, then the batch is appended as raw bytes with its base offset rewritten.

A transactional batch needs its partition in the producer's transaction. Before v12 the client added it
(AddPartitionsToTxn); otherwise the answer is, as Apache Kafka 4.1's verification answers, TRANSACTION_ABORTABLE
(v11) or INVALID_TXN_STATE. From v12 (transactions v2, KIP-890) the leader adds it itself, as Kafka does: a batch
of an epoch older than the partition knows is INVALID_PRODUCER_EPOCH, the coordinator's refusal is the answer
(INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH for a fenced epoch), and a producer the partition has no
batches of must start at sequence 0 (OUT_OF_ORDER_SEQUENCE_NUMBER).
"""
from __future__ import annotations

from typing import List, Optional

from ...protocol.errors import (
    NO_ERROR,
    CorruptMessageError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTimestampError,
    InvalidTxnStateError,
    MessageTooLargeError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    ProtocolError,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
)
from ...protocol.records import (
    CRC_COVERAGE_OFFSET,
    MAGIC,
    MAGIC_OFFSET,
    RecordDecodeError,
    crc32c,
    read_batch_header,
    read_batches,
)
from ..acl import produce_refusal
from ..context import BrokerContext
from ..request_channel import Request
from ..results import CLOSE_CONNECTION, DEFERRED, NO_RESPONSE, Body, Result

#: acks=-1 (all in-sync replicas), 0 (no response), 1 (the leader)
VALID_ACKS = (-1, 0, 1)
NO_ACKS = 0
ALL_ACKS = -1
#: the first Produce version whose NOT_LEADER_OR_FOLLOWER answers carry the new leader (KIP-951)
LEADER_HINTS_VERSION = 10
#: from this Produce version the client waits out a quota throttle itself (KIP-219); before, the broker
#: holds the response back
CLIENT_THROTTLE_VERSION = 6
#: from this version a partition not in the transaction is TRANSACTION_ABORTABLE (KIP-890 part 1), before
#: INVALID_TXN_STATE
TRANSACTION_ABORTABLE_VERSION = 11
#: from this version the leader adds a transactional batch's partition to the transaction (KIP-890 part 2)
IMPLICIT_ADD_VERSION = 12


def handle_produce(ctx: BrokerContext, request: Request) -> Result:
    body = request.body
    assert body is not None
    acks = body["acks"]
    transactional_id = body["transactional_id"]
    responses = []
    any_error = False
    moved: List[int] = []
    hints = request.version >= LEADER_HINTS_VERSION
    for topic_data in body["topic_data"]:
        name = topic_data["name"]
        parts = []
        refused = produce_refusal(ctx.state.authorizer, request, name, transactional_id)  # ACLs
        for pd in topic_data["partition_data"]:
            result = (_result(pd["index"], refused) if refused else
                      _produce_partition(ctx, name, pd["index"], pd["records"], acks, transactional_id,
                                         request.version))
            if result["error_code"]:
                any_error = True
                if result["error_code"] == NotLeaderOrFollowerError.code and hints:
                    # KIP-951 (v10+): where the partition's leader is now, and that broker's endpoint
                    leader = ctx.leader_info(ctx.state.partition(name, pd["index"]))
                    result["current_leader"] = leader
                    if leader["leader_id"] >= 0:
                        moved.append(leader["leader_id"])
            parts.append(result)
        responses.append({"name": name, "partition_responses": parts})
    # a producer_byte_rate quota: answer at once with the throttle and mute the connection that long (KIP-219)
    user = request.session.principal if request.session is not None else None
    throttle = ctx.quotas.record(user, request.header.client_id or "", request.size)
    if acks == NO_ACKS:
        # nothing is sent back; like Kafka, an error closes the connection so the client notices
        if any_error or not throttle:
            return CLOSE_CONNECTION if any_error else NO_RESPONSE
        ctx.respond(request, NO_RESPONSE, throttle_ms=throttle)
        return DEFERRED
    response: Body = {"responses": responses, "throttle_time_ms": throttle}
    if moved and hints:
        response["node_endpoints"] = ctx.node_endpoints(moved)
    if throttle:
        ctx.respond(request, response, throttle_ms=throttle, client_throttles=request.version >= CLIENT_THROTTLE_VERSION)
        return DEFERRED
    return response


def _result(index: int, error: int, base_offset: int = -1, message: Optional[str] = None,
            record_errors: Optional[List[Body]] = None) -> Body:
    return {
        "index": index,
        "error_code": error,
        "base_offset": base_offset,
        "log_append_time_ms": -1,
        "log_start_offset": 0 if error == NO_ERROR else -1,
        "record_errors": record_errors or [],
        "error_message": message,
    }


def _produce_partition(ctx: BrokerContext, topic: str, index: int, data: Optional[bytes], acks: int,
                       transactional_id: Optional[str], version: int) -> Body:
    if acks not in VALID_ACKS:
        return _result(index, InvalidRequiredAcksError.code, message=f"acks must be -1, 0 or 1, not {acks}")
    injected = ctx.faults.take_error("produce")
    if injected:
        return _result(index, injected, message="injected error")
    error, p = ctx.partition_error(topic, index)
    if error:
        return _result(index, error)
    assert p is not None
    if acks == ALL_ACKS:  # as Kafka's Partition.appendRecordsToLeader: before anything is appended
        too_few = ctx.state.not_enough_replicas(p)
        if too_few:
            return _result(index, NotEnoughReplicasError.code, message=too_few)
    if not data:
        return _result(index, InvalidRecordError.code, message="the partition data holds no record batch")
    try:
        header = read_batch_header(data, 0, verify_crc=False)
    except ProtocolError as e:
        magic_problem = len(data) > MAGIC_OFFSET and data[MAGIC_OFFSET] != MAGIC
        return _result(index, InvalidRecordError.code if magic_problem else CorruptMessageError.code, message=str(e))
    if header.size != len(data):
        return _result(index, InvalidRecordError.code,
                       message="Produce v3+ must carry exactly one record batch per partition "
                               f"(batch of {header.size} bytes, {len(data) - header.size} bytes after it)")
    limit, topic_config = ctx.max_message_bytes(topic)
    if header.size > limit:  # a topic's max.message.bytes: no message, as Apache Kafka; the mock's own limit: a hint
        return _result(index, MessageTooLargeError.code, message=None if topic_config else
                       f"batch of {header.size} bytes exceeds max_message_bytes {limit}")
    if crc32c(memoryview(data)[CRC_COVERAGE_OFFSET:]) != header.crc:
        return _result(index, CorruptMessageError.code, message="record batch CRC mismatch")
    if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
        return _result(index, InvalidRecordError.code,
                       message=f"recordCount {header.record_count} does not match lastOffsetDelta "
                               f"{header.last_offset_delta}")
    if header.is_control:
        return _result(index, InvalidRecordError.code, message="clients may not produce control batches")
    if header.is_transactional and transactional_id is None:
        return _result(index, TransactionalIdAuthorizationFailedError.code,
                       message="transactional records need a transactional id")
    if ctx.config.validate_records:
        try:
            read_batches(data, verify_crc=False)
        except Exception as e:  # ProtocolError, or a codec error on a bad compressed section
            # the record at fault when the error names one (Kafka's record_errors), else the first
            batch_index = e.record_index if isinstance(e, RecordDecodeError) else 0
            return _result(index, InvalidRecordError.code, message=f"invalid record: {e}",
                           record_errors=[{"batch_index": batch_index, "batch_index_error_message": str(e)}])
    plog = p.log
    pid = header.producer_id
    transactions_v2 = header.is_transactional and pid >= 0 and version >= IMPLICIT_ADD_VERSION
    if transactions_v2:
        refusal = _add_to_transaction(ctx, topic, index, header.producer_id, header.producer_epoch,
                                      transactional_id)
        if refusal is not None:
            return refusal
    late = _late_timestamps(ctx, topic, index, data, header.max_timestamp)
    if late is not None:
        return late
    with plog.lock:
        if pid >= 0:
            # (Kafka checks it where its verification started, i.e. unless the producer has data of this
            # transaction here already -- and then it has batches)
            if transactions_v2 and header.base_sequence != 0 and not plog.producers.has_batches(pid):
                return _result(index, OutOfOrderSequenceNumberError.code,
                               message=f"Invalid sequence number for producer {pid} in partition {topic}-{index}: "
                                       f"{header.base_sequence} (incoming seq. number). Expected sequence 0 for "
                                       "transactions v2 idempotent producer with no existing state.")
            check = plog.producers.check(pid, header.producer_epoch, header.base_sequence, header.last_sequence)
            if check.error:
                return _result(index, check.error, message=check.message)
            if check.duplicate is not None:
                return _result(index, NO_ERROR, check.duplicate.first_offset)
            if header.is_transactional and pid not in plog.txn_members:
                code = (TransactionAbortableError.code if version >= TRANSACTION_ABORTABLE_VERSION
                        else InvalidTxnStateError.code)
                return _result(index, code,
                               message=f"partition {topic}-{index} is not part of producer {pid}'s transaction")
        base = plog.append(data, header, p.leader_epoch)
    ctx.state.notify_append(topic, index)
    after = ctx.faults.take_after_append_error()
    if after:  # fault injection: written, but the client is told it failed
        return _result(index, after, message="injected error after the batch was appended")
    return _result(index, NO_ERROR, base)


def _late_timestamps(ctx: BrokerContext, topic: str, index: int, data: bytes, max_timestamp: int) -> Optional[Body]:
    """INVALID_TIMESTAMP for a batch with a record stamped further ahead of the broker's clock than the topic's
    ``message.timestamp.after.max.ms`` (as Kafka's LogValidator: the whole batch is refused, each such record
    named in record_errors), else None."""
    now = ctx.clock.wall_ms()
    limit = ctx.timestamp_after_max_ms(topic)
    if max_timestamp - now <= limit:
        return None
    errors: List[Body] = []
    message = ""
    for batch in read_batches(data, verify_crc=False):
        for i, rec in enumerate(batch.records):
            if rec.timestamp - now > limit:
                text = (f"Timestamp {rec.timestamp} of record {i} is out of range: it may be at most "
                        f"{limit} ms after the broker's time {now} (message.timestamp.after.max.ms)")
                message = message or text
                errors.append({"batch_index": i, "batch_index_error_message": text})
    return _result(index, InvalidTimestampError.code, message=message, record_errors=errors) if errors else None


def _add_to_transaction(ctx: BrokerContext, topic: str, index: int, producer_id: int, epoch: int,
                        transactional_id: Optional[str]) -> Optional[Body]:
    """Produce v12+: put the partition in the producer's transaction unless it is there already, as Apache Kafka's
    ReplicaManager does before appending (its verification with TransactionSupportedOperation ADD_PARTITION). The
    refusal to answer, or None."""
    assert transactional_id is not None  # (a transactional batch without one was refused before)
    p = ctx.state.partition(topic, index)
    assert p is not None
    with p.log.lock:  # (not held while the coordinator runs: it takes its lock, then the partition's)
        known_epoch = p.log.producers.epoch_of(producer_id)
        ongoing = p.log.txn_members.get(producer_id) == epoch
    if known_epoch is not None and epoch < known_epoch:
        return _result(index, InvalidProducerEpochError.code,
                       message=f"Producer {producer_id}'s epoch {epoch} in {topic}-{index} is older than the "
                               f"latest epoch {known_epoch}")
    if ongoing:
        return None
    error = ctx.txn.add_implicitly(transactional_id, producer_id, epoch, [(topic, index)])
    return _result(index, error) if error else None
