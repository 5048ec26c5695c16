"""One replica of one partition on one broker: Kafka's ``Partition``.

Theory of operation
-------------------
The controller decides who leads (``make_leader`` / ``make_follower``, each with a leader
epoch); this class keeps the replication state that follows from it.

On the leader:
- Every follower replicates by fetching. A fetch at offset N tells the leader that the
  follower's log end offset (LEO) is N, and ``update_follower_fetch_state`` records it with
  Kafka's "caught up" rule: a follower is caught up at time t if it fetched, at t, from at
  or past the leader's LEO (or past the LEO the leader had at its previous fetch).
- The high watermark (HW) is the minimum LEO over the leader and the ISR: the offset below
  which every in-sync replica has the data. Consumers never read at or past it. It never
  moves backwards on a leader.
- ``maybe_shrink_isr``: a follower not caught up for ``replica.lag.time.max.ms`` leaves
  the ISR, whether it stopped fetching (stuck) or fetches but cannot keep up (slow).
  ``maybe_expand_isr``: a follower whose LEO reached the HW rejoins. Changes are only
  *proposed* here; the controller commits them (AlterPartition). Until it does, the HW is
  computed over the *maximal* ISR (committed plus proposed), so a replica leaving the ISR
  never lets the HW move ahead of what the controller believes (Kafka's KIP-497 rule).
  A proposal stays pending until its fate is known: committed (``apply_isr_update``, from
  the controller's answer or the metadata log), certainly refused (``isr_change_refused``),
  or overtaken by a new leadership. Never on a mere timeout: a proposal whose answer is late
  may still be committed, and a HW computed without it would acknowledge writes a member of
  the ISR the controller commits does not have.
- ``append_as_leader`` refuses acks=all writes with NOT_ENOUGH_REPLICAS while the ISR is
  smaller than ``min.insync.replicas``, and checks idempotent producers' sequences. A disk
  that refuses the write (full, failing) is KAFKA_STORAGE_ERROR: the log wrote nothing, so
  nothing is acknowledged and the producer retries. (The records themselves were validated
  before, by the replica manager's ``LogValidator``.)
  Batches the transaction coordinator has written (``origin="coordinator"``: markers and
  transactional offset commits) have their epoch checked, not their sequences.
- The last stable offset (LSO): the HW, or the first offset of a transaction not yet
  decided below it (``ProducerStateManager``); read_committed consumers read below it.

On a follower: ``append_as_follower`` keeps the leader's offsets; the HW is the leader's HW
capped by the local LEO; ``truncate_to`` cuts a divergent log at the point its leader epochs
say it diverged (KIP-101), never just at the HW.

The decisions themselves are rules (``minikafka.rules``), called through ``self.rules``:
``high_watermark`` in ``maybe_increment_high_watermark`` and ``last_caught_up`` in
``update_follower_fetch_state``, and ``check_batch`` (the idempotence check) in its
``ProducerStateManager``. Kafka's are the default; a student's can take their place.

No I/O beyond the partition's own ``Log``, and no clock: ``now`` is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

from minikafka.broker.producer_state import ProducerStateManager
from minikafka.broker.transaction_marker import TransactionMarker
from minikafka.errors import CorruptRecordError, KafkaError, MessageSizeTooLargeError
from minikafka.messages import (
    CORRUPT_MESSAGE,
    DUPLICATE_SEQUENCE_NUMBER,
    MESSAGE_TOO_LARGE,
    NO_ERROR,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    PartitionState,
)
from minikafka.records import MemoryRecords
from minikafka.rules import REFERENCE, Rules
from minikafka.storage import Log


@dataclass
class ReplicaState:
    """What the leader knows of one follower."""

    broker_id: int
    log_end_offset: int = -1  # unknown until it fetches
    last_caught_up_time_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_time_ms: int = 0


@dataclass(frozen=True)
class PartitionConfig:
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    unclean_leader_election: bool = False


class Partition:
    def __init__(self, topic: str, partition: int, broker_id: int, log: Log, config: PartitionConfig,
                 rules: Rules = REFERENCE) -> None:
        self.topic = topic
        self.rules = rules
        self.partition = partition
        self.broker_id = broker_id
        self.log = log
        self.config = config
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()  # committed by the controller
        self.pending_isr: tuple[int, ...] | None = None  # proposed, not yet committed
        self.high_watermark = log.log_start_offset
        self.leader_epoch_start_offset = -1
        self.followers: dict[int, ReplicaState] = {}
        self.producer_state = ProducerStateManager(rules)
        self.producer_state.rebuild(log)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    # --- leadership --------------------------------------------------------------------------

    def make_leader(self, state: PartitionState, now: int) -> bool:
        """Become (or stay) leader; True if this is a new leader epoch."""
        new_epoch = state.leader_epoch > self.leader_epoch or not self.is_leader
        self._apply_state(state)
        if new_epoch:
            self.leader_epoch_start_offset = self.log.log_end_offset
            self.log.leader_epoch_cache.assign(state.leader_epoch, self.leader_epoch_start_offset)
            # A new leader knows nothing of its followers' logs yet; it counts them as
            # caught up now, so they get replica.lag.time.max.ms to show up.
            self.followers = {
                r: ReplicaState(r, last_caught_up_time_ms=now if r in self.isr else 0)
                for r in self.replicas if r != self.broker_id
            }
            self.pending_isr = None
            # The HW a new leader starts from is its own (<= LEO); it moves on when the ISR
            # has fetched. Never above its LEO.
            self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset), self.log.log_end_offset)
        else:
            for r in self.replicas:
                if r != self.broker_id and r not in self.followers:
                    self.followers[r] = ReplicaState(r)
        return new_epoch

    def make_follower(self, state: PartitionState) -> bool:
        """Follow ``state.leader``; True if the leader or epoch changed (refetch from scratch)."""
        changed = state.leader_epoch > self.leader_epoch or state.leader != self.leader_id
        self._apply_state(state)
        self.followers = {}
        self.pending_isr = None
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        return changed

    def _apply_state(self, state: PartitionState) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.replicas = state.replicas
        self.isr = state.isr

    def apply_isr_update(self, state: PartitionState) -> None:
        """The controller committed an ISR (ours or a newer one)."""
        if state.leader_epoch == self.leader_epoch and state.partition_epoch >= self.partition_epoch:
            self.partition_epoch = state.partition_epoch
            self.isr = state.isr
            self.replicas = state.replicas
            self.pending_isr = None

    def isr_change_refused(self) -> None:
        """The controller refused the pending proposal and it certainly was not applied
        (INELIGIBLE_REPLICA): back to the committed ISR, free to propose afresh."""
        self.pending_isr = None

    # --- the leader's write path -------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset(self.high_watermark)
        return self.high_watermark if first_unstable is None else min(first_unstable, self.high_watermark)

    def append_as_leader(self, records: bytes, acks: int, origin: str = "client") -> tuple[int, int, int, str | None]:
        """(error, base offset, last offset, message). Duplicates of an idempotent batch are
        answered with the original offsets and NO_ERROR, as Kafka does."""
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            return NOT_ENOUGH_REPLICAS, -1, -1, (
                f"the ISR {list(self.isr)} is smaller than min.insync.replicas={self.config.min_insync_replicas}"
            )
        try:
            batches = list(MemoryRecords(records).batches())
        except CorruptRecordError as e:
            return CORRUPT_MESSAGE, -1, -1, str(e)
        for b in batches:
            if origin == "coordinator":
                coordinator_epoch = -1
                if b.is_control_batch:
                    try:
                        coordinator_epoch = TransactionMarker.of(b).coordinator_epoch
                    except ValueError as e:
                        return CORRUPT_MESSAGE, -1, -1, str(e)
                error = self.producer_state.check_epoch(b.producer_id, b.producer_epoch, coordinator_epoch)
                if error != NO_ERROR:
                    return error, -1, -1, "a newer producer epoch or transaction coordinator was here first"
                continue
            error, offset = self.producer_state.check(b.producer_id, b.producer_epoch, b.base_sequence, b.records_count)
            if error == DUPLICATE_SEQUENCE_NUMBER:
                return NO_ERROR, offset, offset + b.last_offset_delta, "duplicate"
            if error != NO_ERROR:
                return error, -1, -1, None
        try:
            info = self.log.append(records, leader_epoch=self.leader_epoch)
        except MessageSizeTooLargeError as e:
            return MESSAGE_TOO_LARGE, -1, -1, str(e)
        except KafkaError as e:
            return getattr(e, "errno", CORRUPT_MESSAGE), -1, -1, str(e)
        offset = info.first_offset
        for b in batches:
            self.producer_state.update(b.producer_id, b.producer_epoch, b.base_sequence, offset, offset + b.last_offset_delta)
            self.producer_state.update_transaction(b, offset, offset + b.last_offset_delta)
            offset += b.last_offset_delta + 1
        self.maybe_increment_high_watermark()
        return NO_ERROR, info.first_offset, info.last_offset, None

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, int]:
        """For a waiting acks=all produce: (done?, error)."""
        if self.high_watermark >= required_offset:
            if len(self.maximal_isr) < self.config.min_insync_replicas:
                return True, NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return True, NO_ERROR
        return False, NO_ERROR

    # --- the leader's view of its followers --------------------------------------------------------

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now: int) -> bool:
        """A follower fetched at ``fetch_offset``; True if the HW moved."""
        replica = self.followers.get(replica_id)
        if replica is None:
            return False
        leader_leo = self.log.log_end_offset
        previous = None if replica.last_fetch_leader_leo < 0 else (
            replica.last_fetch_time_ms, replica.log_end_offset, replica.last_fetch_leader_leo)
        replica.last_caught_up_time_ms = self.rules.last_caught_up(
            replica.last_caught_up_time_ms, (now, fetch_offset, leader_leo), previous)
        replica.last_fetch_leader_leo = leader_leo
        replica.last_fetch_time_ms = now
        replica.log_end_offset = fetch_offset
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """Ask the high-watermark rule (the least LEO in the maximal ISR); True if the HW moved."""
        if not self.is_leader:
            return False
        new_hw = self.rules.high_watermark(
            self.high_watermark, self.broker_id, self.log.log_end_offset,
            {r: f.log_end_offset for r, f in self.followers.items()}, self.isr, self.pending_isr)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    def out_of_sync_replicas(self, now: int) -> list[int]:
        lag_max = self.config.replica_lag_time_max_ms
        return [
            r for r in self.isr
            if r != self.broker_id and now - self.followers[r].last_caught_up_time_ms > lag_max
        ]

    def maybe_shrink_isr(self, now: int) -> tuple[int, ...] | None:
        """The ISR to propose without the followers that fell behind, or None."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        out = self.out_of_sync_replicas(now)
        if not out:
            return None
        self.pending_isr = tuple(r for r in self.isr if r not in out)
        return self.pending_isr

    def maybe_expand_isr(self, replica_id: int, live_brokers) -> tuple[int, ...] | None:
        """The ISR to propose with ``replica_id`` back in, if it caught up, or None."""
        if not self.is_leader or self.pending_isr is not None or replica_id in self.isr:
            return None
        replica = self.followers.get(replica_id)
        if (
            replica is None
            or replica_id not in live_brokers
            or replica.log_end_offset < self.high_watermark
            or replica.log_end_offset < self.leader_epoch_start_offset
        ):
            return None
        self.pending_isr = tuple(sorted(set(self.isr) | {replica_id}))
        return self.pending_isr

    # --- the follower's side -----------------------------------------------------------------------------

    def append_as_follower(self, records: bytes, leader_high_watermark: int) -> None:
        if records:
            self.log.append(records, assign_offsets=False)
            self.producer_state.update_appended(records)
        self.high_watermark = min(leader_high_watermark, self.log.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        if self.log.truncate_to(offset):
            self.producer_state.rebuild(self.log)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    def fetch_upper_bound(self, follower: bool, isolation_level: int = 0) -> int:
        """How far a Fetch may read on this leader: a follower up to the log end (it copies
        everything), a consumer only below the high watermark (committed records), or below the
        last stable offset with ``isolation_level`` 1 (read_committed, notebook 07)."""
        if follower:
            return self.log_end_offset
        return self.last_stable_offset if isolation_level == 1 else self.high_watermark

    def last_fetched_epoch(self) -> int:
        return self.log.leader_epoch_cache.latest_epoch

    def describe(self) -> dict:
        return {
            "topic": self.topic, "partition": self.partition, "leader": self.leader_id,
            "leader_epoch": self.leader_epoch, "isr": self.isr, "replicas": self.replicas,
            "log_end_offset": self.log.log_end_offset, "high_watermark": self.high_watermark,
        }
