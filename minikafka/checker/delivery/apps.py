"""The applications: one poll loop per strategy (at-most-once, at-least-once, auto-commit,
exactly-once), and for exactly-once the ``ExternalStore`` that keeps results and offsets together
with the listener that seeks to its offsets (``SeekToStoredOffsets``).

The theory of operation of the whole is ``minikafka.checker.delivery``'s."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from minikafka.checker.delivery.history import RecordKey
from minikafka.checker.delivery.plan import GROUP, TOPIC
from minikafka.checker.delivery.report import AT_LEAST_ONCE, AT_MOST_ONCE, AUTO_COMMIT, EXACTLY_ONCE
from minikafka.clients.consumer import ConsumerRebalanceListener, KafkaConsumer
from minikafka.errors import KafkaError
from minikafka.topic import TopicPartition

if TYPE_CHECKING:
    from minikafka.checker.delivery.runner import _Run

# --- the external store (exactly-once) ----------------------------------------------------------------------


class ExternalStore:
    """A database standing outside Kafka (a dict; it survives consumer crashes). ``write``
    puts a record's result and the partition's next offset in one update: both or
    neither, which is the whole trick."""

    def __init__(self) -> None:
        self.data: dict[tuple, Any] = {}

    def write(self, record: Any, result: Any) -> None:
        t, p, o = record.topic, record.partition, record.offset
        self.data.update({("result", t, p, o): result, ("offset", t, p): o + 1})

    def offset(self, tp: TopicPartition) -> int | None:
        """The next offset to process in ``tp``, or None if nothing of it was stored."""
        return self.data.get(("offset", tp.topic, tp.partition))

    def offsets(self) -> dict[TopicPartition, int]:
        return {TopicPartition(k[1], k[2]): v for k, v in sorted(self.data.items()) if k[0] == "offset"}

    def results(self) -> dict[RecordKey, Any]:
        return {k[1:]: v for k, v in sorted(self.data.items()) if k[0] == "result"}


class SeekToStoredOffsets(ConsumerRebalanceListener):
    """On assignment, start each partition where the store says (its beginning if the
    store has nothing of it), whatever Kafka's committed offsets are."""

    def __init__(self, consumer: KafkaConsumer, store: ExternalStore) -> None:
        self.consumer = consumer
        self.store = store

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        for tp in assigned:
            offset = self.store.offset(tp)
            if offset is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)


# --- the applications: one poll loop per strategy -----------------------------------------------------------


class _App:
    """One consumer's application thread. ``turn()`` is one iteration of its poll loop;
    a crash (``_Run.process`` returning True) ends the turn, the thread dying with the
    process. ``backlog`` is what it polled and has not processed."""

    enable_auto_commit = False

    def __init__(self, run: "_Run") -> None:
        self.run = run
        p = run.params
        self.consumer = KafkaConsumer(
            bootstrap_servers=run.cluster, group_id=GROUP, auto_offset_reset="earliest",
            enable_auto_commit=self.enable_auto_commit, auto_commit_interval_ms=p.auto_commit_interval_ms,
            session_timeout_ms=p.session_timeout_ms, heartbeat_interval_ms=p.heartbeat_interval_ms,
            max_poll_interval_ms=p.max_poll_interval_ms, max_poll_records=run.plan.max_poll_records,
            fetch_max_wait_ms=p.poll_timeout_ms)
        self.name = str(self.consumer.node_id)
        self.backlog: deque = deque()
        self.subscribe()

    def subscribe(self) -> None:
        self.consumer.subscribe([TOPIC])

    @property
    def alive(self) -> bool:
        return self.consumer.alive

    def crashed(self) -> None:
        self.backlog.clear()  # the application's memory dies with the process

    def poll(self, timeout_ms: int | None = None) -> list:
        timeout = self.run.params.poll_timeout_ms if timeout_ms is None else timeout_ms
        batch = self.consumer.poll(timeout_ms=timeout)
        return [r for _, records in sorted(batch.items()) for r in records]

    def commit(self, records: list) -> bool:
        """Commit the ends of ``records``' partitions; False if refused."""
        offsets = {}
        for r in records:
            offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
        try:
            self.consumer.commit(offsets)
        except KafkaError as e:  # the group moved on (CommitFailedError) or no answer in time
            self.run.history.commit(self.name, offsets, error=e)
            return False
        self.run.history.commit(self.name, offsets)
        return True

    def process_backlog(self, limit: int | None = None) -> None:
        n = 0
        while self.backlog and (limit is None or n < limit):
            record = self.backlog.popleft()
            n += 1
            if self.run.process(self, record):
                return

    def turn(self) -> None:
        raise NotImplementedError


class _AtMostOnce(_App):
    def turn(self) -> None:
        records = self.poll()
        if not records:
            return
        # Commit first: from now on a crash loses whatever of the batch is unprocessed. If
        # the commit is refused, nothing is processed: processing could make a record twice
        # (after a CommitFailedError the member rejoins and the partition's owner starts
        # again from the committed offset). At most once allows the other outcome: after a
        # mere timeout we keep the partition, positioned past the batch, and skip it.
        if not self.commit(records):
            return
        self.backlog.extend(records)
        self.process_backlog()


class _AtLeastOnce(_App):
    def turn(self) -> None:
        records = self.poll()
        if not records:
            return
        self.backlog.extend(records)
        self.process_backlog()
        if self.alive:
            # If refused (the group rebalanced while we worked), the partition's next owner
            # processes the batch again: duplicates, never loss.
            self.commit(records)


class _AutoCommit(_App):
    enable_auto_commit = True

    def turn(self) -> None:
        # The main thread polls (an auto commit may go out in there, covering every record
        # polled so far, queued ones included) and hands the records to the worker's queue;
        # the worker gets through ``handoff`` of them per iteration. With work queued, the
        # poll does not wait: the main thread only keeps the queue fed.
        records = self.poll(0 if self.backlog else None)
        self.backlog.extend(records)
        self.process_backlog(self.run.plan.handoff)


class _ExactlyOnce(_App):
    def subscribe(self) -> None:
        self.consumer.subscribe([TOPIC], listener=SeekToStoredOffsets(self.consumer, self.run.store))

    def turn(self) -> None:
        records = self.poll()
        self.backlog.extend(records)
        self.process_backlog()  # each record: one atomic write of result and offset; no commit


_APPS = {AT_MOST_ONCE: _AtMostOnce, AT_LEAST_ONCE: _AtLeastOnce, AUTO_COMMIT: _AutoCommit,
         EXACTLY_ONCE: _ExactlyOnce}
