"""What a coordinator may ask of the broker that hosts it: ``CoordinatorContext``.

Theory of operation
-------------------
The group coordinator and the transaction coordinator live inside a broker, but they are not the
broker. In Kafka 4 they run on the *coordinator runtime*, which hands each one a narrow set of
services: a clock (``Time``), a timer (``CoordinatorTimer``), a writer to the partitions of its
internal topic (``PartitionWriter``), the metadata image, and a way to talk to other nodes. A
coordinator never touches the broker's replica manager, request handlers or log manager.

This class is that set, and the only thing a coordinator gets (``GroupCoordinator(context)``,
``TransactionCoordinator(context)``). Each method below is one thing a coordinator needs:

- *time and timers*: ``now``, ``set_timer``, ``cancel_timer`` (the broker routes a fired timer
  back to the coordinator that set it);
- *the network*: ``send``;
- *metadata*: ``topic``, ``partition_state``, ``partition_states``, ``topic_id``, ``topic_name``;
- *its internal topic*: ``local_log`` (to replay a partition it now leads), ``append_internal``
  (acks=all, answered once replicated) and ``write_txn_markers`` (markers for partitions this
  broker leads);
- *the broker's other services*: ``allocate_producer_id``, ``group_partition_for`` (the
  transaction coordinator needs the ``__consumer_offsets`` partition of a group), and the rule
  that decodes ``__consumer_offsets`` keys (``decode_offsets_key``, a student's seam).

It reads the broker's state when asked (the metadata image is replaced as the metadata log
moves on), never copies it; it does no I/O and reads no clock of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Hashable

if TYPE_CHECKING:
    from minikafka.broker.broker import Broker
    from minikafka.storage.log import Log


class CoordinatorContext:
    def __init__(self, broker: "Broker") -> None:
        self._broker = broker

    # --- who and when ----------------------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self._broker.broker_id

    @property
    def incarnation(self) -> Any:
        """Which start of this broker: member ids drawn after a restart differ from the last run's."""
        return self._broker.incarnation

    @property
    def config(self):
        return self._broker.config

    @property
    def now(self) -> int:
        return self._broker.now

    def set_timer(self, key: Hashable, delay_ms: int) -> None:
        self._broker.set_timer(key, delay_ms)

    def cancel_timer(self, key: Hashable) -> None:
        self._broker.cancel_timer(key)

    def send(self, dst: Any, message: Any) -> None:
        self._broker.send(dst, message)

    # --- metadata ---------------------------------------------------------------------------------

    def topic(self, name: str):
        """The topic's config (``TopicConfig``: partitions, replication, configs), or None."""
        return self._broker.topics.get(name)

    def partition_state(self, topic: str, partition: int):
        """The partition's leader, epoch, replicas and ISR as this broker's metadata has them, or None."""
        return self._broker.partition_states.get((topic, partition))

    def partition_states(self, topic: str) -> list[tuple[int, Any]]:
        """[(partition, state), ...] of one topic, in the order the metadata named them."""
        return [(p, state) for (t, p), state in self._broker.partition_states.items() if t == topic]

    def topic_id(self, name: str) -> str | None:
        return self._broker.image.topic_id(name)

    def topic_name(self, topic_id: str) -> str | None:
        return self._broker.image.topic_names.get(topic_id)

    # --- the internal topics ------------------------------------------------------------------------

    def local_log(self, topic: str, partition: int) -> "Log | None":
        """This broker's replica of the partition (to replay it), or None if it has none."""
        replica = self._broker.replica_manager.partitions.get((topic, partition))
        return None if replica is None else replica.log

    def append_internal(self, topic: str, partition: int, records: bytes, timeout_ms: int,
                        callback: Callable[[int], None]) -> None:
        """Append to a partition this broker leads, acks=all; ``callback(error)`` once replicated."""
        self._broker.replica_manager.append_internal(topic, partition, records, timeout_ms, callback)

    def write_txn_markers(self, request: Any, reply: Callable[[Any], None]) -> None:
        """Write transaction markers to partitions this broker leads (as a WriteTxnMarkers request would)."""
        self._broker.replica_manager.write_txn_markers(request, reply)

    # --- the broker's other services --------------------------------------------------------------

    def allocate_producer_id(self, callback: Callable[[int, int], None]) -> None:
        self._broker.allocate_producer_id(callback)

    def group_partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds ``group_id``."""
        return self._broker.group_coordinator.partition_for(group_id)

    def decode_offsets_key(self, key: bytes) -> tuple:
        """A ``__consumer_offsets`` record key, read by the broker's rules:
        ("offset", group, topic, partition) or ("group", group)."""
        return self._broker.rules.decode_key(key)
