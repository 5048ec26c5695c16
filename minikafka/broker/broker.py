"""A broker: Kafka's ``KafkaApis`` (one handler per request type) around a ReplicaManager.

Theory of operation
-------------------
The broker is a state machine (see ``minikafka.node``). On start it opens its log
directory (recovering whatever a crash left), registers with the active controller by
heartbeating it, and follows the metadata log ``__cluster_metadata`` as a Raft *observer*
(``minikafka.raft``: it fetches the log from the quorum's leader, keeps a copy in its own
log directory, and never votes). Every committed metadata record is applied to its
``MetadataImage``; what changed (a partition's leader or ISR, a topic removed) makes it
leader or follower of the replicas it hosts (a replica new here opens a log: a few per step
when there are many, so a huge topic does not hold its other clients), or deletes a removed
topic's logs. A log is
deleted only for a committed topic removal, never because some controller did not
mention it. After a restart it replays the log from the start, so it comes back with the
same view as everyone else. From then on it serves:

- clients: Metadata (from its image; unknown topics auto-created, as in Kafka), Produce,
  Fetch, ListOffsets, InitProducerId (ids from blocks the controller allocates),
  CreateTopics, DeleteTopics, CreatePartitions and (Incremental)AlterConfigs (forwarded to
  the active controller, as KRaft brokers do, through ``NodeToControllerChannelManager``;
  a changed topic config reaches the running logs when its ConfigRecord commits),
  DescribeQuorum (forwarded too), DescribeConfigs, DeleteRecords (at the leader: the log
  start offset moves; followers follow it through their fetches), OffsetForLeaderEpoch
  (KIP-320: clients validate their positions after a leader change);
- retention: every ``log.retention.check.interval.ms``, old segments go (``log-retention``);
- disk errors: a write that fails (an append or roll on a full disk, a failed fsync) is
  answered KAFKA_STORAGE_ERROR (nothing written) and takes the log directory offline
  (``LogDirFailureChannel``): every partition here is answered KAFKA_STORAGE_ERROR from then
  on, and the next heartbeat, sent at once, names the directory (``offline_log_dirs``), so
  the controller moves its leaders to in-sync replicas and takes it out of their ISRs; a
  restart that finds the directory writable brings it back (a new incarnation rejoins).
  The metadata log lives in the same directory: once it cannot take a record, the broker
  halts (``Halt``), as Kafka's does when its metadata log directory fails (KIP-858);
- other brokers: Fetch from followers;
- the controller: heartbeat and AlterPartition answers (through the controller channel; a
  late answer to a request it no longer waits for is dropped);
- consumer groups: FindCoordinator (any broker answers: the leader of the group's
  partition of ``__consumer_offsets``, which it asks the controller to create on first use),
  and, when it is that leader, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
  OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups and KIP-848's
  ConsumerGroupHeartbeat and ConsumerGroupDescribe (the ``GroupCoordinator``);
- transactions (KIP-98): FindCoordinator with key type 1 (the leader of the id's partition of
  ``__transaction_state``, created on first use like ``__consumer_offsets``), and, there,
  InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
  (the ``TransactionCoordinator``); TxnOffsetCommit (the group coordinator); WriteTxnMarkers
  from coordinators (the replica manager appends the markers).

It never reads a clock (``self.now`` is the input's time) and touches disk only through
the storage layer.
"""

from __future__ import annotations

import logging

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Hashable

from minikafka.broker.config import BrokerConfig
from minikafka.broker.controller_channel import NodeToControllerChannelManager
from minikafka.broker.coordinator_context import CoordinatorContext
from minikafka.broker.group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from minikafka.broker.replica_manager import ReplicaManager
from minikafka.rules import REFERENCE, Rules
from minikafka.storage.disk import OS_DISK, Disk
from minikafka.broker.transaction_coordinator import TransactionCoordinator
from minikafka.broker.transaction_state_manager import TRANSACTION_STATE_TOPIC
from minikafka.messages import (
    CONTROLLER_ID,
    CORRUPT_MESSAGE,
    COORDINATOR_NOT_AVAILABLE,
    REQUEST_TIMED_OUT,
    LEADER_NOT_AVAILABLE,
    NO_ERROR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_TOPIC_OR_PARTITION,
    KAFKA_STORAGE_ERROR,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH,
    OffsetForLeaderEpochRequest,
    OffsetDeleteRequest,
    OffsetForLeaderEpochResponse,
    OFFSET_NOT_AVAILABLE,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_ID,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    Disconnected,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    FetchResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    PartitionState,
    ProduceRequest,
    TopicConfig,
    TopicMetadata,
)
from minikafka.metadata.image import MetadataImage
from minikafka.node import NodeId, StateMachine
from minikafka.raft import KafkaRaftClient

METADATA_TOPIC = "__cluster_metadata"  # the controllers' log: never a topic clients may create
from minikafka.storage import LogManager
from minikafka.errors import CorruptRecordError, InvalidTopicError, KafkaStorageError
from minikafka.topic import INTERNAL_TOPICS, TopicPartition, validate_topic_name
from minikafka.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

log = logging.getLogger("minikafka.broker")
log_dir_log = logging.getLogger("minikafka.broker.log_dir")  # a log directory went offline (quiet in campaigns)

# Opening a replica new here creates its log (a directory and five files: 0.3 to 4 ms on this
# machine, as busy as its disk is). A metadata step with up to OPEN_AT_ONCE of them opens them
# all; a larger one opens OPEN_REPLICAS_PER_STEP per step, the rest in later steps (a 0 ms
# timer, so the runtime serves other clients in between): a 2,000-partition CreateTopics or a
# restart's replay held this broker's other clients for seconds. A replica not open yet
# answers as one this broker does not host yet (UNKNOWN_TOPIC_OR_PARTITION, which clients retry).
OPEN_AT_ONCE = 64
OPEN_REPLICAS_PER_STEP = 16


class Broker(StateMachine):
    def __init__(self, broker_id: int, log_dir: Path | str, config: BrokerConfig, *, incarnation: int = 0,
                 advertised: tuple[str, int] | None = None, inter_broker_port: int = 0, controllers: tuple[int, ...] = (CONTROLLER_ID,),
                 seed: int = 0, raft_history: Any = None, disk: Disk = OS_DISK,
                 file_records_min_bytes: int | None = None, rules: Rules = REFERENCE) -> None:
        super().__init__(broker_id)
        self.rules = rules  # the decisions its partitions make (minikafka.rules): Kafka's by default
        # On the wire: record sets this large are answered unread, for the runtime to sendfile
        # (see storage/file_records.py); None in the simulated world, whose messages are bytes.
        self.file_records_min_bytes = file_records_min_bytes
        self.disk = disk  # what its logs write through (the simulated cluster injects faults there)
        self.broker_id = broker_id
        self.log_dir = Path(log_dir)
        # Its own copy: dynamic broker configs change this broker's, not every broker's that
        # was handed the same object (the simulated cluster hands one to all).
        self.config = BrokerConfig(config.values)
        self._static_config = dict(config.values)  # as started; dynamic broker configs go over it
        self.incarnation = incarnation
        self.advertised = advertised  # (host, port) in a real-process cluster; None in the simulation
        self.inter_broker_port = inter_broker_port  # its inter-broker listener's port there; 0 in the simulation
        self.controllers = tuple(controllers)  # the metadata quorum's voters
        self.seed = seed
        self.raft_history = raft_history  # a checker's RaftHistory: what this observer was told
        self.raft: KafkaRaftClient | None = None
        self.image = MetadataImage()  # the committed metadata log, folded
        self.fenced = True  # as the controller last said
        # what the image says, in the shapes the handlers use
        self.endpoints: dict[int, tuple[str, int]] = {}  # every live broker's client address
        self.inter_broker_endpoints: dict[int, tuple[str, int]] = {}  # ... and inter-broker address
        self.live_brokers: tuple[int, ...] = ()
        self.topics: dict[str, TopicConfig] = {}
        self.partition_states: dict[tuple[str, int], PartitionState] = {}
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self._creating_internal: set[str] = set()  # __transaction_state being created
        self.controller_channel: NodeToControllerChannelManager | None = None
        self._creating_offsets_topic = False
        self._auto_creating: set[str] = set()  # topics a Metadata request is having created
        self.retention_deleted = 0  # segments retention deleted here (for notebooks and tests)
        self._heartbeat_in_flight = False
        self._heartbeat_again = False  # a commit arrived while a heartbeat was out
        self._correlation = 0
        self._after_metadata: list[tuple[int, Callable[[], None]]] = []  # (offset, then) waiting for our image
        self._to_open: dict[tuple[str, int], None] = {}  # replicas new here, in order, past a step's share
        self._producer_ids: list[int] = []  # first id, count of the block we hand out
        self._waiting_for_ids: list[Callable[[int, int], None]] = []  # callback(error, producer id)
        self._asked_for_ids = False

    @property
    def metadata_offset(self) -> int:
        """The last metadata record this broker has applied (-1: none yet)."""
        return self.image.offset

    @property
    def active_controller(self) -> int | None:
        return self.raft.leader_id if self.raft is not None else None

    def _next_correlation(self) -> int:
        self._correlation += 1
        return self._correlation

    # --- lifecycle -------------------------------------------------------------------------------

    def on_start(self) -> None:
        self.log_manager = LogManager(self.log_dir, clock=lambda: self.now, disk=self.disk, rules=self.rules)
        self.replica_manager = ReplicaManager(self, self.broker_id, self.log_manager, self.config, self.rules)
        self.replica_manager.file_records_min_bytes = self.file_records_min_bytes
        # A failed write calls this from inside the failing append: handle it on our own turn.
        self.log_manager.failure_channel.listener = lambda log_dir, reason: self.set_timer("log-dir-failure", 0)
        coordinators = CoordinatorContext(self)  # what they may ask of this broker, and no more
        self.group_coordinator = GroupCoordinator(coordinators)
        self.transaction_coordinator = TransactionCoordinator(coordinators)
        self.raft = KafkaRaftClient(self, self.broker_id, self.controllers, self.log_dir, config=self.config.values,
                                    seed=f"{self.seed}-{self.broker_id}", listener=self, rules=self.rules)
        self.controller_channel = NodeToControllerChannelManager(
            self, self.controllers, lambda: self.raft.leader_id,
            retry_backoff_ms=max(50, self.config["controller.quorum.retry.backoff.ms"]))
        self.raft.start()
        self._heartbeat()
        self.set_timer("offsets-expire", self.config["offsets.retention.check.interval.ms"])
        if self.config["log.cleaner.enable"]:
            self.set_timer("log-cleaner", self.config["log.cleaner.backoff.ms"])
        self.set_timer("log-retention", self.config["log.retention.check.interval.ms"])
        self.set_timer("isr-check", self.config["replica.lag.time.max.ms"] // 2)
        self.set_timer("flush", self.config["log.flush.interval.ms"])
        self.transaction_coordinator.start()

    def _heartbeat(self) -> None:
        self.set_timer("heartbeat", self.config["broker.heartbeat.interval.ms"])
        if self._heartbeat_in_flight:
            # Asked again while one is out (a commit that may catch us up): its answer may
            # already be stale, so ask once more when it comes rather than a whole interval later.
            self._heartbeat_again = True
            return
        self._heartbeat_in_flight = True
        self._heartbeat_again = False
        host, port = self.advertised or ("", 0)
        offline_dirs = self.log_manager.failure_channel.offline_log_dirs

        def answered(response: BrokerHeartbeatResponse) -> None:
            self._heartbeat_in_flight = False
            if response.error == NO_ERROR:
                self.fenced = response.is_fenced
            if self._heartbeat_again and (self.fenced or offline_dirs != self.log_manager.failure_channel.offline_log_dirs):
                self._heartbeat()  # (or a directory failed since this one went: say so now)

        def timed_out() -> None:
            self._heartbeat_in_flight = False

        self.controller_channel.send(
            lambda corr: BrokerHeartbeatRequest(corr, self.broker_id, self.incarnation, self.metadata_offset, host, port,
                                                self.inter_broker_port, offline_dirs),
            answered, timeout_ms=self.config["broker.heartbeat.interval.ms"], on_timeout=timed_out)

    # --- the metadata log: the Raft client's listener -----------------------------------------------

    def handle_commit(self, records: list) -> None:
        if self.raft_history is not None:
            for rec in records:
                self.raft_history.commit(self.now, self.broker_id, self.incarnation, rec)
        delta = self.image.apply_committed(records)
        if delta:
            self._publish(delta)
        if self._after_metadata:
            ready = [then for offset, then in self._after_metadata if offset <= self.image.offset]
            self._after_metadata = [(o, t) for o, t in self._after_metadata if o > self.image.offset]
            for then in ready:
                then()
        if self.fenced:
            self._heartbeat()  # caught up further: the controller may unfence us now

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        # The controller channel asks the Raft client for the leader on every send; told of a
        # new one, it sends what is still out (our heartbeat) there at once.
        if self.raft_history is not None:
            self.raft_history.leader_change(self.now, self.broker_id, self.incarnation, leader_id, epoch)
        if self.controller_channel is not None:
            self.controller_channel.leader_changed(leader_id)

    def _publish(self, delta) -> None:
        """Act on what the committed metadata changed (Kafka's ``BrokerMetadataPublisher``)."""
        image = self.image
        if delta.brokers_changed:
            self.live_brokers = image.live_brokers
            self.endpoints = image.endpoints()
            self.inter_broker_endpoints = image.inter_broker_endpoints()
            self._apply_dynamic_broker_configs()
        for topic in sorted(delta.removed_topics):
            self._drop_topic(topic)  # every local copy goes; a re-created topic starts afresh below
        for topic in sorted(delta.topics):
            if topic in image.topic_ids:
                old = self.topics.get(topic)
                self.topics[topic] = image.topic_config(topic)
                if old is not None and old.configs != self.topics[topic].configs:
                    self.replica_manager.apply_topic_configs(topic, dict(self.topics[topic].configs))
        if self.log_manager.short_of_fds is not None:
            self.log_manager.recheck_descriptors()  # connections may have closed since
        failed: dict[tuple[str, int], str] = {}
        rm = self.replica_manager
        new = sum(1 for key, state in delta.partitions.items() if key[0] in image.topic_ids
                  and self.broker_id in state.replicas and key not in rm.partitions)
        budget = 0 if self._to_open else new if new <= OPEN_AT_ONCE else OPEN_REPLICAS_PER_STEP
        for key, state in sorted(delta.partitions.items()):
            if key[0] not in image.topic_ids:
                continue
            self.partition_states[key] = state
            if self.broker_id in state.replicas and key not in rm.offline_partitions:
                if key in rm.partitions:
                    self._apply_here(state, failed)  # a change to an open replica: cheap, and now
                elif budget > 0:
                    self._apply_here(state, failed)
                    budget -= 1
                else:
                    self._to_open[key] = None  # opened later, from partition_states as it is then
        if delta.removed_topics:
            failed.update(self._reopen_offline())
        self._applied(failed)

    def _applied(self, failed: dict[tuple[str, int], str], *, later_share: bool = False) -> None:
        """After a step of partition states: fetch what is due, say what went offline, let the
        coordinators look at their partitions, and open the rest of the new replicas later."""
        self.replica_manager.send_due_fetches(idle_only=later_share)
        if failed:
            (topic, partition), why = next(iter(sorted(failed.items())))
            log.error("broker %s: %d partition(s) offline here, %s-%s first: %s",
                      self.broker_id, len(failed), topic, partition, why)
        self.group_coordinator.on_metadata_changed()
        self.transaction_coordinator.on_metadata_changed()
        if self._to_open:
            self.set_timer("open-replicas", 0)

    def _open_replicas(self) -> None:
        """The next share of the replicas new here, each in the state the image has for it now
        (it may have moved on, or its topic gone, since it was queued)."""
        rm = self.replica_manager
        failed: dict[tuple[str, int], str] = {}
        keys = list(self._to_open)[:OPEN_REPLICAS_PER_STEP]
        for key in keys:
            del self._to_open[key]
            state = self.partition_states.get(key)
            if (state is not None and key[0] in self.topics and self.broker_id in state.replicas
                    and key not in rm.offline_partitions):
                self._apply_here(state, failed)
        self._applied(failed, later_share=True)

    def _apply_here(self, state: PartitionState, failed: dict[tuple[str, int], str]) -> None:
        """Apply a partition's state to this broker's replica. If that fails (out of file
        descriptors, a disk error), the partition goes offline here, as Kafka takes a failed
        log directory's replicas offline: it is answered KAFKA_STORAGE_ERROR, the failure is
        noted in ``failed``, and the rest of the metadata (other topics, deletions) is applied
        as usual instead of failing again and again. With the log directory offline, a
        replica new here is offline from the start (said once, when the directory failed)."""
        if self.log_manager.offline is not None:
            self.replica_manager.mark_offline((state.topic, state.partition), self.log_manager.offline)
            return
        try:
            self.replica_manager.apply_partition_state(state, dict(self.topics[state.topic].configs))
        except (KafkaStorageError, OSError) as e:
            key = (state.topic, state.partition)
            failed[key] = str(e)
            self.replica_manager.mark_offline(key, str(e))

    def _log_dir_failed(self) -> None:
        """The log directory went offline (Kafka's ``LogDirFailureHandler``). Kafka's broker
        halts when its last directory fails; with JBOD (KIP-858) it goes on and tells the
        controller. This one does the latter: every replica here goes offline (produce and
        fetch answered KAFKA_STORAGE_ERROR, fetchers stopped), and a heartbeat goes out now
        naming the directory, so the controller moves the leaders away without waiting for
        the next interval. The broker stays up for what needs no disk here (metadata, finding
        coordinators) until it is restarted, or until its metadata log (in the same directory)
        cannot take the next record: then it halts (see the Raft client's observer)."""
        reason = self.log_manager.offline
        if reason is None:
            return
        keys = self.replica_manager.handle_log_dir_failure(reason)
        log_dir_log.error("broker %s: log directory %s is offline, %d partition(s) offline here: %s",
                          self.broker_id, self.log_manager.log_dir, len(keys), reason)
        self._heartbeat()

    def _reopen_offline(self) -> dict[tuple[str, int], str]:
        """Deleted topics gave their files back: try again the partitions that could not be
        opened at all (no ``Partition`` here yet, so nothing half set up). What failed again."""
        rm = self.replica_manager
        failed: dict[tuple[str, int], str] = {}
        for key in sorted(k for k in rm.offline_partitions if k not in rm.partitions):
            state = self.partition_states.get(key)
            if state is None or key[0] not in self.topics:
                continue
            del rm.offline_partitions[key]
            self._apply_here(state, failed)
        return failed

    def _apply_dynamic_broker_configs(self) -> None:
        """Dynamic broker configs (committed broker ConfigRecords: "" for the cluster, then this
        broker's id) over the ones it started with; every hosted log takes the new defaults.
        The values are changed in place: the replica manager and the logs share the object."""
        dynamic = {**self.image.broker_configs.get("", {}), **self.image.broker_configs.get(str(self.broker_id), {})}
        values = BrokerConfig({**self._static_config, **dynamic}).values
        if values != self.config.values:
            self.config.values = values
            for topic in sorted(self.topics):
                self.replica_manager.apply_topic_configs(topic, dict(self.topics[topic].configs))

    def send_to_controller(self, make: Callable[[int], Any], on_response: Callable[[Any], None], *,
                           retry_ms: int) -> int:
        """A request to the active controller that is sent again every ``retry_ms`` until
        answered (AlterPartition: the replica manager must learn its fate). Its correlation id,
        for ``cancel_controller_request``."""
        return self.controller_channel.send(make, on_response, timeout_ms=None, attempt_timeout_ms=retry_ms)

    def cancel_controller_request(self, correlation_id: int) -> None:
        self.controller_channel.cancel(correlation_id)

    def on_timer(self, key: Hashable) -> None:
        rm = self.replica_manager
        if self.raft.on_timer(key) or self.controller_channel.on_timer(key):
            return
        if key == "heartbeat":
            self._heartbeat()
        elif key == "open-replicas":
            self._open_replicas()
        elif key == "log-dir-failure":
            self._log_dir_failed()
        elif key == "flush":
            # Kafka leaves flushing to the OS, which writes dirty pages back within ~30 s;
            # this timer stands in for that writeback, so a power loss costs the last
            # seconds, not everything since the broker started.
            if self.log_manager.flush_all() is None and self.log_manager.offline is None:
                self.set_timer("flush", self.config["log.flush.interval.ms"])
            # else the log dir is offline (an fsync or an append failed): nothing here is
            # flushed again; the failure channel has told us (``_log_dir_failed``), and the
            # logs are recovered from their last recovery point at the next start.
        elif key == "isr-check":
            rm.maybe_shrink_isrs()
            self.set_timer("isr-check", self.config["replica.lag.time.max.ms"] // 2)
        elif key[0] == "produce-timeout":
            rm.produce_timed_out(key[1])
        elif key[0] == "fetch-expire":
            rm.fetch_expired(key[1])
        elif key[0] == "replica-fetch-timeout":
            rm.replica_fetch_timed_out(key[1])
        elif key[0] == "replica-fetch-backoff":
            rm.fetch_backoff_over(key[1])
        elif key == "log-cleaner":
            # Kafka's cleaner threads, as a timer: compact what has rolled, never past the
            # high watermark (a record above it may still be truncated away).
            hws = {TopicPartition(*k): p.high_watermark for k, p in rm.partitions.items()}
            for tp, stats in self.log_manager.clean_logs(self.now, high_watermarks=hws).items():
                p = rm.partitions.get((tp.topic, tp.partition))
                if stats.removed_markers and p is not None:
                    p.producer_state.forget_markers({offset for _, offset in stats.removed_markers})
            self.set_timer("log-cleaner", self.config["log.cleaner.backoff.ms"])
        elif key == "log-retention":
            # Kafka's kafka-log-retention task: every log.retention.check.interval.ms, whole
            # segments past retention.ms / retention.bytes go and the log start offset moves.
            self.retention_deleted += sum(len(v) for v in rm.delete_old_segments().values())
            self.set_timer("log-retention", self.config["log.retention.check.interval.ms"])
        elif key == "offsets-expire":
            self.group_coordinator.expire_offsets()
            self.set_timer("offsets-expire", self.config["offsets.retention.check.interval.ms"])
        elif key == "txn-abort-timed-out":
            self.transaction_coordinator.abort_timed_out_transactions()
        elif key == "txn-markers":
            self.transaction_coordinator.retry_markers()
        elif key[0] == "group-join":
            self.group_coordinator.join_timer(key[1])
        elif key[0] == "group-session":
            self.group_coordinator.session_expired(key[1], key[2])
        elif key[0] == "group-pending":
            self.group_coordinator.pending_expired(key[1], key[2])
        elif key[0] in ("cgroup-session", "cgroup-revoke"):  # KIP-848: a member to fence
            self.group_coordinator.consumer_member_expired(key[1], key[2])

    # --- dispatch --------------------------------------------------------------------------------------

    def on_message(self, src: NodeId, message: Any) -> None:
        handler = self._HANDLERS.get(type(message))
        if handler is not None and src not in self.controllers:
            # Not the Raft client's (its messages are none of these) nor an answer from a
            # controller: most of what a broker gets (produce, fetch), straight to its handler.
            handler(self, src, message)
            return
        if isinstance(message, Disconnected):  # the Raft client and the channel both need to know
            self.raft.handle(src, message)
            self.controller_channel.disconnected(message.node)  # AlterPartitions too: sent elsewhere
            self.transaction_coordinator.leader_unreachable(message.node)
        elif self.raft.handle(src, message) or self.controller_channel.handle_response(src, message):
            return
        elif handler is not None:
            handler(self, src, message)

    def _produce(self, src: NodeId, request: ProduceRequest) -> None:
        self.replica_manager.append_records(src, request)

    def _fetch(self, src: NodeId, request: FetchRequest) -> None:
        self.replica_manager.fetch_messages(src, request)

    def _fetch_response(self, src: NodeId, response: FetchResponse) -> None:
        self.replica_manager.handle_fetch_response(src, response)

    def _drop_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
        for key in [k for k in self.partition_states if k[0] == topic]:
            del self.partition_states[key]
            self._to_open.pop(key, None)
        on_disk = {tp.partition for tp in self.log_manager.partitions_on_disk() if tp.topic == topic}
        hosted = {p for t, p in (*self.replica_manager.partitions, *self.replica_manager.offline_partitions) if t == topic}
        for partition in sorted(on_disk | hosted):
            self.replica_manager.remove_partition(topic, partition)

    def _metadata(self, src: NodeId, request: MetadataRequest) -> None:
        # Each name once, as Kafka answers (a set): a request that repeats a name costs no more.
        names = sorted(self.topics) if request.topics is None else list(dict.fromkeys(request.topics))
        topics = []
        for topic_id in request.topic_ids:  # asked by id (Metadata v10+): the name it has, if any
            name = self.image.topic_names.get(topic_id)
            if name is None or name not in self.topics:
                topics.append(TopicMetadata("", UNKNOWN_TOPIC_ID, topic_id=topic_id))
            elif name not in names:
                names.append(name)
        to_create: list[TopicConfig] = []
        for name in names:
            if name not in self.topics:
                error = self._unknown_topic(name, request.allow_auto_topic_creation, to_create)
                topics.append(TopicMetadata(name, error))
                continue
            parts = []
            for p in range(self.topics[name].num_partitions):
                s = self.partition_states.get((name, p))
                if s is None:
                    parts.append(PartitionMetadata(p, LEADER_NOT_AVAILABLE, -1, -1, (), ()))
                    continue
                error = NO_ERROR if s.leader >= 0 else LEADER_NOT_AVAILABLE
                parts.append(PartitionMetadata(p, error, s.leader, s.leader_epoch, s.replicas, s.isr))
            topics.append(TopicMetadata(name, NO_ERROR, tuple(parts), self.image.topic_id(name)))
        # The active controller, as far as this broker knows. Clients cannot reach it over TCP:
        # the wire codec names the answering broker instead (it forwards), as KRaft brokers do.
        controller = self.active_controller
        if to_create:
            self._auto_create(to_create)
        self.send(src, MetadataResponse(request.correlation_id, self.live_brokers,
                                        CONTROLLER_ID if controller is None else controller, tuple(topics)))

    def _unknown_topic(self, name: str, allow_auto_creation: bool, to_create: list[TopicConfig]) -> int:
        """The error for a topic a Metadata request names and this broker does not know.

        Kafka's auto-creation: with ``auto.create.topics.enable`` (default true) and a client
        that allows it (producers do), the broker asks the controller to create the topic
        with ``num.partitions`` partitions and ``default.replication.factor`` replicas,
        capped at the live brokers so a one-broker course cluster works (Kafka would refuse
        there), and answers LEADER_NOT_AVAILABLE: the client asks again until it exists.
        An illegal name is INVALID_TOPIC_EXCEPTION, never created."""
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            return INVALID_TOPIC_EXCEPTION
        if not allow_auto_creation or (name in INTERNAL_TOPICS and name != OFFSETS_TOPIC):
            return UNKNOWN_TOPIC_OR_PARTITION
        if name == OFFSETS_TOPIC:  # internal: made as the group coordinator makes it, whatever the config
            self._create_offsets_topic()
            return LEADER_NOT_AVAILABLE
        if not self.config["auto.create.topics.enable"]:
            return UNKNOWN_TOPIC_OR_PARTITION
        if name not in self._auto_creating:
            self._auto_creating.add(name)  # one request per topic in flight, however often clients ask
            c = self.config
            # (not knowing any live broker yet, ask for the default: the controller knows better)
            rf = max(1, min(c["default.replication.factor"], len(self.live_brokers) or c["default.replication.factor"]))
            to_create.append(TopicConfig(name, c["num.partitions"], rf))
        return LEADER_NOT_AVAILABLE

    def _auto_create(self, topics: list[TopicConfig]) -> None:
        """One CreateTopics for every topic one Metadata request auto-creates (Kafka's
        ``AutoTopicCreationManager``): one message to the controller however many names the
        request holds, and subject as a whole to ``max.request.partition.size.limit``, so a
        request naming a hundred thousand topics creates none of them."""
        names = [t.name for t in topics]
        if sum(t.num_partitions for t in topics) > self.config["max.request.partition.size.limit"]:
            # The controller would refuse it whole (POLICY_VIOLATION): not worth the trip.
            self._auto_creating.difference_update(names)
            return

        def done(*_: Any) -> None:
            self._auto_creating.difference_update(names)  # made (or refused): ask again if need be

        batch = tuple(topics)
        self.controller_channel.send(lambda corr: CreateTopicsRequest(corr, batch), done,
                                     timeout_ms=self.config["request.timeout.ms"], on_timeout=done)

    def _leading_here(self, topic: str, partition: int) -> tuple[Any, int]:
        """The partition, if this broker can serve a leader's request for it, and otherwise
        why not (Kafka's ``getPartitionOrException``): offline here (its log directory failed:
        KAFKA_STORAGE_ERROR, checked first, since such a replica may still believe it leads),
        not the leader, or unknown."""
        p = self.replica_manager.partitions.get((topic, partition))
        if (topic, partition) in self.replica_manager.offline_partitions:
            return None, KAFKA_STORAGE_ERROR
        if p is None:
            return None, UNKNOWN_TOPIC_OR_PARTITION
        return (p, NO_ERROR) if p.is_leader else (None, NOT_LEADER_OR_FOLLOWER)

    def _list_offsets(self, src: NodeId, request: ListOffsetsRequest) -> None:
        out = []
        for topic, partition, timestamp in request.partitions:
            p, error = self._leading_here(topic, partition)
            # A new leader knows the high watermark only as a follower last heard it: until its
            # own reaches the start of its epoch, "latest" could go backwards. Kafka answers
            # OFFSET_NOT_AVAILABLE (retriable) then, for "latest" and for a time not found below it.
            lagging = p is not None and p.leader_epoch_start_offset > p.high_watermark
            if p is None:
                out.append((topic, partition, error, -1, -1))
            elif timestamp == EARLIEST_TIMESTAMP:
                out.append((topic, partition, NO_ERROR, -1, p.log.log_start_offset))
            elif timestamp == LATEST_TIMESTAMP and lagging:
                out.append((topic, partition, OFFSET_NOT_AVAILABLE, -1, -1))
            elif timestamp == LATEST_TIMESTAMP:  # read_committed: what such a consumer can reach
                latest = p.last_stable_offset if request.isolation_level == 1 else p.high_watermark
                out.append((topic, partition, NO_ERROR, -1, latest))
            else:  # another negative target (a client's bug) finds the first record, as in Kafka
                try:
                    found = p.log.offset_for_timestamp(max(timestamp, 0))
                except CorruptRecordError:
                    # A bad batch stored before records were validated: Kafka answers this
                    # partition with the error; the request and connection go on.
                    out.append((topic, partition, CORRUPT_MESSAGE, -1, -1))
                    continue
                if found is None or found[1] >= p.high_watermark:
                    out.append((topic, partition, OFFSET_NOT_AVAILABLE if lagging else NO_ERROR, -1, -1))
                else:
                    out.append((topic, partition, NO_ERROR, found[0], found[1]))
        self.send(src, ListOffsetsResponse(request.correlation_id, tuple(out)))

    def _delete_records(self, src: NodeId, request: DeleteRecordsRequest) -> None:
        """At the leader: the log start offset moves to the given offset (-1: the high
        watermark), never past the high watermark (OFFSET_OUT_OF_RANGE). Followers move theirs
        when their next fetch brings the leader's log start offset. Answered at once, with the
        leader's new log start offset (Kafka waits until every follower has caught up with it)."""
        out = []
        for topic, partition, offset in request.partitions:
            p, error = self._leading_here(topic, partition)
            if p is None:
                out.append((topic, partition, -1, error))
                continue
            target = p.high_watermark if offset == -1 else offset
            if target < 0 or target > p.high_watermark:
                out.append((topic, partition, -1, OFFSET_OUT_OF_RANGE))
                continue
            p.log.maybe_increment_log_start_offset(target)
            out.append((topic, partition, p.log.log_start_offset, NO_ERROR))
        self.send(src, DeleteRecordsResponse(request.correlation_id, tuple(out)))

    def _offset_for_leader_epoch(self, src: NodeId, request: OffsetForLeaderEpochRequest) -> None:
        """KIP-320, at the leader: the largest epoch at or below the one asked and the offset
        where it ended in this log (the log end for the current epoch), from the leader epoch
        cache; (-1, -1) if the log knows no such epoch (the client then resets). A client's
        current epoch older than ours is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH
        (our metadata is behind): both make it refresh metadata and ask again."""
        out = []
        for topic, partition, current_epoch, epoch in request.partitions:
            p, error = self._leading_here(topic, partition)
            if p is None:
                out.append((topic, partition, error, -1, -1))
            elif current_epoch >= 0 and current_epoch != p.leader_epoch:
                error = FENCED_LEADER_EPOCH if current_epoch < p.leader_epoch else UNKNOWN_LEADER_EPOCH
                out.append((topic, partition, error, -1, -1))
            else:
                found_epoch, end = p.log.leader_epoch_cache.end_offset_for(epoch, p.log.log_end_offset)
                out.append((topic, partition, NO_ERROR, found_epoch, end))
        self.send(src, OffsetForLeaderEpochResponse(request.correlation_id, tuple(out)))

    def _init_producer_id(self, src: NodeId, request: InitProducerIdRequest) -> None:
        if request.transactional_id is not None:
            return self.transaction_coordinator.init_producer_id(src, request)

        def allocated(error: int, producer_id: int) -> None:
            self.send(src, InitProducerIdResponse(request.correlation_id, error, producer_id, 0 if error == NO_ERROR else -1))

        self.allocate_producer_id(allocated)

    def allocate_producer_id(self, callback: Callable[[int, int], None]) -> None:
        """A fresh producer id from this broker's block (``callback(error, id)``): for
        idempotent producers directly, for transactional ones through their coordinator."""
        self._waiting_for_ids.append(callback)
        self._hand_out_producer_ids()

    def _hand_out_producer_ids(self) -> None:
        while self._waiting_for_ids and self._producer_ids and self._producer_ids[1] > 0:
            callback = self._waiting_for_ids.pop(0)
            first, count = self._producer_ids
            self._producer_ids = [first + 1, count - 1]
            callback(NO_ERROR, first)
        if self._waiting_for_ids and not self._asked_for_ids:
            self._asked_for_ids = True  # one request at a time: blocks are not to be wasted

            def timed_out() -> None:
                self._asked_for_ids = False
                waiting, self._waiting_for_ids = self._waiting_for_ids, []
                for callback in waiting:
                    callback(REQUEST_TIMED_OUT, -1)

            self.controller_channel.send(lambda corr: AllocateProducerIdsRequest(corr, self.broker_id),
                                         self._allocate_producer_ids_response,
                                         timeout_ms=self.config["request.timeout.ms"], on_timeout=timed_out)

    def _allocate_producer_ids_response(self, response: AllocateProducerIdsResponse) -> None:
        self._asked_for_ids = False
        if response.error == NO_ERROR:
            self._producer_ids = [response.first_producer_id, response.count]
        self._hand_out_producer_ids()

    def _forward(self, src: NodeId, request: Any, make: Callable[[int], Any],
                 answer: Callable[[Any], Any], timed_out: Callable[[str], Any]) -> None:
        """Send a client's request on to the active controller; its answer goes back to the
        client under the client's correlation id."""
        timeout = self.config["request.timeout.ms"]

        def answered(response: Any) -> None:
            # Read your writes: answer once our own image has the change, so the client's
            # next Metadata request to this broker already shows the new topic.
            offset = getattr(response, "metadata_offset", -1)
            if offset > self.image.offset:
                self._after_metadata.append((offset, lambda: self.send(src, answer(response))))
            else:
                self.send(src, answer(response))

        self.controller_channel.send(
            make, answered, timeout_ms=timeout,
            on_timeout=lambda: self.send(src, timed_out(
                f"no active controller answered within {timeout} ms: is a majority of the controller "
                f"quorum {list(self.controllers)} up?")))

    def _create_topics(self, src: NodeId, request: CreateTopicsRequest) -> None:
        internal = [t.name for t in request.topics if t.name in INTERNAL_TOPICS]
        if internal:  # the brokers create their own (the group coordinator, on first use)
            self.send(src, CreateTopicsResponse(request.correlation_id, tuple(
                (t.name, INVALID_REQUEST, f"Creation of internal topic {t.name} is prohibited.") if t.name in internal
                else (t.name, INVALID_REQUEST, "not created: the request also names an internal topic")
                for t in request.topics)))
            return
        # -1 asks for the broker's defaults, as kafka-topics does without --partitions. With
        # explicit replicas -1 is what Kafka requires, and the controller checks it: left as sent.
        topics = tuple(t if t.assignments else replace(
            t, num_partitions=self.config["num.partitions"] if t.num_partitions == -1 else t.num_partitions,
            replication_factor=(self.config["default.replication.factor"] if t.replication_factor == -1
                                else t.replication_factor)) for t in request.topics)
        self._forward(src, request, lambda corr: CreateTopicsRequest(corr, topics),
                      lambda r: CreateTopicsResponse(request.correlation_id, r.results),
                      lambda message: CreateTopicsResponse(request.correlation_id, tuple(
                          (t.name, REQUEST_TIMED_OUT, message) for t in request.topics)))

    def _delete_topics(self, src: NodeId, request: DeleteTopicsRequest) -> None:
        self._forward(src, request, lambda corr: DeleteTopicsRequest(corr, request.topics, request.timeout_ms),
                      lambda r: DeleteTopicsResponse(request.correlation_id, r.results),
                      lambda message: DeleteTopicsResponse(request.correlation_id, tuple(
                          (t, REQUEST_TIMED_OUT, message) for t in request.topics)))

    def _create_partitions(self, src: NodeId, request: CreatePartitionsRequest) -> None:
        self._forward(src, request, lambda corr: replace(request, correlation_id=corr),
                      lambda r: replace(r, correlation_id=request.correlation_id, metadata_offset=-1),
                      lambda message: CreatePartitionsResponse(request.correlation_id, tuple(
                          (t, REQUEST_TIMED_OUT, message) for t, _ in request.topics)))

    def _alter_configs(self, src: NodeId, request: AlterConfigsRequest) -> None:
        self._forward(src, request, lambda corr: replace(request, correlation_id=corr),
                      lambda r: replace(r, correlation_id=request.correlation_id, metadata_offset=-1),
                      lambda message: AlterConfigsResponse(request.correlation_id, tuple(
                          (rtype, name, REQUEST_TIMED_OUT, message) for rtype, name, _ in request.resources)))

    def _describe_quorum(self, src: NodeId, request: DescribeQuorumRequest) -> None:
        self._forward(src, request, lambda corr: DescribeQuorumRequest(corr),
                      lambda r: replace(r, correlation_id=request.correlation_id),
                      lambda message: DescribeQuorumResponse(request.correlation_id, REQUEST_TIMED_OUT,
                                                             error_message=message))

    def _describe_configs(self, src: NodeId, request: DescribeConfigsRequest) -> None:
        """Kafka's resource types: 2 a topic (its overrides over the broker's defaults), 4 a broker."""
        from minikafka.broker.config import DEFAULTS, TOPIC_KEYS

        results = []
        for resource_type, name, keys in request.resources:
            if resource_type == 2:
                topic = self.topics.get(name)
                if topic is None:
                    results.append((2, name, UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist", ()))
                    continue
                overrides = dict(topic.configs)
                values = self.config.for_topic(overrides)
                entries = [(k, str(values[k]).lower() if isinstance(values[k], bool) else str(values[k]),
                            False, k not in overrides, False) for k in sorted(TOPIC_KEYS)]
            elif resource_type == 4:
                if name not in ("", str(self.broker_id)):
                    results.append((4, name, INVALID_REQUEST, f"this is broker {self.broker_id}, not {name}", ()))
                    continue
                entries = [(k, str(v).lower() if isinstance(v, bool) else str(v), True,
                            v == DEFAULTS.get(k), False) for k, v in sorted(self.config.values.items())]
            else:
                results.append((resource_type, name, INVALID_REQUEST, f"unknown resource type {resource_type}", ()))
                continue
            if keys is not None:
                entries = [e for e in entries if e[0] in set(keys)]
            results.append((resource_type, name, NO_ERROR, None, tuple(entries)))
        self.send(src, DescribeConfigsResponse(request.correlation_id, tuple(results)))

    # --- consumer groups ---------------------------------------------------------------------------------

    def _find_coordinator(self, src: NodeId, request: FindCoordinatorRequest) -> None:
        def reply(error: int, node: int = -1, message: str | None = None) -> None:
            self.send(src, FindCoordinatorResponse(request.correlation_id, error, node, message))

        if request.key_type == 1:
            return self._find_transaction_coordinator(request.key, reply)
        if request.key_type != 0:
            return reply(INVALID_REQUEST, message=f"key_type {request.key_type}: 0 (group) or 1 (transaction)")
        if OFFSETS_TOPIC not in self.topics:
            self._create_offsets_topic()
            return reply(COORDINATOR_NOT_AVAILABLE, message=f"{OFFSETS_TOPIC} is being created")
        p = self.group_coordinator.partition_for(request.key)
        state = self.partition_states.get((OFFSETS_TOPIC, p))
        if state is None or state.leader < 0:
            return reply(COORDINATOR_NOT_AVAILABLE, message=f"{OFFSETS_TOPIC}-{p} has no leader")
        reply(NO_ERROR, state.leader)

    def _find_transaction_coordinator(self, transactional_id: str, reply: Callable[..., None]) -> None:
        if not transactional_id:
            return reply(INVALID_REQUEST, message="a transactional id may not be empty")
        if TRANSACTION_STATE_TOPIC not in self.topics:
            self._create_transaction_state_topic()
            return reply(COORDINATOR_NOT_AVAILABLE, message=f"{TRANSACTION_STATE_TOPIC} is being created")
        p = self.transaction_coordinator.state.partition_for(transactional_id)
        state = self.partition_states.get((TRANSACTION_STATE_TOPIC, p))
        if state is None or state.leader < 0:
            return reply(COORDINATOR_NOT_AVAILABLE, message=f"{TRANSACTION_STATE_TOPIC}-{p} has no leader")
        reply(NO_ERROR, state.leader)

    def _create_transaction_state_topic(self) -> None:
        """``__transaction_state``, made when the first transactional producer looks for its
        coordinator: compacted, ``transaction.state.log.*`` partitions and replicas (capped at
        the live brokers, as ``__consumer_offsets`` is)."""
        if TRANSACTION_STATE_TOPIC in self._creating_internal:
            return
        self._creating_internal.add(TRANSACTION_STATE_TOPIC)
        c = self.config
        rf = max(1, min(c["transaction.state.log.replication.factor"], len(self.live_brokers)))
        topic = TopicConfig(TRANSACTION_STATE_TOPIC, c["transaction.state.log.num.partitions"], rf, (
            ("cleanup.policy", "compact"), ("segment.bytes", str(c["transaction.state.log.segment.bytes"]))))

        def done(*_: Any) -> None:
            self._creating_internal.discard(TRANSACTION_STATE_TOPIC)

        self.controller_channel.send(lambda corr: CreateTopicsRequest(corr, (topic,)), done,
                                     timeout_ms=self.config["request.timeout.ms"], on_timeout=done)

    # --- transactions -------------------------------------------------------------------------------------

    def _txn_request(self, src: NodeId, request: Any) -> None:
        tc = self.transaction_coordinator
        if isinstance(request, AddPartitionsToTxnRequest):
            tc.add_partitions(src, request)
        elif isinstance(request, AddOffsetsToTxnRequest):
            tc.add_offsets(src, request)
        elif isinstance(request, EndTxnRequest):
            tc.end_txn(src, request)
        elif isinstance(request, TxnOffsetCommitRequest):
            self.group_coordinator.txn_commit_offsets(src, request)
        elif isinstance(request, WriteTxnMarkersRequest):
            self.replica_manager.write_txn_markers(request, lambda response: self.send(src, response))
        elif isinstance(request, WriteTxnMarkersResponse):
            tc.markers_written(request)

    def txn_marker_written(self, topic: str, partition: int, producer_id: int, committed: bool) -> None:
        """A marker is replicated here (the replica manager's listener): transactional
        offsets in ``__consumer_offsets`` become committed, or are dropped."""
        if topic == OFFSETS_TOPIC:
            self.group_coordinator.complete_transaction(partition, producer_id, committed)

    def _create_offsets_topic(self) -> None:
        """Kafka creates ``__consumer_offsets`` when the first group needs it. Its replication
        factor is ``offsets.topic.replication.factor``, capped here at the live brokers so
        that a one-broker course cluster works (Kafka would refuse until enough brokers are up)."""
        if self._creating_offsets_topic:
            return
        self._creating_offsets_topic = True
        c = self.config
        rf = max(1, min(c["offsets.topic.replication.factor"], len(self.live_brokers)))
        topic = TopicConfig(OFFSETS_TOPIC, c["offsets.topic.num.partitions"], rf, (
            ("cleanup.policy", "compact"), ("segment.bytes", str(c["offsets.topic.segment.bytes"]))))

        def done(*_: Any) -> None:
            self._creating_offsets_topic = False  # made, or made by another broker: ask again if need be

        self.controller_channel.send(lambda corr: CreateTopicsRequest(corr, (topic,)), done,
                                     timeout_ms=self.config["request.timeout.ms"], on_timeout=done)

    def _group_request(self, src: NodeId, request: Any) -> None:
        handler = {
            JoinGroupRequest: GroupCoordinator.join_group,
            SyncGroupRequest: GroupCoordinator.sync_group,
            HeartbeatRequest: GroupCoordinator.heartbeat,
            LeaveGroupRequest: GroupCoordinator.leave_group,
            OffsetCommitRequest: GroupCoordinator.commit_offsets,
            OffsetFetchRequest: GroupCoordinator.fetch_offsets,
            ListGroupsRequest: GroupCoordinator.list_groups,
            DescribeGroupsRequest: GroupCoordinator.describe_groups,
            DeleteGroupsRequest: GroupCoordinator.delete_groups,
            OffsetDeleteRequest: GroupCoordinator.delete_offsets,
            ConsumerGroupHeartbeatRequest: GroupCoordinator.consumer_group_heartbeat,
            ConsumerGroupDescribeRequest: GroupCoordinator.consumer_group_describe,
        }[type(request)]
        handler(self.group_coordinator, src, request)

    _HANDLERS = {
        ProduceRequest: _produce,
        FetchRequest: _fetch,
        FetchResponse: _fetch_response,
        MetadataRequest: _metadata,
        ListOffsetsRequest: _list_offsets,
        DeleteRecordsRequest: _delete_records,
        OffsetForLeaderEpochRequest: _offset_for_leader_epoch,
        InitProducerIdRequest: _init_producer_id,
        CreateTopicsRequest: _create_topics,
        DeleteTopicsRequest: _delete_topics,
        DescribeQuorumRequest: _describe_quorum,
        CreatePartitionsRequest: _create_partitions,
        AlterConfigsRequest: _alter_configs,
        DescribeConfigsRequest: _describe_configs,
        FindCoordinatorRequest: _find_coordinator,
        JoinGroupRequest: _group_request,
        SyncGroupRequest: _group_request,
        HeartbeatRequest: _group_request,
        LeaveGroupRequest: _group_request,
        OffsetCommitRequest: _group_request,
        OffsetFetchRequest: _group_request,
        ListGroupsRequest: _group_request,
        DescribeGroupsRequest: _group_request,
        DeleteGroupsRequest: _group_request,
        OffsetDeleteRequest: _group_request,
        ConsumerGroupHeartbeatRequest: _group_request,
        ConsumerGroupDescribeRequest: _group_request,
        AddPartitionsToTxnRequest: _txn_request,
        AddOffsetsToTxnRequest: _txn_request,
        EndTxnRequest: _txn_request,
        TxnOffsetCommitRequest: _txn_request,
        WriteTxnMarkersRequest: _txn_request,
        WriteTxnMarkersResponse: _txn_request,
    }

    def close(self, *, lose_unflushed: bool = False) -> None:
        """Release files after a crash (the runtime calls it); optionally lose what was not
        flushed, as a power loss would."""
        if self.log_manager is not None:
            self.log_manager.crash(lose_unflushed=lose_unflushed)
        if self.raft is not None:
            self.raft.close()
