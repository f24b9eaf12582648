"""Kafka protocol error codes and the exceptions that stand for them.

Every error code a broker can put in a response has a class here, named after the code in CamelCase
with an ``Error`` suffix (``NOT_LEADER_OR_FOLLOWER`` is :class:`NotLeaderOrFollowerError`). Each class
carries the Kafka ``code``, the upper-case Kafka ``name``, Kafka's ``default_message`` and the
category flags below, all copied from its row of :data:`ERROR_TABLE`.

* :func:`error_for_code` turns a response's ``error_code`` (and optional ``error_message``) into an
  exception instance; a code this client does not know gives an :class:`UnknownKafkaError`.
* :func:`error_class_for_code` gives the class, so ``error_class_for_code(code).invalid_metadata``
  answers a category question without making an exception.
* :data:`ERROR_TABLE` is the table the classes are built from: ``(code, name, class_name, retriable,
  message)`` and the category columns, codes -1 and 1..135 with no gaps (0 is ``NONE``, i.e.
  success, and has no class).
* :class:`ProtocolError` is raised by this client for malformed wire data; it has no broker code.
* :data:`NO_ERROR` is code 0 (``NONE``, success). Outside this package, compare error codes with
  ``NO_ERROR`` and the classes' ``code`` (``NotCoordinatorError.code``), never with bare numbers.

Category columns (class attributes of every error; all False on :class:`KafkaError`, so any
kproducer error can be asked, and on :class:`UnknownKafkaError`). What the client does with each,
and where Apache Kafka's Java client (the source of truth) decides it:

``retriable``
    Retrying the same request later may succeed; the producer retries such a batch or request until
    ``delivery.timeout.ms``/its time limit. Java: the exception extends ``RetriableException``
    (``Sender.canRetry``, ``TransactionManager.TxnRequestHandler``: ``instanceof RetriableException``).
``invalid_metadata``
    The client's cluster metadata is stale: request a metadata refresh (and retry, as all of these
    are also retriable). Java: the exception extends ``InvalidMetadataException``; ``Sender.completeBatch``
    calls ``metadata.requestUpdate`` for exactly those. Codes 3, 5, 6, 9, 13 (NETWORK_EXCEPTION), 56
    (KAFKA_STORAGE_ERROR), 72, 74, 80, 83, 84, 100, 103. Not UNKNOWN_LEADER_EPOCH (75) nor
    NOT_CONTROLLER (41): their Java exceptions extend ``RetriableException`` only.
``coordinator_moved``
    The transaction (or group) coordinator must be looked up again (FindCoordinator) before the
    request is retried. Java: every ``TransactionManager`` handler tests ``error ==
    COORDINATOR_NOT_AVAILABLE || error == NOT_COORDINATOR`` and calls ``lookupCoordinator``.
    COORDINATOR_LOAD_IN_PROGRESS is only retriable (same coordinator, try later).
``fenced``
    Another producer with the same ``transactional.id`` (a newer epoch) has fenced this one: the
    producer can only be closed. Java: PRODUCER_FENCED, and INVALID_PRODUCER_EPOCH in a response
    from the transaction coordinator, which every ``TransactionManager`` handler turns into
    ``ProducerFencedException`` and ``fatalError``. Caveat: INVALID_PRODUCER_EPOCH in a *produce*
    response is not fatal in Java (KIP-588: ``InvalidProducerEpochException`` is not in
    ``maybeTransitionToErrorState``'s fatal list, so the transaction becomes abortable).
``txn_fatal``
    Fatal for a transactional producer: the transaction manager enters its fatal state and every
    later transactional call raises this error. Java ``transitionToFatalError`` cases: the fenced
    codes, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE (AddPartitionsToTxn, EndTxn,
    AddOffsetsToTxn), UNSUPPORTED_FOR_MESSAGE_FORMAT (TxnOffsetCommit), and, from
    ``maybeTransitionToErrorState`` (failed produce batches), CLUSTER_AUTHORIZATION_FAILED and
    UNSUPPORTED_VERSION. For a failed *produce* batch Java's fatal list is narrower (31, 35, 53, 90):
    any other error of a batch in a transaction makes the transaction abortable. (Java's
    InitProducerId handler treats 31 and 53 as abortable too.)
``txn_abortable``
    The open transaction must be aborted, after which the producer can go on (Java ``ABORTABLE_ERROR``
    state, ``transitionToAbortableError``): TRANSACTION_ABORTABLE (Java's
    ``TransactionAbortableException``), TOPIC_AUTHORIZATION_FAILED (AddPartitionsToTxn, produce),
    GROUP_AUTHORIZATION_FAILED (FindCoordinator, AddOffsetsToTxn, TxnOffsetCommit), UNKNOWN_MEMBER_ID,
    ILLEGAL_GENERATION and FENCED_INSTANCE_ID (TxnOffsetCommit), UNKNOWN_PRODUCER_ID and
    INVALID_PRODUCER_ID_MAPPING (``abortableErrorIfPossible``: abortable when the broker can bump the
    epoch, InitProducerId v3+, fatal otherwise). ``txn_fatal`` and ``txn_abortable`` never overlap.
``authentication`` (a column of the table only)
    The Java exception extends ``AuthenticationException``; the class derives from
    :class:`AuthenticationError` as well, so ``isinstance(err, AuthenticationError)`` is the test.

The table follows Apache Kafka's ``org.apache.kafka.common.protocol.Errors`` as of Kafka 4.4.
The classes and ``__all__`` below the table are written by ``tools/gen_errors.py`` from it
(``tests/unit/test_errors.py`` runs it in check mode). Only the standard library is imported here;
:mod:`kproducer.errors` re-exports all of it and adds the client-side errors (timeouts,
configuration, closed producer, ...).
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple, Type

__all__ = [
    "ErrorSpec",
    "ERROR_TABLE",
    "MAX_KNOWN_ERROR_CODE",
    "NO_ERROR",
    "KafkaError",
    "ProtocolError",
    "AuthenticationError",
    "BrokerResponseError",
    "UnknownKafkaError",
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
    "ERROR_CLASSES",
    "error_class_for_code",
    "error_for_code",
]


class ErrorSpec(NamedTuple):
    """One row of :data:`ERROR_TABLE`; the category columns are described in the module docstring.

    The category columns default to False, so a row names only the categories its code is in.
    """

    code: int
    name: str
    class_name: str
    retriable: bool
    message: str
    invalid_metadata: bool = False
    coordinator_moved: bool = False
    fenced: bool = False
    txn_fatal: bool = False
    txn_abortable: bool = False
    authentication: bool = False


# fmt: off
ERROR_TABLE: Tuple[ErrorSpec, ...] = (
    ErrorSpec(
        -1, "UNKNOWN_SERVER_ERROR", "UnknownServerError", False,
        "The server experienced an unexpected error when processing the request."
    ),
    ErrorSpec(
        1, "OFFSET_OUT_OF_RANGE", "OffsetOutOfRangeError", False,
        "The requested offset is not within the range of offsets maintained by the server."
    ),
    ErrorSpec(
        2, "CORRUPT_MESSAGE", "CorruptMessageError", True,
        "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted "
        "topic, or is otherwise corrupt."
    ),
    ErrorSpec(
        3, "UNKNOWN_TOPIC_OR_PARTITION", "UnknownTopicOrPartitionError", True,
        "This server does not host this topic-partition.",
        invalid_metadata=True,
    ),
    ErrorSpec(4, "INVALID_FETCH_SIZE", "InvalidFetchSizeError", False, "The requested fetch size is invalid."),
    ErrorSpec(
        5, "LEADER_NOT_AVAILABLE", "LeaderNotAvailableError", True,
        "There is no leader for this topic-partition as we are in the middle of a leadership election.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        6, "NOT_LEADER_OR_FOLLOWER", "NotLeaderOrFollowerError", True,
        "For requests intended only for the leader, this error indicates that the broker is not the current "
        "leader. For requests intended for any replica, this error indicates that the broker is not a replica "
        "of the topic partition.",
        invalid_metadata=True,
    ),
    ErrorSpec(7, "REQUEST_TIMED_OUT", "RequestTimedOutError", True, "The request timed out."),
    ErrorSpec(8, "BROKER_NOT_AVAILABLE", "BrokerNotAvailableError", False, "The broker is not available."),
    ErrorSpec(
        9, "REPLICA_NOT_AVAILABLE", "ReplicaNotAvailableError", True,
        "The replica is not available for the requested topic-partition. Produce/Fetch requests and other "
        "requests intended only for the leader or follower return NOT_LEADER_OR_FOLLOWER if the broker is not "
        "a replica of the topic-partition.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        10, "MESSAGE_TOO_LARGE", "MessageTooLargeError", False,
        "The request included a message larger than the max message size the server will accept."
    ),
    ErrorSpec(
        11, "STALE_CONTROLLER_EPOCH", "StaleControllerEpochError", False,
        "The controller moved to another broker."
    ),
    ErrorSpec(
        12, "OFFSET_METADATA_TOO_LARGE", "OffsetMetadataTooLargeError", False,
        "The metadata field of the offset request was too large."
    ),
    ErrorSpec(
        13, "NETWORK_EXCEPTION", "NetworkError", True,
        "The server disconnected before a response was received.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        14, "COORDINATOR_LOAD_IN_PROGRESS", "CoordinatorLoadInProgressError", True,
        "The coordinator is loading and hence can't process requests."
    ),
    ErrorSpec(
        15, "COORDINATOR_NOT_AVAILABLE", "CoordinatorNotAvailableError", True,
        "The coordinator is not available.",
        coordinator_moved=True,
    ),
    ErrorSpec(
        16, "NOT_COORDINATOR", "NotCoordinatorError", True,
        "This is not the correct coordinator.",
        coordinator_moved=True,
    ),
    ErrorSpec(
        17, "INVALID_TOPIC_EXCEPTION", "InvalidTopicError", False,
        "The request attempted to perform an operation on an invalid topic."
    ),
    ErrorSpec(
        18, "RECORD_LIST_TOO_LARGE", "RecordListTooLargeError", False,
        "The request included message batch larger than the configured segment size on the server."
    ),
    ErrorSpec(
        19, "NOT_ENOUGH_REPLICAS", "NotEnoughReplicasError", True,
        "Messages are rejected since there are fewer in-sync replicas than required."
    ),
    ErrorSpec(
        20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "NotEnoughReplicasAfterAppendError", True,
        "Messages are written to the log, but to fewer in-sync replicas than required."
    ),
    ErrorSpec(
        21, "INVALID_REQUIRED_ACKS", "InvalidRequiredAcksError", False,
        "Produce request specified an invalid value for required acks."
    ),
    ErrorSpec(
        22, "ILLEGAL_GENERATION", "IllegalGenerationError", False,
        "Specified group generation id is not valid.",
        txn_abortable=True,
    ),
    ErrorSpec(
        23, "INCONSISTENT_GROUP_PROTOCOL", "InconsistentGroupProtocolError", False,
        "The group member's supported protocols are incompatible with those of existing members or first "
        "group member tried to join with empty protocol type or empty protocol list."
    ),
    ErrorSpec(24, "INVALID_GROUP_ID", "InvalidGroupIdError", False, "The group id is invalid."),
    ErrorSpec(
        25, "UNKNOWN_MEMBER_ID", "UnknownMemberIdError", False,
        "The coordinator is not aware of this member.",
        txn_abortable=True,
    ),
    ErrorSpec(
        26, "INVALID_SESSION_TIMEOUT", "InvalidSessionTimeoutError", False,
        "The session timeout is not within the range allowed by the broker (as configured by "
        "group.min.session.timeout.ms and group.max.session.timeout.ms)."
    ),
    ErrorSpec(
        27, "REBALANCE_IN_PROGRESS", "RebalanceInProgressError", False,
        "The group is rebalancing, so a rejoin is needed."
    ),
    ErrorSpec(
        28, "INVALID_COMMIT_OFFSET_SIZE", "InvalidCommitOffsetSizeError", False,
        "The committing offset data size is not valid."
    ),
    ErrorSpec(
        29, "TOPIC_AUTHORIZATION_FAILED", "TopicAuthorizationFailedError", False,
        "Topic authorization failed.",
        txn_abortable=True,
    ),
    ErrorSpec(
        30, "GROUP_AUTHORIZATION_FAILED", "GroupAuthorizationFailedError", False,
        "Group authorization failed.",
        txn_abortable=True,
    ),
    ErrorSpec(
        31, "CLUSTER_AUTHORIZATION_FAILED", "ClusterAuthorizationFailedError", False,
        "Cluster authorization failed.",
        txn_fatal=True,
    ),
    ErrorSpec(
        32, "INVALID_TIMESTAMP", "InvalidTimestampError", False,
        "The timestamp of the message is out of acceptable range."
    ),
    ErrorSpec(
        33, "UNSUPPORTED_SASL_MECHANISM", "UnsupportedSaslMechanismError", False,
        "The broker does not support the requested SASL mechanism.",
        authentication=True,
    ),
    ErrorSpec(
        34, "ILLEGAL_SASL_STATE", "IllegalSaslStateError", False,
        "Request is not valid given the current SASL state.",
        authentication=True,
    ),
    ErrorSpec(
        35, "UNSUPPORTED_VERSION", "UnsupportedVersionError", False,
        "The version of API is not supported.",
        txn_fatal=True,
    ),
    ErrorSpec(
        36, "TOPIC_ALREADY_EXISTS", "TopicAlreadyExistsError", False,
        "Topic with this name already exists."
    ),
    ErrorSpec(37, "INVALID_PARTITIONS", "InvalidPartitionsError", False, "Number of partitions is below 1."),
    ErrorSpec(
        38, "INVALID_REPLICATION_FACTOR", "InvalidReplicationFactorError", False,
        "Replication factor is below 1 or larger than the number of available brokers."
    ),
    ErrorSpec(
        39, "INVALID_REPLICA_ASSIGNMENT", "InvalidReplicaAssignmentError", False,
        "Replica assignment is invalid."
    ),
    ErrorSpec(40, "INVALID_CONFIG", "InvalidConfigError", False, "Configuration is invalid."),
    ErrorSpec(
        41, "NOT_CONTROLLER", "NotControllerError", True,
        "This is not the correct controller for this cluster."
    ),
    ErrorSpec(
        42, "INVALID_REQUEST", "InvalidRequestError", False,
        "This most likely occurs because of a request being malformed by the client library or the message "
        "was sent to an incompatible broker. See the broker logs for more details."
    ),
    ErrorSpec(
        43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", "UnsupportedForMessageFormatError", False,
        "The message format version on the broker does not support the request.",
        txn_fatal=True,
    ),
    ErrorSpec(
        44, "POLICY_VIOLATION", "PolicyViolationError", False,
        "Request parameters do not satisfy the configured policy."
    ),
    ErrorSpec(
        45, "OUT_OF_ORDER_SEQUENCE_NUMBER", "OutOfOrderSequenceNumberError", False,
        "The broker received an out of order sequence number."
    ),
    ErrorSpec(
        46, "DUPLICATE_SEQUENCE_NUMBER", "DuplicateSequenceNumberError", False,
        "The broker received a duplicate sequence number."
    ),
    ErrorSpec(
        47, "INVALID_PRODUCER_EPOCH", "InvalidProducerEpochError", False,
        "Producer attempted to produce with an old epoch.",
        fenced=True, txn_fatal=True,
    ),
    ErrorSpec(
        48, "INVALID_TXN_STATE", "InvalidTxnStateError", False,
        "The producer attempted a transactional operation in an invalid state.",
        txn_fatal=True,
    ),
    ErrorSpec(
        49, "INVALID_PRODUCER_ID_MAPPING", "InvalidProducerIdMappingError", False,
        "The producer attempted to use a producer id which is not currently assigned to its transactional id.",
        txn_abortable=True,
    ),
    ErrorSpec(
        50, "INVALID_TRANSACTION_TIMEOUT", "InvalidTransactionTimeoutError", False,
        "The transaction timeout is larger than the maximum value allowed by the broker (as configured by "
        "transaction.max.timeout.ms)."
    ),
    ErrorSpec(
        51, "CONCURRENT_TRANSACTIONS", "ConcurrentTransactionsError", True,
        "The producer attempted to update a transaction while another concurrent operation on the same "
        "transaction was ongoing."
    ),
    ErrorSpec(
        52, "TRANSACTION_COORDINATOR_FENCED", "TransactionCoordinatorFencedError", False,
        "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current "
        "coordinator for a given producer."
    ),
    ErrorSpec(
        53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "TransactionalIdAuthorizationFailedError", False,
        "Transactional Id authorization failed.",
        txn_fatal=True,
    ),
    ErrorSpec(54, "SECURITY_DISABLED", "SecurityDisabledError", False, "Security features are disabled."),
    ErrorSpec(
        55, "OPERATION_NOT_ATTEMPTED", "OperationNotAttemptedError", False,
        "The broker did not attempt to execute this operation. This may happen for batched RPCs where some "
        "operations in the batch failed, causing the broker to respond without trying the rest."
    ),
    ErrorSpec(
        56, "KAFKA_STORAGE_ERROR", "KafkaStorageError", True,
        "Disk error when trying to access log file on the disk.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        57, "LOG_DIR_NOT_FOUND", "LogDirNotFoundError", False,
        "The user-specified log directory is not found in the broker config."
    ),
    ErrorSpec(
        58, "SASL_AUTHENTICATION_FAILED", "SaslAuthenticationFailedError", False,
        "SASL Authentication failed.",
        authentication=True,
    ),
    ErrorSpec(
        59, "UNKNOWN_PRODUCER_ID", "UnknownProducerIdError", False,
        "This exception is raised by the broker if it could not locate the producer metadata associated with "
        "the producerId in question. This could happen if, for instance, the producer's records were deleted "
        "because their retention time had elapsed. Once the last records of the producerId are removed, the "
        "producer's metadata is removed from the broker, and future appends by the producer will return this "
        "exception.",
        txn_abortable=True,
    ),
    ErrorSpec(
        60, "REASSIGNMENT_IN_PROGRESS", "ReassignmentInProgressError", False,
        "A partition reassignment is in progress."
    ),
    ErrorSpec(
        61, "DELEGATION_TOKEN_AUTH_DISABLED", "DelegationTokenAuthDisabledError", False,
        "Delegation Token feature is not enabled."
    ),
    ErrorSpec(
        62, "DELEGATION_TOKEN_NOT_FOUND", "DelegationTokenNotFoundError", False,
        "Delegation Token is not found on server."
    ),
    ErrorSpec(
        63, "DELEGATION_TOKEN_OWNER_MISMATCH", "DelegationTokenOwnerMismatchError", False,
        "Specified Principal is not valid Owner/Renewer."
    ),
    ErrorSpec(
        64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", "DelegationTokenRequestNotAllowedError", False,
        "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token "
        "authenticated channels."
    ),
    ErrorSpec(
        65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", "DelegationTokenAuthorizationFailedError", False,
        "Delegation Token authorization failed."
    ),
    ErrorSpec(
        66, "DELEGATION_TOKEN_EXPIRED", "DelegationTokenExpiredError", False,
        "Delegation Token is expired."
    ),
    ErrorSpec(
        67, "INVALID_PRINCIPAL_TYPE", "InvalidPrincipalTypeError", False,
        "Supplied principalType is not supported."
    ),
    ErrorSpec(68, "NON_EMPTY_GROUP", "NonEmptyGroupError", False, "The group is not empty."),
    ErrorSpec(69, "GROUP_ID_NOT_FOUND", "GroupIdNotFoundError", False, "The group id does not exist."),
    ErrorSpec(
        70, "FETCH_SESSION_ID_NOT_FOUND", "FetchSessionIdNotFoundError", True,
        "The fetch session ID was not found."
    ),
    ErrorSpec(
        71, "INVALID_FETCH_SESSION_EPOCH", "InvalidFetchSessionEpochError", True,
        "The fetch session epoch is invalid."
    ),
    ErrorSpec(
        72, "LISTENER_NOT_FOUND", "ListenerNotFoundError", True,
        "There is no listener on the leader broker that matches the listener on which metadata request was "
        "processed.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        73, "TOPIC_DELETION_DISABLED", "TopicDeletionDisabledError", False,
        "Topic deletion is disabled."
    ),
    ErrorSpec(
        74, "FENCED_LEADER_EPOCH", "FencedLeaderEpochError", True,
        "The leader epoch in the request is older than the epoch on the broker.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        75, "UNKNOWN_LEADER_EPOCH", "UnknownLeaderEpochError", True,
        "The leader epoch in the request is newer than the epoch on the broker."
    ),
    ErrorSpec(
        76, "UNSUPPORTED_COMPRESSION_TYPE", "UnsupportedCompressionTypeError", False,
        "The requesting client does not support the compression type of given partition."
    ),
    ErrorSpec(77, "STALE_BROKER_EPOCH", "StaleBrokerEpochError", False, "Broker epoch has changed."),
    ErrorSpec(
        78, "OFFSET_NOT_AVAILABLE", "OffsetNotAvailableError", True,
        "The leader high watermark has not caught up from a recent leader election so the offsets cannot be "
        "guaranteed to be monotonically increasing."
    ),
    ErrorSpec(
        79, "MEMBER_ID_REQUIRED", "MemberIdRequiredError", False,
        "The group member needs to have a valid member id before actually entering a consumer group."
    ),
    ErrorSpec(
        80, "PREFERRED_LEADER_NOT_AVAILABLE", "PreferredLeaderNotAvailableError", True,
        "The preferred leader was not available.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        81, "GROUP_MAX_SIZE_REACHED", "GroupMaxSizeReachedError", False,
        "The group has reached its maximum size."
    ),
    ErrorSpec(
        82, "FENCED_INSTANCE_ID", "FencedInstanceIdError", False,
        "The broker rejected this static consumer since another consumer with the same group.instance.id has "
        "registered with a different member.id.",
        txn_abortable=True,
    ),
    ErrorSpec(
        83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", "EligibleLeadersNotAvailableError", True,
        "Eligible topic partition leaders are not available.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        84, "ELECTION_NOT_NEEDED", "ElectionNotNeededError", True,
        "Leader election not needed for topic partition.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        85, "NO_REASSIGNMENT_IN_PROGRESS", "NoReassignmentInProgressError", False,
        "No partition reassignment is in progress."
    ),
    ErrorSpec(
        86, "GROUP_SUBSCRIBED_TO_TOPIC", "GroupSubscribedToTopicError", False,
        "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."
    ),
    ErrorSpec(
        87, "INVALID_RECORD", "InvalidRecordError", False,
        "This record has failed the validation on broker and hence will be rejected."
    ),
    ErrorSpec(
        88, "UNSTABLE_OFFSET_COMMIT", "UnstableOffsetCommitError", True,
        "There are unstable offsets that need to be cleared."
    ),
    ErrorSpec(
        89, "THROTTLING_QUOTA_EXCEEDED", "ThrottlingQuotaExceededError", True,
        "The throttling quota has been exceeded."
    ),
    ErrorSpec(
        90, "PRODUCER_FENCED", "ProducerFencedError", False,
        "There is a newer producer with the same transactionalId which fences the current one.",
        fenced=True, txn_fatal=True,
    ),
    ErrorSpec(
        91, "RESOURCE_NOT_FOUND", "ResourceNotFoundError", False,
        "A request illegally referred to a resource that does not exist."
    ),
    ErrorSpec(
        92, "DUPLICATE_RESOURCE", "DuplicateResourceError", False,
        "A request illegally referred to the same resource twice."
    ),
    ErrorSpec(
        93, "UNACCEPTABLE_CREDENTIAL", "UnacceptableCredentialError", False,
        "Requested credential would not meet criteria for acceptability."
    ),
    ErrorSpec(
        94, "INCONSISTENT_VOTER_SET", "InconsistentVoterSetError", False,
        "Indicates that the either the sender or recipient of a voter-only request is not one of the expected "
        "voters."
    ),
    ErrorSpec(
        95, "INVALID_UPDATE_VERSION", "InvalidUpdateVersionError", False,
        "The given update version was invalid."
    ),
    ErrorSpec(
        96, "FEATURE_UPDATE_FAILED", "FeatureUpdateFailedError", False,
        "Unable to update finalized features due to an unexpected server error."
    ),
    ErrorSpec(
        97, "PRINCIPAL_DESERIALIZATION_FAILURE", "PrincipalDeserializationFailureError", False,
        "Request principal deserialization failed during forwarding. This indicates an internal error on the "
        "broker cluster security setup."
    ),
    ErrorSpec(98, "SNAPSHOT_NOT_FOUND", "SnapshotNotFoundError", False, "Requested snapshot was not found."),
    ErrorSpec(
        99, "POSITION_OUT_OF_RANGE", "PositionOutOfRangeError", False,
        "Requested position is not greater than or equal to zero, and less than the size of the snapshot."
    ),
    ErrorSpec(
        100, "UNKNOWN_TOPIC_ID", "UnknownTopicIdError", True,
        "This server does not host this topic ID.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        101, "DUPLICATE_BROKER_REGISTRATION", "DuplicateBrokerRegistrationError", False,
        "This broker ID is already in use."
    ),
    ErrorSpec(
        102, "BROKER_ID_NOT_REGISTERED", "BrokerIdNotRegisteredError", False,
        "The given broker ID was not registered."
    ),
    ErrorSpec(
        103, "INCONSISTENT_TOPIC_ID", "InconsistentTopicIdError", True,
        "The log's topic ID did not match the topic ID in the request.",
        invalid_metadata=True,
    ),
    ErrorSpec(
        104, "INCONSISTENT_CLUSTER_ID", "InconsistentClusterIdError", False,
        "The clusterId in the request does not match that found on the server."
    ),
    ErrorSpec(
        105, "TRANSACTIONAL_ID_NOT_FOUND", "TransactionalIdNotFoundError", False,
        "The transactionalId could not be found."
    ),
    ErrorSpec(
        106, "FETCH_SESSION_TOPIC_ID_ERROR", "FetchSessionTopicIdError", True,
        "The fetch session encountered inconsistent topic ID usage."
    ),
    ErrorSpec(
        107, "INELIGIBLE_REPLICA", "IneligibleReplicaError", False,
        "The new ISR contains at least one ineligible replica."
    ),
    ErrorSpec(
        108, "NEW_LEADER_ELECTED", "NewLeaderElectedError", False,
        "The AlterPartition request successfully updated the partition state but the leader has changed."
    ),
    ErrorSpec(
        109, "OFFSET_MOVED_TO_TIERED_STORAGE", "OffsetMovedToTieredStorageError", False,
        "The requested offset is moved to tiered storage."
    ),
    ErrorSpec(
        110, "FENCED_MEMBER_EPOCH", "FencedMemberEpochError", False,
        "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and "
        "rejoin."
    ),
    ErrorSpec(
        111, "UNRELEASED_INSTANCE_ID", "UnreleasedInstanceIdError", False,
        "The instance ID is still used by another member in the consumer group. That member must leave first."
    ),
    ErrorSpec(
        112, "UNSUPPORTED_ASSIGNOR", "UnsupportedAssignorError", False,
        "The assignor or its version range is not supported by the consumer group."
    ),
    ErrorSpec(
        113, "STALE_MEMBER_EPOCH", "StaleMemberEpochError", False,
        "The member epoch is stale. The member must retry after receiving its updated member epoch via the "
        "ConsumerGroupHeartbeat API."
    ),
    ErrorSpec(
        114, "MISMATCHED_ENDPOINT_TYPE", "MismatchedEndpointTypeError", False,
        "The request was sent to an endpoint of the wrong type."
    ),
    ErrorSpec(
        115, "UNSUPPORTED_ENDPOINT_TYPE", "UnsupportedEndpointTypeError", False,
        "This endpoint type is not supported yet."
    ),
    ErrorSpec(
        116, "UNKNOWN_CONTROLLER_ID", "UnknownControllerIdError", False,
        "This controller ID is not known."
    ),
    ErrorSpec(
        117, "UNKNOWN_SUBSCRIPTION_ID", "UnknownSubscriptionIdError", False,
        "Client sent a push telemetry request with an invalid or outdated subscription ID."
    ),
    ErrorSpec(
        118, "TELEMETRY_TOO_LARGE", "TelemetryTooLargeError", False,
        "Client sent a push telemetry request larger than the maximum size the broker will accept."
    ),
    ErrorSpec(
        119, "INVALID_REGISTRATION", "InvalidRegistrationError", False,
        "The controller has considered the broker registration to be invalid."
    ),
    ErrorSpec(
        120, "TRANSACTION_ABORTABLE", "TransactionAbortableError", False,
        "The server encountered an error with the transaction. The client can abort the transaction to "
        "continue using this transactional ID.",
        txn_abortable=True,
    ),
    ErrorSpec(
        121, "INVALID_RECORD_STATE", "InvalidRecordStateError", False,
        "The record state is invalid. The acknowledgement of delivery could not be completed."
    ),
    ErrorSpec(
        122, "SHARE_SESSION_NOT_FOUND", "ShareSessionNotFoundError", True,
        "The share session was not found."
    ),
    ErrorSpec(
        123, "INVALID_SHARE_SESSION_EPOCH", "InvalidShareSessionEpochError", True,
        "The share session epoch is invalid."
    ),
    ErrorSpec(
        124, "FENCED_STATE_EPOCH", "FencedStateEpochError", False,
        "The share coordinator rejected the request because the share-group state epoch did not match."
    ),
    ErrorSpec(
        125, "INVALID_VOTER_KEY", "InvalidVoterKeyError", False,
        "The voter key doesn't match the receiving replica's key."
    ),
    ErrorSpec(
        126, "DUPLICATE_VOTER", "DuplicateVoterError", False,
        "The voter is already part of the set of voters."
    ),
    ErrorSpec(
        127, "VOTER_NOT_FOUND", "VoterNotFoundError", False,
        "The voter is not part of the set of voters."
    ),
    ErrorSpec(
        128, "INVALID_REGULAR_EXPRESSION", "InvalidRegularExpressionError", False,
        "The regular expression is not valid."
    ),
    ErrorSpec(
        129, "REBOOTSTRAP_REQUIRED", "RebootstrapRequiredError", False,
        "Client metadata is stale. The client should rebootstrap to obtain new metadata."
    ),
    ErrorSpec(
        130, "STREAMS_INVALID_TOPOLOGY", "StreamsInvalidTopologyError", False,
        "The supplied topology is invalid."
    ),
    ErrorSpec(
        131, "STREAMS_INVALID_TOPOLOGY_EPOCH", "StreamsInvalidTopologyEpochError", False,
        "The supplied topology epoch is invalid."
    ),
    ErrorSpec(
        132, "STREAMS_TOPOLOGY_FENCED", "StreamsTopologyFencedError", False,
        "The supplied topology epoch is outdated."
    ),
    ErrorSpec(
        133, "SHARE_SESSION_LIMIT_REACHED", "ShareSessionLimitReachedError", True,
        "The limit of share sessions has been reached."
    ),
    ErrorSpec(
        134, "GROUP_DELETION_FAILED", "GroupDeletionFailedError", False,
        "DeleteGroups could not complete; see the error message on the per-group result for details."
    ),
    ErrorSpec(
        135, "STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED", "StreamsTopologyDescriptionUpdateFailedError", False,
        "The broker could not process the topology description update; see the error message for details."
    ),
)
# fmt: on

MAX_KNOWN_ERROR_CODE = 135

NO_ERROR = 0
"""Kafka's error code 0 (``NONE``): the request succeeded. It has no error class; compare a response's
``error_code`` with this (or with an error class's ``code``) rather than with a bare number."""

_SPECS_BY_CODE: Dict[int, ErrorSpec] = {spec.code: spec for spec in ERROR_TABLE}
_REGISTRY: Dict[int, Type[BrokerResponseError]] = {}


# --------------------------------------------------------------------------------------------
# base classes


class KafkaError(Exception):
    """Base class of every error raised by kproducer.

    ``code`` is the Kafka error code (-1 for errors that arise in the client), ``name`` the Kafka
    upper-case name, ``retriable`` whether retrying the same operation may succeed, and ``message``
    the message given to the constructor or, when none was given, ``default_message``.
    """

    code: int = -1
    name: str = "KAFKA_ERROR"
    retriable: bool = False
    invalid_metadata: bool = False
    coordinator_moved: bool = False
    fenced: bool = False
    txn_fatal: bool = False
    txn_abortable: bool = False
    default_message: str = "An error occurred in the Kafka client."

    message: str

    def __init__(self, message: Optional[str] = None) -> None:
        self.message = message if message else self.default_message
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class ProtocolError(KafkaError):
    """Malformed or unexpected data on the wire (raised by this client, not sent by a broker)."""

    name = "PROTOCOL_ERROR"
    default_message = "Malformed or unexpected Kafka protocol data."


class AuthenticationError(KafkaError):
    """The client could not authenticate to a broker (Java's AuthenticationException): wrong
    credentials, a mechanism the broker does not enable, or a TLS certificate that does not verify.

    Not retriable: the same settings will fail again, so waits in progress (``send().get()``,
    ``flush()``, metadata) fail with it instead of retrying until their time limit.
    """

    name = "AUTHENTICATION_FAILED"
    default_message = "Authentication to the broker failed: check the security settings."


class BrokerResponseError(KafkaError):
    """An error code returned by a broker in a response.

    ``broker_message`` is the ``error_message`` field of the response (None when the broker sent
    none); ``message`` falls back to Kafka's default description of the code.
    """

    name = "BROKER_ERROR"
    default_message = "The broker returned an error."

    broker_message: Optional[str]

    def __init__(self, message: Optional[str] = None) -> None:
        self.broker_message = message if message else None
        super().__init__(message)

    def __init_subclass__(cls, *, code: Optional[int] = None) -> None:
        super().__init_subclass__()
        if code is None:
            return  # a user's subclass of an existing error class: it inherits everything
        spec = _SPECS_BY_CODE.get(code)
        if spec is None:
            raise TypeError(f"{cls.__name__}: error code {code} is not in ERROR_TABLE")
        if spec.class_name != cls.__name__:
            raise TypeError(f"error code {code} belongs to {spec.class_name}, not {cls.__name__}")
        if code in _REGISTRY:
            raise TypeError(f"error code {code} already has a class: {_REGISTRY[code].__name__}")
        if spec.authentication != issubclass(cls, AuthenticationError):
            raise TypeError(f"{cls.__name__}: AuthenticationError base does not match ERROR_TABLE")
        cls.code = spec.code
        cls.name = spec.name
        cls.retriable = spec.retriable
        cls.invalid_metadata = spec.invalid_metadata
        cls.coordinator_moved = spec.coordinator_moved
        cls.fenced = spec.fenced
        cls.txn_fatal = spec.txn_fatal
        cls.txn_abortable = spec.txn_abortable
        cls.default_message = spec.message
        _REGISTRY[code] = cls

    def __str__(self) -> str:
        return f"[Error {self.code}] {self.name}: {self.message}"


class UnknownKafkaError(BrokerResponseError):
    """A broker error code that this client does not know (the broker may be newer than the client).

    Unlike the other classes, ``code`` and ``name`` (``UNKNOWN_CODE_<n>``) are set per instance.
    It is not retriable, as in Kafka's own client.
    """

    name = "UNKNOWN_CODE"
    default_message = "The broker returned an error code that this client does not know."

    def __init__(self, code: int, message: Optional[str] = None) -> None:
        super().__init__(message)
        self.code = code
        self.name = f"UNKNOWN_CODE_{code}"
        if not message:
            self.message = (
                f"The broker returned error code {code}, which this client does not know "
                "(the broker may be newer than this client)."
            )
        self.args = (code, message if message else None)


# --------------------------------------------------------------------------------------------
# one class per Kafka error code, generated from ERROR_TABLE by tools/gen_errors.py (as is __all__):
# edit the table, then run `python tools/gen_errors.py`; tests/unit/test_errors.py runs it with
# --check and fails while the two are out of step. Do not edit between the BEGIN and END lines.

# BEGIN GENERATED ERROR CLASSES


class UnknownServerError(BrokerResponseError, code=-1):
    """UNKNOWN_SERVER_ERROR (code -1, not retriable)."""


class OffsetOutOfRangeError(BrokerResponseError, code=1):
    """OFFSET_OUT_OF_RANGE (code 1, not retriable)."""


class CorruptMessageError(BrokerResponseError, code=2):
    """CORRUPT_MESSAGE (code 2, retriable)."""


class UnknownTopicOrPartitionError(BrokerResponseError, code=3):
    """UNKNOWN_TOPIC_OR_PARTITION (code 3, retriable; invalid metadata)."""


class InvalidFetchSizeError(BrokerResponseError, code=4):
    """INVALID_FETCH_SIZE (code 4, not retriable)."""


class LeaderNotAvailableError(BrokerResponseError, code=5):
    """LEADER_NOT_AVAILABLE (code 5, retriable; invalid metadata)."""


class NotLeaderOrFollowerError(BrokerResponseError, code=6):
    """NOT_LEADER_OR_FOLLOWER (code 6, retriable; invalid metadata)."""


class RequestTimedOutError(BrokerResponseError, code=7):
    """REQUEST_TIMED_OUT (code 7, retriable)."""


class BrokerNotAvailableError(BrokerResponseError, code=8):
    """BROKER_NOT_AVAILABLE (code 8, not retriable)."""


class ReplicaNotAvailableError(BrokerResponseError, code=9):
    """REPLICA_NOT_AVAILABLE (code 9, retriable; invalid metadata)."""


class MessageTooLargeError(BrokerResponseError, code=10):
    """MESSAGE_TOO_LARGE (code 10, not retriable)."""


class StaleControllerEpochError(BrokerResponseError, code=11):
    """STALE_CONTROLLER_EPOCH (code 11, not retriable)."""


class OffsetMetadataTooLargeError(BrokerResponseError, code=12):
    """OFFSET_METADATA_TOO_LARGE (code 12, not retriable)."""


class NetworkError(BrokerResponseError, code=13):
    """NETWORK_EXCEPTION (code 13, retriable; invalid metadata)."""


class CoordinatorLoadInProgressError(BrokerResponseError, code=14):
    """COORDINATOR_LOAD_IN_PROGRESS (code 14, retriable)."""


class CoordinatorNotAvailableError(BrokerResponseError, code=15):
    """COORDINATOR_NOT_AVAILABLE (code 15, retriable; coordinator moved)."""


class NotCoordinatorError(BrokerResponseError, code=16):
    """NOT_COORDINATOR (code 16, retriable; coordinator moved)."""


class InvalidTopicError(BrokerResponseError, code=17):
    """INVALID_TOPIC_EXCEPTION (code 17, not retriable)."""


class RecordListTooLargeError(BrokerResponseError, code=18):
    """RECORD_LIST_TOO_LARGE (code 18, not retriable)."""


class NotEnoughReplicasError(BrokerResponseError, code=19):
    """NOT_ENOUGH_REPLICAS (code 19, retriable)."""


class NotEnoughReplicasAfterAppendError(BrokerResponseError, code=20):
    """NOT_ENOUGH_REPLICAS_AFTER_APPEND (code 20, retriable)."""


class InvalidRequiredAcksError(BrokerResponseError, code=21):
    """INVALID_REQUIRED_ACKS (code 21, not retriable)."""


class IllegalGenerationError(BrokerResponseError, code=22):
    """ILLEGAL_GENERATION (code 22, not retriable; aborts the transaction)."""


class InconsistentGroupProtocolError(BrokerResponseError, code=23):
    """INCONSISTENT_GROUP_PROTOCOL (code 23, not retriable)."""


class InvalidGroupIdError(BrokerResponseError, code=24):
    """INVALID_GROUP_ID (code 24, not retriable)."""


class UnknownMemberIdError(BrokerResponseError, code=25):
    """UNKNOWN_MEMBER_ID (code 25, not retriable; aborts the transaction)."""


class InvalidSessionTimeoutError(BrokerResponseError, code=26):
    """INVALID_SESSION_TIMEOUT (code 26, not retriable)."""


class RebalanceInProgressError(BrokerResponseError, code=27):
    """REBALANCE_IN_PROGRESS (code 27, not retriable)."""


class InvalidCommitOffsetSizeError(BrokerResponseError, code=28):
    """INVALID_COMMIT_OFFSET_SIZE (code 28, not retriable)."""


class TopicAuthorizationFailedError(BrokerResponseError, code=29):
    """TOPIC_AUTHORIZATION_FAILED (code 29, not retriable; aborts the transaction)."""


class GroupAuthorizationFailedError(BrokerResponseError, code=30):
    """GROUP_AUTHORIZATION_FAILED (code 30, not retriable; aborts the transaction)."""


class ClusterAuthorizationFailedError(BrokerResponseError, code=31):
    """CLUSTER_AUTHORIZATION_FAILED (code 31, not retriable; fatal for transactions)."""


class InvalidTimestampError(BrokerResponseError, code=32):
    """INVALID_TIMESTAMP (code 32, not retriable)."""


class UnsupportedSaslMechanismError(BrokerResponseError, AuthenticationError, code=33):
    """UNSUPPORTED_SASL_MECHANISM (code 33, not retriable; authentication)."""


class IllegalSaslStateError(BrokerResponseError, AuthenticationError, code=34):
    """ILLEGAL_SASL_STATE (code 34, not retriable; authentication)."""


class UnsupportedVersionError(BrokerResponseError, code=35):
    """UNSUPPORTED_VERSION (code 35, not retriable; fatal for transactions)."""


class TopicAlreadyExistsError(BrokerResponseError, code=36):
    """TOPIC_ALREADY_EXISTS (code 36, not retriable)."""


class InvalidPartitionsError(BrokerResponseError, code=37):
    """INVALID_PARTITIONS (code 37, not retriable)."""


class InvalidReplicationFactorError(BrokerResponseError, code=38):
    """INVALID_REPLICATION_FACTOR (code 38, not retriable)."""


class InvalidReplicaAssignmentError(BrokerResponseError, code=39):
    """INVALID_REPLICA_ASSIGNMENT (code 39, not retriable)."""


class InvalidConfigError(BrokerResponseError, code=40):
    """INVALID_CONFIG (code 40, not retriable)."""


class NotControllerError(BrokerResponseError, code=41):
    """NOT_CONTROLLER (code 41, retriable)."""


class InvalidRequestError(BrokerResponseError, code=42):
    """INVALID_REQUEST (code 42, not retriable)."""


class UnsupportedForMessageFormatError(BrokerResponseError, code=43):
    """UNSUPPORTED_FOR_MESSAGE_FORMAT (code 43, not retriable; fatal for transactions)."""


class PolicyViolationError(BrokerResponseError, code=44):
    """POLICY_VIOLATION (code 44, not retriable)."""


class OutOfOrderSequenceNumberError(BrokerResponseError, code=45):
    """OUT_OF_ORDER_SEQUENCE_NUMBER (code 45, not retriable)."""


class DuplicateSequenceNumberError(BrokerResponseError, code=46):
    """DUPLICATE_SEQUENCE_NUMBER (code 46, not retriable)."""


class InvalidProducerEpochError(BrokerResponseError, code=47):
    """INVALID_PRODUCER_EPOCH (code 47, not retriable; fenced, fatal for transactions)."""


class InvalidTxnStateError(BrokerResponseError, code=48):
    """INVALID_TXN_STATE (code 48, not retriable; fatal for transactions)."""


class InvalidProducerIdMappingError(BrokerResponseError, code=49):
    """INVALID_PRODUCER_ID_MAPPING (code 49, not retriable; aborts the transaction)."""


class InvalidTransactionTimeoutError(BrokerResponseError, code=50):
    """INVALID_TRANSACTION_TIMEOUT (code 50, not retriable)."""


class ConcurrentTransactionsError(BrokerResponseError, code=51):
    """CONCURRENT_TRANSACTIONS (code 51, retriable)."""


class TransactionCoordinatorFencedError(BrokerResponseError, code=52):
    """TRANSACTION_COORDINATOR_FENCED (code 52, not retriable)."""


class TransactionalIdAuthorizationFailedError(BrokerResponseError, code=53):
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED (code 53, not retriable; fatal for transactions)."""


class SecurityDisabledError(BrokerResponseError, code=54):
    """SECURITY_DISABLED (code 54, not retriable)."""


class OperationNotAttemptedError(BrokerResponseError, code=55):
    """OPERATION_NOT_ATTEMPTED (code 55, not retriable)."""


class KafkaStorageError(BrokerResponseError, code=56):
    """KAFKA_STORAGE_ERROR (code 56, retriable; invalid metadata)."""


class LogDirNotFoundError(BrokerResponseError, code=57):
    """LOG_DIR_NOT_FOUND (code 57, not retriable)."""


class SaslAuthenticationFailedError(BrokerResponseError, AuthenticationError, code=58):
    """SASL_AUTHENTICATION_FAILED (code 58, not retriable; authentication)."""


class UnknownProducerIdError(BrokerResponseError, code=59):
    """UNKNOWN_PRODUCER_ID (code 59, not retriable; aborts the transaction)."""


class ReassignmentInProgressError(BrokerResponseError, code=60):
    """REASSIGNMENT_IN_PROGRESS (code 60, not retriable)."""


class DelegationTokenAuthDisabledError(BrokerResponseError, code=61):
    """DELEGATION_TOKEN_AUTH_DISABLED (code 61, not retriable)."""


class DelegationTokenNotFoundError(BrokerResponseError, code=62):
    """DELEGATION_TOKEN_NOT_FOUND (code 62, not retriable)."""


class DelegationTokenOwnerMismatchError(BrokerResponseError, code=63):
    """DELEGATION_TOKEN_OWNER_MISMATCH (code 63, not retriable)."""


class DelegationTokenRequestNotAllowedError(BrokerResponseError, code=64):
    """DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (code 64, not retriable)."""


class DelegationTokenAuthorizationFailedError(BrokerResponseError, code=65):
    """DELEGATION_TOKEN_AUTHORIZATION_FAILED (code 65, not retriable)."""


class DelegationTokenExpiredError(BrokerResponseError, code=66):
    """DELEGATION_TOKEN_EXPIRED (code 66, not retriable)."""


class InvalidPrincipalTypeError(BrokerResponseError, code=67):
    """INVALID_PRINCIPAL_TYPE (code 67, not retriable)."""


class NonEmptyGroupError(BrokerResponseError, code=68):
    """NON_EMPTY_GROUP (code 68, not retriable)."""


class GroupIdNotFoundError(BrokerResponseError, code=69):
    """GROUP_ID_NOT_FOUND (code 69, not retriable)."""


class FetchSessionIdNotFoundError(BrokerResponseError, code=70):
    """FETCH_SESSION_ID_NOT_FOUND (code 70, retriable)."""


class InvalidFetchSessionEpochError(BrokerResponseError, code=71):
    """INVALID_FETCH_SESSION_EPOCH (code 71, retriable)."""


class ListenerNotFoundError(BrokerResponseError, code=72):
    """LISTENER_NOT_FOUND (code 72, retriable; invalid metadata)."""


class TopicDeletionDisabledError(BrokerResponseError, code=73):
    """TOPIC_DELETION_DISABLED (code 73, not retriable)."""


class FencedLeaderEpochError(BrokerResponseError, code=74):
    """FENCED_LEADER_EPOCH (code 74, retriable; invalid metadata)."""


class UnknownLeaderEpochError(BrokerResponseError, code=75):
    """UNKNOWN_LEADER_EPOCH (code 75, retriable)."""


class UnsupportedCompressionTypeError(BrokerResponseError, code=76):
    """UNSUPPORTED_COMPRESSION_TYPE (code 76, not retriable)."""


class StaleBrokerEpochError(BrokerResponseError, code=77):
    """STALE_BROKER_EPOCH (code 77, not retriable)."""


class OffsetNotAvailableError(BrokerResponseError, code=78):
    """OFFSET_NOT_AVAILABLE (code 78, retriable)."""


class MemberIdRequiredError(BrokerResponseError, code=79):
    """MEMBER_ID_REQUIRED (code 79, not retriable)."""


class PreferredLeaderNotAvailableError(BrokerResponseError, code=80):
    """PREFERRED_LEADER_NOT_AVAILABLE (code 80, retriable; invalid metadata)."""


class GroupMaxSizeReachedError(BrokerResponseError, code=81):
    """GROUP_MAX_SIZE_REACHED (code 81, not retriable)."""


class FencedInstanceIdError(BrokerResponseError, code=82):
    """FENCED_INSTANCE_ID (code 82, not retriable; aborts the transaction)."""


class EligibleLeadersNotAvailableError(BrokerResponseError, code=83):
    """ELIGIBLE_LEADERS_NOT_AVAILABLE (code 83, retriable; invalid metadata)."""


class ElectionNotNeededError(BrokerResponseError, code=84):
    """ELECTION_NOT_NEEDED (code 84, retriable; invalid metadata)."""


class NoReassignmentInProgressError(BrokerResponseError, code=85):
    """NO_REASSIGNMENT_IN_PROGRESS (code 85, not retriable)."""


class GroupSubscribedToTopicError(BrokerResponseError, code=86):
    """GROUP_SUBSCRIBED_TO_TOPIC (code 86, not retriable)."""


class InvalidRecordError(BrokerResponseError, code=87):
    """INVALID_RECORD (code 87, not retriable)."""


class UnstableOffsetCommitError(BrokerResponseError, code=88):
    """UNSTABLE_OFFSET_COMMIT (code 88, retriable)."""


class ThrottlingQuotaExceededError(BrokerResponseError, code=89):
    """THROTTLING_QUOTA_EXCEEDED (code 89, retriable)."""


class ProducerFencedError(BrokerResponseError, code=90):
    """PRODUCER_FENCED (code 90, not retriable; fenced, fatal for transactions)."""


class ResourceNotFoundError(BrokerResponseError, code=91):
    """RESOURCE_NOT_FOUND (code 91, not retriable)."""


class DuplicateResourceError(BrokerResponseError, code=92):
    """DUPLICATE_RESOURCE (code 92, not retriable)."""


class UnacceptableCredentialError(BrokerResponseError, code=93):
    """UNACCEPTABLE_CREDENTIAL (code 93, not retriable)."""


class InconsistentVoterSetError(BrokerResponseError, code=94):
    """INCONSISTENT_VOTER_SET (code 94, not retriable)."""


class InvalidUpdateVersionError(BrokerResponseError, code=95):
    """INVALID_UPDATE_VERSION (code 95, not retriable)."""


class FeatureUpdateFailedError(BrokerResponseError, code=96):
    """FEATURE_UPDATE_FAILED (code 96, not retriable)."""


class PrincipalDeserializationFailureError(BrokerResponseError, code=97):
    """PRINCIPAL_DESERIALIZATION_FAILURE (code 97, not retriable)."""


class SnapshotNotFoundError(BrokerResponseError, code=98):
    """SNAPSHOT_NOT_FOUND (code 98, not retriable)."""


class PositionOutOfRangeError(BrokerResponseError, code=99):
    """POSITION_OUT_OF_RANGE (code 99, not retriable)."""


class UnknownTopicIdError(BrokerResponseError, code=100):
    """UNKNOWN_TOPIC_ID (code 100, retriable; invalid metadata)."""


class DuplicateBrokerRegistrationError(BrokerResponseError, code=101):
    """DUPLICATE_BROKER_REGISTRATION (code 101, not retriable)."""


class BrokerIdNotRegisteredError(BrokerResponseError, code=102):
    """BROKER_ID_NOT_REGISTERED (code 102, not retriable)."""


class InconsistentTopicIdError(BrokerResponseError, code=103):
    """INCONSISTENT_TOPIC_ID (code 103, retriable; invalid metadata)."""


class InconsistentClusterIdError(BrokerResponseError, code=104):
    """INCONSISTENT_CLUSTER_ID (code 104, not retriable)."""


class TransactionalIdNotFoundError(BrokerResponseError, code=105):
    """TRANSACTIONAL_ID_NOT_FOUND (code 105, not retriable)."""


class FetchSessionTopicIdError(BrokerResponseError, code=106):
    """FETCH_SESSION_TOPIC_ID_ERROR (code 106, retriable)."""


class IneligibleReplicaError(BrokerResponseError, code=107):
    """INELIGIBLE_REPLICA (code 107, not retriable)."""


class NewLeaderElectedError(BrokerResponseError, code=108):
    """NEW_LEADER_ELECTED (code 108, not retriable)."""


class OffsetMovedToTieredStorageError(BrokerResponseError, code=109):
    """OFFSET_MOVED_TO_TIERED_STORAGE (code 109, not retriable)."""


class FencedMemberEpochError(BrokerResponseError, code=110):
    """FENCED_MEMBER_EPOCH (code 110, not retriable)."""


class UnreleasedInstanceIdError(BrokerResponseError, code=111):
    """UNRELEASED_INSTANCE_ID (code 111, not retriable)."""


class UnsupportedAssignorError(BrokerResponseError, code=112):
    """UNSUPPORTED_ASSIGNOR (code 112, not retriable)."""


class StaleMemberEpochError(BrokerResponseError, code=113):
    """STALE_MEMBER_EPOCH (code 113, not retriable)."""


class MismatchedEndpointTypeError(BrokerResponseError, code=114):
    """MISMATCHED_ENDPOINT_TYPE (code 114, not retriable)."""


class UnsupportedEndpointTypeError(BrokerResponseError, code=115):
    """UNSUPPORTED_ENDPOINT_TYPE (code 115, not retriable)."""


class UnknownControllerIdError(BrokerResponseError, code=116):
    """UNKNOWN_CONTROLLER_ID (code 116, not retriable)."""


class UnknownSubscriptionIdError(BrokerResponseError, code=117):
    """UNKNOWN_SUBSCRIPTION_ID (code 117, not retriable)."""


class TelemetryTooLargeError(BrokerResponseError, code=118):
    """TELEMETRY_TOO_LARGE (code 118, not retriable)."""


class InvalidRegistrationError(BrokerResponseError, code=119):
    """INVALID_REGISTRATION (code 119, not retriable)."""


class TransactionAbortableError(BrokerResponseError, code=120):
    """TRANSACTION_ABORTABLE (code 120, not retriable; aborts the transaction)."""


class InvalidRecordStateError(BrokerResponseError, code=121):
    """INVALID_RECORD_STATE (code 121, not retriable)."""


class ShareSessionNotFoundError(BrokerResponseError, code=122):
    """SHARE_SESSION_NOT_FOUND (code 122, retriable)."""


class InvalidShareSessionEpochError(BrokerResponseError, code=123):
    """INVALID_SHARE_SESSION_EPOCH (code 123, retriable)."""


class FencedStateEpochError(BrokerResponseError, code=124):
    """FENCED_STATE_EPOCH (code 124, not retriable)."""


class InvalidVoterKeyError(BrokerResponseError, code=125):
    """INVALID_VOTER_KEY (code 125, not retriable)."""


class DuplicateVoterError(BrokerResponseError, code=126):
    """DUPLICATE_VOTER (code 126, not retriable)."""


class VoterNotFoundError(BrokerResponseError, code=127):
    """VOTER_NOT_FOUND (code 127, not retriable)."""


class InvalidRegularExpressionError(BrokerResponseError, code=128):
    """INVALID_REGULAR_EXPRESSION (code 128, not retriable)."""


class RebootstrapRequiredError(BrokerResponseError, code=129):
    """REBOOTSTRAP_REQUIRED (code 129, not retriable)."""


class StreamsInvalidTopologyError(BrokerResponseError, code=130):
    """STREAMS_INVALID_TOPOLOGY (code 130, not retriable)."""


class StreamsInvalidTopologyEpochError(BrokerResponseError, code=131):
    """STREAMS_INVALID_TOPOLOGY_EPOCH (code 131, not retriable)."""


class StreamsTopologyFencedError(BrokerResponseError, code=132):
    """STREAMS_TOPOLOGY_FENCED (code 132, not retriable)."""


class ShareSessionLimitReachedError(BrokerResponseError, code=133):
    """SHARE_SESSION_LIMIT_REACHED (code 133, retriable)."""


class GroupDeletionFailedError(BrokerResponseError, code=134):
    """GROUP_DELETION_FAILED (code 134, not retriable)."""


class StreamsTopologyDescriptionUpdateFailedError(BrokerResponseError, code=135):
    """STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED (code 135, not retriable)."""

# END GENERATED ERROR CLASSES


RecordTooLargeError = MessageTooLargeError  # Java's name: RecordTooLargeException
NotLeaderForPartitionError = NotLeaderOrFollowerError  # the name of code 6 before Kafka 2.6


def _check_table() -> Dict[int, Type[KafkaError]]:
    missing = [spec.name for spec in ERROR_TABLE if spec.code not in _REGISTRY]
    if missing:  # pragma: no cover - a programming error caught at import time
        raise RuntimeError(f"error codes without a class: {', '.join(missing)}")
    return {code: _REGISTRY[code] for code in sorted(_REGISTRY)}


ERROR_CLASSES: Dict[int, Type[KafkaError]] = _check_table()
"""Kafka error code -> exception class, for every code in :data:`ERROR_TABLE`."""


# --------------------------------------------------------------------------------------------
# lookups


def error_class_for_code(code: int) -> Type[KafkaError]:
    """The exception class for a Kafka error code (:class:`UnknownKafkaError` for unknown codes).

    Raises ValueError for 0 (``NONE``), which means success.
    """
    if code == NO_ERROR:
        raise ValueError("error code 0 (NONE) means success: it has no error class")
    return ERROR_CLASSES.get(code, UnknownKafkaError)


def error_for_code(code: int, message: Optional[str] = None) -> KafkaError:
    """An exception instance for a response's error code and optional error message.

    ``message`` is the broker's ``error_message`` (None or empty means Kafka's default message).
    Unknown codes give an :class:`UnknownKafkaError`. Raises ValueError for 0 (``NONE``).
    """
    if code == NO_ERROR:
        raise ValueError("error code 0 (NONE) means success: there is no error to make")
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        return UnknownKafkaError(code, message)
    return cls(message)
