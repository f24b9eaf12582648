"""A prometheus_client collector for kproducer's metrics (``pip install kproducer[prometheus]``).

Register one collector for the producers of a process; every scrape measures them then::

    from prometheus_client import start_http_server
    from kproducer.metrics_prometheus import ProducerCollector

    collector = ProducerCollector.register(producer)   # on prometheus_client's default registry
    start_http_server(8000)

Names: ``kproducer_<metric>`` for Java's producer-metrics, ``kproducer_topic_<metric>`` (label ``topic``)
and ``kproducer_node_<metric>`` (label ``node_id``, e.g. ``node-1``) for the per-topic and per-node ones,
dashes as underscores; every sample has the label ``client_id``. Java's ``-total`` metrics are counters
(exposed with the ``_total`` suffix), the others gauges. A rate or average with nothing recorded in its
window is NaN, as in Java. See docs/metrics.md.
"""
from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Union

try:
    from prometheus_client import REGISTRY
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("kproducer.metrics_prometheus needs prometheus_client: pip install 'kproducer[prometheus]'") \
        from e

from .producer.metrics import NODE_GROUP, PRODUCER_GROUP, TOPIC_GROUP

if TYPE_CHECKING:
    from .producer.kafka_producer import Producer

_PREFIX = {PRODUCER_GROUP: "", TOPIC_GROUP: "topic_", NODE_GROUP: "node_"}
_LABEL = {"topic": "topic", "node-id": "node_id"}

Family = Union[CounterMetricFamily, GaugeMetricFamily]


class ProducerCollector:
    """Collects the metrics of the producers added to it (held weakly: a producer that is garbage
    collected drops out). Thread-safe."""

    def __init__(self, *producers: "Producer", namespace: str = "kproducer") -> None:
        self.namespace = namespace
        self._producers: "weakref.WeakSet[Producer]" = weakref.WeakSet()
        self._lock = threading.Lock()
        for p in producers:
            self.add(p)

    @classmethod
    def register(cls, *producers: "Producer", registry: Any = None,
                 namespace: str = "kproducer") -> "ProducerCollector":
        """A collector for ``producers``, registered on ``registry`` (prometheus_client's default one
        when None)."""
        collector = cls(*producers, namespace=namespace)
        (REGISTRY if registry is None else registry).register(collector)
        return collector

    def add(self, producer: "Producer") -> None:
        with self._lock:
            self._producers.add(producer)

    def remove(self, producer: "Producer") -> None:
        with self._lock:
            self._producers.discard(producer)

    def collect(self) -> Iterator[Family]:
        """One metric family per kproducer metric, with a sample for each producer (and topic or node)."""
        with self._lock:
            producers = list(self._producers)
        families: Dict[str, Family] = {}
        order: List[str] = []
        for producer in producers:
            client_id = producer.client_id
            for metric in producer.metric_list():
                counter = metric.name.endswith("-total")
                base = metric.name[:-6] if counter else metric.name
                name = f"{self.namespace}_{_PREFIX[metric.group]}{base}".replace("-", "_").replace(".", "_")
                labels: Tuple[str, ...] = ("client_id",) + tuple(_LABEL.get(k, k) for k in metric.tags)
                family = families.get(name)
                if family is None:
                    factory = CounterMetricFamily if counter else GaugeMetricFamily
                    family = families[name] = factory(name, metric.description, labels=labels)
                    order.append(name)
                family.add_metric([client_id, *metric.tags.values()], metric.value)
        for name in order:
            yield families[name]

    def describe(self) -> List[Family]:
        """Nothing up front: the metrics of topics and nodes appear as producers use them (and the
        registry then does not call collect() at registration)."""
        return []


def register(*producers: "Producer", registry: Optional[Any] = None, namespace: str = "kproducer") -> ProducerCollector:
    """Shortcut for :meth:`ProducerCollector.register`."""
    return ProducerCollector.register(*producers, registry=registry, namespace=namespace)


__all__ = ["ProducerCollector", "register"]
