"""The checker's reader: a consumer that writes down every record it sees, in order.

Theory of operation
-------------------
A ``Reader`` is a client state machine (added with ``cluster.add_client``) that reads
every partition of one topic from offset 0 with plain Fetch requests (``replica_id`` -1,
as a consumer, so a broker serves only what is below its high watermark), from each
partition's leader, and records each fetch's records as one ``Poll`` in a ``History``.
It commits nothing and belongs to no group: it is the simplest consumer that can show
how the cluster behaves, and nothing it does can hide an anomaly.

It learns leaders from Metadata requests, asked of the brokers in turn (one broker's
cache may be stale, or the broker dead), and asks again when a fetch says the broker
is not (or no longer) the leader, or the epoch it named is fenced or unknown. A dead
broker refuses the connection (``Disconnected``); a cut-off one stays silent, so every
request has a timeout. Either way the reader forgets that leader and asks for metadata
again, after ``retry_backoff_ms`` (every broker may be down).

Two uses:

- *polling* during a workload (``final=False``): long-polls (``max_wait_ms``) for ever,
  until ``stop()``;
- the *final read* (``final=True``, see ``final_read``): reads each partition from its
  log start up to its high watermark, then stops. Its polls are marked ``final`` and
  ``History.final_reads`` says which partitions it read completely.

Offsets out of range: below the log start (retention deleted them) the reader moves to
the log start; above the log end (the log was cut back under it, as an unclean election
does) it waits and asks again until the log grows past its position. It never moves its
position backwards, as a consumer with ``auto_offset_reset`` might: a non-monotonic poll
in a history is the cluster's doing, never the reader's.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any, Hashable

from minikafka.checker.history import FinalRead, History
from minikafka.errors import IllegalArgumentError
from minikafka.messages import (
    CONSUMER_REPLICA_ID,
    ERROR_NAMES,
    NO_ERROR,
    OFFSET_OUT_OF_RANGE,
    Disconnected,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
)
from minikafka.node import NodeId, StateMachine
from minikafka.records import MemoryRecords


class Reader(StateMachine):
    def __init__(
        self, node_id: NodeId, topic: str, *, bootstrap: list[int], history: History | None = None,
        final: bool = False, max_wait_ms: int = 200, request_timeout_ms: int = 1_000,
        retry_backoff_ms: int = 100, max_bytes: int = 1024 * 1024,
    ) -> None:
        super().__init__(node_id)
        if not bootstrap:
            raise IllegalArgumentError("a reader needs at least one bootstrap broker")
        self.topic = topic
        self.bootstrap = list(bootstrap)
        self.history = history if history is not None else History()
        self.final = final
        # The final read wants the high watermark now, not new data: no long poll.
        self.max_wait_ms = 0 if final else max_wait_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_bytes = max_bytes
        self.positions: dict[int, int] = {}
        self.leaders: dict[int, tuple[int, int] | None] = {}  # partition -> (leader, epoch)
        self.high_watermarks: dict[int, int] = {}
        self.log_starts: dict[int, int] = {}
        self.done: set[int] = set()  # final read: partitions read up to their high watermark
        self.stopped = False
        self.stats: Counter = Counter()
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[str, int]] = {}  # corr -> ("fetch" | "metadata", broker)
        self._fetching: set[int] = set()  # brokers with a fetch in flight
        self._backing_off: set[int] = set()
        self._epochs: dict[int, int] = {}  # the newest leader epoch seen, per partition
        self._next_broker = 0

    # --- views -----------------------------------------------------------------------------------

    @property
    def partitions(self) -> list[int]:
        return sorted(self.positions)

    @property
    def finished(self) -> bool:
        """Final read: every partition read up to its high watermark."""
        return bool(self.positions) and self.done >= set(self.positions)

    def stop(self) -> None:
        self.stopped = True

    # --- inputs ------------------------------------------------------------------------------------

    def on_start(self) -> None:
        self._request_metadata()

    def on_timer(self, key: Hashable) -> None:
        if self.stopped:
            return
        kind, arg = key
        if kind == "timeout":
            request = self._pending.pop(arg, None)
            if request is None:
                return
            what, broker = request
            self.stats["timeouts"] += 1
            if what == "fetch":
                self._fetching.discard(broker)
                self._forget_leader(broker)
            self._request_metadata()
        elif kind == "backoff":
            self._backing_off.discard(arg)
            if arg == "metadata":
                self._request_metadata()
            else:
                self._fetch()

    def on_message(self, src: NodeId, message: Any) -> None:
        if self.stopped:
            return
        if isinstance(message, Disconnected):
            self._disconnected(message.node)
            return
        request = self._pending.pop(message.correlation_id, None)
        if request is None:
            return  # the answer to a request we gave up on
        self.cancel_timer(("timeout", message.correlation_id))
        if isinstance(message, MetadataResponse):
            self._on_metadata(message)
        elif isinstance(message, FetchResponse):
            self._fetching.discard(request[1])
            self._on_fetch(request[1], message)

    def _disconnected(self, broker: NodeId) -> None:
        """The broker's process is gone (its port refused us): every request to it is lost."""
        lost = [corr for corr, (_, b) in self._pending.items() if b == broker]
        if not lost:
            return
        self.stats["disconnections"] += 1
        for corr in lost:
            self._pending.pop(corr)
            self.cancel_timer(("timeout", corr))
        self._fetching.discard(broker)
        self._forget_leader(broker)
        self._retry_metadata_later()  # after a pause: every broker may be down

    # --- metadata ----------------------------------------------------------------------------------

    def _send(self, what: str, broker: int, message_for) -> None:
        corr = next(self._correlation)
        self._pending[corr] = (what, broker)
        self.send(broker, message_for(corr))
        self.set_timer(("timeout", corr), self.request_timeout_ms)

    def _request_metadata(self) -> None:
        if any(what == "metadata" for what, _ in self._pending.values()) or "metadata" in self._backing_off:
            return
        # In turn: the broker we asked last may be dead or its cache stale.
        broker = self.bootstrap[self._next_broker % len(self.bootstrap)]
        self._next_broker += 1
        self.stats["metadata requests"] += 1
        self._send("metadata", broker, lambda corr: MetadataRequest(corr, (self.topic,)))

    def _retry_metadata_later(self) -> None:
        if "metadata" not in self._backing_off:
            self._backing_off.add("metadata")
            self.set_timer(("backoff", "metadata"), self.retry_backoff_ms)

    def _on_metadata(self, response: MetadataResponse) -> None:
        topic = next((t for t in response.topics if t.name == self.topic), None)
        if topic is None or topic.error != NO_ERROR or not topic.partitions:
            self._retry_metadata_later()
            return
        missing = False
        for pm in topic.partitions:
            self.positions.setdefault(pm.partition, 0)
            if pm.leader_epoch < self._epochs.get(pm.partition, -1):
                # A broker that has not heard of the latest election: ask another.
                self.stats["stale metadata"] += 1
                missing = True
            elif pm.error == NO_ERROR and pm.leader >= 0:
                self.leaders[pm.partition] = (pm.leader, pm.leader_epoch)
                self._epochs[pm.partition] = pm.leader_epoch
            else:
                self.leaders[pm.partition] = None
                missing = True
        if missing:
            self._retry_metadata_later()
        self._fetch()

    def _forget_leader(self, broker: int) -> None:
        for p, leader in self.leaders.items():
            if leader is not None and leader[0] == broker:
                self.leaders[p] = None

    # --- fetch ---------------------------------------------------------------------------------------

    def _fetch(self) -> None:
        by_leader: dict[int, list[FetchPartition]] = {}
        for p in self.partitions:
            leader = self.leaders.get(p)
            if leader is None or (self.final and p in self.done):
                continue
            broker, epoch = leader
            by_leader.setdefault(broker, []).append(FetchPartition(
                self.topic, p, self.positions[p], current_leader_epoch=epoch, partition_max_bytes=self.max_bytes))
        for broker, parts in sorted(by_leader.items()):
            if broker in self._fetching or broker in self._backing_off:
                continue
            self._fetching.add(broker)
            self.stats["fetches"] += 1
            self._send("fetch", broker, lambda corr, parts=tuple(parts): FetchRequest(
                corr, CONSUMER_REPLICA_ID, self.max_wait_ms, 1, parts, self.max_bytes))

    def _on_fetch(self, broker: int, response: FetchResponse) -> None:
        trouble = False
        for part in response.partitions:
            p = part.partition
            if part.topic != self.topic or p not in self.positions:
                continue
            if part.error == NO_ERROR:
                self.high_watermarks[p] = part.high_watermark
                self.log_starts[p] = part.log_start_offset
                self._take_records(p, part.records)
                if self.final and self.positions[p] >= part.high_watermark:
                    self.done.add(p)
            elif part.error == OFFSET_OUT_OF_RANGE and 0 <= self.positions[p] < part.log_start_offset:
                self.stats["moved to log start"] += 1
                self.positions[p] = part.log_start_offset
            else:
                # Out of range above the log end: wait for the log to grow back past us.
                # Any other error: the leader moved, or we named a stale epoch: ask again.
                self.stats[ERROR_NAMES.get(part.error, str(part.error))] += 1
                if part.error != OFFSET_OUT_OF_RANGE:
                    self.leaders[p] = None
                    self._request_metadata()
                trouble = True
        if trouble:
            # Errors come back at once: without a pause the reader would spin.
            self._backing_off.add(broker)
            self.set_timer(("backoff", broker), self.retry_backoff_ms)
        if not self.finished:
            self._fetch()

    def _take_records(self, partition: int, raw: bytes) -> None:
        if not raw:
            return
        position = self.positions[partition]
        records = []
        # A fetch returns whole batches, the first of which may start before our
        # position; a fetch may also end inside a batch (max bytes), which we skip.
        for batch in MemoryRecords(raw).batches(allow_partial_tail=True):
            if batch.last_offset < position:
                continue
            records.extend(r for r in batch.records() if r.offset >= position)
        if records:
            self.history.poll(self.node_id, self.topic, partition, records, time_ms=self.now, final=self.final)
            self.positions[partition] = records[-1].offset + 1
            self.stats["records"] += len(records)

    def final_reads(self) -> dict[tuple[str, int], FinalRead]:
        out = {}
        for p in self.partitions:
            start = self.log_starts.get(p, 0)
            out[(self.topic, p)] = FinalRead(start, self.high_watermarks.get(p, start), p in self.done)
        return out


def start_reader(cluster, topic: str, history: History, **kwargs: Any) -> Reader:
    """Add a polling ``Reader`` of ``topic`` to ``cluster``; it records into ``history``."""
    node_id = cluster.add_client(
        "reader", lambda nid: Reader(nid, topic, bootstrap=list(cluster.broker_ids), history=history, **kwargs))
    return cluster.world.nodes[node_id]


def final_read(cluster, topic: str, history: History, *, timeout_ms: int = 60_000, **kwargs: Any) -> bool:
    """Read every partition of ``topic`` from its log start to its high watermark into
    ``history`` (polls marked ``final``; ``history.final_reads`` set). True if every
    partition was read completely within ``timeout_ms`` of simulated time."""
    node_id = cluster.add_client(
        "final", lambda nid: Reader(nid, topic, bootstrap=list(cluster.broker_ids), history=history,
                                    final=True, **kwargs))
    reader: Reader = cluster.world.nodes[node_id]
    complete = cluster.run_until(lambda: reader.finished, timeout_ms)
    reader.stop()
    cluster.world.crash(node_id)  # its timers and late answers die with it
    history.final_reads.update(reader.final_reads())
    return complete
