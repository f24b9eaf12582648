"""The errors kproducer raises: import them from here.

Everything in :mod:`kproducer.protocol.errors` is re-exported: :class:`KafkaError` (the base of all
of them), one class per Kafka broker error code (``NotLeaderOrFollowerError``, ...),
:func:`error_for_code` and friends. This module adds the errors that arise in the client itself;
they have ``code == -1`` and are not broker error codes.

Every error has a ``retriable`` flag: True means retrying the same operation later may succeed.
"""
from __future__ import annotations

from typing import Optional

from .protocol.errors import *  # noqa: F401,F403
from .protocol.errors import AuthenticationError, KafkaError

__all__ = [
    # from kproducer.protocol.errors
    "ErrorSpec",
    "ERROR_TABLE",
    "ERROR_CLASSES",
    "MAX_KNOWN_ERROR_CODE",
    "KafkaError",
    "ProtocolError",
    "AuthenticationError",
    "BrokerResponseError",
    "UnknownKafkaError",
    "error_for_code",
    "error_class_for_code",
    "UnknownServerError",
    "OffsetOutOfRangeError",
    "CorruptMessageError",
    "UnknownTopicOrPartitionError",
    "InvalidFetchSizeError",
    "LeaderNotAvailableError",
    "NotLeaderOrFollowerError",
    "RequestTimedOutError",
    "BrokerNotAvailableError",
    "ReplicaNotAvailableError",
    "MessageTooLargeError",
    "StaleControllerEpochError",
    "OffsetMetadataTooLargeError",
    "NetworkError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "NotCoordinatorError",
    "InvalidTopicError",
    "RecordListTooLargeError",
    "NotEnoughReplicasError",
    "NotEnoughReplicasAfterAppendError",
    "InvalidRequiredAcksError",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidGroupIdError",
    "UnknownMemberIdError",
    "InvalidSessionTimeoutError",
    "RebalanceInProgressError",
    "InvalidCommitOffsetSizeError",
    "TopicAuthorizationFailedError",
    "GroupAuthorizationFailedError",
    "ClusterAuthorizationFailedError",
    "InvalidTimestampError",
    "UnsupportedSaslMechanismError",
    "IllegalSaslStateError",
    "UnsupportedVersionError",
    "TopicAlreadyExistsError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidReplicaAssignmentError",
    "InvalidConfigError",
    "NotControllerError",
    "InvalidRequestError",
    "UnsupportedForMessageFormatError",
    "PolicyViolationError",
    "OutOfOrderSequenceNumberError",
    "DuplicateSequenceNumberError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "InvalidProducerIdMappingError",
    "InvalidTransactionTimeoutError",
    "ConcurrentTransactionsError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationFailedError",
    "SecurityDisabledError",
    "OperationNotAttemptedError",
    "KafkaStorageError",
    "LogDirNotFoundError",
    "SaslAuthenticationFailedError",
    "UnknownProducerIdError",
    "ReassignmentInProgressError",
    "DelegationTokenAuthDisabledError",
    "DelegationTokenNotFoundError",
    "DelegationTokenOwnerMismatchError",
    "DelegationTokenRequestNotAllowedError",
    "DelegationTokenAuthorizationFailedError",
    "DelegationTokenExpiredError",
    "InvalidPrincipalTypeError",
    "NonEmptyGroupError",
    "GroupIdNotFoundError",
    "FetchSessionIdNotFoundError",
    "InvalidFetchSessionEpochError",
    "ListenerNotFoundError",
    "TopicDeletionDisabledError",
    "FencedLeaderEpochError",
    "UnknownLeaderEpochError",
    "UnsupportedCompressionTypeError",
    "StaleBrokerEpochError",
    "OffsetNotAvailableError",
    "MemberIdRequiredError",
    "PreferredLeaderNotAvailableError",
    "GroupMaxSizeReachedError",
    "FencedInstanceIdError",
    "EligibleLeadersNotAvailableError",
    "ElectionNotNeededError",
    "NoReassignmentInProgressError",
    "GroupSubscribedToTopicError",
    "InvalidRecordError",
    "UnstableOffsetCommitError",
    "ThrottlingQuotaExceededError",
    "ProducerFencedError",
    "ResourceNotFoundError",
    "DuplicateResourceError",
    "UnacceptableCredentialError",
    "InconsistentVoterSetError",
    "InvalidUpdateVersionError",
    "FeatureUpdateFailedError",
    "PrincipalDeserializationFailureError",
    "SnapshotNotFoundError",
    "PositionOutOfRangeError",
    "UnknownTopicIdError",
    "DuplicateBrokerRegistrationError",
    "BrokerIdNotRegisteredError",
    "InconsistentTopicIdError",
    "InconsistentClusterIdError",
    "TransactionalIdNotFoundError",
    "FetchSessionTopicIdError",
    "IneligibleReplicaError",
    "NewLeaderElectedError",
    "OffsetMovedToTieredStorageError",
    "FencedMemberEpochError",
    "UnreleasedInstanceIdError",
    "UnsupportedAssignorError",
    "StaleMemberEpochError",
    "MismatchedEndpointTypeError",
    "UnsupportedEndpointTypeError",
    "UnknownControllerIdError",
    "UnknownSubscriptionIdError",
    "TelemetryTooLargeError",
    "InvalidRegistrationError",
    "TransactionAbortableError",
    "InvalidRecordStateError",
    "ShareSessionNotFoundError",
    "InvalidShareSessionEpochError",
    "FencedStateEpochError",
    "InvalidVoterKeyError",
    "DuplicateVoterError",
    "VoterNotFoundError",
    "InvalidRegularExpressionError",
    "RebootstrapRequiredError",
    "StreamsInvalidTopologyError",
    "StreamsInvalidTopologyEpochError",
    "StreamsTopologyFencedError",
    "ShareSessionLimitReachedError",
    "GroupDeletionFailedError",
    "StreamsTopologyDescriptionUpdateFailedError",
    "RecordTooLargeError",
    "NotLeaderForPartitionError",
    # client-side errors
    "KafkaTimeoutError",
    "BufferExhaustedError",
    "ConfigError",
    "ProducerClosedError",
    "SerializationError",
    "KafkaConnectionError",
    "SslAuthenticationError",
    "SecurityProtocolMismatchError",
    "NoBrokersAvailableError",
    "TransactionError",
    "TransactionAbortedError",
    "IllegalStateError",
]


class KafkaTimeoutError(KafkaError):
    """A client-side time limit expired: ``max.block.ms`` while waiting for metadata or buffer space,
    a ``flush()``/``close()`` timeout, or ``delivery.timeout.ms`` for a record that was never
    acknowledged. Retriable: the same operation may succeed later."""

    name = "KAFKA_TIMEOUT"
    retriable = True
    default_message = (
        "Timed out: a client time limit expired (max.block.ms, delivery.timeout.ms, "
        "or a flush()/close() timeout)."
    )


class BufferExhaustedError(KafkaTimeoutError):
    """The record could not get space in ``buffer.memory`` within ``max.block.ms``.

    Give ``size``, ``max_block_ms`` and ``buffer_memory`` (keyword arguments) to have them in the
    message; they are kept as attributes of the same names.
    """

    name = "BUFFER_EXHAUSTED"
    default_message = (
        "Failed to allocate memory within max.block.ms; buffer.memory is full: "
        "increase buffer.memory or max.block.ms, or produce slower"
    )

    size: Optional[int]
    max_block_ms: Optional[int]
    buffer_memory: Optional[int]

    def __init__(
        self,
        message: Optional[str] = None,
        *,
        size: Optional[int] = None,
        max_block_ms: Optional[int] = None,
        buffer_memory: Optional[int] = None,
    ) -> None:
        if not message and size is not None and max_block_ms is not None and buffer_memory is not None:
            message = (
                f"Failed to allocate {size} bytes within max.block.ms={max_block_ms} ms; "
                f"buffer.memory={buffer_memory} is full: increase buffer.memory or max.block.ms, "
                "or produce slower"
            )
        super().__init__(message)
        self.size = size
        self.max_block_ms = max_block_ms
        self.buffer_memory = buffer_memory


class ConfigError(KafkaError, ValueError):
    """A producer setting is unknown, has a bad value, or conflicts with another setting."""

    name = "CONFIG_ERROR"
    default_message = "Invalid producer configuration: check the setting names and values."


class ProducerClosedError(KafkaError):
    """The producer was used after ``close()``."""

    name = "PRODUCER_CLOSED"
    default_message = (
        "The producer is closed: close() was called, so it cannot send or flush; create a new producer."
    )


class SerializationError(KafkaError, TypeError):
    """A key or value could not be turned into bytes (or the serializer raised)."""

    name = "SERIALIZATION_ERROR"
    default_message = (
        "Could not serialize the record: keys and values must be bytes (or None) "
        "unless a key/value serializer is configured."
    )


class KafkaConnectionError(KafkaError):
    """A broker could not be reached, or the connection to it was lost. Retriable."""

    name = "CONNECTION_ERROR"
    retriable = True
    default_message = "Could not connect to the broker, or the connection was lost."


class NoBrokersAvailableError(KafkaConnectionError):
    """None of the brokers (``bootstrap.servers`` or known from metadata) could be reached."""

    name = "NO_BROKERS_AVAILABLE"
    default_message = (
        "No broker could be reached: check bootstrap.servers (host:port), that the brokers are "
        "running, and that the network allows the connection."
    )


class TransactionError(KafkaError):
    """The transactional API was used in the wrong order or state, e.g. ``begin_transaction()``
    before ``init_transactions()``, or a transactional call on a producer without
    ``transactional.id``."""

    name = "TRANSACTION_ERROR"
    default_message = (
        "Transactional API misuse: the call is not allowed in the producer's current transaction "
        "state (e.g. begin_transaction() called before init_transactions())."
    )


class IllegalStateError(KafkaError):
    """The producer is in a state that does not allow the operation (an internal invariant broke,
    or the producer failed fatally and must be closed)."""

    name = "ILLEGAL_STATE"
    default_message = "The producer is in a state that does not allow this operation."


class TransactionAbortedError(TransactionError):
    """The record belonged to a transaction that was aborted before the record was sent."""

    name = "TRANSACTION_ABORTED"
    default_message = "The transaction was aborted before this record was sent."


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake with a broker failed: its certificate did not verify (unknown CA, hostname
    mismatch, expired), the broker refused ours, or the two sides share no protocol version or cipher.
    The message names the broker and OpenSSL's reason."""

    name = "SSL_AUTHENTICATION_FAILED"
    default_message = "The TLS handshake with the broker failed: check the ssl.* settings."


class SecurityProtocolMismatchError(SslAuthenticationError):
    """One side of a connection speaks TLS and the other does not: ``security.protocol`` does not match
    the broker's listener (SSL or SASL_SSL against a plaintext port, or the reverse)."""

    name = "SECURITY_PROTOCOL_MISMATCH"
    default_message = (
        "The broker's listener and security.protocol disagree about TLS: check security.protocol."
    )
