"""What a consumer reads and where it is: Kafka's ``SubscriptionState``.

Theory of operation
-------------------
A consumer either *subscribes* (to topics or a pattern: the group decides which partitions
it gets) or is *assigned* partitions by hand (``assign``: no group membership, no
rebalances); never both at once, as in Kafka. For each partition it currently owns it keeps:

- the *position*: the offset of the next record ``poll()`` will return. It moves forward
  when records are handed to the application, and jumps on ``seek``;
- whether the position must first be *reset* (no committed offset, out of range, or
  ``seek_to_beginning/end``), and with which strategy (earliest or latest);
- the last high watermark a fetch reported (for lag);
- whether it is paused.

A partition with no position yet is *initializing*: the consumer asks the group coordinator
for the committed offset, and failing that applies ``auto_offset_reset``. The *consumed*
offsets (the positions) are what ``commit()`` commits: "everything before this has been
handed to you".

Pure bookkeeping: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from minikafka.errors import IllegalStateError
from minikafka.topic import TopicPartition

EARLIEST, LATEST, NONE = "earliest", "latest", "none"


@dataclass
class PartitionState:
    position: int | None = None
    leader_epoch: int = -1  # of the last record consumed (Kafka's FetchPosition epoch)
    reset_strategy: str | None = None  # pending reset
    committed_checked: bool = False  # the coordinator was asked for a committed offset
    highwater: int | None = None
    log_start: int | None = None
    paused: bool = False


class SubscriptionState:
    def __init__(self, auto_offset_reset: str = LATEST) -> None:
        self.default_reset = auto_offset_reset
        self.subscription: set[str] = set()
        self.pattern: re.Pattern | None = None
        self.user_assignment: bool = False
        self.listener = None
        self.assignment: dict[TopicPartition, PartitionState] = {}

    # --- subscribe / assign -------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener=None) -> None:
        if self.user_assignment:
            raise IllegalStateError(
                "Subscription to topics, partitions and pattern are mutually exclusive: "
                "call unsubscribe() before subscribe() after assign()")
        self.listener = listener
        if pattern is not None:
            self.pattern = re.compile(pattern)
            self.subscription = set()
        else:
            self.pattern = None
            self.subscription = set(topics)

    def change_subscription(self, topics: Iterable[str]) -> bool:
        """A pattern matched a new set of topics; True if it changed."""
        topics = set(topics)
        changed = topics != self.subscription
        self.subscription = topics
        return changed

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        if self.subscription or self.pattern is not None:
            raise IllegalStateError(
                "Subscription to topics, partitions and pattern are mutually exclusive: "
                "call unsubscribe() before assign() after subscribe()")
        self.user_assignment = True
        self._set_assignment(partitions)

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        self._set_assignment(partitions)

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = list(dict.fromkeys(partitions))
        self.assignment = {tp: self.assignment.get(tp) or PartitionState() for tp in sorted(wanted)}

    def unsubscribe(self) -> None:
        self.subscription = set()
        self.pattern = None
        self.user_assignment = False
        self.assignment = {}
        self.listener = None

    @property
    def partitions_auto_assigned(self) -> bool:
        return bool(self.subscription) or self.pattern is not None

    # --- positions --------------------------------------------------------------------------------

    def assigned(self, tp: TopicPartition) -> PartitionState:
        state = self.assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"No current assignment for partition {tp}")
        return state

    def seek(self, tp: TopicPartition, offset: int) -> None:
        state = self.assigned(tp)
        state.position = offset
        state.reset_strategy = None

    def request_reset(self, tp: TopicPartition, strategy: str) -> None:
        state = self.assigned(tp)
        state.position = None
        state.reset_strategy = strategy

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, s in self.assignment.items() if s.position is None]

    def fetchable(self) -> list[TopicPartition]:
        return [tp for tp, s in self.assignment.items() if s.position is not None and not s.paused]

    def all_consumed(self) -> dict[TopicPartition, int]:
        return {tp: s.position for tp, s in self.assignment.items() if s.position is not None}
