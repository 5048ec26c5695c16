"""RecordAccumulator and ProducerBatch: where records wait to be sent.

Theory of operation
-------------------
``producer.send()`` only *appends*: the record joins the last open ``ProducerBatch`` of
its partition (one deque of batches per partition) or starts a new one. The Sender later
asks two questions, exactly as Kafka's and kafka-python's Sender do:

``ready(metadata, now)``
    Which brokers lead a partition whose first batch may go now? A batch may go when it is
    full (another batch queues behind it, or it holds ``batch_size`` bytes), when it has
    lingered ``linger_ms``, when a flush or close is under way, or when a ``send()`` is
    blocked waiting for buffer memory; never while it backs off after a failure
    (``retry_backoff_ms``) or while its partition is muted. Whether a fresh batch may go is a
    rule (``minikafka.rules.batch_ready``, notebook 05's exercise), asked through
    ``self.rules`` (the cluster's for its producers: Kafka's by default); a retried batch
    (closed: its bytes are sealed, Kafka counts it as full) goes when its backoff is over.

``drain(metadata, nodes, max_size, now)``
    Take at most one batch per partition for each ready broker, up to ``max_size`` bytes
    per broker: that is one ProduceRequest's worth. Draining *closes* a batch: its bytes
    (a v2 ``RecordBatch``, compressed as configured) are built once and never change, so a
    retry resends exactly the same bytes, with the same producer id, epoch and sequence.

Memory: every batch reserves ``max(batch_size, record size)`` bytes of ``buffer_memory``
when it is created and gives them back when it completes (``deallocate``), as Kafka's
BufferPool does. When a new batch does not fit, ``append`` says how many bytes it needs and
the producer blocks (runs the world) until batches complete or ``max_block_ms`` passes.

Idempotence (a ``transaction_manager`` is given): a batch gets its sequence number when it
is first drained; the next sequence for the partition moves on by its record count. A
retried batch goes back into its deque *in sequence order* and keeps its sequence; it may
be sent again only when it is the lowest unresolved sequence of its partition (Kafka's
rule), so retries reach the broker in order and the broker's dedup and order checks hold.

Never: no clock (every method takes ``now`` in milliseconds), no I/O, no threads. A batch
completes once; its final state never changes.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

from minikafka.clients.future import FutureProduceResult, FutureRecordMetadata, Waiter
from minikafka.errors import IllegalStateError, KafkaConfigurationError, KafkaError
from minikafka.records import HEADER_SIZE, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, Compression, Record, RecordBatch
from minikafka.rules import REFERENCE, Rules
from minikafka.topic import TopicPartition


# --- sizes -------------------------------------------------------------------------------------


def _varint_size(value: int) -> int:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF  # zig-zag, as the encoder does
    return (v.bit_length() + 6) // 7 or 1  # 7 bits a byte; 0 takes one byte too


def _bytes_size(b: bytes | None) -> int:
    return _varint_size(-1) if b is None else _varint_size(len(b)) + len(b)


def record_size_in_bytes(offset_delta: int, timestamp_delta: int, key: bytes | None,
                         value: bytes | None, headers: Iterable[tuple[str, bytes | None]]) -> int:
    """The exact size of one record inside an uncompressed v2 batch (Kafka's
    ``DefaultRecord.sizeInBytes``): a length varint, then the body."""
    headers = list(headers)
    body = 1 + _varint_size(timestamp_delta) + _varint_size(offset_delta)  # attributes, deltas
    body += _bytes_size(key) + _bytes_size(value) + _varint_size(len(headers))
    for h_key, h_value in headers:
        body += _bytes_size(h_key.encode("utf-8")) + _bytes_size(h_value)
    return _varint_size(body) + body


def estimate_size_in_bytes(key: bytes | None, value: bytes | None,
                           headers: Iterable[tuple[str, bytes | None]] = ()) -> int:
    """A batch holding just this record, uncompressed: what ``max_request_size`` is checked
    against when ``send()`` is called."""
    return HEADER_SIZE + record_size_in_bytes(0, 0, key, value, headers)


# --- batches ------------------------------------------------------------------------------------


class FinalState(enum.IntEnum):
    ABORTED = 0
    FAILED = 1
    SUCCEEDED = 2


class ProducerBatch:
    """The records for one partition that travel together in one v2 RecordBatch."""

    def __init__(self, tp: TopicPartition, batch_size: int, now: int, *,
                 reserved_bytes: int = 0, wait: Waiter | None = None) -> None:
        self.topic_partition = tp
        self.batch_size = batch_size
        self.created = now
        self.last_attempt = now  # linger and backoff count from here
        self.last_append = now
        self.drained: int | None = None
        self.attempts = 0
        self.records: list[Record] = []
        self.size_in_bytes = HEADER_SIZE  # uncompressed estimate while open
        self.max_record_size = 0
        self.reserved_bytes = reserved_bytes
        self.produce_future = FutureProduceResult(tp, wait)
        self._record_futures: list[FutureRecordMetadata] = []
        self._retry = False
        self._final_state: FinalState | None = None
        # Set when the batch is closed (first drained): the bytes sent on every attempt.
        self.buffer: bytes | None = None
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE

    # -- filling
    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def is_closed(self) -> bool:
        return self.buffer is not None

    def is_full(self) -> bool:
        return self.is_closed or self.size_in_bytes >= self.batch_size

    def try_append(self, timestamp_ms: int, key: bytes | None, value: bytes | None,
                   headers: list[tuple[str, bytes]], now: int) -> FutureRecordMetadata | None:
        """Add a record if it fits (the first record always fits); None if it does not."""
        if self.is_closed:
            return None
        base_ts = self.records[0].timestamp if self.records else timestamp_ms
        size = record_size_in_bytes(len(self.records), timestamp_ms - base_ts, key, value, headers)
        if self.records and self.size_in_bytes + size > self.batch_size:
            return None
        self.records.append(Record(key, value, timestamp_ms, tuple(headers)))
        self.size_in_bytes += size
        self.max_record_size = max(self.max_record_size, size)
        self.last_append = now
        future = FutureRecordMetadata(
            self.produce_future, len(self.records) - 1, timestamp_ms, None,
            len(key) if key is not None else -1,
            len(value) if value is not None else -1,
            sum(len(k.encode("utf-8")) + len(v or b"") for k, v in headers) if headers else -1,
        )
        self._record_futures.append(future)
        return future

    def close(self, compression: Compression, producer_id: int = NO_PRODUCER_ID,
              producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
              is_transactional: bool = False) -> None:
        """Freeze the records into the bytes every attempt will send."""
        if self.is_closed:
            raise IllegalStateError(f"{self} is already closed")
        self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence
        self.buffer = bytes(RecordBatch.build(
            self.records, compression=compression, producer_id=producer_id,
            producer_epoch=producer_epoch, base_sequence=base_sequence, is_transactional=is_transactional,
        ))

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence != NO_SEQUENCE

    # -- attempts
    def in_retry(self) -> bool:
        return self._retry

    def retry(self, now: int) -> None:
        self._retry = True
        self.attempts += 1
        self.last_attempt = now
        self.last_append = now

    def has_reached_delivery_timeout(self, delivery_timeout_ms: int, now: int) -> bool:
        return now - self.created >= delivery_timeout_ms

    # -- completion (kafka-python's state rules)
    @property
    def final_state(self) -> FinalState | None:
        return self._final_state

    @property
    def is_done(self) -> bool:
        return self.produce_future.is_done

    def complete(self, base_offset: int, log_append_time: int = -1) -> bool:
        return self.done(base_offset=base_offset, timestamp_ms=log_append_time)

    def complete_exceptionally(self, exception: BaseException) -> bool:
        return self.done(top_level_exception=exception)

    def abort(self, exception: BaseException) -> None:
        if self._final_state is not None:
            raise IllegalStateError(f"Batch has already been completed in final state: {self._final_state.name}")
        self._final_state = FinalState.ABORTED
        self.produce_future.success((-1, -1, lambda _: exception))

    def done(self, base_offset: int | None = None, timestamp_ms: int | None = None,
             top_level_exception: BaseException | None = None) -> bool:
        """Set the final state; True if this call did. A late answer for a batch that has
        already failed (it expired while in flight) is ignored; a second change to a
        succeeded batch is a bug."""
        final_state = FinalState.SUCCEEDED if top_level_exception is None else FinalState.FAILED
        if self._final_state is None:
            self._final_state = final_state
            if final_state is FinalState.SUCCEEDED:
                self.produce_future.success((base_offset, timestamp_ms, None))
            else:
                self.produce_future.success((-1, -1, lambda _: top_level_exception))
            return True
        if self._final_state is FinalState.SUCCEEDED:
            raise IllegalStateError(f"A SUCCEEDED batch must not attempt another state change to {final_state.name}")
        return False

    def __repr__(self) -> str:
        seq = f", base_sequence={self.base_sequence}" if self.has_sequence else ""
        return f"ProducerBatch({self.topic_partition}, records={self.record_count}, attempts={self.attempts}{seq})"


@dataclass
class AppendResult:
    future: FutureRecordMetadata | None
    batch_is_full: bool = False
    new_batch_created: bool = False
    abort_for_new_batch: bool = False
    memory_needed: int = 0  # > 0: no buffer memory for a new batch; block and try again


class RecordAccumulator:
    """Per-partition deques of ProducerBatch, with Kafka's readiness and drain rules."""

    DEFAULT_CONFIG = {
        "batch_size": 16384,
        "compression_type": None,
        "linger_ms": 0,
        "retry_backoff_ms": 100,
        "delivery_timeout_ms": 120000,
        "request_timeout_ms": 30000,
        "buffer_memory": 32 * 1024 * 1024,
        "max_in_flight_requests_per_connection": 5,
    }

    def __init__(self, *, transaction_manager: Any = None, wait: Waiter | None = None, rules: Rules = REFERENCE,
                 **configs: Any) -> None:
        self.rules = rules  # the "ready" rule (minikafka.rules.batch_ready): Kafka's by default
        self.config = dict(self.DEFAULT_CONFIG)
        for key in self.config:
            if key in configs:
                self.config[key] = configs[key]
        self.compression = Compression.parse(self.config["compression_type"])
        self._transaction_manager = transaction_manager
        self._wait = wait
        self._closed = False
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}  # insertion order: deterministic
        self._incomplete: dict[ProducerBatch, None] = {}  # an ordered set
        self.muted: set[TopicPartition] = set()
        self._drain_index = 0
        self._flushes_in_progress = 0
        self._waiting_for_memory = 0
        self.used_memory = 0
        if self.config["delivery_timeout_ms"] < self.config["linger_ms"] + self.config["request_timeout_ms"]:
            raise KafkaConfigurationError(
                "Must set delivery_timeout_ms higher than linger_ms + request_timeout_ms "
                f"(delivery_timeout_ms={self.config['delivery_timeout_ms']}, linger_ms={self.config['linger_ms']}, "
                f"request_timeout_ms={self.config['request_timeout_ms']})"
            )

    @property
    def delivery_timeout_ms(self) -> int:
        return self.config["delivery_timeout_ms"]

    @property
    def available_memory(self) -> int:
        return self.config["buffer_memory"] - self.used_memory

    # --- appending ------------------------------------------------------------------------------

    def append(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes]], now: int, *, abort_on_new_batch: bool = False) -> AppendResult:
        """Add a record. ``abort_on_new_batch`` (KIP-480): instead of starting a new batch,
        say so, so that the producer can move a sticky partitioner on first."""
        if self._closed:
            raise IllegalStateError("RecordAccumulator is closed")
        dq = self._batches.setdefault(tp, deque())
        if dq:
            last = dq[-1]
            future = last.try_append(timestamp_ms, key, value, headers, now)
            if future is not None:
                return AppendResult(future, len(dq) > 1 or last.is_full())
        if abort_on_new_batch:
            return AppendResult(None, abort_for_new_batch=True)
        size = HEADER_SIZE + record_size_in_bytes(0, 0, key, value, headers)
        reserve = max(self.config["batch_size"], size)
        if reserve > self.available_memory:
            return AppendResult(None, memory_needed=reserve)
        batch = ProducerBatch(tp, self.config["batch_size"], now, reserved_bytes=reserve, wait=self._wait)
        future = batch.try_append(timestamp_ms, key, value, headers, now)
        assert future is not None  # an empty batch takes any record
        self.used_memory += reserve
        dq.append(batch)
        self._incomplete[batch] = None
        return AppendResult(future, len(dq) > 1 or batch.is_full(), new_batch_created=True)

    # --- readiness and draining ----------------------------------------------------------------------

    def ready(self, metadata: Any, now: int) -> tuple[set, int | None, bool]:
        """(brokers with a sendable partition, ms until the next batch may become sendable or
        None, whether some partition with data has no known leader)."""
        ready_nodes: set = set()
        next_ready_check: int | None = None
        unknown_leaders_exist = False
        # flush(), close() or a send() blocked for buffer memory: everything may go now
        flushing = self._waiting_for_memory > 0 or self._closed or self._flushes_in_progress > 0
        batch_ready = self.rules.batch_ready
        linger_ms = self.config["linger_ms"]
        for tp, dq in self._batches.items():
            if not dq:
                continue
            leader = metadata.leader_for_partition(tp)
            if leader is None:
                unknown_leaders_exist = True
                continue
            if leader in ready_nodes or tp in self.muted:
                continue
            batch = dq[0]
            backing_off = batch.attempts > 0 and batch.last_attempt + self.config["retry_backoff_ms"] > now
            time_to_wait = self.config["retry_backoff_ms"] if backing_off else linger_ms
            waited = now - batch.last_attempt
            if batch.buffer is not None:  # a retry: its bytes are sealed (full), it goes when its backoff is over
                sendable = True
            else:
                sendable = batch_ready(batch.size_in_bytes, batch.batch_size, len(dq) - 1, waited, time_to_wait,
                                       flushing)
            if sendable and not backing_off:
                ready_nodes.add(leader)
            else:
                # Kafka's rule is never "not yet" once the wait is over; a student's may be: ask
                # it again 1 ms on (0 would wake the Sender at the same instant forever).
                left = time_to_wait - waited if waited < time_to_wait else 1
                next_ready_check = left if next_ready_check is None else min(next_ready_check, left)
        return ready_nodes, next_ready_check, unknown_leaders_exist

    def _should_stop_drain(self, first: ProducerBatch) -> bool:
        tm = self._transaction_manager
        if tm is None:
            return False
        if not tm.has_producer_id():
            return True  # no producer id yet: nothing may be stamped or sent
        tp = first.topic_partition
        if first.has_sequence:
            # A retry goes only when it is the oldest unresolved batch of its partition;
            # later retries wait their turn, so the broker sees sequences in order.
            return tm.first_in_flight_sequence(tp) != first.base_sequence
        return tm.in_flight_count(tp) >= tm.max_in_flight_per_partition

    def drain_batches_for_one_node(self, metadata: Any, node_id: Any, max_size: int, now: int) -> list[ProducerBatch]:
        ready: list[ProducerBatch] = []
        size = 0
        partitions = metadata.partitions_for_broker(node_id)
        if not partitions:
            return ready
        # Start where the last drain stopped, so no partition starves behind the others.
        self._drain_index %= len(partitions)
        start = self._drain_index
        while True:
            tp = partitions[self._drain_index]
            self._drain_index = (self._drain_index + 1) % len(partitions)
            dq = self._batches.get(tp)
            if dq and tp not in self.muted:
                first = dq[0]
                backoff = first.attempts > 0 and first.last_attempt + self.config["retry_backoff_ms"] > now
                if not backoff:
                    batch_bytes = len(first.buffer) if first.is_closed else first.size_in_bytes
                    if size + batch_bytes > max_size and ready:
                        break  # a single oversized batch still goes, alone
                    if not self._should_stop_drain(first):
                        batch = dq.popleft()
                        if not batch.is_closed:
                            self._close(batch)
                        size += len(batch.buffer)
                        batch.drained = now
                        ready.append(batch)
            if self._drain_index == start:
                break
        return ready

    def _close(self, batch: ProducerBatch) -> None:
        tm = self._transaction_manager
        if tm is None:
            batch.close(self.compression)
            return
        tp = batch.topic_partition
        pid = tm.producer_id_and_epoch
        batch.close(self.compression, pid.producer_id, pid.epoch, tm.sequence_number(tp),
                    is_transactional=getattr(tm, "transactional", False))
        tm.increment_sequence_number(tp, batch.record_count)

    def drain(self, metadata: Any, nodes: Iterable, max_size: int, now: int) -> dict:
        """{node: [batches]} for one ProduceRequest per node."""
        return {node: self.drain_batches_for_one_node(metadata, node, max_size, now) for node in nodes}

    def reenqueue(self, batch: ProducerBatch, now: int) -> None:
        """Put a failed batch back at the front of its deque to be retried."""
        batch.retry(now)
        dq = self._batches.setdefault(batch.topic_partition, deque())
        if not batch.has_sequence:
            dq.appendleft(batch)
            return
        # Keep sequence order: before the first batch that is unsequenced or later.
        for i, other in enumerate(dq):
            if not other.has_sequence or other.base_sequence > batch.base_sequence:
                dq.insert(i, batch)
                return
        dq.append(batch)

    # --- expiry, completion, flush, close -----------------------------------------------------------------

    def expired_batches(self, now: int) -> list[ProducerBatch]:
        """Batches that waited ``delivery_timeout_ms`` in the accumulator: taken out."""
        expired = []
        for dq in self._batches.values():
            while dq and dq[0].has_reached_delivery_timeout(self.delivery_timeout_ms, now):
                expired.append(dq.popleft())
        return expired

    def next_expiry_time(self) -> int | None:
        times = [dq[0].created + self.delivery_timeout_ms for dq in self._batches.values() if dq]
        return min(times) if times else None

    def deallocate(self, batch: ProducerBatch) -> None:
        if self._incomplete.pop(batch, False) is not False:
            self.used_memory -= batch.reserved_bytes

    def begin_flush(self) -> None:
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        self._flushes_in_progress = max(0, self._flushes_in_progress - 1)

    def flush_in_progress(self) -> bool:
        return self._flushes_in_progress > 0

    def begin_wait_for_memory(self) -> None:
        self._waiting_for_memory += 1

    def end_wait_for_memory(self) -> None:
        self._waiting_for_memory = max(0, self._waiting_for_memory - 1)

    def incomplete(self) -> list[ProducerBatch]:
        return list(self._incomplete)

    @property
    def has_incomplete(self) -> bool:
        return bool(self._incomplete)

    def has_undrained(self) -> bool:
        return any(self._batches.values())

    def batches(self, tp: TopicPartition) -> list[ProducerBatch]:
        """The batches waiting for ``tp`` (a copy, for tests and pictures)."""
        return list(self._batches.get(tp, ()))

    def abort_batches(self, error: KafkaError) -> None:
        """Fail every incomplete batch, in flight or not (a forced close)."""
        for batch in self.incomplete():
            dq = self._batches.get(batch.topic_partition)
            if dq and batch in dq:
                dq.remove(batch)
            if batch.final_state is None:
                batch.abort(error)
            self.deallocate(batch)

    def abort_undrained_batches(self, error: KafkaError, predicate=lambda batch: True) -> None:
        """Fail the batches still waiting in a deque (and matching ``predicate``)."""
        for batch in self.incomplete():
            dq = self._batches.get(batch.topic_partition)
            if dq and batch in dq and predicate(batch):
                dq.remove(batch)
                batch.abort(error)
                self.deallocate(batch)

    def close(self) -> None:
        """No more appends; everything queued becomes ready at once."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed
