"""The controller: KRaft's ``QuorumController``, a replicated state machine over a Raft log.

Theory of operation
-------------------
Every controller node (``controller.quorum.voters``: 3000, 3001, 3002 in a 3-voter quorum)
runs a ``KafkaRaftClient`` (``minikafka.raft``) on the metadata log ``__cluster_metadata``
and folds the committed records into a ``MetadataImage``. One of them, the Raft leader, is
the *active* controller: the only one that decides. A decision is a list of metadata
records (``minikafka.metadata.records``) appended to the log; it takes effect, and its
requester gets an answer, only once the records are committed (on a majority of voters).
Nothing lives only in one process's memory: a new or restarted controller rebuilds
everything by replaying the log, and so do the brokers, which follow the log as observers.

Decisions, one at a time: an operation reads the committed image and returns records; the
next operation waits until those are committed (or leadership is lost), so every decision
sees the ones before it. An active controller acts only once its own ``LeaderChange``
record is committed: by then its image holds everything earlier leaders committed.

- Brokers heartbeat every ``broker.heartbeat.interval.ms``. A new incarnation is a
  ``RegisterBrokerRecord`` (fenced: it may not lead or be in an ISR yet); once the broker's
  heartbeat says it has applied the log past its registration, ``UnfenceBrokerRecord`` and
  the offline partitions it can lead elect it. A broker silent for
  ``broker.session.timeout.ms`` is fenced, and in the *same* committed batch it leaves every
  ISR and every partition it led gets a new leader. Heartbeat times are the one thing kept
  in memory (as in Kafka): a newly active controller gives every broker a fresh session.
  A controller judges only the silence it was there to hear: when its session check comes
  late (the process was paused, SIGSTOP or a long GC pause, and its heartbeats queued
  unread), every broker gets a fresh session instead of being fenced for the controller's
  own absence. A paused leader that was deposed meanwhile writes nothing either way: its
  appends are in an epoch the quorum has left, so they never commit and are truncated
  when it follows the new leader.
  A heartbeat that names an offline log directory (a full or failing disk) takes the
  broker out of every ISR and moves every partition it led, in one committed batch with a
  ``BrokerRegistrationChangeRecord``; the broker stays registered, and leads again only
  as a new incarnation (``_log_dirs_offline``).
- Create topic: replicas placed as Kafka's ``assignReplicasToBrokers`` does (rack unaware):
  partition p's first replica on broker ``(p + start) % n``, the others shifted by a second
  offset that grows every n partitions; start and shift from a seeded RNG. The placement is
  the rule ``assign_replicas`` (``minikafka.replicas``), called through ``self.rules``. A
  ``TopicRecord`` with a new topic id and one ``PartitionRecord`` per partition.
- Leader election (a broker fenced, or back): the next replica in assignment order that is
  unfenced and in the ISR leads; with none, the partition goes offline (leader -1) unless
  ``unclean.leader.election.enable`` lets any live replica lead (the rule ``elect_leader``,
  called through ``self.rules``: a leader outside the ISR makes the election unclean). A leader
  change bumps the leader epoch; every change bumps the partition epoch (``PartitionChangeRecord``).
- Explicit replicas (``kafka-topics --replica-assignment``, ``NewTopic(replica_assignments=...)``,
  ``NewPartitions(new_assignments=...)``): no placement; the lists are judged as KRaft's
  ``ReplicationControlManager`` judges them (``minikafka.replica_assignment``) and written as
  given, each partition's ISR its live replicas and its leader the first of them.
- CreatePartitions: only ever more partitions; the new ones placed as Kafka places added
  partitions (continuing the topic's round robin), one ``PartitionRecord`` each.
- Incremental/AlterConfigs (topics; brokers: the topics' defaults, cluster-wide or per broker): the resulting overrides validated as a whole, then one
  ``ConfigRecord`` per key that changed (value None: back to the broker's default).
- AlterPartition: granted only if it names the current leader epoch and partition epoch
  (a deposed leader cannot change the ISR) and every new member is unfenced.
- DescribeQuorum answers from the Raft client's view.

A request that reaches a controller which is not active is answered ``NOT_CONTROLLER``;
brokers then ask the leader the Raft layer names. No I/O but the Raft log's, no clock:
``now`` comes with every input.
"""

from __future__ import annotations

import base64
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from minikafka.broker.config import TOPIC_KEYS, BrokerConfig, validate
from minikafka.errors import IllegalArgumentError, InvalidTopicError
from minikafka.messages import (
    CONTROLLER_ID,
    FENCED_LEADER_EPOCH,
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    POLICY_VIOLATION,
    INVALID_REPLICATION_FACTOR,
    INVALID_TOPIC_EXCEPTION,
    INELIGIBLE_REPLICA,
    INVALID_UPDATE_VERSION,
    NO_ERROR,
    NOT_CONTROLLER,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
    STALE_BROKER_EPOCH,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    CONFIG_APPEND,
    CONFIG_DELETE,
    CONFIG_SET,
    CONFIG_SUBTRACT,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    INVALID_REQUEST,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    PartitionState,
    QuorumReplica,
    TopicConfig,
)
from minikafka.metadata import records as mr
from minikafka.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from minikafka.node import NodeId, StateMachine
from minikafka.raft import KafkaRaftClient
from minikafka.replica_assignment import added_partitions_placement, topic_placement
from minikafka.replicas import assign_replicas  # noqa: F401  (the placement rule, by its old import path)
from minikafka.rules import REFERENCE, Rules
from minikafka.topic import validate_topic_name

PRODUCER_ID_BLOCK = 1000
SESSION_CHECK_MS = 500
EXCESSIVE_PARTITIONS = "Excessively large number of partitions per request."  # Kafka's PolicyViolationException


@dataclass
class _Operation:
    """One decision: ``run()`` reads the committed image and returns the records to write and
    what to do once they are committed; ``fail(error, message)`` answers the requester when
    they cannot be."""

    run: Callable[[], tuple[list, Callable[[], None]]]
    fail: Callable[[int, str], None]
    queued_at: int
    answered: bool = False  # failed already (timed out): the commit must not answer again


class QuorumController(StateMachine):
    """A controller node: ``QuorumController(log_dir, voters=(3000, 3001, 3002), node_id=3001)``."""

    def __init__(self, log_dir: Path | str, config: BrokerConfig | None = None, *, seed: int = 0,
                 node_id: int = CONTROLLER_ID, voters: Sequence[int] = (CONTROLLER_ID,),
                 incarnation: int = 0, raft_history: Any = None, rules: Rules = REFERENCE) -> None:
        super().__init__(node_id)
        self.rules = rules  # its Raft client's vote rule and cut (minikafka.rules): Kafka's by default
        self.incarnation = incarnation
        self.raft_history = raft_history  # a checker's RaftHistory: what this node was told
        self.config = config or BrokerConfig()
        self.log_dir = Path(log_dir)
        self.voters = tuple(voters)
        # Placement draws from the same stream in every controller, so a seeded simulation
        # places replicas the same way whoever is active; topic ids have a stream of their own.
        self.rng = random.Random(f"controller-{seed}")
        self._ids = random.Random(f"topic-ids-{seed}-{node_id}")
        self.seed = seed
        self.image = MetadataImage()
        self.raft: KafkaRaftClient | None = None
        self.last_heartbeat: dict[int, int] = {}  # broker -> time of its last heartbeat (active only)
        self.heartbeats: deque[tuple[int, int]] = deque(maxlen=10_000)  # (time, broker): the latest, for notebooks
        self._queue: deque[_Operation] = deque()
        self._inflight: tuple[int, Callable[[], None], _Operation] | None = None  # (last offset, done, op)
        self._active_epoch = -1  # the epoch in which this node is the active controller, or -1
        self._last_session_check = 0  # when the session check last ran (or was first set)

    # --- views (what notebooks, pictures and tests read) ------------------------------------------------

    @property
    def active(self) -> bool:
        # The Raft client's word first: a leader deposed a moment ago (a paused one, resumed to
        # find a higher epoch) hears of it from its listener only later, and must not decide meanwhile.
        return (self._active_epoch >= 0 and self.raft is not None and self.raft.is_leader
                and self.raft.epoch == self._active_epoch)

    @property
    def topics(self) -> dict[str, TopicConfig]:
        return self.image.topics

    @property
    def partitions(self) -> dict[tuple[str, int], PartitionState]:
        return self.image.partitions

    @property
    def live_brokers(self) -> tuple[int, ...]:
        return self.image.live_brokers

    @property
    def brokers(self):
        return self.image.brokers

    @property
    def elections(self) -> list[tuple[int, str, int, int, int, bool]]:
        return self.image.elections

    def is_alive(self, broker_id: int) -> bool:
        return self.image.is_alive(broker_id)

    def _unclean_allowed(self, topic: str) -> bool:
        # the cluster-wide dynamic default (a broker ConfigRecord for ""), then the topic's own
        configs = {**self.image.broker_configs.get("", {}), **self.image.topic_configs.get(topic, {})}
        return self.config.for_topic(configs)["unclean.leader.election.enable"]

    # --- lifecycle ------------------------------------------------------------------------------------------

    def on_start(self) -> None:
        self.raft = KafkaRaftClient(self, self.node_id, self.voters, self.log_dir,
                                    config=self.config.values, seed=f"{self.seed}-{self.node_id}", listener=self,
                                    rules=self.rules)
        self.raft.start()
        self.set_timer("session-check", SESSION_CHECK_MS)
        self._last_session_check = self.now

    def close(self) -> None:
        if self.raft is not None:
            self.raft.close()

    # --- the Raft client's listener ------------------------------------------------------------------------

    def handle_commit(self, records: list) -> None:
        if self.raft_history is not None:
            for rec in records:
                self.raft_history.commit(self.now, self.node_id, self.incarnation, rec)
        self.image.apply_committed(records)  # controllers act on operations, not on deltas
        self._maybe_activate()
        if self._inflight is not None and self.image.offset >= self._inflight[0]:
            _, done, op = self._inflight
            self._inflight = None
            self.cancel_timer("write-timeout")
            if not op.answered:
                done()
        self._pump()

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        if self.raft_history is not None:
            self.raft_history.leader_change(self.now, self.node_id, self.incarnation, leader_id, epoch)
        if self._active_epoch >= 0 and (leader_id != self.node_id or epoch != self._active_epoch):
            self._deactivate()
        self._maybe_activate()

    def _maybe_activate(self) -> None:
        if (self._active_epoch < 0 and self.raft is not None and self.raft.is_leader
                and self.image.leader == (self.node_id, self.raft.epoch)):
            self._active_epoch = self.raft.epoch
            # Heartbeat times were never replicated: every broker gets a fresh session.
            self.last_heartbeat = {b: self.now for b in self.image.brokers}
            self._pump()

    def _deactivate(self) -> None:
        self._active_epoch = -1
        pending = ([self._inflight[2]] if self._inflight else []) + list(self._queue)
        self._inflight = None
        self._queue.clear()
        self.cancel_timer("write-timeout")
        for op in pending:
            if not op.answered:
                op.fail(NOT_CONTROLLER, f"controller {self.node_id} is no longer the active controller")

    # --- operations --------------------------------------------------------------------------------------

    def _submit(self, run: Callable[[], tuple[list, Callable[[], None]]], fail: Callable[[int, str], None]) -> None:
        if not self.active:
            fail(NOT_CONTROLLER, f"controller {self.node_id} is not the active controller")
            return
        self._queue.append(_Operation(run, fail, self.now))
        self._pump()

    def _pump(self) -> None:
        while self.active and self._inflight is None and self._queue:
            op = self._queue.popleft()
            records, done = op.run()
            if not records:
                done()
                continue
            last = self.raft.append([mr.encode(r) for r in records])
            self._inflight = (last, done, op)
            self.set_timer("write-timeout", self.config["request.timeout.ms"])

    def on_timer(self, key: Hashable) -> None:
        if self.raft is not None and self.raft.on_timer(key):
            return
        if key == "session-check":
            self.set_timer("session-check", SESSION_CHECK_MS)
            late = self.now - self._last_session_check > 2 * SESSION_CHECK_MS
            self._last_session_check = self.now
            if late:
                # This process was not running (paused): the brokers' silence is ours.
                self.last_heartbeat = {b: self.now for b in self.last_heartbeat}
            if self.active:
                self._check_sessions()
                self._expire_queued()
        elif key == "write-timeout" and self._inflight is not None:
            # Not committed in time (no majority?): the requester hears so; later decisions
            # still wait for this write, or for the loss of leadership that drops it.
            op = self._inflight[2]
            op.fail(REQUEST_TIMED_OUT, "the metadata change was not committed in time: is a majority of "
                                       f"the controller quorum {list(self.voters)} up?")
            op.answered = True

    def _expire_queued(self) -> None:
        timeout = self.config["request.timeout.ms"]
        while self._queue and self.now - self._queue[0].queued_at > timeout:
            op = self._queue.popleft()
            op.fail(REQUEST_TIMED_OUT, "the controller could not commit metadata changes in time: is a "
                                       f"majority of the controller quorum {list(self.voters)} up?")

    def on_message(self, src: NodeId, message: Any) -> None:
        if self.raft is not None and self.raft.handle(src, message):
            return
        handler = self._HANDLERS.get(type(message))
        if handler is not None:
            handler(self, src, message)

    # --- brokers: registration, heartbeats, fencing -----------------------------------------------------------

    def _heartbeat(self, src: NodeId, req: BrokerHeartbeatRequest) -> None:
        def reply(error: int, message: str = "") -> None:
            reg = self.image.brokers.get(req.broker_id)
            fenced = reg is None or reg.fenced or reg.incarnation != req.incarnation
            self.send(src, BrokerHeartbeatResponse(req.correlation_id, error, fenced))

        if not self.active:
            return reply(NOT_CONTROLLER)
        self.heartbeats.append((self.now, req.broker_id))
        reg = self.image.brokers.get(req.broker_id)
        if req.offline_log_dirs and reg is not None and reg.incarnation == req.incarnation:
            self._log_dirs_offline(req)  # decided apart: the heartbeat is answered as usual
        if reg is not None and reg.incarnation == req.incarnation:
            self.last_heartbeat[req.broker_id] = self.now
            if not reg.fenced or req.metadata_offset < reg.registered_at:
                return reply(NO_ERROR)
        elif reg is not None and reg.incarnation > req.incarnation:
            return reply(STALE_BROKER_EPOCH)

        def run() -> tuple[list, Callable[[], None]]:
            reg = self.image.brokers.get(req.broker_id)
            if reg is None or reg.incarnation < req.incarnation:  # new, or restarted
                records: list = []
                if reg is not None and not reg.fenced:  # restarted before its session expired
                    records += self._fence_records([req.broker_id])
                records.append(mr.RegisterBrokerRecord(req.broker_id, req.incarnation, req.host, req.port, True,
                                                       req.inter_broker_port))
                self.last_heartbeat[req.broker_id] = self.now
                return records, lambda: reply(NO_ERROR)
            if reg.incarnation == req.incarnation and reg.fenced and req.metadata_offset >= reg.registered_at:
                return self._unfence_records(req.broker_id, reg.incarnation), lambda: reply(NO_ERROR)
            return [], lambda: reply(NO_ERROR)

        self._submit(run, lambda error, message: reply(error, message))

    def _log_dirs_offline(self, req: BrokerHeartbeatRequest) -> None:
        """The broker's heartbeat names log directories that failed (Kafka's
        ``ReplicationControlManager.handleDirectoriesOffline``): in one committed batch, its
        registration notes them (``BrokerRegistrationChangeRecord``), every partition it led
        on them gets a new leader from the rest of the ISR, and it leaves every ISR. It stays
        registered and unfenced (its other duties go on), but may lead or join an ISR again
        only as a new incarnation, after a restart that finds the directory writable."""
        if any(not isinstance(d, str) or not d for d in req.offline_log_dirs):
            return  # a malformed report (the codec only lets strings through): nothing to act on

        def run() -> tuple[list, Callable[[], None]]:
            reg = self.image.brokers.get(req.broker_id)
            if (reg is None or reg.incarnation != req.incarnation
                    or set(req.offline_log_dirs) <= set(reg.offline_log_dirs)):
                return [], lambda: None  # a stale incarnation, or already decided (a repeated heartbeat)
            records: list = [mr.BrokerRegistrationChangeRecord(req.broker_id, req.incarnation,
                                                               tuple(sorted(set(req.offline_log_dirs))))]
            return records + self._replicas_offline_records(req.broker_id), lambda: None

        self._submit(run, lambda error, message: None)  # run() looks again: a repeat is harmless

    def _replicas_offline_records(self, broker_id: int) -> list:
        """The broker's replicas went offline (one log directory per broker: all of them):
        each partition it leads elects another leader from its ISR (or goes offline, leader
        -1, if no other member can lead and unclean election is off), and it leaves every
        other ISR it is in (never the last member, as for a fenced broker)."""
        def ok(r: int) -> bool:
            return r != broker_id and self.image.can_replicate(r)

        records: list = []
        for key, state in sorted(self.image.partitions.items()):
            if state.leader == broker_id:
                records.append(self._elect(state, ok))
            elif broker_id in state.isr and state.leader >= 0:
                isr = tuple(r for r in state.isr if r != broker_id)
                if isr:
                    records.append(self._change(state, isr=isr))
        return records

    def _check_sessions(self) -> None:
        timeout = self.config["broker.session.timeout.ms"]
        expired = [b for b, reg in sorted(self.image.brokers.items())
                   if not reg.fenced and self.now - self.last_heartbeat.get(b, self.now) > timeout]
        if not expired:
            return

        def run() -> tuple[list, Callable[[], None]]:
            still = [b for b in expired if self.image.is_alive(b)
                     and self.now - self.last_heartbeat.get(b, self.now) > timeout]
            return self._fence_records(still), lambda: None

        self._submit(run, lambda error, message: None)  # run() looks again: a repeat is harmless

    def _fence_records(self, broker_ids: list[int]) -> list:
        """Fence these brokers and, in the same batch, take them out of every ISR and give
        every partition they led a new leader (all of them first: none is elected by
        another's failure)."""
        dead = set(broker_ids)
        records: list = [mr.FenceBrokerRecord(b, self.image.brokers[b].incarnation) for b in sorted(dead)]

        def ok(r: int) -> bool:
            return r not in dead and self.image.can_replicate(r)

        for key, state in sorted(self.image.partitions.items()):
            if state.leader in dead:
                records.append(self._elect(state, ok))
            elif dead & set(state.isr) and state.leader >= 0:
                isr = tuple(r for r in state.isr if r not in dead)
                if isr:
                    records.append(self._change(state, isr=isr))
        return records

    def _unfence_records(self, broker_id: int, incarnation: int) -> list:
        records: list = [mr.UnfenceBrokerRecord(broker_id, incarnation)]
        if self.image.brokers[broker_id].offline_log_dirs:
            return records  # its replicas are offline: it elects nothing until a restart

        def ok(r: int) -> bool:
            return r == broker_id or self.image.can_replicate(r)

        for key, state in sorted(self.image.partitions.items()):
            if state.leader == -1 and broker_id in state.replicas:
                if broker_id in state.isr or self._unclean_allowed(state.topic):
                    records.append(self._elect(state, ok))
        return records

    def _change(self, state: PartitionState, **fields: Any) -> mr.PartitionChangeRecord:
        return mr.PartitionChangeRecord(state.partition, self.image.topic_ids[state.topic], **fields)

    def _elect(self, state: PartitionState, ok: Callable[[int], bool]) -> mr.PartitionChangeRecord:
        """A new leader for ``state``'s partition, by the rule ``elect_leader`` (the replicas
        ``ok`` calls alive are the live brokers): one from the ISR keeps the live members of
        the ISR; one from outside it is an unclean election (the ISR becomes just the leader);
        None takes the partition offline."""
        live = tuple(b for b in sorted(set(self.image.brokers).union(state.replicas)) if ok(b))
        leader = self.rules.elect_leader(state.replicas, state.isr, live, self._unclean_allowed(state.topic))
        if leader is None:
            return self._change(state, leader=-1)
        if leader in state.isr:
            return self._change(state, leader=leader, isr=tuple(r for r in state.isr if ok(r) or r == leader))
        return self._change(state, leader=leader, isr=(leader,), unclean=True)

    # --- requests --------------------------------------------------------------------------------------------

    def _create_topics(self, src: NodeId, req: CreateTopicsRequest) -> None:
        def fail(error: int, message: str) -> None:
            self.send(src, CreateTopicsResponse(req.correlation_id, tuple((t.name, error, message) for t in req.topics)))

        def run() -> tuple[list, Callable[[], None]]:
            # Kafka's validateTotalNumberOfPartitions: a topic with explicit replicas counts its lists
            if self._too_many_partitions(len(t.assignments) if t.assignments else max(t.num_partitions, 0)
                                         for t in req.topics):
                return [], lambda: fail(POLICY_VIOLATION, EXCESSIVE_PARTITIONS)
            results, records, seen = [], [], set()
            for topic in req.topics:
                if topic.assignments:
                    error, message, placement = self._check_manual_topic(topic, seen)
                else:
                    error, message = self._check_new_topic(topic, seen)
                if error == NO_ERROR:
                    seen.add(topic.name)
                    if not topic.assignments:
                        live = list(self.image.live_brokers)
                        start = self.rng.randrange(len(live))
                        shift = self.rng.randrange(len(live))
                        placement = [(replicas, replicas) for replicas in self.rules.assign_replicas(
                            topic.num_partitions, topic.replication_factor, live, start, shift)]
                    topic_id = self._new_topic_id()
                    records.append(mr.TopicRecord(topic.name, topic_id))
                    for key, value in topic.configs:
                        records.append(mr.ConfigRecord(TOPIC_RESOURCE, topic.name, key, value))
                    for p, (replicas, isr) in enumerate(placement):
                        # the leader: the first in-sync replica (Kafka's buildPartitionRegistration)
                        records.append(mr.PartitionRecord(p, topic_id, replicas, isr, isr[0], 0, 0))
                results.append((topic.name, error, message))
            return records, lambda: self.send(src, CreateTopicsResponse(req.correlation_id, tuple(results),
                                                                        self.image.offset))

        self._submit(run, fail)

    def _too_many_partitions(self, new_partitions) -> bool:
        """Kafka's ``validateTotalNumberOfPartitions``: one request may not add more partitions
        than the limit, checked before any is placed (a million would block the controller
        and every broker making directories), and the whole request is refused."""
        return sum(new_partitions) > self.config["max.request.partition.size.limit"]

    def _new_topic_id(self) -> str:
        """Kafka's topic ids: 16 random bytes, URL-safe base64 without padding (22 characters)."""
        while True:
            raw = self._ids.getrandbits(128).to_bytes(16, "big")
            topic_id = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
            if topic_id not in self.image.topic_names and not topic_id.startswith(("-", "_")):
                return topic_id

    def _delete_topics(self, src: NodeId, req: DeleteTopicsRequest) -> None:
        def fail(error: int, message: str) -> None:
            self.send(src, DeleteTopicsResponse(req.correlation_id, tuple((t, error, message) for t in req.topics)))

        def run() -> tuple[list, Callable[[], None]]:
            results, records = [], []
            for name in req.topics:
                if name not in self.image.topic_ids:
                    results.append((name, UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist"))
                elif name.startswith("__"):
                    results.append((name, INVALID_TOPIC_EXCEPTION, f"'{name}' is an internal topic and cannot be deleted"))
                elif any(isinstance(r, mr.RemoveTopicRecord) and r.topicId == self.image.topic_ids[name] for r in records):
                    results.append((name, NO_ERROR, None))
                else:
                    records.append(mr.RemoveTopicRecord(self.image.topic_ids[name]))
                    results.append((name, NO_ERROR, None))
            return records, lambda: self.send(src, DeleteTopicsResponse(req.correlation_id, tuple(results),
                                                                        self.image.offset))

        self._submit(run, fail)

    def _check_topic_name(self, topic: TopicConfig, seen: set[str]) -> tuple[int, str | None]:
        try:
            validate_topic_name(topic.name)
        except InvalidTopicError as e:
            return INVALID_TOPIC_EXCEPTION, str(e)
        if topic.name == "__cluster_metadata":
            return INVALID_TOPIC_EXCEPTION, "'__cluster_metadata' is the controllers' metadata log, not a topic"
        if topic.name in self.image.topic_ids or topic.name in seen:
            return TOPIC_ALREADY_EXISTS, f"topic '{topic.name}' already exists"
        return NO_ERROR, None

    def _check_topic_configs(self, topic: TopicConfig) -> tuple[int, str | None]:
        try:
            validate(dict(topic.configs), allowed=TOPIC_KEYS)
        except IllegalArgumentError as e:
            return INVALID_CONFIG, str(e)
        return NO_ERROR, None

    def _check_manual_topic(self, topic: TopicConfig, seen: set[str]) -> tuple[int, str | None, list]:
        """A new topic with explicit replicas, in Kafka's order: the name, the configs
        (``ReplicationControlManager.createTopics``), then the lists (``createTopic``).
        Returns (error, message, [(replicas, isr) per partition])."""
        for error, message in (self._check_topic_name(topic, seen), self._check_topic_configs(topic)):
            if error != NO_ERROR:
                return error, message, []
        placement, refusal = topic_placement(topic.assignments, topic.num_partitions, topic.replication_factor,
                                             self.image.brokers, self.image.live_brokers)
        if refusal is not None:
            return *refusal, []
        return NO_ERROR, None, placement

    def _check_new_topic(self, topic: TopicConfig, seen: set[str]) -> tuple[int, str | None]:
        error, message = self._check_topic_name(topic, seen)
        if error != NO_ERROR:
            return error, message
        if topic.num_partitions < 1:
            return INVALID_PARTITIONS, f"number of partitions must be at least 1, not {topic.num_partitions}"
        live = len(self.image.live_brokers)
        if topic.replication_factor < 1 or topic.replication_factor > live:
            return INVALID_REPLICATION_FACTOR, (
                f"replication factor {topic.replication_factor} is not between 1 and the "
                f"{live} available brokers"
            )
        return self._check_topic_configs(topic)

    def _create_partitions(self, src: NodeId, req: CreatePartitionsRequest) -> None:
        def fail(error: int, message: str) -> None:
            self.send(src, CreatePartitionsResponse(req.correlation_id, tuple((t, error, message) for t, _ in req.topics)))

        def run() -> tuple[list, Callable[[], None]]:
            if req.assignments and len(req.assignments) != len(req.topics):  # parallel to topics, or ()
                return [], lambda: fail(INVALID_REQUEST, f"{len(req.assignments)} assignment entries for "
                                                         f"{len(req.topics)} topics")
            if self._too_many_partitions(max(count - self.image.partition_count(name), 0) for name, count in req.topics):
                return [], lambda: fail(POLICY_VIOLATION, EXCESSIVE_PARTITIONS)
            results, records, seen = [], [], set()
            assignments = req.assignments or (None,) * len(req.topics)
            for (name, count), assigned in zip(req.topics, assignments):
                error, message, placement = self._new_partitions(name, count, seen, assigned)
                seen.add(name)
                if error == NO_ERROR and not req.validate_only:
                    topic_id = self.image.topic_ids[name]
                    first = self.image.partition_count(name)
                    for p, (replicas, isr) in enumerate(placement, start=first):
                        records.append(mr.PartitionRecord(p, topic_id, replicas, isr, isr[0], 0, 0))
                results.append((name, error, message))
            return records, lambda: self.send(src, CreatePartitionsResponse(req.correlation_id, tuple(results),
                                                                            self.image.offset))

        self._submit(run, fail)

    def _new_partitions(self, name: str, count: int, seen: set[str],
                        assigned: Sequence[Sequence[int]] | None = None) -> tuple[int, str | None, list]:
        """Validate growing ``name`` to ``count`` partitions; place the new ones as Kafka's
        ``assignReplicasToBrokers`` does for added partitions: the start index and the
        replica shift fixed by partition 0's first replica, numbering from the current count,
        so the new partitions continue the existing round robin. ``assigned``: explicit
        replicas for the new ones instead, judged as ``ReplicationControlManager.createPartitions``
        does. Returns (error, message, [(replicas, isr) per new partition])."""
        if name in seen:
            return INVALID_REQUEST, f"topic '{name}' is named twice in one request", []
        if name not in self.image.topic_ids:
            return UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist", []
        if name.startswith("__"):
            return INVALID_PARTITIONS, f"'{name}' is an internal topic: its partition count is fixed", []
        current = self.image.partition_count(name)
        if count == current:
            return INVALID_PARTITIONS, f"topic '{name}' already has {current} partition(s)", []
        if count < current:
            return INVALID_PARTITIONS, (f"topic '{name}' currently has {current} partition(s); {count} would not be "
                                        "an increase (partitions can be added, never removed)"), []
        rf = len(self.image.partitions[(name, 0)].replicas)
        live = list(self.image.live_brokers)
        if assigned is not None:
            placement, refusal = added_partitions_placement(assigned, count - current, current, rf,
                                                            self.image.brokers, live)
            return (*refusal, []) if refusal is not None else (NO_ERROR, None, placement)
        if rf > len(live):
            return INVALID_REPLICATION_FACTOR, (f"topic '{name}' has replication factor {rf}, but only "
                                                f"{len(live)} broker(s) are available for the new partitions"), []
        head = self.image.partitions[(name, 0)].replicas[0]
        fixed = live.index(head) if head in live else 0
        placement = self.rules.assign_replicas(count, rf, live, fixed, fixed)[current:]
        return NO_ERROR, None, [(replicas, replicas) for replicas in placement]

    def _alter_configs(self, src: NodeId, req: AlterConfigsRequest) -> None:
        def fail(error: int, message: str) -> None:
            self.send(src, AlterConfigsResponse(req.correlation_id, tuple(
                (rtype, name, error, message) for rtype, name, _ in req.resources)))

        def run() -> tuple[list, Callable[[], None]]:
            results, records = [], []
            for rtype, name, entries in req.resources:
                error, message, changes = self._config_changes(rtype, name, entries, req.incremental)
                if error == NO_ERROR and not req.validate_only:
                    records += [mr.ConfigRecord(rtype, name, k, v) for k, v in changes]
                results.append((rtype, name, error, message))
            return records, lambda: self.send(src, AlterConfigsResponse(req.correlation_id, tuple(results),
                                                                        self.image.offset))

        self._submit(run, fail)

    def _config_changes(self, rtype: int, name: str, entries: Sequence[tuple[str, int, str | None]],
                        incremental: bool) -> tuple[int, str | None, list[tuple[str, str | None]]]:
        """The ConfigRecords' (key, value or None) that turn a topic's overrides into what the
        request asks, validated as a whole (unknown keys, bad values, a LogConfig that could
        not be made); or the error."""
        if rtype == BROKER_RESOURCE:
            # Dynamic broker configs: the defaults every topic inherits ("" for the whole
            # cluster, or one broker's id), as Kafka's kafka-configs --entity-type brokers.
            if name != "" and not (name.isdigit() and int(name) in self.image.brokers):
                return INVALID_REQUEST, (f"broker {name!r} is not registered: name a broker id, or '' for the "
                                         "cluster-wide default (--entity-default)"), []
            old = dict(self.image.broker_configs.get(name, {}))
            kind = "dynamic broker"
        elif rtype == TOPIC_RESOURCE:
            if name not in self.image.topic_ids:
                return UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist", []
            old = dict(self.image.topic_configs.get(name, {}))
            kind = "topic"
        else:
            return INVALID_REQUEST, f"resource type {rtype} is neither a topic (2) nor a broker (4)", []
        new = dict(old) if incremental else {}
        for key, op, value in entries:
            if key not in TOPIC_KEYS:  # the dynamic broker configs here are the topics' defaults
                return INVALID_CONFIG, f"unknown {kind} config {key!r}; known: {', '.join(sorted(TOPIC_KEYS))}", []
            if op == CONFIG_DELETE:
                new.pop(key, None)
            elif value is None:
                return INVALID_CONFIG, f"{key}: a value is needed to set it (null only deletes)", []
            elif op == CONFIG_SET:
                new[key] = value
            elif op in (CONFIG_APPEND, CONFIG_SUBTRACT):
                if key != "cleanup.policy":  # Kafka's only LIST-typed topic config here
                    return INVALID_CONFIG, f"{key} is not a list: APPEND and SUBTRACT apply to cleanup.policy only", []
                items = [v for v in new.get(key, self.config[key]).split(",") if v]
                given = [v.strip() for v in value.split(",") if v.strip()]
                items = items + [v for v in given if v not in items] if op == CONFIG_APPEND else \
                    [v for v in items if v not in given]
                new[key] = ",".join(items)
            else:
                return INVALID_REQUEST, f"unknown config operation {op} for {key}", []
        try:
            self.config.partition_config(new)
            self.config.log_config(new)  # LogConfig's own limits (segment.bytes, ...)
        except (IllegalArgumentError, ValueError) as e:
            return INVALID_CONFIG, str(e), []
        changes = [(k, new[k]) for k in sorted(new) if old.get(k) != new[k]]
        changes += [(k, None) for k in sorted(old) if k not in new]
        return NO_ERROR, None, changes

    def _alter_partition(self, src: NodeId, req: AlterPartitionRequest) -> None:
        def fail(error: int, message: str) -> None:
            self.send(src, AlterPartitionResponse(req.correlation_id, error, None))

        def run() -> tuple[list, Callable[[], None]]:
            state = self.image.partitions.get((req.topic, req.partition))
            if state is None:
                error = UNKNOWN_TOPIC_OR_PARTITION
            elif state.leader != req.broker_id:
                error = NOT_LEADER_OR_FOLLOWER
            elif req.leader_epoch != state.leader_epoch:
                error = FENCED_LEADER_EPOCH
            elif req.partition_epoch != state.partition_epoch:
                error = INVALID_UPDATE_VERSION
            elif (
                req.broker_id not in req.new_isr
                or not set(req.new_isr) <= set(state.replicas)
                or not all(self.image.can_replicate(r) for r in req.new_isr)
            ):
                error = INELIGIBLE_REPLICA
            else:
                record = self._change(state, isr=tuple(sorted(req.new_isr)))
                key = (req.topic, req.partition)
                return [record], lambda: self.send(src, AlterPartitionResponse(
                    req.correlation_id, NO_ERROR, self.image.partitions.get(key)))
            return [], lambda: self.send(src, AlterPartitionResponse(req.correlation_id, error, state))

        self._submit(run, fail)

    def _allocate_producer_ids(self, src: NodeId, req: AllocateProducerIdsRequest) -> None:
        def fail(error: int, message: str) -> None:
            self.send(src, AllocateProducerIdsResponse(req.correlation_id, error))

        def run() -> tuple[list, Callable[[], None]]:
            first = self.image.next_producer_id
            reg = self.image.brokers.get(req.broker_id)
            record = mr.ProducerIdsRecord(req.broker_id, reg.incarnation if reg else -1, first + PRODUCER_ID_BLOCK)
            return [record], lambda: self.send(src, AllocateProducerIdsResponse(
                req.correlation_id, NO_ERROR, first, PRODUCER_ID_BLOCK))

        self._submit(run, fail)

    def _describe_quorum(self, src: NodeId, req: DescribeQuorumRequest) -> None:
        self.send(src, self.describe_quorum(req.correlation_id))

    def describe_quorum(self, correlation_id: int = 0) -> DescribeQuorumResponse:
        raft = self.raft
        if raft is None or not raft.is_leader:
            leader = raft.leader_id if raft is not None else None
            return DescribeQuorumResponse(correlation_id, NOT_CONTROLLER, -1 if leader is None else leader,
                                          raft.epoch if raft else -1,
                                          error_message=f"controller {self.node_id} is not the quorum leader")
        states = raft.replica_states()

        def replicas(rows) -> tuple[QuorumReplica, ...]:
            return tuple(QuorumReplica(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows)

        return DescribeQuorumResponse(correlation_id, NO_ERROR, self.node_id, raft.epoch, raft.high_watermark,
                                      replicas(states.get("voters", ())), replicas(states.get("observers", ())))

    _HANDLERS = {
        BrokerHeartbeatRequest: _heartbeat,
        CreateTopicsRequest: _create_topics,
        DeleteTopicsRequest: _delete_topics,
        AlterPartitionRequest: _alter_partition,
        AllocateProducerIdsRequest: _allocate_producer_ids,
        CreatePartitionsRequest: _create_partitions,
        AlterConfigsRequest: _alter_configs,
        DescribeQuorumRequest: _describe_quorum,
    }


Controller = QuorumController  # the name the first chapters use
