"""Kafka error table, error classes, lookups and the public kproducer.errors module."""
from __future__ import annotations

import ast
import importlib.util
import pickle
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, FrozenSet, List, Optional, Tuple, Type

import pytest

import kproducer.errors as public
import kproducer.protocol.errors as proto
from kproducer.errors import (
    BufferExhaustedError,
    ConfigError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    ProducerClosedError,
    SerializationError,
    TransactionError,
)
from kproducer.protocol.errors import (
    ERROR_CLASSES,
    ERROR_TABLE,
    MAX_KNOWN_ERROR_CODE,
    BrokerResponseError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    MessageTooLargeError,
    NotCoordinatorError,
    NotLeaderForPartitionError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    ProtocolError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnknownKafkaError,
    UnknownProducerIdError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_class_for_code,
    error_for_code,
)
from kproducer.protocol.schema import SchemaError

# Codes whose Java exception extends RetriableException (directly or through InvalidMetadataException,
# RefreshRetriableException, ...), checked class by class against Apache Kafka's sources.
JAVA_RETRIABLE_CODES = {
    2, 3, 5, 6, 7, 9, 13, 14, 15, 16, 19, 20, 41, 51, 56, 70, 71, 72, 74, 75, 78, 80, 83, 84, 88, 89,
    100, 103, 106, 122, 123, 133,
}

# The category columns, checked against Apache Kafka's client sources (see the module docstring of
# kproducer.protocol.errors for the Java code each one follows).
EXPECTED_CATEGORIES: Dict[str, FrozenSet[int]] = {
    # the Java exception extends InvalidMetadataException
    "invalid_metadata": frozenset({3, 5, 6, 9, 13, 56, 72, 74, 80, 83, 84, 100, 103}),
    # TransactionManager handlers: COORDINATOR_NOT_AVAILABLE || NOT_COORDINATOR -> lookupCoordinator
    "coordinator_moved": frozenset({15, 16}),
    # PRODUCER_FENCED, and INVALID_PRODUCER_EPOCH from the coordinator (turned into ProducerFencedException)
    "fenced": frozenset({47, 90}),
    # transitionToFatalError
    "txn_fatal": frozenset({31, 35, 43, 47, 48, 53, 90}),
    # transitionToAbortableError / abortableErrorIfPossible
    "txn_abortable": frozenset({22, 25, 29, 30, 49, 59, 82, 120}),
    # the Java exception extends AuthenticationException
    "authentication": frozenset({33, 34, 58}),
}
CLASS_FLAGS = ("retriable", "invalid_metadata", "coordinator_moved", "fenced", "txn_fatal", "txn_abortable")

# Every name `from kproducer.errors import ...` gave before kproducer/errors.py computed its __all__
# (its hand-written list, taken from git): each must keep working.
NAMES_EXPORTED_BEFORE = [
    "ErrorSpec", "ERROR_TABLE", "ERROR_CLASSES", "MAX_KNOWN_ERROR_CODE", "KafkaError", "ProtocolError",
    "AuthenticationError", "BrokerResponseError", "UnknownKafkaError", "error_for_code",
    "error_class_for_code", "UnknownServerError", "OffsetOutOfRangeError", "CorruptMessageError",
    "UnknownTopicOrPartitionError", "InvalidFetchSizeError", "LeaderNotAvailableError",
    "NotLeaderOrFollowerError", "RequestTimedOutError", "BrokerNotAvailableError",
    "ReplicaNotAvailableError", "MessageTooLargeError", "StaleControllerEpochError",
    "OffsetMetadataTooLargeError", "NetworkError", "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError", "NotCoordinatorError", "InvalidTopicError",
    "RecordListTooLargeError", "NotEnoughReplicasError", "NotEnoughReplicasAfterAppendError",
    "InvalidRequiredAcksError", "IllegalGenerationError", "InconsistentGroupProtocolError",
    "InvalidGroupIdError", "UnknownMemberIdError", "InvalidSessionTimeoutError",
    "RebalanceInProgressError", "InvalidCommitOffsetSizeError", "TopicAuthorizationFailedError",
    "GroupAuthorizationFailedError", "ClusterAuthorizationFailedError", "InvalidTimestampError",
    "UnsupportedSaslMechanismError", "IllegalSaslStateError", "UnsupportedVersionError",
    "TopicAlreadyExistsError", "InvalidPartitionsError", "InvalidReplicationFactorError",
    "InvalidReplicaAssignmentError", "InvalidConfigError", "NotControllerError", "InvalidRequestError",
    "UnsupportedForMessageFormatError", "PolicyViolationError", "OutOfOrderSequenceNumberError",
    "DuplicateSequenceNumberError", "InvalidProducerEpochError", "InvalidTxnStateError",
    "InvalidProducerIdMappingError", "InvalidTransactionTimeoutError", "ConcurrentTransactionsError",
    "TransactionCoordinatorFencedError", "TransactionalIdAuthorizationFailedError",
    "SecurityDisabledError", "OperationNotAttemptedError", "KafkaStorageError", "LogDirNotFoundError",
    "SaslAuthenticationFailedError", "UnknownProducerIdError", "ReassignmentInProgressError",
    "DelegationTokenAuthDisabledError", "DelegationTokenNotFoundError",
    "DelegationTokenOwnerMismatchError", "DelegationTokenRequestNotAllowedError",
    "DelegationTokenAuthorizationFailedError", "DelegationTokenExpiredError",
    "InvalidPrincipalTypeError", "NonEmptyGroupError", "GroupIdNotFoundError",
    "FetchSessionIdNotFoundError", "InvalidFetchSessionEpochError", "ListenerNotFoundError",
    "TopicDeletionDisabledError", "FencedLeaderEpochError", "UnknownLeaderEpochError",
    "UnsupportedCompressionTypeError", "StaleBrokerEpochError", "OffsetNotAvailableError",
    "MemberIdRequiredError", "PreferredLeaderNotAvailableError", "GroupMaxSizeReachedError",
    "FencedInstanceIdError", "EligibleLeadersNotAvailableError", "ElectionNotNeededError",
    "NoReassignmentInProgressError", "GroupSubscribedToTopicError", "InvalidRecordError",
    "UnstableOffsetCommitError", "ThrottlingQuotaExceededError", "ProducerFencedError",
    "ResourceNotFoundError", "DuplicateResourceError", "UnacceptableCredentialError",
    "InconsistentVoterSetError", "InvalidUpdateVersionError", "FeatureUpdateFailedError",
    "PrincipalDeserializationFailureError", "SnapshotNotFoundError", "PositionOutOfRangeError",
    "UnknownTopicIdError", "DuplicateBrokerRegistrationError", "BrokerIdNotRegisteredError",
    "InconsistentTopicIdError", "InconsistentClusterIdError", "TransactionalIdNotFoundError",
    "FetchSessionTopicIdError", "IneligibleReplicaError", "NewLeaderElectedError",
    "OffsetMovedToTieredStorageError", "FencedMemberEpochError", "UnreleasedInstanceIdError",
    "UnsupportedAssignorError", "StaleMemberEpochError", "MismatchedEndpointTypeError",
    "UnsupportedEndpointTypeError", "UnknownControllerIdError", "UnknownSubscriptionIdError",
    "TelemetryTooLargeError", "InvalidRegistrationError", "TransactionAbortableError",
    "InvalidRecordStateError", "ShareSessionNotFoundError", "InvalidShareSessionEpochError",
    "FencedStateEpochError", "InvalidVoterKeyError", "DuplicateVoterError", "VoterNotFoundError",
    "InvalidRegularExpressionError", "RebootstrapRequiredError", "StreamsInvalidTopologyError",
    "StreamsInvalidTopologyEpochError", "StreamsTopologyFencedError", "ShareSessionLimitReachedError",
    "GroupDeletionFailedError", "StreamsTopologyDescriptionUpdateFailedError", "RecordTooLargeError",
    "NotLeaderForPartitionError", "KafkaTimeoutError", "BufferExhaustedError", "ConfigError",
    "ProducerClosedError", "SerializationError", "KafkaConnectionError", "SslAuthenticationError",
    "SecurityProtocolMismatchError", "NoBrokersAvailableError", "TransactionError",
    "TransactionAbortedError", "IllegalStateError",
]

REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------
# the table


def test_table_has_every_code_from_minus_one_to_the_highest() -> None:
    # Kafka has never left a gap: -1 (UNKNOWN_SERVER_ERROR), 0 (NONE, success, no class), 1..max.
    codes = [spec.code for spec in ERROR_TABLE]
    assert codes == [-1] + list(range(1, MAX_KNOWN_ERROR_CODE + 1))
    assert MAX_KNOWN_ERROR_CODE >= 133
    assert list(ERROR_CLASSES) == codes
    assert 0 not in ERROR_CLASSES


def test_names_and_class_names_are_unique_and_well_formed() -> None:
    names = [spec.name for spec in ERROR_TABLE]
    class_names = [spec.class_name for spec in ERROR_TABLE]
    assert len(set(names)) == len(names)
    assert len(set(class_names)) == len(class_names)
    for spec in ERROR_TABLE:
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", spec.name), spec.name
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*Error", spec.class_name), spec.class_name
        assert not spec.class_name.endswith("ErrorError")
        assert spec.message.strip() == spec.message and spec.message, spec.name


def test_classes_match_the_table_and_are_module_attributes() -> None:
    for spec in ERROR_TABLE:
        cls = getattr(proto, spec.class_name)
        assert ERROR_CLASSES[spec.code] is cls
        assert issubclass(cls, BrokerResponseError) and issubclass(cls, KafkaError)
        assert cls.__name__ == spec.class_name
        assert cls.__module__ == "kproducer.protocol.errors"
        assert (cls.code, cls.name, cls.retriable, cls.default_message) == (
            spec.code,
            spec.name,
            spec.retriable,
            spec.message,
        )
        for flag in CLASS_FLAGS:
            assert getattr(cls, flag) is getattr(spec, flag), (spec.name, flag)
        assert issubclass(cls, proto.AuthenticationError) is spec.authentication, spec.name
        assert spec.class_name in proto.__all__


def test_retriable_set_is_exactly_javas() -> None:
    retriable = {code for code, cls in ERROR_CLASSES.items() if cls.retriable}
    assert retriable == JAVA_RETRIABLE_CODES


@pytest.mark.parametrize("column", sorted(EXPECTED_CATEGORIES))
def test_category_columns_are_exactly_javas(column: str) -> None:
    assert {spec.code for spec in ERROR_TABLE if getattr(spec, column)} == EXPECTED_CATEGORIES[column]


def test_category_columns_agree_with_each_other() -> None:
    for spec in ERROR_TABLE:
        if spec.invalid_metadata or spec.coordinator_moved:
            assert spec.retriable, spec.name  # refresh (metadata or coordinator), then retry
        if spec.fenced:
            assert spec.txn_fatal and not spec.retriable, spec.name
        assert not (spec.txn_fatal and spec.txn_abortable), spec.name
        assert not (spec.retriable and (spec.txn_fatal or spec.txn_abortable)), spec.name


@pytest.mark.parametrize("flag", CLASS_FLAGS[1:])
def test_category_flags_are_readable_from_every_error(flag: str) -> None:
    # False on the bases, the client-side errors and unknown codes; the lookups answer without an instance
    for cls in (KafkaError, BrokerResponseError, ProtocolError, proto.AuthenticationError, UnknownKafkaError,
                KafkaTimeoutError, TransactionError, ConfigError):
        assert getattr(cls, flag) is False, cls
    assert getattr(UnknownKafkaError(4242), flag) is False
    assert getattr(error_class_for_code(MAX_KNOWN_ERROR_CODE + 1), flag) is False
    for code in EXPECTED_CATEGORIES[flag]:
        assert getattr(error_class_for_code(code), flag) is True
        assert getattr(error_for_code(code), flag) is True


def test_category_flags_by_hand() -> None:
    assert NotLeaderOrFollowerError.invalid_metadata and UnknownTopicOrPartitionError.invalid_metadata
    assert not error_class_for_code(75).invalid_metadata  # UNKNOWN_LEADER_EPOCH: only retriable in Java
    assert not error_class_for_code(41).invalid_metadata  # NOT_CONTROLLER
    assert NotCoordinatorError.coordinator_moved and not CoordinatorLoadInProgressError.coordinator_moved
    assert ProducerFencedError.fenced and ProducerFencedError.txn_fatal
    assert InvalidProducerEpochError.fenced
    assert InvalidTxnStateError.txn_fatal and not InvalidTxnStateError.fenced
    assert proto.TransactionAbortableError.txn_abortable and not proto.TransactionAbortableError.txn_fatal
    assert UnknownProducerIdError.txn_abortable and TopicAuthorizationFailedError.txn_abortable
    assert not OutOfOrderSequenceNumberError.txn_fatal and not OutOfOrderSequenceNumberError.txn_abortable

    class MyFenced(ProducerFencedError):
        pass

    assert MyFenced.fenced and MyFenced("x").txn_fatal


# --------------------------------------------------------------------------------------------
# the generated part of protocol/errors.py is in step with ERROR_TABLE


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_errors", REPO / "tools" / "gen_errors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_protocol_errors_py_is_what_the_generator_writes() -> None:
    text = Path(proto.__file__).read_text(encoding="utf-8")
    assert _generator().render(text) == text, "run: python tools/gen_errors.py"


def test_generator_check_mode_from_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gen_errors.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_generator_notices_a_table_edit(tmp_path: Path) -> None:
    gen = _generator()
    text = Path(proto.__file__).read_text(encoding="utf-8")
    edited = text.replace(
        '"Topic authorization failed.",\n        txn_abortable=True,', '"Topic authorization failed.",'
    )
    assert edited != text
    wanted = gen.render(edited)
    assert '"""TOPIC_AUTHORIZATION_FAILED (code 29, not retriable)."""' in wanted
    assert '"""TOPIC_AUTHORIZATION_FAILED (code 29, not retriable; aborts the transaction)."""' in text
    out_of_step = tmp_path / "errors.py"
    out_of_step.write_text(edited, encoding="utf-8")
    assert gen.main(["--check", "--path", str(out_of_step)]) == 1
    assert gen.main(["--path", str(out_of_step)]) == 0
    assert out_of_step.read_text(encoding="utf-8") == wanted
    assert gen.main(["--check", "--path", str(out_of_step)]) == 0


@pytest.mark.parametrize(
    "code, name, cls, retriable",
    [
        (-1, "UNKNOWN_SERVER_ERROR", UnknownServerError, False),
        (3, "UNKNOWN_TOPIC_OR_PARTITION", UnknownTopicOrPartitionError, True),
        (6, "NOT_LEADER_OR_FOLLOWER", NotLeaderOrFollowerError, True),
        (10, "MESSAGE_TOO_LARGE", MessageTooLargeError, False),
        (14, "COORDINATOR_LOAD_IN_PROGRESS", CoordinatorLoadInProgressError, True),
        (16, "NOT_COORDINATOR", NotCoordinatorError, True),
        (29, "TOPIC_AUTHORIZATION_FAILED", TopicAuthorizationFailedError, False),
        (35, "UNSUPPORTED_VERSION", UnsupportedVersionError, False),
        (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", OutOfOrderSequenceNumberError, False),
        (46, "DUPLICATE_SEQUENCE_NUMBER", DuplicateSequenceNumberError, False),
        (47, "INVALID_PRODUCER_EPOCH", InvalidProducerEpochError, False),
        (48, "INVALID_TXN_STATE", InvalidTxnStateError, False),
        (51, "CONCURRENT_TRANSACTIONS", ConcurrentTransactionsError, True),
        (59, "UNKNOWN_PRODUCER_ID", UnknownProducerIdError, False),
        (90, "PRODUCER_FENCED", ProducerFencedError, False),
    ],
)
def test_known_codes_by_hand(code: int, name: str, cls: Type[KafkaError], retriable: bool) -> None:
    assert error_class_for_code(code) is cls
    err = error_for_code(code)
    assert type(err) is cls
    assert (err.code, err.name, err.retriable) == (code, name, retriable)


@pytest.mark.parametrize(
    "code, name, retriable",
    [
        (2, "CORRUPT_MESSAGE", True),
        (5, "LEADER_NOT_AVAILABLE", True),
        (7, "REQUEST_TIMED_OUT", True),
        (8, "BROKER_NOT_AVAILABLE", False),
        (9, "REPLICA_NOT_AVAILABLE", True),
        (13, "NETWORK_EXCEPTION", True),
        (15, "COORDINATOR_NOT_AVAILABLE", True),
        (17, "INVALID_TOPIC_EXCEPTION", False),
        (18, "RECORD_LIST_TOO_LARGE", False),
        (19, "NOT_ENOUGH_REPLICAS", True),
        (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
        (21, "INVALID_REQUIRED_ACKS", False),
        (22, "ILLEGAL_GENERATION", False),
        (41, "NOT_CONTROLLER", True),
        (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False),
        (56, "KAFKA_STORAGE_ERROR", True),
        (74, "FENCED_LEADER_EPOCH", True),
        (75, "UNKNOWN_LEADER_EPOCH", True),
        (78, "OFFSET_NOT_AVAILABLE", True),
        (87, "INVALID_RECORD", False),
        (89, "THROTTLING_QUOTA_EXCEEDED", True),
        (100, "UNKNOWN_TOPIC_ID", True),
        (120, "TRANSACTION_ABORTABLE", False),
        (129, "REBOOTSTRAP_REQUIRED", False),
        (133, "SHARE_SESSION_LIMIT_REACHED", True),
    ],
)
def test_more_codes_against_java(code: int, name: str, retriable: bool) -> None:
    cls = ERROR_CLASSES[code]
    assert (cls.name, cls.retriable) == (name, retriable)


def test_aliases() -> None:
    assert RecordTooLargeError is MessageTooLargeError
    assert NotLeaderForPartitionError is NotLeaderOrFollowerError
    assert ERROR_CLASSES[10] is RecordTooLargeError


def test_a_few_class_names_that_do_not_follow_the_plain_rule() -> None:
    # trailing _ERROR / _EXCEPTION is dropped before adding "Error"
    assert ERROR_CLASSES[-1].__name__ == "UnknownServerError"
    assert ERROR_CLASSES[13].__name__ == "NetworkError"
    assert ERROR_CLASSES[17].__name__ == "InvalidTopicError"
    assert ERROR_CLASSES[56].__name__ == "KafkaStorageError"
    assert ERROR_CLASSES[106].__name__ == "FetchSessionTopicIdError"


# --------------------------------------------------------------------------------------------
# instances, messages, str()


def test_default_message_and_str() -> None:
    err = NotLeaderOrFollowerError()
    assert err.message == NotLeaderOrFollowerError.default_message
    assert err.message.startswith("For requests intended only for the leader, this error indicates")
    assert err.broker_message is None
    assert str(err) == f"[Error 6] NOT_LEADER_OR_FOLLOWER: {err.message}"


def test_broker_message_is_used_when_given() -> None:
    err = error_for_code(29, "Not authorized to access topics: [secret]")
    assert isinstance(err, TopicAuthorizationFailedError)
    assert err.message == "Not authorized to access topics: [secret]"
    assert err.broker_message == "Not authorized to access topics: [secret]"
    assert str(err) == "[Error 29] TOPIC_AUTHORIZATION_FAILED: Not authorized to access topics: [secret]"


@pytest.mark.parametrize("empty", [None, ""])
def test_null_or_empty_broker_message_means_default(empty: Optional[str]) -> None:
    err = error_for_code(3, empty)
    assert err.message == "This server does not host this topic-partition."
    assert isinstance(err, BrokerResponseError) and err.broker_message is None


def test_negative_code_formatting() -> None:
    assert str(error_for_code(-1)) == (
        "[Error -1] UNKNOWN_SERVER_ERROR: The server experienced an unexpected error when processing "
        "the request."
    )


def test_errors_are_raisable_and_catchable_by_base() -> None:
    with pytest.raises(KafkaError) as info:
        raise error_for_code(51)
    assert isinstance(info.value, ConcurrentTransactionsError)
    assert info.value.retriable


def test_pickle_round_trip() -> None:
    for err in (
        NotLeaderOrFollowerError(),
        NotLeaderOrFollowerError("from the broker"),
        UnknownKafkaError(4242, "new"),
        ProtocolError("bad varint"),
        BufferExhaustedError(size=10, max_block_ms=5, buffer_memory=100),
        ConfigError("bad setting"),
    ):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err)
        assert str(back) == str(err)
        assert back.__dict__ == err.__dict__


# --------------------------------------------------------------------------------------------
# unknown codes and code 0


def test_unknown_code() -> None:
    err = error_for_code(9999)
    assert isinstance(err, UnknownKafkaError) and isinstance(err, BrokerResponseError)
    assert err.code == 9999
    assert err.name == "UNKNOWN_CODE_9999"
    assert not err.retriable
    assert "9999" in err.message
    assert str(err).startswith("[Error 9999] UNKNOWN_CODE_9999: ")
    assert error_class_for_code(9999) is UnknownKafkaError
    assert error_class_for_code(MAX_KNOWN_ERROR_CODE + 1) is UnknownKafkaError
    assert error_class_for_code(-2) is UnknownKafkaError


def test_unknown_code_keeps_the_broker_message() -> None:
    err = error_for_code(777, "something new went wrong")
    assert err.message == "something new went wrong"
    assert str(err) == "[Error 777] UNKNOWN_CODE_777: something new went wrong"
    # the class attribute is untouched by instances
    assert UnknownKafkaError.code == -1 and UnknownKafkaError.name == "UNKNOWN_CODE"


def test_code_zero_is_success_not_an_error() -> None:
    with pytest.raises(ValueError, match="NONE"):
        error_for_code(0)
    with pytest.raises(ValueError, match="NONE"):
        error_class_for_code(0)


def test_error_code_classes_cannot_be_redefined() -> None:
    with pytest.raises(TypeError):

        class Duplicate(BrokerResponseError, code=6):  # noqa: F841
            pass

    with pytest.raises(TypeError):

        class NotInTable(BrokerResponseError, code=31337):  # noqa: F841
            pass

    assert ERROR_CLASSES[6] is NotLeaderOrFollowerError


def test_user_subclass_inherits_code() -> None:
    class MyNotLeader(NotLeaderOrFollowerError):
        pass

    err = MyNotLeader("x")
    assert (err.code, err.name, err.retriable) == (6, "NOT_LEADER_OR_FOLLOWER", True)
    assert ERROR_CLASSES[6] is NotLeaderOrFollowerError


# --------------------------------------------------------------------------------------------
# ProtocolError and the client-side errors


def test_protocol_error() -> None:
    err = ProtocolError("truncated INT32 at offset 7")
    assert isinstance(err, KafkaError) and not isinstance(err, BrokerResponseError)
    assert (err.code, err.name, err.retriable) == (-1, "PROTOCOL_ERROR", False)
    assert str(err) == "truncated INT32 at offset 7"
    assert ProtocolError().message == ProtocolError.default_message
    assert ProtocolError not in ERROR_CLASSES.values()


@pytest.mark.parametrize(
    "cls, retriable, bases",
    [
        (KafkaTimeoutError, True, (KafkaError,)),
        (BufferExhaustedError, True, (KafkaTimeoutError,)),
        (ConfigError, False, (KafkaError, ValueError)),
        (ProducerClosedError, False, (KafkaError,)),
        (SerializationError, False, (KafkaError, TypeError)),
        (KafkaConnectionError, True, (KafkaError,)),
        (NoBrokersAvailableError, True, (KafkaConnectionError,)),
        (TransactionError, False, (KafkaError,)),
        (IllegalStateError, False, (KafkaError,)),
    ],
)
def test_client_side_errors(cls: Type[KafkaError], retriable: bool, bases: Tuple[type, ...]) -> None:
    assert all(issubclass(cls, base) for base in bases)
    assert not issubclass(cls, BrokerResponseError)
    assert cls.code == -1
    assert cls.retriable is retriable
    assert re.fullmatch(r"[A-Z][A-Z_]*", cls.name)
    assert cls.name not in {spec.name for spec in ERROR_TABLE}
    err = cls()
    assert err.message == cls.default_message and len(err.message) > 20
    assert str(err) == err.message  # no "[Error -1]" prefix: -1 is UNKNOWN_SERVER_ERROR's code
    assert str(cls("custom")) == "custom"
    assert cls not in ERROR_CLASSES.values()


def test_client_side_error_names_are_distinct() -> None:
    names = [
        cls.name
        for cls in (
            KafkaError,
            ProtocolError,
            KafkaTimeoutError,
            BufferExhaustedError,
            ConfigError,
            ProducerClosedError,
            SerializationError,
            KafkaConnectionError,
            NoBrokersAvailableError,
            TransactionError,
            IllegalStateError,
        )
    ]
    assert len(set(names)) == len(names)


def test_config_and_serialization_errors_are_caught_as_builtin_errors() -> None:
    with pytest.raises(ValueError):
        raise ConfigError("unknown producer setting 'lingr.ms'")
    with pytest.raises(TypeError):
        raise SerializationError()


def test_buffer_exhausted_message() -> None:
    err = BufferExhaustedError(size=1048576, max_block_ms=60000, buffer_memory=33554432)
    assert str(err) == (
        "Failed to allocate 1048576 bytes within max.block.ms=60000 ms; buffer.memory=33554432 is full: "
        "increase buffer.memory or max.block.ms, or produce slower"
    )
    assert (err.size, err.max_block_ms, err.buffer_memory) == (1048576, 60000, 33554432)
    assert isinstance(err, KafkaTimeoutError) and err.retriable
    assert "buffer.memory" in BufferExhaustedError().message
    assert str(BufferExhaustedError("explicit", size=1, max_block_ms=2, buffer_memory=3)) == "explicit"


def test_default_messages_say_what_happened() -> None:
    assert "close" in ProducerClosedError().message
    assert "init_transactions()" in TransactionError().message
    assert "bootstrap.servers" in NoBrokersAvailableError().message
    for setting in ("max.block.ms", "delivery.timeout.ms"):
        assert setting in KafkaTimeoutError().message


# --------------------------------------------------------------------------------------------
# kproducer.errors re-exports


def test_public_module_reexports_everything_from_protocol_errors() -> None:
    for name in proto.__all__:
        assert name in public.__all__, name
        assert getattr(public, name) is getattr(proto, name)
    assert public.NotLeaderOrFollowerError is NotLeaderOrFollowerError
    assert public.error_for_code is error_for_code
    assert public.ERROR_CLASSES is ERROR_CLASSES


def test_public_all_is_complete_and_resolvable() -> None:
    assert len(public.__all__) == len(set(public.__all__))
    for name in public.__all__:
        assert hasattr(public, name), name
    for name in (
        "KafkaTimeoutError",
        "BufferExhaustedError",
        "ConfigError",
        "ProducerClosedError",
        "SerializationError",
        "KafkaConnectionError",
        "NoBrokersAvailableError",
        "TransactionError",
        "IllegalStateError",
    ):
        assert name in public.__all__
    # every exception class defined in either module is exported
    for module in (proto, public):
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, BaseException) and not name.startswith("_"):
                assert name in public.__all__, name


def test_every_name_exported_before_still_imports() -> None:
    assert len(NAMES_EXPORTED_BEFORE) == len(set(NAMES_EXPORTED_BEFORE)) == 161
    assert set(NAMES_EXPORTED_BEFORE) <= set(public.__all__)
    for name in NAMES_EXPORTED_BEFORE:
        namespace: Dict[str, object] = {}
        exec(f"from kproducer.errors import {name}", namespace)
        assert namespace[name] is getattr(public, name)


def test_public_all_is_computed_from_both_modules() -> None:
    assert public.__all__[: len(proto.__all__)] == proto.__all__
    local = [
        name for name, obj in vars(public).items()
        if isinstance(obj, type) and issubclass(obj, KafkaError) and obj.__module__ == public.__name__
    ]
    # and the codec's SchemaError (defined in kproducer.protocol.schema)
    assert public.__all__[len(proto.__all__):] == local + ["SchemaError"]


def test_star_import() -> None:
    namespace: Dict[str, object] = {}
    exec("from kproducer.errors import *", namespace)
    assert namespace["UnknownTopicOrPartitionError"] is UnknownTopicOrPartitionError
    assert namespace["KafkaTimeoutError"] is KafkaTimeoutError
    assert namespace["SchemaError"] is SchemaError
    assert namespace["RecordTooLargeError"] is MessageTooLargeError
    assert "Optional" not in namespace and "_REGISTRY" not in namespace


# --------------------------------------------------------------------------------------------
# no bare error codes outside kproducer/protocol/


def test_no_error_is_code_zero() -> None:
    assert proto.NO_ERROR == 0 and public.NO_ERROR == 0
    assert proto.NO_ERROR not in ERROR_CLASSES
    with pytest.raises(ValueError):
        error_for_code(proto.NO_ERROR)


def _bare_error_codes(source: str, filename: str) -> List[str]:
    """Lines of a source file that write an error code as a number: a response field
    ``"..._error_code": <int>``, an error code constant (``NOT_COORDINATOR = 16``), or a comparison of
    something named ``*error*``/``*err``/``*_code``/``code`` with a number."""
    names = {spec.name for spec in ERROR_TABLE} | {"NONE", "NO_ERROR"}
    found: List[str] = []

    def is_int(node: ast.AST) -> bool:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) is int

    def looks_like_code(node: ast.AST) -> bool:
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            text = str(node.slice.value)
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        else:
            return False
        text = text.lower()
        return "error" in text or text.endswith(("err", "_code")) or text == "code"

    for node in ast.walk(ast.parse(source)):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and str(key.value).endswith("error_code") and is_int(value):
                    found.append(where)
        elif isinstance(node, ast.Assign) and is_int(node.value):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id.lstrip("_") in names:
                    found.append(where)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(looks_like_code(o) for o in operands):
                for o in operands:
                    if is_int(o) or (isinstance(o, (ast.Tuple, ast.Set, ast.List)) and any(map(is_int, o.elts))):
                        found.append(where)
                        break
    return sorted(set(found), key=lambda w: int(w.rsplit(":", 1)[1]))


def test_no_bare_error_codes_outside_the_protocol_package() -> None:
    # error meaning lives in the error table: the mock broker answers with the classes' codes
    # (NotCoordinatorError.code) and NO_ERROR; the client reads codes through the classes and their flags
    protocol = REPO / "kproducer" / "protocol"
    found = [
        hit
        for path in sorted((REPO / "kproducer").rglob("*.py")) if protocol not in path.parents
        for hit in _bare_error_codes(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert found == []


def test_the_bare_error_code_check_finds_them() -> None:
    source = (
        "NOT_COORDINATOR = 16\n"
        "_LEADER_NOT_AVAILABLE = 5\n"
        "def f(error: int, body: Dict[str, int]) -> Dict[str, int]:\n"
        "    if error == 6 or body['error_code'] in (3, 5) or body['x'] > 0:\n"
        "        return {'error_code': 0}\n"
        "    if body['partition_error_code'] != NO_ERROR and len(body) == 2:\n"
        "        return {'partition_error_code': -1, 'error_code': NotCoordinatorError.code}\n"
        "    return {'error_code': NO_ERROR}\n"
    )
    assert _bare_error_codes(source, "f.py") == ["f.py:1", "f.py:2", "f.py:4", "f.py:5", "f.py:7"]
