"""How a producer's parts are put together: one function, used by :class:`kproducer.Producer` and by the
test harness of :mod:`kproducer.testing` alike, so that what a test drives is what users run.

``wire_producer(config, clock, transport)`` builds Metadata, the TransactionManager (idempotence or
transactions), the BufferPool, the RecordAccumulator, the NetworkClient over ``transport`` and the Sender
(not started). The only knobs beyond the settings are the ones tests need: the jitter of the backoffs (Java's
+/-20% by default; 0 makes every backoff exact) and names.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from .._version import __version__
from ..clock import Clock, ExponentialBackoff
from ..config import ProducerConfig
from ..network.channel_security import ChannelSecurity
from ..network.client import NetworkClient
from ..network.connection_states import ClusterConnectionStates
from ..network.metadata import Metadata
from ..network.transport import Transport
from .accumulator import RecordAccumulator
from .buffer_pool import BufferPool
from .metrics import ProducerMetrics
from .sender import Sender
from .transaction_manager import TransactionManager

#: Java's jitter of the exponential backoffs (retries, reconnects, metadata refreshes, connection setup)
JAVA_JITTER = 0.2


class ProducerParts(NamedTuple):
    """The parts of one producer, as :func:`wire_producer` connected them."""

    config: ProducerConfig
    clock: Clock
    metadata: Metadata
    transaction_manager: Optional[TransactionManager]
    pool: BufferPool
    accumulator: RecordAccumulator
    transport: Transport
    client: NetworkClient
    sender: Sender


def wire_producer(config: ProducerConfig, clock: Clock, transport: Transport, *, client_id: str,
                  security: Optional[ChannelSecurity] = None, software_version: str = __version__,
                  jitter: float = JAVA_JITTER, retry_jitter: Optional[float] = None,
                  reconnect_jitter: Optional[float] = None, sender_name: Optional[str] = None,
                  metrics: Optional[ProducerMetrics] = None) -> ProducerParts:
    """Build a producer's parts from its settings, its clock and its transport (a
    :class:`~kproducer.network.selector.Selector`, or a scripted one in tests). ``security`` defaults to what
    the settings ask for. ``jitter`` is the backoffs' jitter; ``retry_jitter`` / ``reconnect_jitter`` override
    it for produce retries / reconnects; ``metrics`` is the Sender's metrics (by default one built from the
    settings: metrics.num.samples, metrics.sample.window.ms, statistics.interval.ms, stats_cb). The Sender is
    returned unstarted."""
    cfg = config
    if security is None:
        from ..security import channel_security

        security = channel_security(cfg)
    metadata = Metadata(cfg.bootstrap_servers, cfg.metadata_max_age_ms, cfg.retry_backoff_ms,
                        cfg.metadata_max_idle_ms, clock, refresh_backoff_max_ms=cfg.retry_backoff_max_ms,
                        refresh_backoff_jitter=jitter)
    txn: Optional[TransactionManager] = None
    if cfg.enable_idempotence:
        txn = TransactionManager(cfg.transactional_id, cfg.transaction_timeout_ms, clock)
    pool = BufferPool(cfg.buffer_memory, cfg.batch_size, clock)
    accumulator = RecordAccumulator(
        cfg.batch_size, cfg.linger_ms, cfg.retry_backoff_ms, cfg.retry_backoff_max_ms, cfg.delivery_timeout_ms,
        pool, cfg.compression_type, cfg.compression_level, clock, txn,
        backoff=ExponentialBackoff(cfg.retry_backoff_ms, cfg.retry_backoff_max_ms,
                                   jitter if retry_jitter is None else retry_jitter),
        max_request_size=cfg.max_request_size,
    )
    client = NetworkClient(
        metadata, transport, client_id=client_id,
        max_in_flight=cfg.max_in_flight_requests_per_connection, request_timeout_ms=cfg.request_timeout_ms,
        reconnect_backoff_ms=cfg.reconnect_backoff_ms, reconnect_backoff_max_ms=cfg.reconnect_backoff_max_ms,
        connection_setup_timeout_ms=cfg.socket_connection_setup_timeout_ms,
        connection_setup_timeout_max_ms=cfg.socket_connection_setup_timeout_max_ms,
        connection_setup_timeout_jitter=jitter,
        connections_max_idle_ms=cfg.connections_max_idle_ms,
        allow_auto_topic_creation=cfg.allow_auto_create_topics, software_version=software_version, clock=clock,
        security=security, metadata_recovery_strategy=cfg.metadata_recovery_strategy,
        rebootstrap_trigger_ms=cfg.metadata_recovery_rebootstrap_trigger_ms,
    )
    client.on_error = cfg.error_cb  # errors that belong to no record (confluent-kafka's error_cb)
    client.states = ClusterConnectionStates(
        cfg.reconnect_backoff_ms, cfg.reconnect_backoff_max_ms,
        ExponentialBackoff(cfg.reconnect_backoff_ms, cfg.reconnect_backoff_max_ms,
                           jitter if reconnect_jitter is None else reconnect_jitter))
    if metrics is None:
        metrics = ProducerMetrics(clock, samples=cfg.metrics_num_samples, window_ms=cfg.metrics_sample_window_ms,
                                  stats_cb=cfg.stats_cb, stats_interval_ms=cfg.statistics_interval_ms,
                                  client_id=client_id)
    sender = Sender(
        client, metadata, accumulator, acks=cfg.acks, retries=cfg.retries,
        max_request_size=cfg.max_request_size, request_timeout_ms=cfg.request_timeout_ms,
        guarantee_message_order=cfg.max_in_flight_requests_per_connection == 1,
        transaction_manager=txn, retry_backoff_ms=cfg.retry_backoff_ms, clock=clock, metrics=metrics,
        name=sender_name or f"kproducer-network-thread | {client_id}",
    )
    return ProducerParts(cfg, clock, metadata, txn, pool, accumulator, transport, client, sender)


__all__ = ["JAVA_JITTER", "ProducerParts", "wire_producer"]
