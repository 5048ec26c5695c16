"""All the partitions a broker hosts: Kafka's ``ReplicaManager`` (with its purgatories and
the follower's ``ReplicaFetcher``).

Theory of operation
-------------------
- Produce: validate what the client sent (``LogValidator``: every record decoded, in one
  place, ``_validate``), then append to each partition this broker leads. acks=0 gets no
  answer, acks=1 an answer as soon as the local log has it (a disk that refuses the write
  answers KAFKA_STORAGE_ERROR), acks=all waits in the *produce purgatory* until
  the high watermark passes the last offset appended (every in-sync replica has it), the
  leader loses leadership, or ``timeout_ms`` passes.
- Fetch: a consumer reads up to the high watermark, a follower up to the log end. A fetch
  that finds nothing waits in the *fetch purgatory* for up to ``max_wait_ms`` and is
  answered as soon as an append brings data. A follower's fetch is also its report of how
  far it got: it can move the HW, complete waiting produces and bring it back into the ISR.
  A follower whose last epoch disagrees with the leader's history is told where the logs
  diverge (``diverging_epoch``) and must truncate there first.
- The follower side: for each leader it follows, one fetch in flight at a time, carrying
  every partition it follows from that leader; the next one goes out when the answer comes.
- Transactions: WriteTxnMarkers (from a transaction coordinator) appends a commit or abort
  control batch to each partition named, acks=all, trusted as the coordinator's; the answer
  goes back once every in-sync replica has it. A read_committed consumer reads below the
  last stable offset and is told which aborted transactions the range holds.
- ISR changes are proposed to the controller with AlterPartition and applied when it
  commits them (see ``Partition``). A proposal stays pending until its fate is known (Kafka's
  ``PendingExpandIsr``/``PendingShrinkIsr`` and ``AlterPartitionManager``): the request goes
  through the controller channel, sent again to the active controller whenever an attempt
  goes unanswered for ``replica.socket.timeout.ms`` (the controller may be slow, not gone,
  and may still commit it), and is never forgotten on a timeout. Its answer:

  ==========================  ===============================================================
  NO_ERROR                    committed: the ISR it returns is applied
  INELIGIBLE_REPLICA          certainly not applied (the partition epoch was right): back to
                              the committed ISR, and a new proposal at the next check
  FENCED_LEADER_EPOCH,        the controller knows a newer state (perhaps this very proposal,
  INVALID_UPDATE_VERSION,     committed by an earlier attempt): stay pending until the
  NOT_LEADER_OR_FOLLOWER,     metadata log brings it
  UNKNOWN_TOPIC_OR_PARTITION
  anything else               (REQUEST_TIMED_OUT: not committed *yet*) send it again
  ==========================  ===============================================================

  The metadata log settles it too: a committed ISR change (a ``PartitionChangeRecord``) or a
  new leadership replaces the pending proposal, whose request is then cancelled; an answer
  that comes after its proposal was replaced is dropped, whatever it says.
- The log start offset: retention (``delete_old_segments``, on the broker's timer) moves it
  on each replica; DeleteRecords moves it on the leader, and a follower moves its own to the
  leader's as its fetches bring it. Changed topic configs reach every running log and
  partition at once (``apply_topic_configs``).

- Where a follower cuts a divergent log is a rule (``minikafka.rules.truncation_offset``),
  asked through ``self.rules`` (Kafka's by default), as ``Partition`` asks its own.

This class does no I/O of its own: it sends and sets timers through its broker node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from minikafka.broker.config import BrokerConfig
from minikafka.broker.partition import Partition
from minikafka.errors import CorruptRecordError, InvalidRecordError, KafkaStorageError, MessageSizeTooLargeError
from minikafka.broker.transaction_marker import TransactionMarker
from minikafka.rules import REFERENCE, Rules
from minikafka.topic import INTERNAL_TOPICS
from minikafka.messages import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    MESSAGE_TOO_LARGE,
    CONSUMER_REPLICA_ID,
    FENCED_LEADER_EPOCH,
    INELIGIBLE_REPLICA,
    INVALID_UPDATE_VERSION,
    INVALID_REQUIRED_ACKS,
    NO_ERROR,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    REQUEST_TIMED_OUT,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    PartitionState,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
)
from minikafka.storage import LogManager
from minikafka.storage.file_records import FileRecords
from minikafka.storage.log_validator import DecompressionBudget, LogValidator

Key = tuple[str, int]


def _detail(error: Exception) -> str:
    "An error's own text, without the ``[Error 87] INVALID_RECORD:`` prefix its ``str`` adds."
    return str(error.args[0]) if error.args else str(error)


@dataclass
class DelayedProduce:
    src: object
    request: ProduceRequest | None
    results: dict[Key, ProducePartitionResponse]
    waiting: dict[Key, int]  # partition -> offset the HW must reach
    callback: Callable[[int], None] | None = None  # an internal append (the group coordinator's)


@dataclass
class DelayedFetch:
    src: object
    request: FetchRequest
    keys: frozenset  # the (topic, partition)s it reads: what can wake it


@dataclass
class AlterPartitionItem:
    """One ISR change proposed to the controller and not yet answered (Kafka's
    ``AlterPartitionItem``): the partition and epochs it was proposed at, and its request's
    correlation id in the controller channel."""

    key: Key
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    correlation_id: int = -1

    def is_pending_on(self, p: Partition) -> bool:
        """Whether ``p`` still waits for this proposal (nothing replaced it meanwhile)."""
        return (p.is_leader and p.leader_epoch == self.leader_epoch
                and p.partition_epoch == self.partition_epoch and p.pending_isr == self.new_isr)


# AlterPartition refusals after which the leader waits for the metadata log: the controller
# has a newer state of the partition, which may be this very proposal committed.
WAIT_FOR_METADATA = frozenset({FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, NOT_LEADER_OR_FOLLOWER,
                               UNKNOWN_TOPIC_OR_PARTITION})


@dataclass
class Fetcher:
    """The follower's fetch session towards one leader."""

    leader: int
    partitions: set = field(default_factory=set)
    in_flight: int | None = None


class ReplicaManager:
    def __init__(self, node, broker_id: int, log_manager: LogManager, config: BrokerConfig,
                 rules: Rules = REFERENCE) -> None:
        self.node = node
        self.rules = rules  # the Broker state machine: send(), set_timer(), now, live_brokers
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.config = config
        self.partitions: dict[Key, Partition] = {}
        # Partitions this broker could not open or set up (out of file descriptors, a disk
        # error): answered KAFKA_STORAGE_ERROR, as Kafka's offline replicas are, until the
        # topic is deleted or the broker restarts.
        self.offline_partitions: dict[Key, str] = {}
        self.produce_purgatory: dict[tuple, DelayedProduce] = {}
        self.fetch_purgatory: dict[tuple, DelayedFetch] = {}
        self.fetchers: dict[int, Fetcher] = {}
        # Leaders whose fetch must be (re)sent once the metadata being applied is all in:
        # one request for a whole CreateTopics, not one per partition, each naming every
        # partition so far (2,000 partitions: ~1,300 requests of up to 1,300 partitions).
        self._fetches_due: dict[int, None] = {}
        self.alter_in_flight: dict[Key, AlterPartitionItem] = {}  # at most one proposal per partition
        self._correlation = 0
        # Set by the wire runtime (never in the simulated world, whose messages are bytes):
        # record sets of at least this many bytes are answered as FileRecords, left in their
        # segment for the runtime to sendfile (see storage/file_records.py).
        self.file_records_min_bytes: int | None = None

    def _next_correlation(self) -> int:
        self._correlation += 1
        return self._correlation

    # --- leadership changes ------------------------------------------------------------------

    def get_or_create_partition(self, topic: str, partition: int, topic_configs: dict) -> Partition:
        key = (topic, partition)
        p = self.partitions.get(key)
        if p is None:
            log = self.log_manager.get_or_create_log(topic, partition, self.config.log_config(topic_configs))
            p = self.partitions[key] = Partition(
                topic, partition, self.broker_id, log, self.config.partition_config(topic_configs), self.rules
            )
        return p

    def apply_topic_configs(self, topic: str, topic_configs: dict) -> None:
        """A topic's overrides changed (a committed ConfigRecord): every replica of it here
        takes them at once, as Kafka's ``LogManager.updateTopicConfig`` does: the next
        append, roll, retention check or ISR decision uses the new values."""
        for (t, _), p in self.partitions.items():
            if t == topic:
                p.config = self.config.partition_config(topic_configs)
                p.log.config = self.config.log_config(topic_configs)

    def delete_old_segments(self) -> dict[tuple[str, int], list[tuple[int, str]]]:
        """Retention (Kafka's ``LogManager.cleanupLogs``): whole segments past retention.ms or
        retention.bytes go from every replica here, never at or past its high watermark (a
        follower's own high watermark, as in Kafka). What went, per partition."""
        deleted = {}
        for key, p in sorted(self.partitions.items()):
            gone = p.log.delete_old_segments(self.node.now, high_watermark=p.high_watermark)
            if gone:
                deleted[key] = gone
        return deleted

    def apply_partition_state(self, state: PartitionState, topic_configs: dict) -> None:
        self._apply_partition_state(state, topic_configs)
        self._drop_replaced_proposal((state.topic, state.partition))

    def _apply_partition_state(self, state: PartitionState, topic_configs: dict) -> None:
        p = self.get_or_create_partition(state.topic, state.partition, topic_configs)
        key = p.key
        if state.leader == self.broker_id:
            if state.leader_epoch < p.leader_epoch:
                return  # an old decision, overtaken
            if p.is_leader and state.leader_epoch == p.leader_epoch:
                if state.partition_epoch > p.partition_epoch:
                    p.apply_isr_update(state)
                    self._on_high_watermark_maybe_changed(key, p.maybe_increment_high_watermark())
                return
            self._stop_fetching(key)
            p.make_leader(state, self.node.now)
            self._on_high_watermark_maybe_changed(key, p.maybe_increment_high_watermark())
        else:
            was_leader = p.is_leader
            if state.leader_epoch < p.leader_epoch:
                return
            changed = p.make_follower(state)
            if was_leader or changed:
                # No longer the leader: waiting produces fail and parked fetches get the
                # error now, instead of at their timeouts.
                self._complete_produces_for(key)
                self._wake_fetches(key)
            self._stop_fetching(key)
            if state.leader >= 0:
                # A new leader or epoch: don't wait on a fetch sent before the change (its
                # leader may have died with it); its late answer is ignored.
                self._start_fetching(key, state.leader, fresh=was_leader or changed)

    def mark_offline(self, key: Key, reason: str) -> None:
        """Applying this partition's state failed here (``KafkaStorageError``, ``OSError``):
        it is offline on this broker, and the rest of the metadata is applied as usual."""
        self.offline_partitions[key] = reason
        p = self.partitions.get(key)
        if p is not None:
            self._stop_fetching(key)
            p.log.offline = p.log.offline or reason  # appends refused: KAFKA_STORAGE_ERROR

    def handle_log_dir_failure(self, reason: str) -> list[Key]:
        """The log directory went offline (Kafka's ``ReplicaManager.handleLogDirFailure``): every
        replica here is offline from now on. Its fetcher stops, produces waiting on it are
        answered KAFKA_STORAGE_ERROR, parked fetches too; the controller, told by the next
        heartbeat, moves its leadership to in-sync replicas elsewhere. The keys taken offline."""
        keys = sorted(k for k in self.partitions if k not in self.offline_partitions)
        for key in keys:
            self.mark_offline(key, reason)
        for key in keys:
            self._complete_produces_for(key)
            self._wake_fetches(key)
        return keys

    def remove_partition(self, topic: str, partition: int) -> None:
        """The topic was deleted: stop serving and fetching the partition, fail what waits
        on it, and delete its log."""
        key = (topic, partition)
        self.offline_partitions.pop(key, None)
        p = self.partitions.pop(key, None)
        self._stop_fetching(key)
        self._drop_replaced_proposal(key)
        if p is not None:
            self._complete_produces_for(key)  # NOT_LEADER_OR_FOLLOWER now that it is gone
            self._wake_fetches(key)
        self.log_manager.delete_log(topic, partition)

    # --- produce -----------------------------------------------------------------------------------

    def append_records(self, src, request: ProduceRequest) -> None:
        results: dict[Key, ProducePartitionResponse] = {}
        waiting: dict[Key, int] = {}
        if request.acks not in (-1, 0, 1):
            self.node.send(src, ProduceResponse(request.correlation_id, tuple(
                ProducePartitionResponse(part.topic, part.partition, INVALID_REQUIRED_ACKS,
                                         error_message=f"acks must be -1, 0 or 1, not {request.acks}")
                for part in request.partitions
            )))
            return
        budget = DecompressionBudget()  # one for the whole request: many small bombs are one big one
        for part in request.partitions:
            key = (part.topic, part.partition)
            p = self.partitions.get(key)
            if part.topic in INTERNAL_TOPICS:  # Kafka's "Cannot append to internal topic"
                results[key] = ProducePartitionResponse(*key, INVALID_TOPIC_EXCEPTION, error_message=(
                    f"cannot append to internal topic {part.topic}: only the brokers write it"))
                continue
            if key in self.offline_partitions:
                results[key] = ProducePartitionResponse(*key, KAFKA_STORAGE_ERROR, error_message=(
                    f"{part.topic}-{part.partition} is offline on broker {self.broker_id}: {self.offline_partitions[key]}"))
                continue
            if p is None:
                results[key] = ProducePartitionResponse(*key, UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if not p.is_leader:
                results[key] = ProducePartitionResponse(*key, NOT_LEADER_OR_FOLLOWER)
                continue
            rejected = self._validate(p, part.records, budget)
            if rejected is not None:
                results[key] = rejected
                continue
            error, base, last, message = p.append_as_leader(part.records, request.acks)
            results[key] = ProducePartitionResponse(*key, error, base, p.log.log_start_offset, message if error else None)
            if error == NO_ERROR:
                if request.acks == -1:
                    waiting[key] = last + 1
                self._wake_fetches(key)
        if request.acks == 0:
            return
        delayed = DelayedProduce(src, request, results, waiting)
        self._try_complete_produce(delayed)
        if delayed.waiting:
            ident = (src, request.correlation_id)
            self.produce_purgatory[ident] = delayed
            self.node.set_timer(("produce-timeout", ident), request.timeout_ms)

    @staticmethod
    def _validate(p: Partition, records: bytes, budget: DecompressionBudget) -> ProducePartitionResponse | None:
        """The one place client records are validated (Kafka's ``LogValidator`` for an
        ``AppendOrigin.CLIENT`` append): None if they may be appended, else the answer.
        Replicated and coordinator appends never come this way. The answer's error message is
        the error's own text, as Kafka's ``e.getMessage()``: the client names the code itself."""
        try:
            LogValidator.for_log(p.log).validate(records, budget)
        except InvalidRecordError as e:
            return ProducePartitionResponse(*p.key, INVALID_RECORD, -1, p.log.log_start_offset, _detail(e), e.record_errors)
        except MessageSizeTooLargeError as e:
            return ProducePartitionResponse(*p.key, MESSAGE_TOO_LARGE, -1, p.log.log_start_offset, _detail(e))
        except CorruptRecordError as e:
            return ProducePartitionResponse(*p.key, CORRUPT_MESSAGE, -1, p.log.log_start_offset, _detail(e))
        return None

    def _try_complete_produce(self, delayed: DelayedProduce) -> bool:
        for key, required in list(delayed.waiting.items()):
            p = self.partitions.get(key)
            if key in self.offline_partitions:
                done, error = True, KAFKA_STORAGE_ERROR  # its log directory failed: it will not get there
            elif p is None or not p.is_leader:
                done, error = True, NOT_LEADER_OR_FOLLOWER
            else:
                done, error = p.check_enough_replicas_reach_offset(required)
            if done:
                del delayed.waiting[key]
                if error:
                    delayed.results[key] = ProducePartitionResponse(*key, error)
        if delayed.waiting:
            return False
        if delayed.callback is not None:
            (result,) = delayed.results.values()
            delayed.callback(result.error)
        else:
            self.node.send(delayed.src, ProduceResponse(delayed.request.correlation_id, tuple(delayed.results.values())))
        return True

    def append_internal(self, topic: str, partition: int, records: bytes, timeout_ms: int,
                        callback: Callable[[int], None]) -> None:
        """Append to a partition this broker leads, acks=all, and call ``callback(error)``
        once every in-sync replica has it (or it failed): how the group coordinator writes
        to ``__consumer_offsets`` (Kafka's ``appendRecords`` with an internal origin)."""
        key = (topic, partition)
        p = self.partitions.get(key)
        if p is None or not p.is_leader:
            callback(NOT_LEADER_OR_FOLLOWER)
            return
        error, base, last, _ = p.append_as_leader(records, -1, origin="coordinator")
        if error != NO_ERROR:
            callback(error)
            return
        self._wake_fetches(key)
        delayed = DelayedProduce(None, None, {key: ProducePartitionResponse(*key, NO_ERROR, base)},
                                 {key: last + 1}, callback)
        if not self._try_complete_produce(delayed):
            ident = ("internal", self._next_correlation())
            self.produce_purgatory[ident] = delayed
            self.node.set_timer(("produce-timeout", ident), timeout_ms)

    def write_txn_markers(self, request: WriteTxnMarkersRequest,
                          reply: Callable[[WriteTxnMarkersResponse], None]) -> None:
        """Kafka's ``handleWriteTxnMarkersRequest``: one control batch per partition, each
        answered once replicated (or failed); the whole answer once all are. A marker whose
        epoch is older than the producer's is INVALID_PRODUCER_EPOCH (a newer coordinator
        decision already fenced it)."""
        results: dict[tuple[int, str, int], int | None] = {}
        for marker in request.markers:
            for topic, partition in marker.partitions:
                results[(marker.producer_id, topic, partition)] = None

        def answer() -> None:
            if all(e is not None for e in results.values()):
                reply(WriteTxnMarkersResponse(request.correlation_id, tuple(
                    (pid, t, p, e) for (pid, t, p), e in results.items())))

        for marker in request.markers:
            batch = TransactionMarker(marker.committed, marker.coordinator_epoch).to_batch(
                marker.producer_id, marker.producer_epoch, self.node.now)
            for topic, partition in marker.partitions:
                key = (marker.producer_id, topic, partition)

                def done(error: int, key=key, marker=marker) -> None:
                    results[key] = error
                    if error == NO_ERROR:
                        listener = getattr(self.node, "txn_marker_written", None)
                        if listener is not None:
                            listener(key[1], key[2], marker.producer_id, marker.committed)
                    answer()

                self.append_internal(topic, partition, batch, self.config["request.timeout.ms"], done)
        if not results:
            answer()

    def produce_timed_out(self, ident: tuple) -> None:
        delayed = self.produce_purgatory.pop(ident, None)
        if delayed is None:
            return
        for key in delayed.waiting:
            delayed.results[key] = ProducePartitionResponse(*key, REQUEST_TIMED_OUT)
        delayed.waiting.clear()
        self._try_complete_produce(delayed)

    def _complete_produces_for(self, key: Key) -> None:
        for ident, delayed in list(self.produce_purgatory.items()):
            if key in delayed.waiting and self._try_complete_produce(delayed):
                del self.produce_purgatory[ident]
                self.node.cancel_timer(("produce-timeout", ident))

    def _on_high_watermark_maybe_changed(self, key: Key, changed: bool) -> None:
        if changed:
            self._complete_produces_for(key)
            self._wake_fetches(key)

    # --- fetch (leader side) ---------------------------------------------------------------------------

    def fetch_messages(self, src, request: FetchRequest) -> None:
        # Kafka's KafkaApis: whatever a client asks, a response holds at most the broker's
        # fetch.max.bytes (each partition at most what is left of it; one batch at least, so
        # a batch larger than that still flows), and min_bytes cannot exceed that.
        limit = self.config["fetch.max.bytes"]
        if request.max_bytes > limit or request.min_bytes > limit:
            request = replace(request, max_bytes=min(request.max_bytes, limit), min_bytes=min(request.min_bytes, limit))
        follower = request.replica_id != CONSUMER_REPLICA_ID
        if follower:
            for fp in request.partitions:
                self._record_follower_fetch(request.replica_id, fp)
        # A follower keeping up asks for what is not written yet: most fetches wait, and
        # ``_answers_now`` tells so without building the answer ``_read`` would drop.
        if request.max_wait_ms <= 0 or self._answers_now(request):
            parts, size, urgent = self._read(request)
            if urgent or size >= request.min_bytes or request.max_wait_ms <= 0:
                self.node.send(src, FetchResponse(request.correlation_id, parts))
                return
        ident = (src, request.correlation_id)
        self.fetch_purgatory[ident] = DelayedFetch(
            src, request, frozenset([(fp.topic, fp.partition) for fp in request.partitions]))
        self.node.set_timer(("fetch-expire", ident), request.max_wait_ms)

    def _record_follower_fetch(self, replica_id: int, fp: FetchPartition) -> None:
        key = (fp.topic, fp.partition)
        p = self.partitions.get(key)
        if p is None or not p.is_leader or fp.current_leader_epoch not in (-1, p.leader_epoch):
            return
        if self._diverging(p, fp) is not None or fp.fetch_offset > p.log_end_offset:
            return
        moved = p.update_follower_fetch_state(replica_id, fp.fetch_offset, self.node.now)
        self._on_high_watermark_maybe_changed(key, moved)
        proposal = p.maybe_expand_isr(replica_id, self.node.live_brokers)
        if proposal is not None:
            self._propose_isr(p, proposal)

    @staticmethod
    def _diverging(p: Partition, fp: FetchPartition) -> tuple[int, int] | None:
        if fp.last_fetched_epoch < 0 or fp.fetch_offset == 0:
            return None
        cache = p.log.leader_epoch_cache
        if fp.last_fetched_epoch == cache.latest_epoch:
            # A follower of the current epoch (every fetch but the first after an
            # election): that epoch ends at our log end, as ``end_offset_for`` would say.
            end = p.log_end_offset
            return None if fp.fetch_offset <= end else (fp.last_fetched_epoch, end)
        epoch, end = cache.end_offset_for(fp.last_fetched_epoch, p.log_end_offset)
        if epoch < 0:
            return (-1, p.log.log_start_offset)
        if epoch != fp.last_fetched_epoch or end < fp.fetch_offset:
            return (epoch, end)
        return None

    def _read(self, request: FetchRequest) -> tuple[tuple[FetchPartitionResponse, ...], int, bool]:
        follower = request.replica_id != CONSUMER_REPLICA_ID
        parts = []
        size = 0
        urgent = False  # errors and divergences are answered at once
        budget = request.max_bytes
        for fp in request.partitions:
            key = (fp.topic, fp.partition)
            p = self.partitions.get(key)
            if key in self.offline_partitions:
                parts.append(FetchPartitionResponse(*key, KAFKA_STORAGE_ERROR))
                urgent = True
                continue
            if p is None:
                parts.append(FetchPartitionResponse(*key, UNKNOWN_TOPIC_OR_PARTITION))
                urgent = True
                continue
            if not p.is_leader:
                parts.append(FetchPartitionResponse(*key, NOT_LEADER_OR_FOLLOWER))
                urgent = True
                continue
            if fp.current_leader_epoch >= 0 and fp.current_leader_epoch != p.leader_epoch:
                error = FENCED_LEADER_EPOCH if fp.current_leader_epoch < p.leader_epoch else UNKNOWN_LEADER_EPOCH
                parts.append(FetchPartitionResponse(*key, error))
                urgent = True
                continue
            hw, start = p.high_watermark, p.log.log_start_offset
            if follower:
                diverging = self._diverging(p, fp)
                if diverging is not None:
                    parts.append(FetchPartitionResponse(*key, NO_ERROR, hw, start, b"", diverging))
                    urgent = True
                    continue
            # Out of range means outside the log, as in Kafka; a consumer between the HW and
            # the log end just gets nothing yet (a new leader learns the HW a fetch late).
            end = p.log_end_offset
            if fp.fetch_offset < start or fp.fetch_offset > end:
                parts.append(FetchPartitionResponse(*key, OFFSET_OUT_OF_RANGE, hw, start))
                urgent = True
                continue
            lso = -1 if follower else p.last_stable_offset
            upper = p.fetch_upper_bound(follower, request.isolation_level)
            records = b""
            if budget > 0 and fp.fetch_offset < upper:
                records = self._read_records(p, fp.fetch_offset, min(fp.partition_max_bytes, budget), upper)
                budget -= len(records)
                size += len(records)
            aborted = ()
            if request.isolation_level == 1 and records:
                aborted = p.producer_state.aborted_transactions(fp.fetch_offset, upper)
            parts.append(FetchPartitionResponse(*key, NO_ERROR, hw, start, records, last_stable_offset=lso,
                                                aborted_transactions=aborted))
        return tuple(parts), size, urgent

    def _read_records(self, p: Partition, offset: int, max_bytes: int, upper: int) -> bytes | FileRecords:
        if self.file_records_min_bytes is None:
            return p.log.read_bytes(offset, max_bytes, max_offset=upper)
        found = p.log.read_file_records(offset, max_bytes, max_offset=upper)
        if found is None:
            return b""
        return found if len(found) >= self.file_records_min_bytes else found.read()

    def _answers_now(self, request: FetchRequest) -> bool:
        """Whether ``_read(request)`` would answer at once (an error, or records to send):
        its checks in its order, without building the answer. Most wake-ups of a parked
        fetch find nothing new (each follower fetch that moves the HW wakes them all), and a
        simulated campaign spends a tenth of its time building answers it then drops. False
        only if ``_read`` would find no error and no offset to read below its upper bound in
        any partition, so it can never hold back an answer ``_read`` would give. Like
        ``_read`` it asks ``last_stable_offset`` of every partition a consumer reads (which
        prunes finished transactions: the same pruning either way)."""
        if request.min_bytes <= 0:
            return True
        follower = request.replica_id != CONSUMER_REPLICA_ID
        can_read = request.max_bytes > 0  # no batch is read before the first one found
        partitions, offline = self.partitions, self.offline_partitions
        for fp in request.partitions:
            key = (fp.topic, fp.partition)
            p = partitions.get(key)
            if p is None or not p.is_leader or key in offline:
                return True
            if fp.current_leader_epoch >= 0 and fp.current_leader_epoch != p.leader_epoch:
                return True
            if follower and self._diverging(p, fp) is not None:
                return True
            end = p.log_end_offset
            if fp.fetch_offset < p.log.log_start_offset or fp.fetch_offset > end:
                return True
            upper = p.fetch_upper_bound(follower, request.isolation_level)
            if can_read and fp.fetch_offset < upper:
                return True
        return False

    def _wake_fetches(self, key: Key) -> None:
        purgatory = self.fetch_purgatory
        if not purgatory:
            return
        for ident, delayed in list(purgatory.items()):
            if key in delayed.keys and self._answers_now(delayed.request):
                parts, size, urgent = self._read(delayed.request)
                if urgent or size >= delayed.request.min_bytes:
                    del purgatory[ident]
                    self.node.cancel_timer(("fetch-expire", ident))
                    self.node.send(delayed.src, FetchResponse(delayed.request.correlation_id, parts))

    def fetch_expired(self, ident: tuple) -> None:
        delayed = self.fetch_purgatory.pop(ident, None)
        if delayed is not None:
            parts, _, _ = self._read(delayed.request)
            self.node.send(delayed.src, FetchResponse(delayed.request.correlation_id, parts))

    # --- ISR maintenance -----------------------------------------------------------------------------------

    def maybe_shrink_isrs(self) -> None:
        for key, p in self.partitions.items():
            if key in self.offline_partitions:
                continue  # its followers cannot fetch from it: their lag says nothing (the controller moves it)
            proposal = p.maybe_shrink_isr(self.node.now)
            if proposal is not None:
                self._propose_isr(p, proposal)

    def _propose_isr(self, p: Partition, new_isr: tuple[int, ...]) -> None:
        self._submit_alter(AlterPartitionItem(p.key, p.leader_epoch, p.partition_epoch, new_isr))

    def _submit_alter(self, item: AlterPartitionItem) -> None:
        """Send ``item`` to the active controller, again and again until it is answered."""
        item.correlation_id = self.node.send_to_controller(
            lambda corr: AlterPartitionRequest(corr, self.broker_id, *item.key, item.leader_epoch,
                                               item.partition_epoch, item.new_isr),
            lambda response: self._alter_partition_answered(item, response),
            retry_ms=self.config["replica.socket.timeout.ms"])
        self.alter_in_flight[item.key] = item

    def _alter_partition_answered(self, item: AlterPartitionItem, response: AlterPartitionResponse) -> None:
        if self.alter_in_flight.get(item.key) is not item:
            return  # replaced meanwhile (its request was cancelled then)
        del self.alter_in_flight[item.key]
        p = self.partitions.get(item.key)
        if p is None or not item.is_pending_on(p):
            return
        if response.error == NO_ERROR:
            if response.state is None:
                return  # committed, but not said how: the metadata log will say
            p.apply_isr_update(response.state)
        elif response.error == INELIGIBLE_REPLICA:
            p.isr_change_refused()
        elif response.error in WAIT_FOR_METADATA:
            return  # pending until the metadata log says what became of the partition
        else:
            self._submit_alter(item)  # not decided yet (REQUEST_TIMED_OUT): ask again
            return
        self._on_high_watermark_maybe_changed(item.key, p.maybe_increment_high_watermark())

    def _drop_replaced_proposal(self, key: Key) -> None:
        """The metadata log replaced this partition's pending proposal (a committed ISR, a new
        leader or epoch, the topic gone): stop asking, and drop whatever answer comes."""
        item = self.alter_in_flight.get(key)
        if item is None:
            return
        p = self.partitions.get(key)
        if p is None or not item.is_pending_on(p):
            del self.alter_in_flight[key]
            self.node.cancel_controller_request(item.correlation_id)

    # --- the follower side ----------------------------------------------------------------------------------

    def _start_fetching(self, key: Key, leader: int, *, fresh: bool = False) -> None:
        fetcher = self.fetchers.setdefault(leader, Fetcher(leader))
        fetcher.partitions.add(key)
        if fetcher.in_flight is None or fresh:
            self._fetches_due[leader] = None

    def send_due_fetches(self, *, idle_only: bool = False) -> None:
        """After a batch of partition states: one fetch to each leader that gained partitions
        or changed (Kafka's ReplicaFetcherManager adds a delta's partitions at once too).
        ``idle_only``: leave a fetch that is out alone; its answer sends the next one, which
        names the new partitions too (replicas opened a share at a time: a fresh fetch per
        share, each naming every partition so far, grew with the square of the topic)."""
        due, self._fetches_due = self._fetches_due, {}
        for leader in due:
            fetcher = self.fetchers.get(leader)
            if fetcher is None or (idle_only and fetcher.in_flight is not None):
                continue
            self.node.cancel_timer(("replica-fetch-timeout", leader))
            self.node.cancel_timer(("replica-fetch-backoff", leader))
            self.send_fetch(fetcher)

    def _stop_fetching(self, key: Key) -> None:
        for fetcher in self.fetchers.values():
            fetcher.partitions.discard(key)

    def send_fetch(self, fetcher: Fetcher) -> None:
        """A follower asks its leader for more: one Fetch for every partition it follows from that
        leader, each from its own log end offset ("send me what comes after what I have"), with
        the epoch of its last record and the leader epoch it knows (KIP-101, notebook 04 section 8)."""
        if not fetcher.partitions:
            fetcher.in_flight = None
            return
        parts = []
        for key in sorted(fetcher.partitions):
            p = self.partitions[key]
            parts.append(FetchPartition(
                p.topic, p.partition, p.log_end_offset, p.last_fetched_epoch(), p.leader_epoch,
                self.config["replica.fetch.max.bytes"],
            ))
        corr = self._next_correlation()
        fetcher.in_flight = corr
        self.node.send(fetcher.leader, FetchRequest(
            corr, self.broker_id, self.config["replica.fetch.wait.max.ms"], 1, tuple(parts),
            self.config["replica.fetch.response.max.bytes"],
        ))
        self.node.set_timer(("replica-fetch-timeout", fetcher.leader), self.config["replica.socket.timeout.ms"])

    def handle_fetch_response(self, src: int, response: FetchResponse) -> None:
        fetcher = self.fetchers.get(src)
        if fetcher is None or fetcher.in_flight != response.correlation_id:
            return  # an answer to a session we gave up on
        self.node.cancel_timer(("replica-fetch-timeout", src))
        backoff = False
        for part in response.partitions:
            key = (part.topic, part.partition)
            p = self.partitions.get(key)
            if p is None or key not in fetcher.partitions or p.leader_id != src:
                continue
            if part.diverging_epoch is not None:
                epoch, end = part.diverging_epoch
                p.truncate_to(self.rules.truncation_offset(
                    epoch, end, p.log.leader_epoch_cache.entries(), p.log_end_offset, p.log.log_start_offset))
            elif part.error == OFFSET_OUT_OF_RANGE and part.log_start_offset > p.log_end_offset:
                p.log.truncate_fully_and_start_at(part.log_start_offset)
                p.producer_state.rebuild(p.log)
            elif part.error != NO_ERROR:
                backoff = True  # wait for the controller's news
            else:
                try:
                    p.append_as_follower(part.records, part.high_watermark)
                except KafkaStorageError:  # a full disk: logged by the log; try again after a backoff
                    backoff = True
                    continue
                if part.log_start_offset > p.log.log_start_offset:
                    # DeleteRecords (or the leader's retention) moved the leader's log start:
                    # a follower's copy starts there too, as far as it holds (Kafka's follower
                    # does the same with the fetch response's log_start_offset).
                    p.log.maybe_increment_log_start_offset(min(part.log_start_offset, p.log.log_end_offset))
        fetcher.in_flight = None
        if backoff:
            fetcher.in_flight = -1  # parked until the backoff timer
            self.node.set_timer(("replica-fetch-backoff", src), self.config["replica.fetch.backoff.ms"])
        else:
            self.send_fetch(fetcher)

    def fetch_backoff_over(self, leader: int) -> None:
        fetcher = self.fetchers.get(leader)
        if fetcher is not None:
            fetcher.in_flight = None
            self.send_fetch(fetcher)

    def replica_fetch_timed_out(self, leader: int) -> None:
        self.fetch_backoff_over(leader)  # no answer: the leader may be gone; ask again
