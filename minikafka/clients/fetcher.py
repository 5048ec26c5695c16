"""The consumer's fetch side: Kafka's ``Fetcher`` (and its offset-reset logic).

Theory of operation
-------------------
For every assigned partition that has a position, is not paused and has nothing buffered,
the fetcher asks the partition's leader for records from that position: one Fetch request
per leader at a time, carrying all of that leader's partitions (``fetch_min_bytes``,
``fetch_max_wait_ms``, ``max_partition_fetch_bytes``, ``fetch_max_bytes``). The broker
holds the request until enough bytes are there or the wait is over (a long poll), so an
idle consumer costs one request per ``fetch_max_wait_ms``, not a busy loop.

Answers are buffered per partition, *completed fetches*, and handed out by
``fetched_records(max_records)``: that, not the fetch, is what moves the position forward,
so records fetched but not yet returned are never "consumed". A buffered answer whose fetch
offset no longer equals the position (the user seeked, or the partition was revoked) is
dropped.

Positions that are missing are found first: the committed offset if the group has one
(asked by the ``ConsumerCoordinator``), else ``auto_offset_reset`` through a ListOffsets
request to the leader (``earliest``: the log start; ``latest``: the high watermark;
``none``: ``NoOffsetForPartitionError`` on the next ``poll``). A fetch that finds its offset
out of range (retention deleted it, or a ``seek`` went too far) resets the same way.

Transactions (KIP-98): with ``isolation_level='read_committed'`` fetches ask for data below
the last stable offset only, and the broker lists the aborted transactions in the range; a
batch of an aborted transaction (its producer id, from the transaction's first offset to
its abort marker) is dropped, as Kafka's consumer does. Control batches (the markers) are
never handed out under either level, but the position moves past them, so a consumer whose
partition ends with a marker is not stuck fetching it forever.

Errors that mean "your metadata is stale" (not the leader, unknown partition, fenced epoch)
refresh metadata and retry; nothing here blocks or reads a clock.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple

from minikafka.clients.subscription_state import EARLIEST, NONE
from minikafka.errors import NoOffsetForPartitionError, OffsetOutOfRangeError
from minikafka.messages import (
    CONSUMER_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_ERROR,
    OFFSET_OUT_OF_RANGE,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from minikafka.records import MemoryRecords
from minikafka.topic import TopicPartition

if TYPE_CHECKING:
    from minikafka.clients.consumer_network_client import ConsumerNetworkClient


class ConsumerRecord(NamedTuple):
    """One record as ``poll()`` returns it (kafka-python's ``ConsumerRecord``, field for field)."""

    topic: str
    partition: int
    leader_epoch: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class CompletedFetch:
    def __init__(self, tp: TopicPartition, fetch_offset: int, records: list[ConsumerRecord],
                 next_offset: int = -1) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.records = deque(records)
        self.next_offset = next_offset  # past the last whole batch (markers and dropped records too)


class Fetcher:
    def __init__(self, client: "ConsumerNetworkClient", config: dict) -> None:
        self.client = client
        self.config = config
        self.subscriptions = client.subscriptions
        self.completed: dict[TopicPartition, CompletedFetch] = {}
        self._fetching: set[Any] = set()  # leaders with a fetch in flight
        self._listing: set[TopicPartition] = set()  # partitions with a ListOffsets in flight
        # A broker that just failed us (not the leader, gone): not asked again before this
        # time, or a stale leader would be asked in a tight loop until metadata catches up.
        self.backoff_until: dict[Any, int] = {}
        self.errors: list[Exception] = []  # raised by the next poll()
        self.records_fetched = 0
        self.fetch_requests = 0

    # --- positions ------------------------------------------------------------------------------------

    def reset_offsets_if_needed(self) -> None:
        """Partitions with a pending reset: ask their leaders for the earliest/latest offset."""
        by_leader: dict[Any, list[tuple[TopicPartition, int]]] = {}
        for tp, state in self.subscriptions.assignment.items():
            if state.position is not None or state.reset_strategy is None or tp in self._listing:
                continue
            if state.reset_strategy == NONE:
                state.reset_strategy = None
                self.errors.append(NoOffsetForPartitionError(
                    f"no committed offset for {tp} and auto_offset_reset='none' "
                    "(seek() it, or use 'earliest' or 'latest')"))
                continue
            leader = self.client.metadata.leader_for_partition(tp)
            if leader is None:
                self.client.metadata.request_update()
                continue
            if self.backoff_until.get(leader, 0) > self.client.now:
                continue
            ts = EARLIEST_TIMESTAMP if state.reset_strategy == EARLIEST else LATEST_TIMESTAMP
            by_leader.setdefault(leader, []).append((tp, ts))
        for leader, parts in sorted(by_leader.items(), key=lambda kv: str(kv[0])):
            self._listing.update(tp for tp, _ in parts)
            self.client.send_request(
                leader, lambda corr, parts=parts: ListOffsetsRequest(corr, tuple((tp.topic, tp.partition, ts)
                                                                               for tp, ts in parts),
                                                                     isolation_level=self.isolation_level),
                lambda response, leader=leader, parts=parts: self._on_list_offsets(leader, parts, response),
                lambda error, leader=leader, parts=parts: self._failed(leader, {tp for tp, _ in parts}))

    def _failed(self, leader: Any, listing: set[TopicPartition] = frozenset()) -> None:
        self._fetching.discard(leader)
        self._listing.difference_update(listing)
        self._back_off(leader)

    def _back_off(self, leader: Any) -> None:
        self.backoff_until[leader] = self.client.now + self.config["retry_backoff_ms"]
        self.client.metadata.request_update()

    def next_retry(self) -> int | None:
        """When a broker we backed off from may be asked again (for the node's wake-up)."""
        pending = [t for t in self.backoff_until.values() if t > self.client.now]
        return min(pending) if pending else None

    def _on_list_offsets(self, leader: Any, parts: list[tuple[TopicPartition, int]],
                         response: ListOffsetsResponse) -> None:
        self._listing.difference_update(tp for tp, _ in parts)
        for topic, partition, error, _ts, offset in response.partitions:
            tp = TopicPartition(topic, partition)
            state = self.subscriptions.assignment.get(tp)
            if state is None or state.position is not None or state.reset_strategy is None:
                continue
            if error == NO_ERROR and offset >= 0:
                state.position = offset
                state.reset_strategy = None
            else:
                self._back_off(leader)

    def offsets_for(self, partitions: list[TopicPartition], timestamp: int, callback) -> None:
        """ListOffsets for ``partitions`` (earliest/latest/a time), for ``beginning_offsets``,
        ``end_offsets`` and ``offsets_for_times``; ``callback({tp: (offset, timestamp)})``
        gets what the leaders answered (missing leaders: nothing for that partition)."""
        by_leader: dict[Any, list[TopicPartition]] = {}
        for tp in partitions:
            leader = self.client.metadata.leader_for_partition(tp)
            if leader is None:
                self.client.metadata.request_update()
            else:
                by_leader.setdefault(leader, []).append(tp)
        results: dict[TopicPartition, tuple[int, int]] = {}
        pending = set(by_leader)
        if not pending:
            callback(results)
            return

        def done(leader: Any, response: ListOffsetsResponse | None) -> None:
            if response is not None:
                for topic, partition, error, ts, offset in response.partitions:
                    if error == NO_ERROR:
                        results[TopicPartition(topic, partition)] = (offset, ts)
            pending.discard(leader)
            if not pending:
                callback(results)

        for leader, tps in sorted(by_leader.items(), key=lambda kv: str(kv[0])):
            self.client.send_request(
                leader, lambda corr, tps=tps: ListOffsetsRequest(corr, tuple((tp.topic, tp.partition, timestamp)
                                                                             for tp in tps),
                                                                 isolation_level=self.isolation_level),
                lambda response, leader=leader: done(leader, response),
                lambda error, leader=leader: done(leader, None))

    # --- fetching ------------------------------------------------------------------------------------------

    def send_fetches(self) -> None:
        by_leader: dict[Any, list[FetchPartition]] = {}
        for tp in self.subscriptions.fetchable():
            if tp in self.completed:
                continue
            leader = self.client.metadata.leader_for_partition(tp)
            if leader is None:
                self.client.metadata.request_update()
                continue
            if leader in self._fetching or self.backoff_until.get(leader, 0) > self.client.now:
                continue
            state = self.subscriptions.assignment[tp]
            by_leader.setdefault(leader, []).append(FetchPartition(
                tp.topic, tp.partition, state.position, current_leader_epoch=self.client.leader_epoch(tp),
                partition_max_bytes=self.config["max_partition_fetch_bytes"]))
        c = self.config
        for leader, parts in sorted(by_leader.items(), key=lambda kv: str(kv[0])):
            self._fetching.add(leader)
            self.fetch_requests += 1
            offsets = {TopicPartition(p.topic, p.partition): p.fetch_offset for p in parts}
            self.client.send_request(
                leader, lambda corr, parts=tuple(parts): FetchRequest(
                    corr, CONSUMER_REPLICA_ID, c["fetch_max_wait_ms"], c["fetch_min_bytes"], parts,
                    c["fetch_max_bytes"], isolation_level=self.isolation_level),
                lambda response, leader=leader, offsets=offsets: self._on_fetch(leader, offsets, response),
                lambda error, leader=leader: self._failed(leader),
                timeout_ms=c["request_timeout_ms"] + c["fetch_max_wait_ms"])

    def _on_fetch(self, leader: Any, offsets: dict[TopicPartition, int], response: FetchResponse) -> None:
        self._fetching.discard(leader)
        for part in response.partitions:
            tp = TopicPartition(part.topic, part.partition)
            state = self.subscriptions.assignment.get(tp)
            fetch_offset = offsets.get(tp)
            if state is None or state.position is None or state.position != fetch_offset:
                continue  # revoked or seeked while the fetch was out: its data is stale
            if part.error == NO_ERROR:
                state.highwater = part.high_watermark
                state.log_start = part.log_start_offset
                records, next_offset = self._parse(tp, fetch_offset, part.records, part.aborted_transactions)
                if records or next_offset > fetch_offset:
                    self.completed[tp] = CompletedFetch(tp, fetch_offset, records, next_offset)
                    self.records_fetched += len(records)
            elif part.error == OFFSET_OUT_OF_RANGE:
                strategy = self.subscriptions.default_reset
                if strategy == NONE:
                    self.errors.append(OffsetOutOfRangeError(
                        f"fetch offset {fetch_offset} is out of range for {tp} and auto_offset_reset='none'"))
                    state.paused = True  # until the user seeks
                else:
                    state.position = None
                    state.reset_strategy = strategy
            else:  # not the leader (any more), unknown partition, fenced epoch: stale metadata
                self._back_off(leader)

    @property
    def isolation_level(self) -> int:
        return 1 if self.config.get("isolation_level") == "read_committed" else 0

    def _parse(self, tp: TopicPartition, position: int, raw: bytes,
               aborted: tuple = ()) -> tuple[list[ConsumerRecord], int]:
        """(records to hand out, the offset after the last whole batch)."""
        out = []
        next_offset = position
        # Kafka's rule: an aborted transaction starts at its first offset and ends at its
        # producer's abort marker; the list is consumed in first-offset order.
        pending = sorted(aborted, key=lambda a: a[1]) if self.isolation_level == 1 else []
        aborted_producers: set[int] = set()
        # Whole batches come back; the first may start before our position and the last may
        # be cut short by the byte limits: skip below the position, drop the partial tail.
        for batch in MemoryRecords(raw).batches(allow_partial_tail=True):
            while pending and pending[0][1] <= batch.last_offset:
                aborted_producers.add(pending.pop(0)[0])
            if batch.last_offset < position:
                continue
            next_offset = max(next_offset, batch.next_offset)
            if batch.is_control_batch:
                aborted_producers.discard(batch.producer_id)  # the transaction ends here
                continue
            if batch.is_transactional and batch.producer_id in aborted_producers:
                continue
            epoch = batch.partition_leader_epoch
            ts_type = int(batch.timestamp_type)
            for r in batch.records():
                if r.offset < position:
                    continue
                headers = list(r.headers)
                out.append(ConsumerRecord(
                    tp.topic, tp.partition, epoch, r.offset, r.timestamp, ts_type, r.key, r.value, headers,
                    None, -1 if r.key is None else len(r.key), -1 if r.value is None else len(r.value),
                    sum(len(k.encode()) + len(v or b"") for k, v in headers) if headers else -1))
        return out, next_offset

    def fetched_records(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Hand out up to ``max_records`` buffered records and move the positions past them."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        left = max_records
        for tp in list(self.completed):
            if left <= 0:
                break
            fetch = self.completed[tp]
            state = self.subscriptions.assignment.get(tp)
            if state is None or state.position is None or state.paused:
                del self.completed[tp]
                continue
            while fetch.records and fetch.records[0].offset < state.position:
                fetch.records.popleft()
            taken = []
            while fetch.records and left > 0:
                taken.append(fetch.records.popleft())
                left -= 1
            if taken:
                out[tp] = taken
                state.position = taken[-1].offset + 1
                state.leader_epoch = taken[-1].leader_epoch
            if not fetch.records:
                # past markers and aborted batches too (they hold offsets, no records for us)
                state.position = max(state.position, fetch.next_offset)
                del self.completed[tp]
        return out

    def has_buffered(self) -> bool:
        return any(f.records for f in self.completed.values())

    def drop_buffered(self, tp: TopicPartition | None = None) -> None:
        if tp is None:
            self.completed.clear()
        else:
            self.completed.pop(tp, None)
