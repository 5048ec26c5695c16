"""The Sender: the producer's network side, as a sans-I/O state machine.

Theory of operation
-------------------
In Kafka and kafka-python the Sender is a background thread looping over ``run_once``.
Here it is a ``StateMachine`` node: the runtime hands it one input at a time (a response,
a timer, or a call from ``KafkaProducer``) and, after each, the Sender runs the same loop
body once and says when it next wants to be woken (one timer, ``"poll"``):

1. **Request timeouts.** A request unanswered after ``request_timeout_ms`` closes its
   connection, as kafka-python does: *every* request in flight to that broker fails with
   ``RequestTimedOutError`` (retriable), and metadata is refreshed. A dead broker or a cut
   link looks exactly like this: the request, or its answer, is simply never delivered.
   A broker that has never answered on the current connection gets only
   ``socket_connection_setup_timeout_ms`` (Kafka's Java client: 10 s), as a TCP connect
   would; and requests that may go anywhere (metadata, producer id) prefer brokers with a
   live connection.
2. **Produce.** Ask the ``RecordAccumulator`` which leaders have a sendable partition;
   drain one ProduceRequest per ready broker (at most
   ``max_in_flight_requests_per_connection`` unanswered per broker); fail batches that have
   outlived ``delivery_timeout_ms`` with ``KafkaTimeoutError``. With ``acks=0`` no answer
   will come: the batch succeeds, offset -1, the moment its request is sent.
3. **Metadata.** Refresh when a leader is unknown, after an error that says metadata is
   stale (``NOT_LEADER_OR_FOLLOWER``, a timeout), or every ``metadata_max_age_ms``.
4. **Producer id.** An idempotent producer asks for one (InitProducerId) before it sends
   anything. A transactional one (``transactional_id``) gets it from its transaction
   coordinator instead, and its requests to the coordinator (``TransactionalRequests``,
   ``minikafka.clients.transactions``) go through this loop too, one at a time.

Answers to a ProduceRequest, per partition:

- no error (or ``DUPLICATE_SEQUENCE_NUMBER``: the broker already has it) -> the batch succeeds;
- a retriable error, or no answer within ``request_timeout_ms`` -> back into the
  accumulator after ``retry_backoff_ms``, while ``retries`` and ``delivery_timeout_ms``
  allow; otherwise the batch fails with that error. Non-retriable errors fail at once.

Ordering. Without idempotence, with ``max_in_flight_requests_per_connection > 1``, a
retried batch can land *after* a later batch of the same partition that succeeded first:
Kafka's famous reordering. With ``max_in_flight_requests_per_connection == 1`` the partition
is muted while a batch is in flight, so this cannot happen. With idempotence (Kafka's way,
not kafka-python's: kafka-python simply mutes the partition) up to 5 batches per partition
stay in flight; each carries (producer id, epoch, first sequence). If one fails, the broker
rejects the later ones with ``OUT_OF_ORDER_SEQUENCE_NUMBER``, which is retriable *while an
earlier sequence is unresolved*; retries go back in sequence order and are resent one at a
time, lowest sequence first, so the log keeps the send order with no gaps or duplicates.
When a sequence can no longer be resolved (its batch failed after being sent), the producer
takes a new producer id and starts its sequences again from 0.

Never: read a clock (``self.now`` is the time of the input), sleep, or do I/O.
Everything leaves through ``self.send``/``self.set_timer``.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Hashable, NamedTuple

from minikafka import errors
from minikafka.clients.cluster_metadata import ClusterMetadata
from minikafka.clients.record_accumulator import AppendResult, ProducerBatch, RecordAccumulator
from minikafka.errors import (
    BrokerResponseError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
)
from minikafka.messages import (
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    Disconnected,
    DUPLICATE_SEQUENCE_NUMBER,
    ERROR_NAMES,
    NO_ERROR,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
    ProducePartition,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
)
from minikafka.node import NodeId, StateMachine
from minikafka.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from minikafka.topic import TopicPartition

log = logging.getLogger(__name__)


def error_for_code(code: int, detail: str | None = None) -> BrokerResponseError:
    """An exception instance for a protocol error code."""
    cls = errors.for_code(code)
    if cls is BrokerResponseError:  # a code nobody named: keep the number and Kafka's name
        e = BrokerResponseError(detail or "")
        e.errno, e.message = code, ERROR_NAMES.get(code, "UNKNOWN_SERVER_ERROR")
        return e
    return cls(detail) if detail else cls()


# --- idempotence ------------------------------------------------------------------------------------


class ProducerIdAndEpoch(NamedTuple):
    producer_id: int
    epoch: int

    @property
    def is_valid(self) -> bool:
        return self.producer_id >= 0


_NO_PRODUCER = ProducerIdAndEpoch(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
_SEQ_MOD = 2**31


class TransactionManager:
    """The idempotent producer's state (Kafka keeps it in ``TransactionManager``; the
    transactional part is ``minikafka.clients.transactions``): the producer id and epoch,
    the next sequence per partition, and the batches sent but not yet resolved, by sequence."""

    max_in_flight_per_partition = 5  # what the broker remembers per producer (BATCHES_KEPT)

    def __init__(self) -> None:
        self.producer_id_and_epoch = _NO_PRODUCER
        self.transactional = False  # batches carry the transactional bit (a producer with a transactional_id)
        self._sequences: dict[TopicPartition, int] = {}
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = {}  # sorted by base_sequence
        self._last_acked_sequence: dict[TopicPartition, int] = {}
        self.next_init_attempt = 0
        self.resets = 0
        # An InitProducerId error no retry can mend (Java's TransactionManager "fatal error"):
        # every batch then fails with it, instead of waiting for a producer id that never comes.
        self.fatal_error: KafkaError | None = None

    def has_producer_id(self) -> bool:
        return self.producer_id_and_epoch.is_valid

    def set_producer_id_and_epoch(self, producer_id: int, epoch: int) -> None:
        self.producer_id_and_epoch = ProducerIdAndEpoch(producer_id, epoch)

    def reset_producer_id(self) -> None:
        """Forget the id and every sequence: the next id starts each partition at 0."""
        self.producer_id_and_epoch = _NO_PRODUCER
        self._sequences.clear()
        self._in_flight.clear()
        self._last_acked_sequence.clear()
        self.resets += 1

    def matches(self, batch: ProducerBatch) -> bool:
        return (batch.producer_id, batch.producer_epoch) == tuple(self.producer_id_and_epoch)

    # -- sequences
    def sequence_number(self, tp: TopicPartition) -> int:
        return self._sequences.get(tp, 0)

    def increment_sequence_number(self, tp: TopicPartition, increment: int) -> None:
        self._sequences[tp] = (self.sequence_number(tp) + increment) % _SEQ_MOD

    def last_acked_sequence(self, tp: TopicPartition) -> int:
        return self._last_acked_sequence.get(tp, -1)

    # -- unresolved batches (sent at least once, no final answer yet; retries included)
    def add_in_flight_batch(self, batch: ProducerBatch) -> None:
        queue = self._in_flight.setdefault(batch.topic_partition, [])
        if batch not in queue:
            queue.append(batch)
            queue.sort(key=lambda b: b.base_sequence)

    def remove_in_flight_batch(self, batch: ProducerBatch) -> None:
        queue = self._in_flight.get(batch.topic_partition)
        if queue and batch in queue:
            queue.remove(batch)

    def first_in_flight_sequence(self, tp: TopicPartition) -> int | None:
        queue = self._in_flight.get(tp)
        return queue[0].base_sequence if queue else None

    def in_flight_count(self, tp: TopicPartition) -> int:
        return len(self._in_flight.get(tp, ()))

    def has_earlier_unresolved(self, batch: ProducerBatch) -> bool:
        first = self.first_in_flight_sequence(batch.topic_partition)
        return first is not None and first < batch.base_sequence

    def on_acked(self, batch: ProducerBatch) -> None:
        tp = batch.topic_partition
        last = (batch.base_sequence + batch.record_count - 1) % _SEQ_MOD
        self._last_acked_sequence[tp] = max(self.last_acked_sequence(tp), last)
        self.remove_in_flight_batch(batch)


# --- the state machine -------------------------------------------------------------------------------


@dataclass
class InFlightRequest:
    correlation_id: int
    node: NodeId
    kind: str  # "produce" | "metadata" | "init_producer_id" | "txn"
    sent_at: int
    batches: list[ProducerBatch] = field(default_factory=list)


_POLL = "poll"


class Sender(StateMachine):
    """Turns the accumulator's batches into ProduceRequests and their answers into futures."""

    DEFAULT_CONFIG = {
        "acks": -1,
        "retries": float("inf"),
        "max_request_size": 1048576,
        "request_timeout_ms": 30000,
        "retry_backoff_ms": 100,
        "reconnect_backoff_ms": 50,
        "max_in_flight_requests_per_connection": 5,
        "metadata_max_age_ms": 300000,
        "socket_connection_setup_timeout_ms": 10000,
        "guarantee_message_order": False,
        "client_id": None,
        "allow_auto_create_topics": False,  # Metadata asks the brokers to create unknown topics (TCP only)
    }

    def __init__(self, node_id: NodeId, accumulator: RecordAccumulator, metadata: ClusterMetadata, *,
                 transaction_manager: TransactionManager | None = None, **configs: Any) -> None:
        super().__init__(node_id)
        self.config = dict(self.DEFAULT_CONFIG)
        for key in self.config:
            if key in configs:
                self.config[key] = configs[key]
        if self.config["client_id"] is None:
            self.config["client_id"] = str(node_id)
        self.accumulator = accumulator
        self.metadata = metadata
        self.transaction_manager = transaction_manager
        self.transactions = None  # a TransactionalRequests, for a producer with a transactional_id
        self._correlation = itertools.count(1)
        self._in_flight: dict[int, InFlightRequest] = {}  # by correlation id, in send order
        self._in_flight_batches: dict[ProducerBatch, None] = {}  # sent, awaiting a final answer
        self._node_backoff_until: dict[NodeId, int] = {}
        self._connected: set[NodeId] = set()  # brokers that answered on the current connection
        self._poll_at: int | None = None
        self._running = True
        self._force_closed = False
        self.in_step = False  # True while handling an input: user callbacks run then
        self._node_rotation = 0
        self.sensors: dict[str, int] = dict.fromkeys((
            "batch-total", "bytes-total", "connection-close-total", "metadata-request-total",
            "produce-request-total", "record-error-total", "record-retry-total", "record-send-total",
            "producer-id-request-total",
        ), 0)

    # --- what KafkaProducer calls (through the runtime) --------------------------------------------

    def append(self, tp: TopicPartition, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers: list, *, abort_on_new_batch: bool = False) -> AppendResult:
        if self.transactions is not None:
            self.transactions.maybe_add_partition(tp)
        result = self.accumulator.append(tp, timestamp_ms, key, value, headers, self.now,
                                         abort_on_new_batch=abort_on_new_batch)
        if result.batch_is_full or result.new_batch_created:
            # Deferred, not now: records sent in the same instant join the same batch, as
            # they would while a real Sender thread is busy elsewhere.
            self.wakeup()
        return result

    def add_topic(self, topic: str) -> None:
        self.metadata.add_topic(topic)
        self.wakeup()

    def wakeup(self) -> None:
        """Run the loop body at the current time (after the current input)."""
        if not self._force_closed:
            if self._poll_at != self.now:
                self._poll_at = self.now
                self.set_timer(_POLL, 0)

    def initiate_close(self) -> None:
        """Stop accepting records; send everything that is queued."""
        self._running = False
        self.accumulator.close()
        self.wakeup()

    def force_close(self) -> None:
        """Fail everything still pending and stop."""
        self._force_closed = True
        self._running = False
        self.accumulator.close()
        self.accumulator.abort_batches(IllegalStateError("Producer is closed forcefully."))
        self._in_flight.clear()
        self._in_flight_batches.clear()
        self.cancel_timer(_POLL)
        self._poll_at = None

    def in_flight_request_count(self, node: NodeId | None = None) -> int:
        return sum(1 for r in self._in_flight.values() if node is None or r.node == node)

    # --- StateMachine inputs -----------------------------------------------------------------------

    def handle(self, now: int, src: NodeId, message: Any) -> list:
        self.in_step = True
        try:
            return super().handle(now, src, message)
        finally:
            self.in_step = False

    def timer(self, now: int, key: Hashable) -> list:
        self.in_step = True
        try:
            return super().timer(now, key)
        finally:
            self.in_step = False

    def on_start(self) -> None:
        self._run_once()

    def on_timer(self, key: Hashable) -> None:
        if key == _POLL:
            self._poll_at = None
            self._run_once()

    def on_message(self, src: NodeId, message: Any) -> None:
        if self._force_closed:
            return
        if isinstance(message, Disconnected):  # the broker's process is gone
            self._close_connection(message.node, KafkaConnectionError(f"connection to broker {message.node} refused"))
            self._run_once()
            return
        request = self._in_flight.get(getattr(message, "correlation_id", None))
        if request is None or request.node != src:
            # An answer on a connection we already closed (it timed out): Kafka drops it too.
            return
        del self._in_flight[request.correlation_id]
        self._connected.add(src)
        if isinstance(message, ProduceResponse):
            self._handle_produce_response(request, message)
        elif isinstance(message, MetadataResponse):
            self.metadata.update(message, self.now)
        elif request.kind == "txn":
            self.transactions.handle(message)
        elif isinstance(message, InitProducerIdResponse):
            self._handle_init_producer_id_response(message)
        self._run_once()

    # --- the loop body -------------------------------------------------------------------------------

    def _run_once(self) -> None:
        if self._force_closed:
            return
        self._close_timed_out_connections()
        wake: list[int] = []
        wake.append(self._send_producer_data())
        wake.append(self._maybe_update_metadata())
        if self.transactions is not None:
            wake.append(self.transactions.poll())  # (its InitProducerId carries the transactional id)
        elif self.transaction_manager is not None and self.transaction_manager.fatal_error is not None:
            self.accumulator.abort_undrained_batches(self.transaction_manager.fatal_error)
        elif self.transaction_manager is not None and not self.transaction_manager.has_producer_id():
            wake.append(self._maybe_init_producer_id())
        wake.extend(self._deadline(r) for r in self._in_flight.values())
        self._schedule_poll([w for w in wake if w is not None])

    def _schedule_poll(self, times: list[int]) -> None:
        at = max(min(times), self.now) if times else None
        if at is None:
            if self._poll_at is not None:
                self.cancel_timer(_POLL)
                self._poll_at = None
        elif self._poll_at is None or at < self._poll_at or self._poll_at < self.now:
            self._poll_at = at
            self.set_timer(_POLL, at - self.now)

    def _send_producer_data(self) -> int | None:
        """Drain and send; returns when the loop next has produce work to look at."""
        now = self.now
        next_times: list[int] = []
        while True:
            ready_nodes, next_ready_check, unknown_leaders = self.accumulator.ready(self.metadata, now)
            if unknown_leaders:
                self.metadata.request_update()
            if next_ready_check is not None:
                next_times.append(now + next_ready_check)
            sendable = []
            for node in sorted(ready_nodes, key=str):
                backoff_until = self._node_backoff_until.get(node, 0)
                if backoff_until > now:
                    next_times.append(backoff_until)
                elif self.in_flight_request_count(node) < self.config["max_in_flight_requests_per_connection"]:
                    sendable.append(node)
            batches_by_node = self.accumulator.drain(self.metadata, sendable, self.config["max_request_size"], now)
            sent_any = False
            for node, batches in batches_by_node.items():
                if batches:
                    self._send_produce_request(node, batches)
                    sent_any = True
            if not sent_any:
                break
        self._expire_batches()
        next_times.extend(b.created + self.accumulator.delivery_timeout_ms for b in self._in_flight_batches)
        expiry = self.accumulator.next_expiry_time()
        if expiry is not None:
            next_times.append(expiry)
        return min(next_times) if next_times else None

    def _send_produce_request(self, node: NodeId, batches: list[ProducerBatch]) -> None:
        tm = self.transaction_manager
        acks = self.config["acks"]
        corr = next(self._correlation)
        for batch in batches:
            if acks != 0:
                self._in_flight_batches[batch] = None
            if tm is not None and batch.has_sequence and tm.matches(batch):
                tm.add_in_flight_batch(batch)
            if self.config["guarantee_message_order"]:
                self.accumulator.muted.add(batch.topic_partition)
            self.sensors["batch-total"] += 1
            self.sensors["bytes-total"] += len(batch.buffer)
            self.sensors["record-send-total"] += batch.record_count
        self.sensors["produce-request-total"] += 1
        self.send(node, ProduceRequest(
            corr, acks, self.config["request_timeout_ms"],
            tuple(ProducePartition(b.topic_partition.topic, b.topic_partition.partition, b.buffer) for b in batches),
            None if self.transactions is None else self.transactions.transactional_id,
        ))
        if acks == 0:
            # Nothing will answer: "sent" is all the producer will ever know.
            for batch in batches:
                self._complete_batch(batch, ProducePartitionResponse(*batch.topic_partition, NO_ERROR, -1))
        else:
            self._in_flight[corr] = InFlightRequest(corr, node, "produce", self.now, batches)

    def _expire_batches(self) -> None:
        now = self.now
        expired = self.accumulator.expired_batches(now)
        expired.extend(b for b in self._in_flight_batches
                       if b.final_state is None and b.has_reached_delivery_timeout(self.accumulator.delivery_timeout_ms, now))
        for batch in expired:
            self._fail_batch(batch, KafkaTimeoutError(
                f"Expiring {batch.record_count} record(s) for {batch.topic_partition}: "
                f"{now - batch.created} ms has passed since batch creation"))

    # --- requests other than produce ------------------------------------------------------------------

    def _least_loaded_node(self) -> tuple[NodeId | None, int | None]:
        """(the broker with the fewest requests in flight, or None and when one will be free)."""
        candidates = list(self.metadata.brokers or self.metadata.bootstrap_nodes)
        if not candidates:
            return None, None
        # Rotate the starting point, so a broker that stopped answering is not chosen forever.
        k = self._node_rotation % len(candidates)
        candidates = candidates[k:] + candidates[:k]
        usable = [n for n in candidates if self._node_backoff_until.get(n, 0) <= self.now]
        if not usable:
            return None, min(self._node_backoff_until[n] for n in candidates)
        node = min(usable, key=lambda n: (n not in self._connected, self.in_flight_request_count(n)))
        self._node_rotation += 1
        return node, None

    def _maybe_update_metadata(self) -> int | None:
        md = self.metadata
        if not md.topics() or any(r.kind == "metadata" for r in self._in_flight.values()):
            return None
        if not self._running and not self.accumulator.has_incomplete:
            return None  # closed and done: no more periodic refreshes
        max_age_at = None if md.last_refresh_ms is None else md.last_refresh_ms + self.config["metadata_max_age_ms"]
        if not md.need_update and (max_age_at is None or max_age_at > self.now):
            return max_age_at
        not_before = 0 if md.last_attempt_ms is None else md.last_attempt_ms + self.config["retry_backoff_ms"]
        if not_before > self.now:
            return not_before
        node, free_at = self._least_loaded_node()
        if node is None:
            return free_at
        corr = next(self._correlation)
        md.last_attempt_ms = self.now
        self.sensors["metadata-request-total"] += 1
        self.send(node, MetadataRequest(corr, tuple(md.topics()), self.config["allow_auto_create_topics"]))
        self._in_flight[corr] = InFlightRequest(corr, node, "metadata", self.now)
        return None

    def _maybe_init_producer_id(self) -> int | None:
        tm = self.transaction_manager
        if any(r.kind == "init_producer_id" for r in self._in_flight.values()):
            return None
        if tm.next_init_attempt > self.now:
            return tm.next_init_attempt
        node, free_at = self._least_loaded_node()
        if node is None:
            return free_at
        corr = next(self._correlation)
        self.sensors["producer-id-request-total"] += 1
        self.send(node, InitProducerIdRequest(corr))
        self._in_flight[corr] = InFlightRequest(corr, node, "init_producer_id", self.now)
        return None

    def send_transactional(self, node: NodeId, make) -> int:
        """Send a transaction request (``TransactionalRequests``); its correlation id."""
        corr = next(self._correlation)
        self.send(node, make(corr))
        self._in_flight[corr] = InFlightRequest(corr, node, "txn", self.now)
        return corr

    def _handle_init_producer_id_response(self, response: InitProducerIdResponse) -> None:
        tm = self.transaction_manager
        if response.error == NO_ERROR:
            tm.set_producer_id_and_epoch(response.producer_id, response.producer_epoch)
            return
        error = error_for_code(response.error)
        if error.retriable or response.error in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
            tm.next_init_attempt = self.now + self.config["retry_backoff_ms"]
            return
        name = ERROR_NAMES.get(response.error, str(response.error))
        tm.fatal_error = error_for_code(response.error, (
            f"the broker answered InitProducerId with {name}, an error no retry mends, so this "
            f"idempotent producer has no producer id and can send nothing (Kafka's producer fails "
            f"the same way); with enable_idempotence=False it would not ask for one"))
        log.warning("%s: %s", self.node_id, tm.fatal_error)
        self.accumulator.abort_undrained_batches(tm.fatal_error)

    def _deadline(self, request: InFlightRequest) -> int:
        if request.node in self._connected:
            return request.sent_at + self.config["request_timeout_ms"]
        return request.sent_at + min(self.config["request_timeout_ms"], self.config["socket_connection_setup_timeout_ms"])

    def _close_timed_out_connections(self) -> None:
        expired = {}
        for r in self._in_flight.values():
            if self._deadline(r) <= self.now:
                expired.setdefault(r.node, self._deadline(r) - r.sent_at)
        for node in sorted(expired, key=str):
            self._close_connection(node, RequestTimedOutError(f"Request timed out after {expired[node]} ms"))

    def _close_connection(self, node: NodeId, error: KafkaError) -> None:
        """What a client does when a connection dies: every request on it fails."""
        self.sensors["connection-close-total"] += 1
        self._connected.discard(node)
        self._node_backoff_until[node] = self.now + self.config["reconnect_backoff_ms"]
        failed = [r for r in self._in_flight.values() if r.node == node]
        for request in failed:
            del self._in_flight[request.correlation_id]
        for request in failed:
            if request.kind == "produce":
                for batch in request.batches:
                    self._complete_batch_with_exception(batch, error)
            elif request.kind == "metadata":
                self.metadata.request_update()
            elif request.kind == "init_producer_id":
                self.transaction_manager.next_init_attempt = self.now + self.config["retry_backoff_ms"]
            elif request.kind == "txn":
                self.transactions.failed(request.correlation_id)
        self.metadata.request_update()

    # --- answers to produce requests ----------------------------------------------------------------

    def _handle_produce_response(self, request: InFlightRequest, response: ProduceResponse) -> None:
        by_tp = {b.topic_partition: b for b in request.batches}
        for pr in response.partitions:
            batch = by_tp.pop(TopicPartition(pr.topic, pr.partition), None)
            if batch is not None:
                self._complete_batch(batch, pr)
        for batch in by_tp.values():
            self._complete_batch_with_exception(batch, KafkaError(
                f"the broker's ProduceResponse said nothing about {batch.topic_partition}"))

    def _complete_batch(self, batch: ProducerBatch, response: ProducePartitionResponse) -> None:
        error = response.error
        if error == DUPLICATE_SEQUENCE_NUMBER:
            error = NO_ERROR  # the broker already has these records: that is success
        if error != NO_ERROR:
            self._dispatch_error(batch, error_for_code(error, response.error_message))
            return
        if batch.complete(response.base_offset, -1):
            self._in_flight_batches.pop(batch, None)
            self.accumulator.deallocate(batch)
        tm = self.transaction_manager
        if tm is not None and batch.has_sequence and tm.matches(batch):
            tm.on_acked(batch)
        if self.config["guarantee_message_order"]:
            self.accumulator.muted.discard(batch.topic_partition)

    def _complete_batch_with_exception(self, batch: ProducerBatch, exception: KafkaError) -> None:
        self._dispatch_error(batch, exception)

    def _dispatch_error(self, batch: ProducerBatch, exception: KafkaError) -> None:
        if self._can_retry(batch, exception):
            log.debug("%s: retrying %s after %r", self.node_id, batch, exception)
            self._in_flight_batches.pop(batch, None)
            self.accumulator.reenqueue(batch, self.now)
            self.sensors["record-retry-total"] += batch.record_count
        else:
            self._fail_batch(batch, exception)
        if getattr(exception, "invalid_metadata", False):
            self.metadata.request_update()
        if self.config["guarantee_message_order"]:
            self.accumulator.muted.discard(batch.topic_partition)

    def _fail_batch(self, batch: ProducerBatch, exception: KafkaError) -> None:
        tm = self.transaction_manager
        if tm is not None and batch.has_sequence and tm.matches(batch):
            # This sequence will never be resolved, and every later one would be rejected as
            # out of order: only a fresh producer id puts the partition back in step.
            self._reset_producer_id(exception)
        if batch.final_state is None:
            self.sensors["record-error-total"] += batch.record_count
        if batch.complete_exceptionally(exception):
            self.accumulator.deallocate(batch)
        self._in_flight_batches.pop(batch, None)
        if self.config["guarantee_message_order"]:
            self.accumulator.muted.discard(batch.topic_partition)

    def _can_retry(self, batch: ProducerBatch, exception: KafkaError) -> bool:
        if batch.has_reached_delivery_timeout(self.accumulator.delivery_timeout_ms, self.now):
            return False
        if batch.attempts >= self.config["retries"]:
            return False
        if batch.final_state is not None:
            return False
        tm = self.transaction_manager
        if tm is not None and batch.has_sequence and not tm.matches(batch):
            return False  # sent under a producer id we gave up: retrying could duplicate
        if isinstance(exception, OutOfOrderSequenceNumberError):
            # Out of order only because an earlier batch of ours failed first: follow it.
            return tm is not None and tm.has_earlier_unresolved(batch)
        return bool(getattr(exception, "retriable", False))

    def _reset_producer_id(self, cause: KafkaError) -> None:
        tm = self.transaction_manager
        log.warning("%s: resetting producer id %s after %r", self.node_id, tm.producer_id_and_epoch, cause)
        old = tm.producer_id_and_epoch
        tm.reset_producer_id()
        tm.next_init_attempt = self.now
        # Retries waiting in the accumulator carry the old id's sequences: sending them
        # under it again would be rejected, and under a new one could duplicate.
        self.accumulator.abort_undrained_batches(
            cause, predicate=lambda b: b.has_sequence and (b.producer_id, b.producer_epoch) == tuple(old))

    # --- for pictures and tests ---------------------------------------------------------------------------

    def in_flight_requests(self) -> list[InFlightRequest]:
        return list(self._in_flight.values())
