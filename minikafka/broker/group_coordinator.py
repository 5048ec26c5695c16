"""Consumer groups on the broker side: Kafka's ``GroupCoordinator`` (the classic protocol).

Theory of operation
-------------------
Every group has one coordinator: the broker that leads partition
``abs(java_hash(group_id)) % offsets.topic.num.partitions`` of ``__consumer_offsets``. That
broker keeps the group's members and committed offsets in memory and writes every change
that must survive to that partition (``group_metadata``), so when it dies the partition's
next leader replays the partition and carries on with the same groups.

A group moves through Kafka's states (``minikafka.group_state``: the enum and the one table of
transitions, which ``Group.transition`` asks; a move it does not list raises):

    Empty --join--> PreparingRebalance --all joined--> CompletingRebalance --leader's sync--> Stable
      ^                  ^    |                                 |                          |
      |                  |    +--no member left-----------------+--------------------------+
      +------------------+-- a member joins, leaves, or misses its session timeout ---------+

- *Join phase.* A rebalance waits until every known member has sent JoinGroup again, or
  until the rebalance timeout (the largest ``max.poll.interval.ms`` among the members)
  passes; members that did not rejoin by then are removed (a consumer stuck between two
  ``poll()`` calls loses its partitions this way). Completing early with whoever is there
  would make the members rebalance forever. A brand-new group first waits
  ``group.initial.rebalance.delay.ms`` so that consumers starting together join one
  generation. Completion bumps the *generation*, picks the assignor every member supports,
  and answers every member; only the leader gets the members' subscriptions.
- *Sync phase.* The leader computes the assignment on the client side (``minikafka.assignors``)
  and sends it in SyncGroup; the coordinator writes the group's metadata, then hands each
  member its part.
- *Liveness.* Each member must heartbeat within ``session.timeout.ms``; one that does not is
  removed and the group rebalances. A heartbeat during a rebalance is answered
  REBALANCE_IN_PROGRESS: that is how the others learn they must rejoin.
- *Offsets.* OffsetCommit from a member of the current generation (or a *simple* commit, with
  no generation, while the group has no members: what an admin tool's reset does) is written
  to ``__consumer_offsets`` with acks=all and acknowledged only once replicated; OffsetFetch
  answers from memory. Offsets of a group that stayed empty for ``offsets.retention.minutes``
  are deleted with tombstones.
- *Transactional offsets* (TxnOffsetCommit, KIP-98): written as a transactional batch under
  the producer's id and epoch, but kept *pending* for that producer id until the
  transaction's marker reaches this partition: a commit marker makes them the group's
  committed offsets, an abort drops them. Replaying the partition does the same, so a new
  coordinator knows which offsets are still pending.

Invariants: a generation's members are exactly those that joined it; a commit from an old
generation or an unknown member is refused (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID), so a
consumer that lost its partitions cannot overwrite the new owner's offsets; nothing is
acknowledged before ``__consumer_offsets`` has it on every in-sync replica.

Never: read a clock or do I/O; it asks its ``CoordinatorContext`` (time, timers, metadata, its
partitions of ``__consumer_offsets``), never the broker itself. Member
ids are deterministic for a seed (no ``uuid4``).

*KIP-848's protocol* (``ConsumerGroupHeartbeat``): a group of type "consumer" has no join or
sync phase; ``consumer_group_heartbeat`` applies ``broker/consumer_group.py``'s rules (the
broker's assignor computes the target; each member reconciles toward it, a partition revoked
from its old owner before the new one gets it). A member is fenced when its session timeout
(``group.consumer.session.timeout.ms``) passes without a heartbeat, or when it keeps a revoked
partition past its rebalance timeout. An empty classic group becomes a consumer group on a
first heartbeat (its offsets stay) and back on a first JoinGroup; a group with members keeps
its type. ``consumer_group_describe`` (ConsumerGroupDescribe, api key 69) shows such a group's
epochs and each member's epoch, current and target assignment; a classic group is not found there.
Every change is written as Kafka's ConsumerGroup* records (key versions 3-8) before the heartbeat
is answered (``_consumer_persist``); a new coordinator replays them (``_consumer_loaded``), so
its members keep their epochs and partitions. Those keys never reach the ``decode_key`` rule
(a student's exercise reads versions 0-2): ``_replay`` sends them to ``group_metadata`` itself.

*Static membership* (KIP-345, ``group.instance.id``): a member that joins with
the instance id of a current member replaces it (``_replace_static_member``) and keeps its
partitions; a stable group does not rebalance, so a consumer restarted within its session
timeout disturbs nobody. Every request of a member may carry its instance id (JoinGroup v5,
SyncGroup and Heartbeat v3, OffsetCommit v7, LeaveGroup v3); where it does, Kafka's
``validateMember`` applies (``_check_member``): the id must be the instance id's *current*
member, else FENCED_INSTANCE_ID (the old process of a replaced member learns that it is a
zombie), or UNKNOWN_MEMBER_ID for an instance id the group does not know. LeaveGroup v3 may
name a static member by its instance id alone (an admin tool removing it). The instance id is
written to ``__consumer_offsets`` with the member, so a new coordinator knows who is static.
KIP-848's heartbeat is checked the same way once a member has joined (epoch > 0).

Simplifications (vs Kafka): the incremental cooperative protocol is left out; loading a partition is synchronous, so
COORDINATOR_LOAD_IN_PROGRESS is never answered.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from minikafka.assignors import Assignment, Subscription
from minikafka.broker.consumer_group import (
    LEAVE_EPOCH,
    SERVER_ASSIGNORS,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    compute_target,
    reconcile,
)
from minikafka.broker.group_metadata import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_KEYS,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    CONSUMER_GROUP_VALUES,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    key_version,
)
from minikafka.messages import (
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    INVALID_REQUEST,
    STALE_MEMBER_EPOCH,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_ASSIGNOR,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    GROUP_SUBSCRIBED_TO_TOPIC,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    COORDINATOR_NOT_AVAILABLE,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    MESSAGE_TOO_LARGE,
    NO_ERROR,
    NON_EMPTY_GROUP,
    NOT_COORDINATOR,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_METADATA_TOO_LARGE,
    REBALANCE_IN_PROGRESS,
    REQUEST_TIMED_OUT,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    INVALID_PRODUCER_EPOCH,
    PRODUCER_FENCED,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from minikafka.broker.internal_topic import replay
from minikafka.broker.transaction_marker import TransactionMarker
from minikafka.records import Record, RecordBatch
from minikafka.topic import TopicPartition
from minikafka.group_state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from minikafka.group_state import GroupEvent, GroupState, MemberState, next_state

if TYPE_CHECKING:
    from minikafka.broker.coordinator_context import CoordinatorContext

OFFSETS_TOPIC = "__consumer_offsets"
INVALID_COMMIT_OFFSET_SIZE = 28
UNKNOWN_SERVER_ERROR = -1


logger = logging.getLogger("minikafka.broker")


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: how Kafka maps a group id to a partition."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """``abs(groupId.hashCode) % offsets.topic.num.partitions`` (Kafka's ``Utils.abs`` maps
    Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: tuple[Any, int] | None = None  # (client node, correlation id)
    awaiting_sync: tuple[Any, int] | None = None
    group_instance_id: str | None = None  # a static member (KIP-345)

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class Group:
    group_id: str
    partition: int  # of __consumer_offsets
    state: GroupState = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)  # given an id, not joined yet
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    state_timestamp: int = -1
    initial_delay: bool = False  # the first join phase of a new group: wait for others
    delay_deadline: int = 0  # ... but not past the rebalance timeout
    new_member_added: bool = False
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetValue]] = field(default_factory=dict)  # producer id ->
    consumer: ConsumerGroup | None = None  # set while this is a KIP-848 group (type "consumer")
    # Its records (key versions 3-8) in __consumer_offsets as last written or replayed: key -> value.
    consumer_records: dict[bytes, bytes] = field(default_factory=dict)

    @property
    def group_type(self) -> str:
        return "classic" if self.consumer is None else "consumer"

    def transition(self, event: GroupEvent, now: int | None) -> None:
        """The one door to a new state: the table (``minikafka.group_state``) says where
        ``event`` leads, or raises naming the state and the event. ``now`` stamps the move
        (None: the stamp stays, as for offsets a transaction's marker brings back)."""
        self.state = next_state(self.state, event, self.group_id)
        if now is not None:
            self.state_timestamp = now

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def candidate_protocols(self) -> list[str]:
        if not self.members:
            return []
        sets = [set(name for name, _ in m.protocols) for m in self.members.values()]
        common = set.intersection(*sets)
        first = next(iter(self.members.values()))
        return [name for name, _ in first.protocols if name in common]

    def select_protocol(self) -> str | None:
        """Every member votes for the first of its protocols that all members support."""
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: dict[str, int] = {c: 0 for c in candidates}
        for m in self.members.values():
            vote = next(name for name, _ in m.protocols if name in votes)
            votes[vote] += 1
        return max(candidates, key=lambda c: (votes[c], -candidates.index(c)))

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & set(self.candidate_protocols()))


class GroupCoordinator:
    def __init__(self, context: "CoordinatorContext") -> None:
        self.context = context  # what it may ask of its broker: time, timers, metadata, its partitions
        self.config = context.config
        self.groups: dict[str, Group] = {}
        self.owned: dict[int, int] = {}  # partition of __consumer_offsets -> leader epoch loaded at
        self._member_counter = 0
        self._creating_topic = False

    # --- helpers -----------------------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self.context.now

    def num_partitions(self) -> int:
        topic = self.context.topic(OFFSETS_TOPIC)
        return topic.num_partitions if topic else self.config["offsets.topic.num.partitions"]

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    def owns(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    def _new_member_id(self, client_id: str, group_id: str) -> str:
        # Kafka: clientId + "-" + UUID; a seeded UUID keeps runs reproducible.
        self._member_counter += 1
        rng = random.Random(f"{self.context.broker_id}/{self.context.incarnation}/{group_id}/{self._member_counter}")
        return f"{client_id or 'consumer'}-{uuid.UUID(int=rng.getrandbits(128), version=4)}"

    def _send(self, dst: Any, message: Any) -> None:
        self.context.send(dst, message)

    # --- ownership: follow the leadership of __consumer_offsets ----------------------------------

    def on_metadata_changed(self) -> None:
        """After each metadata update: load the partitions we now lead, drop the others."""
        me = self.context.broker_id
        for p, state in self.context.partition_states(OFFSETS_TOPIC):
            if state.leader == me and self.owned.get(p) != state.leader_epoch:
                self._load(p, state.leader_epoch)
            elif state.leader != me and p in self.owned:
                self._unload(p)

    def _load(self, p: int, epoch: int) -> None:
        """Replay partition ``p`` of ``__consumer_offsets``: the groups it holds come back."""
        self._unload(p)
        log = self.context.local_log(OFFSETS_TOPIC, p)
        if log is None:
            return
        loaded: dict[str, Group] = {}

        def on_control(batch) -> None:
            try:
                marker = TransactionMarker.of(batch)
            except ValueError:
                return
            for group in loaded.values():
                self._resolve_pending(group, batch.producer_id, marker.committed)

        def on_record(record, batch) -> None:
            self._replay(loaded, p, record, batch.producer_id if batch.is_transactional else None)

        replay(log, f"{OFFSETS_TOPIC}-{p}", on_record, on_control)
        for group in loaded.values():
            if group.consumer is not None:
                self._consumer_loaded(group)
            if group.state == DEAD and group.offsets:
                group.transition(GroupEvent.OFFSETS_LOADED, self.now)  # offsets from simple commits, no metadata
            if group.members or group.offsets or group.pending_txn_offsets or group.state != DEAD:
                self.groups[group.group_id] = group
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        self.owned[p] = epoch

    def _replay(self, loaded: dict[str, Group], p: int, record: Record, txn_pid: int | None = None) -> None:
        if key_version(record.key) in CONSUMER_GROUP_KEYS:  # KIP-848's records: not the rule's (versions 0-2)
            return self._replay_consumer_record(loaded, p, record)
        read = self.context.decode_offsets_key(record.key)  # ("offset", group, topic, partition) or ("group", group)
        key = OffsetKey(*read[1:]) if read[0] == "offset" else GroupKey(read[1])
        group = loaded.get(key.group)
        if group is None:
            # Dead until a metadata record or an offset says otherwise: a group whose last
            # word was a tombstone must not come back.
            group = loaded[key.group] = Group(key.group, p, state=DEAD)
        if isinstance(key, OffsetKey) and txn_pid is not None and record.value is not None:
            group.pending_txn_offsets.setdefault(txn_pid, {})[(key.topic, key.partition)] = \
                OffsetValue.decode(record.value)
            return
        if isinstance(key, OffsetKey):
            if record.value is None:
                group.offsets.pop((key.topic, key.partition), None)
            else:
                group.offsets[(key.topic, key.partition)] = OffsetValue.decode(record.value)
            return
        if record.value is None:  # the group was deleted (its offsets' tombstones came first)
            loaded[key.group] = Group(key.group, p, state=DEAD)
            return
        value = GroupValue.decode(record.value)
        group.consumer = None  # a classic group's metadata, later than any consumer group record: classic now
        group.generation = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol = value.protocol
        group.leader = value.leader
        group.members = {
            m.member_id: Member(m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                                m.rebalance_timeout_ms, value.protocol_type,
                                ((value.protocol or "", m.subscription),), m.assignment,
                                group_instance_id=m.group_instance_id)
            for m in value.members
        }
        group.transition(GroupEvent.LOADED_WITH_MEMBERS if group.members else GroupEvent.LOADED_EMPTY,
                         value.current_state_timestamp)

    def _unload(self, p: int) -> None:
        if p not in self.owned:
            return
        del self.owned[p]
        for gid in [g for g, group in self.groups.items() if group.partition == p]:
            group = self.groups.pop(gid)
            for member in group.members.values():  # they will find the new coordinator
                self._answer_join(member, JoinGroupResponse(0, NOT_COORDINATOR))
                self._answer_sync(member, SyncGroupResponse(0, NOT_COORDINATOR))

    # --- writing to __consumer_offsets --------------------------------------------------------------

    def _append(self, group: Group, records: list[tuple[bytes, bytes | None]], callback: Callable[[int], None]) -> None:
        batch = RecordBatch.build([Record(k, v, timestamp=self.now) for k, v in records])
        self.context.append_internal(
            OFFSETS_TOPIC, group.partition, bytes(batch), self.config["offsets.commit.timeout.ms"], callback)

    @staticmethod
    def _commit_error(error: int) -> int:
        """Kafka's mapping of a failed append to what a committing client is told."""
        if error in (UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                     REQUEST_TIMED_OUT):
            return COORDINATOR_NOT_AVAILABLE
        if error == NOT_LEADER_OR_FOLLOWER:
            return NOT_COORDINATOR
        if error == MESSAGE_TOO_LARGE:
            return INVALID_COMMIT_OFFSET_SIZE
        return error if error == NO_ERROR else UNKNOWN_SERVER_ERROR

    def _group_value(self, group: Group) -> GroupValue:
        return GroupValue(
            group.protocol_type or "", group.generation, group.protocol, group.leader, self.now,
            tuple(MemberValue(m.member_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                              m.session_timeout_ms, m.metadata(group.protocol), m.assignment, m.group_instance_id)
                  for m in group.members.values()))

    def _store_group(self, group: Group, callback: Callable[[int], None]) -> None:
        self._append(group, [(GroupKey(group.group_id).encode(), self._group_value(group).encode())], callback)

    # --- JoinGroup ----------------------------------------------------------------------------------------

    def join_group(self, src: Any, req: JoinGroupRequest) -> None:
        def fail(error: int, member_id: str = "") -> None:
            self._send(src, JoinGroupResponse(req.correlation_id, error, member_id=member_id))

        if not req.group_id:
            return fail(INVALID_GROUP_ID)
        if not self.owns(req.group_id):
            return fail(NOT_COORDINATOR)
        if not (self.config["group.min.session.timeout.ms"] <= req.session_timeout_ms
                <= self.config["group.max.session.timeout.ms"]):
            return fail(INVALID_SESSION_TIMEOUT)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return fail(UNKNOWN_MEMBER_ID)
            group = self.groups[req.group_id] = Group(req.group_id, self.partition_for(req.group_id))
            group.transition(GroupEvent.CREATED, self.now)
        if group.state == DEAD:
            return fail(COORDINATOR_NOT_AVAILABLE)
        if group.consumer is not None:
            if group.consumer.members:
                return fail(INCONSISTENT_GROUP_PROTOCOL)  # a KIP-848 group with members keeps its type
            group.consumer = None  # an empty consumer group becomes a classic one
            group.state = EMPTY
        if not group.supports(req.protocol_type, req.protocols):
            return fail(INCONSISTENT_GROUP_PROTOCOL)
        if req.group_instance_id is not None and not req.member_id:
            known = self._static_member(group, req.group_instance_id)
            if known is not None:
                return self._replace_static_member(src, req, group, known)
        if not req.member_id:
            if len(group.members) + len(group.pending_members) >= self.config["group.max.size"]:
                return fail(GROUP_MAX_SIZE_REACHED)
            member_id = self._new_member_id(req.client_id, req.group_id)
            if req.require_known_member_id and req.group_instance_id is None:  # (static members join at once)
                # JoinGroup v4+: hand out the id first, so a client that times out and
                # retries is not counted twice; it must join again with it.
                group.pending_members.add(member_id)
                self.context.set_timer(("group-pending", req.group_id, member_id), req.session_timeout_ms)
                return fail(MEMBER_ID_REQUIRED, member_id)
            return self._add_member(src, req, group, member_id)
        if req.member_id in group.pending_members:
            group.pending_members.discard(req.member_id)
            self.context.cancel_timer(("group-pending", req.group_id, req.member_id))
            return self._add_member(src, req, group, req.member_id)
        error = self._check_member(group, req.member_id, req.group_instance_id)
        if error != NO_ERROR:
            return fail(error, req.member_id)
        self._update_member(src, req, group, group.members[req.member_id])

    def _add_member(self, src: Any, req: JoinGroupRequest, group: Group, member_id: str) -> None:
        member = Member(member_id, req.client_id, str(src), req.session_timeout_ms, req.rebalance_timeout_ms,
                        req.protocol_type, req.protocols, awaiting_join=(src, req.correlation_id),
                        group_instance_id=req.group_instance_id)
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        group.new_member_added = True
        self._schedule_heartbeat(group, member)
        if group.state == PREPARING_REBALANCE:
            self._try_complete_join(group)
        else:
            self._prepare_rebalance(group, f"new member {member_id} joined")

    def _replace_static_member(self, src: Any, req: JoinGroupRequest, group: Group, old: Member) -> None:
        """Static membership (KIP-345): a member joins with the ``group.instance.id`` of a member
        the group still has (the same consumer, restarted within its session timeout). It takes
        that member's place under a new member id, with its partitions; the old id is fenced
        (FENCED_INSTANCE_ID). A stable group with unchanged subscriptions does not rebalance:
        the others never stop."""
        member_id = self._new_member_id(req.client_id, req.group_id)
        leader_before = group.leader
        self._answer_join(old, JoinGroupResponse(0, FENCED_INSTANCE_ID))
        self._answer_sync(old, SyncGroupResponse(0, FENCED_INSTANCE_ID))
        self.context.cancel_timer(("group-session", group.group_id, old.member_id))
        member = Member(member_id, req.client_id, str(src), req.session_timeout_ms, req.rebalance_timeout_ms,
                        req.protocol_type, req.protocols, old.assignment, group_instance_id=req.group_instance_id)
        group.members = {(member_id if mid == old.member_id else mid): (member if mid == old.member_id else m)
                         for mid, m in group.members.items()}  # (the same place: the same leader choice)
        if group.leader == old.member_id:
            group.leader = member_id
        self._schedule_heartbeat(group, member)
        if group.state == STABLE and old.protocols == req.protocols:
            # Its old assignment stands. Kafka answers JoinGroup v0-8 with the leader as it was
            # (the old member id when the leader itself came back) and no members, so the member
            # runs no assignor: its SyncGroup reads its assignment back.
            self._store_group(group, lambda error: None)
            self._send(src, JoinGroupResponse(req.correlation_id, NO_ERROR, group.generation, group.protocol,
                                              leader_before or "", member_id))
            return
        member.awaiting_join = (src, req.correlation_id)
        if group.state == PREPARING_REBALANCE:
            self._try_complete_join(group)
        else:
            self._prepare_rebalance(group, f"static member {req.group_instance_id} rejoined")

    def _update_member(self, src: Any, req: JoinGroupRequest, group: Group, member: Member) -> None:
        same = member.protocols == req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if group.state == PREPARING_REBALANCE:
            member.protocols = req.protocols
            member.awaiting_join = (src, req.correlation_id)
            self._try_complete_join(group)
        elif group.state == COMPLETING_REBALANCE and same:
            # It lost our answer: send it again.
            self._send(src, self._join_response(group, member, req.correlation_id))
        elif group.state == STABLE and same and member.member_id != group.leader:
            self._send(src, self._join_response(group, member, req.correlation_id))
        else:
            member.protocols = req.protocols
            member.awaiting_join = (src, req.correlation_id)
            self._prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _join_response(self, group: Group, member: Member, correlation_id: int) -> JoinGroupResponse:
        members, instance_ids = (), ()
        if member.member_id == group.leader:
            members = tuple((m.member_id, m.metadata(group.protocol)) for m in group.members.values())
            if any(m.group_instance_id is not None for m in group.members.values()):
                instance_ids = tuple(m.group_instance_id for m in group.members.values())
        return JoinGroupResponse(correlation_id, NO_ERROR, group.generation, group.protocol,
                                 group.leader or "", member.member_id, members, instance_ids)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state == COMPLETING_REBALANCE:
            for member in group.members.values():  # the assignment being made is void
                self._answer_sync(member, SyncGroupResponse(0, REBALANCE_IN_PROGRESS))
        was_empty = group.state == EMPTY
        group.transition(GroupEvent.REBALANCE, self.now)
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if was_empty:
            group.initial_delay = True
            group.new_member_added = False
            group.delay_deadline = self.now + timeout
            delay = min(self.config["group.initial.rebalance.delay.ms"], timeout)
            self.context.set_timer(("group-join", group.group_id), delay)
        else:
            group.initial_delay = False
            self.context.set_timer(("group-join", group.group_id), timeout)
            self._try_complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.state == PREPARING_REBALANCE and not group.initial_delay and group.all_joined():
            self.context.cancel_timer(("group-join", group.group_id))
            self._complete_join(group)

    def join_timer(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.state != PREPARING_REBALANCE:
            return
        if group.initial_delay:
            remaining = group.delay_deadline - self.now
            if group.new_member_added and remaining > 0:
                # Someone joined during the delay: wait once more, within the rebalance timeout.
                group.new_member_added = False
                self.context.set_timer(("group-join", group_id),
                                      min(self.config["group.initial.rebalance.delay.ms"], remaining))
                return
            group.initial_delay = False
            if not group.all_joined():
                self.context.set_timer(("group-join", group_id),
                                      max((m.rebalance_timeout_ms for m in group.members.values()), default=0))
                return
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        # Whoever did not rejoin within the rebalance timeout is out (max.poll.interval.ms).
        for member in [m for m in group.members.values() if m.awaiting_join is None]:
            self._remove_member(group, member, rebalance=False)
        group.pending_members.clear()
        group.generation += 1
        if not group.members:
            group.protocol = group.leader = None
            group.transition(GroupEvent.NO_MEMBER_LEFT, self.now)
            self._store_group(group, lambda error: None)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition(GroupEvent.JOIN_PHASE_OVER, self.now)
        for member in group.members.values():
            member.assignment = b""
            self._answer_join(member, self._join_response(group, member, 0))
            self._schedule_heartbeat(group, member)

    def _answer_join(self, member: Member, response: JoinGroupResponse) -> None:
        if member.awaiting_join is not None:
            dst, corr = member.awaiting_join
            member.awaiting_join = None
            self._send(dst, dataclasses.replace(response, correlation_id=corr))

    def _answer_sync(self, member: Member, response: SyncGroupResponse) -> None:
        if member.awaiting_sync is not None:
            dst, corr = member.awaiting_sync
            member.awaiting_sync = None
            self._send(dst, SyncGroupResponse(corr, response.error, response.assignment))

    # --- SyncGroup ----------------------------------------------------------------------------------------

    def _member_of_generation(self, req: Any) -> tuple[Group | None, Member | None, int]:
        """(group, member, NO_ERROR) if ``req`` comes from a member of the current generation;
        else the error that says why not."""
        if not self.owns(req.group_id):
            return None, None, NOT_COORDINATOR
        group = self.groups.get(req.group_id)
        if group is None:
            return None, None, UNKNOWN_MEMBER_ID
        error = self._check_member(group, req.member_id, req.group_instance_id)
        if error != NO_ERROR:
            return group, None, error
        member = group.members[req.member_id]
        if req.generation_id != group.generation:
            return group, member, ILLEGAL_GENERATION
        return group, member, NO_ERROR

    @staticmethod
    def _static_member(group: Group, instance_id: str) -> Member | None:
        return next((m for m in group.members.values() if m.group_instance_id == instance_id), None)

    def _check_member(self, group: Group, member_id: str, instance_id: str | None) -> int:
        """Kafka's ``ClassicGroup.validateMember``: a request naming an instance id must come from
        that instance's current member (FENCED_INSTANCE_ID: a newer process took its place;
        UNKNOWN_MEMBER_ID: no such instance), and the member id must be the group's."""
        if instance_id is not None:
            current = self._static_member(group, instance_id)
            if current is None:
                return UNKNOWN_MEMBER_ID
            if current.member_id != member_id:
                logger.info("group %s: member %s of instance %s is fenced by member %s", group.group_id,
                            member_id, instance_id, current.member_id)
                return FENCED_INSTANCE_ID
        return NO_ERROR if member_id in group.members else UNKNOWN_MEMBER_ID

    def sync_group(self, src: Any, req: SyncGroupRequest) -> None:
        def reply(error: int, assignment: bytes = b"") -> None:
            self._send(src, SyncGroupResponse(req.correlation_id, error, assignment))

        group, member, error = self._member_of_generation(req)
        if error != NO_ERROR:
            return reply(error)
        if group.state == PREPARING_REBALANCE:
            return reply(REBALANCE_IN_PROGRESS)
        self._schedule_heartbeat(group, member)
        if group.state == STABLE:
            return reply(NO_ERROR, member.assignment)
        member.awaiting_sync = (src, req.correlation_id)
        if req.member_id != group.leader:
            return
        assignments = dict(req.assignments)
        generation = group.generation

        def stored(error: int) -> None:
            if self.groups.get(group.group_id) is not group or group.generation != generation \
                    or group.state != COMPLETING_REBALANCE:
                return  # the group moved on while we were writing
            if error != NO_ERROR:
                for m in group.members.values():
                    m.assignment = b""
                    self._answer_sync(m, SyncGroupResponse(0, self._commit_error(error)))
                self._prepare_rebalance(group, "could not store the group's assignment")
                return
            for m in group.members.values():
                self._answer_sync(m, SyncGroupResponse(0, NO_ERROR, m.assignment))
            group.transition(GroupEvent.ASSIGNMENT_STORED, self.now)

        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        self._store_group(group, stored)

    # --- Heartbeat, LeaveGroup, session expiry --------------------------------------------------------------

    def heartbeat(self, src: Any, req: HeartbeatRequest) -> None:
        def reply(error: int) -> None:
            self._send(src, HeartbeatResponse(req.correlation_id, error))

        group, member, error = self._member_of_generation(req)
        if error != NO_ERROR:
            return reply(error)
        self._schedule_heartbeat(group, member)
        reply(REBALANCE_IN_PROGRESS if group.state == PREPARING_REBALANCE else NO_ERROR)

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        self.context.set_timer(("group-session", group.group_id, member.member_id), member.session_timeout_ms)

    def session_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group else None
        if member is None:
            return
        if member.awaiting_join is not None or member.awaiting_sync is not None:
            self._schedule_heartbeat(group, member)  # waiting on us is being alive
            return
        self._remove_member(group, member)

    def pending_expired(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(group)

    def leave_group(self, src: Any, req: LeaveGroupRequest) -> None:
        def reply(error: int) -> None:
            self._send(src, LeaveGroupResponse(req.correlation_id, error))

        if not self.owns(req.group_id):
            return reply(NOT_COORDINATOR)
        group = self.groups.get(req.group_id)
        if group is None:
            return reply(UNKNOWN_MEMBER_ID)
        if group.state == DEAD:
            return reply(COORDINATOR_NOT_AVAILABLE)
        if not req.member_id and req.group_instance_id is not None:
            # LeaveGroup v3+ by instance id alone: an admin tool removes a static member.
            member = self._static_member(group, req.group_instance_id)
            if member is None:
                return reply(UNKNOWN_MEMBER_ID)
            self._remove_member(group, member)
            return reply(NO_ERROR)
        if req.member_id in group.pending_members:
            group.pending_members.discard(req.member_id)
            self._try_complete_join(group)
            return reply(NO_ERROR)
        error = self._check_member(group, req.member_id, req.group_instance_id)
        if error != NO_ERROR:
            return reply(error)
        self._remove_member(group, group.members[req.member_id])
        reply(NO_ERROR)

    def _remove_member(self, group: Group, member: Member, *, rebalance: bool = True) -> None:
        self._answer_join(member, JoinGroupResponse(0, UNKNOWN_MEMBER_ID))
        self._answer_sync(member, SyncGroupResponse(0, UNKNOWN_MEMBER_ID))
        del group.members[member.member_id]
        self.context.cancel_timer(("group-session", group.group_id, member.member_id))
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)
        if not rebalance:
            return
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} left")
        elif group.state == PREPARING_REBALANCE:
            self._try_complete_join(group)

    # --- ConsumerGroupHeartbeat (KIP-848) -----------------------------------------------------------------

    def consumer_group_heartbeat(self, src: Any, req: ConsumerGroupHeartbeatRequest) -> None:
        """Join (epoch 0), stay (the member's epoch), or leave (-1; -2: a static member that will
        come back): the whole of KIP-848's protocol is this one request."""
        def fail(error: int, message: str | None = None) -> None:
            self._consumer_reply(src, self.groups.get(req.group_id), ConsumerGroupHeartbeatResponse(
                req.correlation_id, error, message, member_id=req.member_id or None))

        error = self._check_heartbeat(req)
        if error is not None:
            return fail(*error)
        if not self.owns(req.group_id):
            return fail(NOT_COORDINATOR)
        group = self.groups.get(req.group_id)
        if group is None or group.state == DEAD:
            if req.member_epoch != 0:
                return fail(UNKNOWN_MEMBER_ID, f"group {req.group_id!r} has no member {req.member_id!r}")
            group = self.groups[req.group_id] = Group(req.group_id, self.partition_for(req.group_id))
        if group.consumer is None:
            if group.members or group.pending_members:
                return fail(GROUP_ID_NOT_FOUND, f"group {req.group_id!r} is a classic group with members")
            group.consumer = ConsumerGroup()  # an empty classic group (perhaps only offsets) changes type
        cg = group.consumer
        if req.by_topic_id and req.topic_partitions:
            # A partition of a topic that no longer exists is owned by nobody: drop it.
            req = dataclasses.replace(req, by_topic_id=False, topic_partitions=tuple(
                (name, p) for t, p in req.topic_partitions if (name := self.context.topic_name(t)) is not None))
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._consumer_leave(src, req, group)
        if req.member_epoch == 0:
            member, error = self._consumer_join(src, req, group)
            if error is not None:
                return fail(*error)
        else:
            if req.instance_id is not None:  # Kafka's throwIfStaticMemberIsUnknown / throwIfInstanceIdIsFenced
                static = cg.static_member(req.instance_id)
                if static is None:
                    return fail(UNKNOWN_MEMBER_ID, f"group {req.group_id!r} has no static member "
                                                   f"{req.instance_id!r}")
                if static.member_id != req.member_id:
                    return fail(FENCED_INSTANCE_ID, f"static member {req.member_id!r} with instance id "
                                                    f"{req.instance_id!r} was fenced by member {static.member_id!r}")
            member = cg.members.get(req.member_id)
            if member is None:
                return fail(UNKNOWN_MEMBER_ID, f"group {req.group_id!r} has no member {req.member_id!r}")
            owned = None if req.topic_partitions is None else frozenset(req.topic_partitions)
            if req.member_epoch != member.member_epoch and not (
                    req.member_epoch == member.previous_member_epoch and owned is not None
                    and owned <= member.assigned):
                self._consumer_fence(group, member)
                return fail(FENCED_MEMBER_EPOCH, f"member {req.member_id!r} is at epoch {member.member_epoch}, "
                                                 f"not {req.member_epoch}")
            if req.subscribed_topic_names is not None and req.subscribed_topic_names != member.subscribed_topics:
                member.subscribed_topics = tuple(req.subscribed_topic_names)
                cg.group_epoch += 1
            if req.server_assignor is not None and req.server_assignor != member.server_assignor:
                member.server_assignor = req.server_assignor
                cg.group_epoch += 1
            if req.rebalance_timeout_ms >= 0:
                member.rebalance_timeout_ms = req.rebalance_timeout_ms
        self._consumer_update(group, member, None if req.topic_partitions is None else frozenset(req.topic_partitions))
        member = cg.members[member.member_id]
        self.context.set_timer(("cgroup-session", group.group_id, member.member_id),
                              self.config["group.consumer.session.timeout.ms"])
        # Kafka answers with the assignment when it changed, or when the request was a "full" one
        # (every optional field set: what a client sends after an error, to resynchronise).
        full = req.member_epoch == 0 or (req.rebalance_timeout_ms >= 0 and req.subscribed_topic_names is not None
                                         and req.topic_partitions is not None)
        assignment = None
        if full or member.sent != member.assigned:
            member.sent = member.assigned
            assignment = tuple(sorted(member.assigned))
        ids = tuple((t, self.context.topic_id(t) or "") for t in sorted({t for t, _ in assignment or ()}))
        self._consumer_reply(src, group, ConsumerGroupHeartbeatResponse(
            req.correlation_id, NO_ERROR, None, member.member_id, member.member_epoch,
            self.config["group.consumer.heartbeat.interval.ms"], assignment, ids))

    @staticmethod
    def _check_heartbeat(req: ConsumerGroupHeartbeatRequest) -> tuple[int, str] | None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``: what a well-formed request holds."""
        if not req.group_id:
            return INVALID_GROUP_ID, "GroupId can't be empty."
        if req.member_epoch < STATIC_LEAVE_EPOCH:
            return INVALID_REQUEST, f"MemberEpoch {req.member_epoch} is not -2, -1, 0 or a member's epoch."
        if req.member_epoch != 0 and not req.member_id:
            return INVALID_REQUEST, "MemberId can't be empty."
        if req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            return INVALID_REQUEST, "InstanceId can't be null when MemberEpoch is -2 (a static member's leave)."
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms < 0:
                return INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."
            if req.subscribed_topic_names is None:
                return INVALID_REQUEST, "SubscribedTopicNames must be set in first request."
            if req.topic_partitions not in (None, ()):
                return INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."
        if req.server_assignor is not None and req.server_assignor not in SERVER_ASSIGNORS:
            return UNSUPPORTED_ASSIGNOR, (f"ServerAssignor {req.server_assignor!r} is not supported; "
                                          f"supported assignors: {sorted(SERVER_ASSIGNORS)}.")
        return None

    def _consumer_join(self, src: Any, req: ConsumerGroupHeartbeatRequest,
                       group: Group) -> tuple[ConsumerMember | None, tuple[int, str] | None]:
        cg = group.consumer
        member_id = req.member_id or self._new_member_id(req.client_id, req.group_id)
        if member_id in cg.members:  # a rejoin (after being fenced, or a lost answer): start over
            self._consumer_remove(group, cg.members[member_id])
        previous = cg.static_member(req.instance_id) if req.instance_id is not None else None
        if previous is not None and previous.member_epoch != STATIC_LEAVE_EPOCH:
            return None, (UNRELEASED_INSTANCE_ID, f"instance id {req.instance_id!r} is in use by member "
                                                  f"{previous.member_id!r}")
        if previous is None and len(cg.members) >= self.config["group.max.size"]:
            return None, (GROUP_MAX_SIZE_REACHED, f"group {req.group_id!r} has {len(cg.members)} members")
        member = ConsumerMember(member_id, req.instance_id, req.client_id, str(src), req.rebalance_timeout_ms,
                                tuple(req.subscribed_topic_names or ()), req.server_assignor)
        if previous is not None:
            # A static member back within its session timeout: it takes over its old self's
            # partitions and epoch; the group epoch does not move unless the subscription did.
            member = ConsumerMember(member_id, req.instance_id, req.client_id, str(src), req.rebalance_timeout_ms,
                                    member.subscribed_topics, req.server_assignor or previous.server_assignor,
                                    previous.previous_member_epoch, previous.previous_member_epoch,
                                    previous.state, previous.assigned, previous.revoking)
            self._consumer_remove(group, previous, bump=False)
            cg.target[member_id] = cg.target.pop(previous.member_id, frozenset())
            if member.subscribed_topics != previous.subscribed_topics:
                cg.group_epoch += 1
        else:
            cg.group_epoch += 1
        cg.members[member_id] = member
        return member, None

    def _consumer_update(self, group: Group, member: ConsumerMember, reported) -> None:
        """After a heartbeat: a new target if the group epoch moved on (or a subscribed topic grew),
        then the member's next reconciliation step; the group's state follows."""
        cg = group.consumer
        counts = {t: topic.num_partitions for t in sorted(cg.subscribed_topics())
                  if (topic := self.context.topic(t)) is not None}
        if counts != cg.partition_counts and cg.assignment_epoch == cg.group_epoch and cg.assignment_epoch > 0:
            cg.group_epoch += 1  # a subscribed topic appeared, went or grew
        if cg.group_epoch > cg.assignment_epoch:
            cg.target = compute_target(cg, counts)
            cg.partition_counts = counts
            cg.assignment_epoch = cg.group_epoch
        before = member.state
        updated = reconcile(member, cg.target.get(member.member_id, frozenset()), cg.assignment_epoch,
                            cg.owned_elsewhere(member.member_id), reported)
        cg.members[member.member_id] = updated
        key = ("cgroup-revoke", group.group_id, member.member_id)
        if updated.revoking and before != updated.state:
            self.context.set_timer(key, updated.rebalance_timeout_ms)
        elif not updated.revoking:
            self.context.cancel_timer(key)
        self._consumer_state(group)

    def _consumer_state(self, group: Group) -> None:
        state = group.consumer.state()
        if state != group.state:
            group.state, group.state_timestamp = state, self.now

    def _consumer_leave(self, src: Any, req: ConsumerGroupHeartbeatRequest, group: Group) -> None:
        cg = group.consumer
        member = cg.members.get(req.member_id)
        if member is None and req.instance_id is not None:
            member = cg.static_member(req.instance_id)
        if member is None:
            return self._consumer_reply(src, group, ConsumerGroupHeartbeatResponse(
                req.correlation_id, UNKNOWN_MEMBER_ID, f"group {req.group_id!r} has no member {req.member_id!r}",
                req.member_id or None))
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # It keeps its partitions (nobody else gets them) until it rejoins with the same
            # instance id or its session timeout passes.
            member.previous_member_epoch, member.member_epoch = member.member_epoch, STATIC_LEAVE_EPOCH
            self._consumer_state(group)
        else:
            self._consumer_remove(group, member)
        self._consumer_reply(src, group, ConsumerGroupHeartbeatResponse(
            req.correlation_id, NO_ERROR, None, member.member_id, req.member_epoch, 0, None))

    def _consumer_remove(self, group: Group, member: ConsumerMember, *, bump: bool = True) -> None:
        cg = group.consumer
        del cg.members[member.member_id]
        cg.target.pop(member.member_id, None)
        self.context.cancel_timer(("cgroup-session", group.group_id, member.member_id))
        self.context.cancel_timer(("cgroup-revoke", group.group_id, member.member_id))
        if bump:
            cg.group_epoch += 1
        self._consumer_state(group)

    def _consumer_fence(self, group: Group, member: ConsumerMember) -> None:
        logger.info("group %s: member %s fenced", group.group_id, member.member_id)
        self._consumer_remove(group, member)

    def consumer_member_expired(self, group_id: str, member_id: str) -> None:
        """``group.consumer.session.timeout.ms`` passed without a heartbeat, or the member kept a
        revoked partition past its rebalance timeout: it is fenced, its partitions go to others."""
        group = self.groups.get(group_id)
        member = group.consumer.members.get(member_id) if group is not None and group.consumer else None
        if member is not None:
            self._consumer_fence(group, member)
            self._consumer_persist(group)

    def _consumer_commit_error(self, group: Group, req: OffsetCommitRequest) -> int:
        """OffsetCommit to a consumer group: from a member at its epoch (KIP-848: the generation
        field carries the member epoch), or a simple commit while the group has no members."""
        cg = group.consumer
        if req.generation_id < 0 and not req.member_id:
            return NO_ERROR if not cg.members else UNKNOWN_MEMBER_ID
        member = cg.members.get(req.member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if req.generation_id > member.member_epoch:
            return FENCED_MEMBER_EPOCH
        if req.generation_id < member.member_epoch and req.generation_id != member.previous_member_epoch:
            return STALE_MEMBER_EPOCH
        return NO_ERROR

    # --- KIP-848's group in __consumer_offsets: written after each change, replayed on load ---------------------

    def _consumer_snapshot(self, group: Group) -> dict[bytes, bytes]:
        """The group as Kafka writes it: key versions 3-8 (``group_metadata``), key bytes -> value bytes."""
        cg, gid = group.consumer, group.group_id
        if cg is None:
            return {}

        def parts(tps) -> tuple:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(tps):
                by_topic.setdefault(t, []).append(p)
            return tuple((self.context.topic_id(t) or "", tuple(ps)) for t, ps in by_topic.items())

        out = {
            ConsumerGroupKey(CONSUMER_GROUP_METADATA, gid).encode():
                ConsumerGroupMetadataValue(cg.group_epoch).encode(),
            ConsumerGroupKey(CONSUMER_GROUP_PARTITION_METADATA, gid).encode(): ConsumerGroupPartitionMetadataValue(
                cg.assignment_epoch, tuple((self.context.topic_id(t) or "", t, n)
                                           for t, n in sorted(cg.partition_counts.items()))).encode(),
            ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, gid).encode():
                ConsumerGroupTargetAssignmentMetadataValue(cg.assignment_epoch).encode(),
        }
        for mid, m in cg.members.items():
            out[ConsumerGroupKey(CONSUMER_GROUP_MEMBER_METADATA, gid, mid).encode()] = ConsumerGroupMemberMetadataValue(
                m.instance_id, m.client_id, m.client_host, m.subscribed_topics, m.rebalance_timeout_ms,
                m.server_assignor).encode()
            out[ConsumerGroupKey(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid, mid).encode()] = \
                ConsumerGroupCurrentMemberAssignmentValue(m.member_epoch, m.previous_member_epoch,
                                                          _MEMBER_STATE_BYTES[m.state], parts(m.assigned),
                                                          parts(m.revoking)).encode()
        for mid, target in cg.target.items():
            out[ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, gid, mid).encode()] = \
                ConsumerGroupTargetAssignmentMemberValue(parts(target)).encode()
        return out

    def _consumer_persist(self, group: Group, then: Callable[[int], None] | None = None) -> None:
        """Write the records that changed since the last write (tombstones for what is gone: a
        member that left), then ``then(error)``; nothing to write calls ``then`` at once. A failed
        write is forgotten, so the next change writes those records again."""
        if group.consumer is None:  # a classic group now: its old records stay for delete's tombstones
            return then(NO_ERROR) if then else None
        now = self._consumer_snapshot(group)
        before = group.consumer_records
        changes = [(k, v) for k, v in now.items() if before.get(k) != v] + [(k, None) for k in before if k not in now]
        if not changes:
            return then(NO_ERROR) if then else None
        group.consumer_records = now

        def written(error: int) -> None:
            if error != NO_ERROR:
                for k, v in changes:  # what the log may not have (unless changed since): write it again next time
                    if group.consumer_records.get(k) == v:
                        if k in before:
                            group.consumer_records[k] = before[k]
                        else:
                            del group.consumer_records[k]
            if then is not None:
                then(error)

        self._append(group, changes, written)

    def _consumer_reply(self, src: Any, group: Group | None, response: ConsumerGroupHeartbeatResponse) -> None:
        """Answer a heartbeat once what it changed is in ``__consumer_offsets`` (on every in-sync
        replica), as Kafka's coordinator runtime does; a failed write is answered with its error."""
        if group is None:
            return self._send(src, response)

        def written(error: int) -> None:
            if error == NO_ERROR:
                self._send(src, response)
            else:
                self._send(src, ConsumerGroupHeartbeatResponse(
                    response.correlation_id, self._commit_error(error),
                    f"the group's change could not be written to {OFFSETS_TOPIC} (error {error})",
                    response.member_id))

        self._consumer_persist(group, written)

    def _consumer_tombstones(self, group: Group) -> list[tuple[bytes, None]]:
        """Tombstones for every consumer group record of ``group`` (it is being deleted)."""
        records = [(k, None) for k in group.consumer_records]
        group.consumer_records = {}
        return records

    def _replay_consumer_record(self, loaded: dict[str, Group], p: int, record: Record) -> None:
        key = ConsumerGroupKey.decode(record.key)
        group = loaded.get(key.group)
        if group is None:
            group = loaded[key.group] = Group(key.group, p, state=DEAD)
        if record.value is None:
            group.consumer_records.pop(record.key, None)
            return
        group.consumer_records[record.key] = record.value
        if group.consumer is None:
            group.consumer = ConsumerGroup()  # rebuilt from the records once the partition is read

    def _consumer_loaded(self, group: Group) -> None:
        """The group as its records say (Kafka's ``GroupMetadataManager.replay``): epochs, members
        with their epochs and partitions, the target. Members' sessions start again now."""
        cg = group.consumer = ConsumerGroup()
        meta: dict[str, ConsumerGroupMemberMetadataValue] = {}
        current: dict[str, ConsumerGroupCurrentMemberAssignmentValue] = {}

        def names(parts) -> frozenset[tuple[str, int]]:  # topic ids back to names; a deleted topic drops out
            return frozenset((name, p) for tid, ps in parts if (name := self.context.topic_name(tid)) is not None
                             for p in ps)

        for raw_key, raw in group.consumer_records.items():
            key = ConsumerGroupKey.decode(raw_key)
            value = CONSUMER_GROUP_VALUES[key.kind].decode(raw)
            if key.kind == CONSUMER_GROUP_METADATA:
                cg.group_epoch = value.epoch
            elif key.kind == CONSUMER_GROUP_PARTITION_METADATA:
                cg.partition_counts = {self.context.topic_name(tid) or name: n for tid, name, n in value.topics}
            elif key.kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
                cg.assignment_epoch = value.epoch
            elif key.kind == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
                cg.target[key.member] = names(value.partitions)
            elif key.kind == CONSUMER_GROUP_MEMBER_METADATA:
                meta[key.member] = value
            else:
                current[key.member] = value
        for mid, m in meta.items():
            c = current.get(mid)
            if c is None:
                continue  # a member whose assignment record is missing never got an answer: it rejoins
            cg.members[mid] = ConsumerMember(
                mid, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms, m.subscribed_topics,
                m.server_assignor, c.member_epoch, c.previous_member_epoch, _MEMBER_STATES[c.state],
                names(c.assigned), names(c.pending_revocation))
            self.context.set_timer(("cgroup-session", group.group_id, mid),
                                   self.config["group.consumer.session.timeout.ms"])
            if c.pending_revocation:
                self.context.set_timer(("cgroup-revoke", group.group_id, mid), m.rebalance_timeout_ms)
        cg.target = {mid: t for mid, t in cg.target.items() if mid in cg.members}
        group.state, group.state_timestamp = cg.state(), self.now

    # --- offsets --------------------------------------------------------------------------------------------------

    def _group_for_commit(self, group_id: str, *, create: bool) -> tuple["Group | None", int]:
        """What OffsetCommit and TxnOffsetCommit both ask first: (the group the offsets go to,
        NO_ERROR), made (Empty) if it did not exist and ``create``; or (None, the error to
        answer every partition with): no group id, another broker coordinates it, no such
        group and not ``create`` (a member's commit), or the group being unloaded (Dead)."""
        if not group_id:
            return None, INVALID_GROUP_ID
        if not self.owns(group_id):
            return None, NOT_COORDINATOR
        group = self.groups.get(group_id)
        if group is None:
            if not create:
                return None, ILLEGAL_GENERATION
            group = self.groups[group_id] = Group(group_id, self.partition_for(group_id))
            group.transition(GroupEvent.CREATED, self.now)
        elif group.state == DEAD:
            return None, COORDINATOR_NOT_AVAILABLE
        return group, NO_ERROR

    def commit_offsets(self, src: Any, req: OffsetCommitRequest) -> None:
        def reply_all(error: int) -> None:
            self._send(src, OffsetCommitResponse(req.correlation_id, tuple(
                (o.topic, o.partition, error) for o in req.offsets)))

        simple = req.generation_id < 0 and not req.member_id and req.group_instance_id is None
        group, error = self._group_for_commit(req.group_id, create=simple)
        if error != NO_ERROR:
            return reply_all(error)
        if group.consumer is not None:
            error = self._consumer_commit_error(group, req)
            if error != NO_ERROR:
                return reply_all(error)
        elif simple:
            if group.state != EMPTY:  # (a group made just now for this commit is Empty)
                return reply_all(UNKNOWN_MEMBER_ID)  # a group with members owns its offsets
        elif (error := self._check_member(group, req.member_id, req.group_instance_id)) != NO_ERROR:
            return reply_all(error)
        elif req.generation_id != group.generation:
            return reply_all(ILLEGAL_GENERATION)
        elif group.state == COMPLETING_REBALANCE:
            return reply_all(REBALANCE_IN_PROGRESS)
        else:
            self._schedule_heartbeat(group, group.members[req.member_id])
        # (PreparingRebalance is fine: a consumer commits in on_partitions_revoked then.)
        results: dict[tuple[str, int], int] = {}
        to_write: list[tuple[tuple[str, int], OffsetValue]] = []
        limit = self.config["offset.metadata.max.bytes"]
        for o in req.offsets:
            key = (o.topic, o.partition)
            if o.metadata is not None and len(o.metadata.encode()) > limit:
                results[key] = OFFSET_METADATA_TOO_LARGE
            else:
                results[key] = NO_ERROR
                to_write.append((key, OffsetValue(o.offset, o.leader_epoch, o.metadata or "", self.now)))

        def respond() -> None:
            self._send(src, OffsetCommitResponse(req.correlation_id, tuple(
                (t, p, error) for (t, p), error in results.items())))

        if not to_write:
            return respond()

        def written(error: int) -> None:
            error = self._commit_error(error)
            for key, value in to_write:
                results[key] = error
                if error == NO_ERROR and self.groups.get(group.group_id) is group:
                    group.offsets[key] = value
            respond()

        self._append(group, [(OffsetKey(group.group_id, t, p).encode(), v.encode()) for (t, p), v in to_write],
                     written)

    def txn_commit_offsets(self, src: Any, req: TxnOffsetCommitRequest) -> None:
        """TxnOffsetCommit: the offsets go to ``__consumer_offsets`` in the producer's
        transaction and stay pending until its marker comes (``complete_transaction``)."""
        def reply_all(error: int) -> None:
            self._send(src, TxnOffsetCommitResponse(req.correlation_id, tuple(
                (o.topic, o.partition, error) for o in req.offsets)))

        group, error = self._group_for_commit(req.group_id, create=True)
        if error != NO_ERROR:
            return reply_all(error)
        limit = self.config["offset.metadata.max.bytes"]
        if any(o.metadata is not None and len(o.metadata.encode()) > limit for o in req.offsets):
            return reply_all(OFFSET_METADATA_TOO_LARGE)
        values = {(o.topic, o.partition): OffsetValue(o.offset, o.leader_epoch, o.metadata or "", self.now)
                  for o in req.offsets}
        if not values:
            return reply_all(NO_ERROR)
        batch = RecordBatch.build([Record(OffsetKey(group.group_id, t, p).encode(), v.encode(), timestamp=self.now)
                                   for (t, p), v in values.items()],
                                  producer_id=req.producer_id, producer_epoch=req.producer_epoch, base_sequence=0,
                                  is_transactional=True)

        def written(error: int) -> None:
            if error == NO_ERROR and self.groups.get(group.group_id) is group:
                group.pending_txn_offsets.setdefault(req.producer_id, {}).update(values)
            reply_all(PRODUCER_FENCED if error == INVALID_PRODUCER_EPOCH else self._commit_error(error))

        self.context.append_internal(
            OFFSETS_TOPIC, group.partition, bytes(batch), self.config["offsets.commit.timeout.ms"], written)

    def complete_transaction(self, partition: int, producer_id: int, committed: bool) -> None:
        """The transaction's marker is on ``partition`` of ``__consumer_offsets``."""
        for group in self.groups.values():
            if group.partition == partition:
                self._resolve_pending(group, producer_id, committed)

    @staticmethod
    def _resolve_pending(group: Group, producer_id: int, committed: bool) -> None:
        pending = group.pending_txn_offsets.pop(producer_id, None)
        if pending and committed:
            group.offsets.update(pending)
            if group.state == DEAD:
                group.transition(GroupEvent.TXN_OFFSETS_COMMITTED, None)

    def fetch_offsets(self, src: Any, req: OffsetFetchRequest) -> None:
        if not self.owns(req.group_id):
            self._send(src, OffsetFetchResponse(req.correlation_id, NOT_COORDINATOR))
            return
        group = self.groups.get(req.group_id)
        offsets = group.offsets if group else {}
        keys = sorted(offsets) if req.partitions is None else list(req.partitions)
        parts = []
        for t, p in keys:
            v = offsets.get((t, p))
            parts.append(OffsetFetchPartition(t, p, -1, -1, "") if v is None
                         else OffsetFetchPartition(t, p, v.offset, v.leader_epoch, v.metadata))
        self._send(src, OffsetFetchResponse(req.correlation_id, NO_ERROR, tuple(parts)))

    def expire_offsets(self) -> None:
        """Kafka's offset expiry: a group that has had no member for ``offsets.retention.minutes``
        loses its committed offsets (and, left with nothing, the group itself)."""
        retention = self.config["offsets.retention.minutes"] * 60_000
        for group in list(self.groups.values()):
            if group.state != EMPTY or group.partition not in self.owned:
                continue
            expired = [key for key, v in group.offsets.items()
                       if max(group.state_timestamp, v.commit_timestamp) + retention <= self.now]
            if not expired:
                continue
            records: list[tuple[bytes, bytes | None]] = [(OffsetKey(group.group_id, t, p).encode(), None)
                                                         for t, p in expired]
            for key in expired:
                del group.offsets[key]
            if not group.offsets:
                records += self._consumer_tombstones(group)
                records.append((GroupKey(group.group_id).encode(), None))
                group.transition(GroupEvent.OFFSETS_EXPIRED, self.now)
                del self.groups[group.group_id]
            self._append(group, records, lambda error: None)

    # --- admin: ListGroups, DescribeGroups, DeleteGroups ---------------------------------------------------

    def list_groups(self, src: Any, req: ListGroupsRequest) -> None:
        owned = sorted((g for g in self.groups.values() if g.partition in self.owned),
                       key=lambda g: (g.group_id, g.protocol_type or "", g.state))
        groups = tuple((g.group_id, "consumer" if g.consumer else g.protocol_type or "", g.state) for g in owned)
        self._send(src, ListGroupsResponse(req.correlation_id, NO_ERROR, groups, tuple(g.group_type for g in owned)))

    def describe_groups(self, src: Any, req: DescribeGroupsRequest) -> None:
        out = []
        for gid in req.groups:
            if not self.owns(gid):
                out.append(DescribedGroup(NOT_COORDINATOR, gid))
                continue
            g = self.groups.get(gid)
            if g is None:
                out.append(DescribedGroup(NO_ERROR, gid, DEAD))
                continue
            if g.consumer is not None:
                out.append(self._describe_consumer_group(g))
                continue
            stable = g.state == STABLE
            members = tuple(
                DescribedMember(m.member_id, m.client_id, m.client_host,
                                m.metadata(g.protocol) if stable else b"", m.assignment if stable else b"",
                                m.group_instance_id)
                for m in g.members.values())
            out.append(DescribedGroup(NO_ERROR, gid, g.state, g.protocol_type or "",
                                      (g.protocol or "") if stable else "", members))
        self._send(src, DescribeGroupsResponse(req.correlation_id, tuple(out)))

    @staticmethod
    def _describe_consumer_group(g: Group) -> DescribedGroup:
        """A KIP-848 group seen through DescribeGroups: each member's assignment is what it owns
        now, encoded as the classic protocol's Assignment, so the classic tools can read it."""
        members = tuple(
            DescribedMember(m.member_id, m.client_id, m.client_host,
                            Subscription(m.subscribed_topics).encode(),
                            Assignment(tuple(TopicPartition(t, p) for t, p in sorted(m.assigned))).encode(),
                            m.instance_id)
            for m in g.consumer.members.values())
        return DescribedGroup(NO_ERROR, g.group_id, g.state, "consumer", g.consumer.assignor(), members,
                              group_type="consumer")

    def consumer_group_describe(self, src: Any, req: ConsumerGroupDescribeRequest) -> None:
        """ConsumerGroupDescribe (api key 69, KIP-848): per group, its state, group epoch,
        assignment epoch and assignor, and per member its epoch, subscription, current and
        target assignment. As Kafka answers: an empty id is INVALID_GROUP_ID, a group another
        broker coordinates NOT_COORDINATOR, an unknown or classic group GROUP_ID_NOT_FOUND."""
        out = []
        for gid in req.group_ids:
            g = self.groups.get(gid)
            if not gid:
                out.append(DescribedConsumerGroup(INVALID_GROUP_ID, gid, "GroupId can't be empty."))
            elif not self.owns(gid):
                out.append(DescribedConsumerGroup(NOT_COORDINATOR, gid))
            elif g is None or g.state == DEAD:
                out.append(DescribedConsumerGroup(GROUP_ID_NOT_FOUND, gid, f"Group {gid} not found."))
            elif g.consumer is None:
                out.append(DescribedConsumerGroup(GROUP_ID_NOT_FOUND, gid, f"Group {gid} is not a consumer group."))
            else:
                out.append(self._described_consumer_group(g))
        self._send(src, ConsumerGroupDescribeResponse(req.correlation_id, tuple(out)))

    def _described_consumer_group(self, g: Group) -> DescribedConsumerGroup:
        cg = g.consumer
        members = tuple(
            DescribedConsumerMember(m.member_id, m.instance_id, m.member_epoch, m.client_id, m.client_host,
                                    m.subscribed_topics, tuple(sorted(m.assigned)),
                                    tuple(sorted(cg.target.get(m.member_id, frozenset()))))
            for m in cg.members.values())
        topics = sorted({t for m in members for t, _ in m.assignment + m.target_assignment})
        return DescribedConsumerGroup(NO_ERROR, g.group_id, None, g.state, cg.group_epoch, cg.assignment_epoch,
                                      cg.assignor(), members,
                                      tuple((t, self.context.topic_id(t) or "") for t in topics))

    def delete_offsets(self, src: Any, req: OffsetDeleteRequest) -> None:
        """OffsetDelete (KIP-496): tombstones for the group's committed offsets of these
        partitions. An empty group loses any of them; a group with members keeps the offsets
        of the topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC: they are in use).
        A partition without a committed offset is no error, as in Kafka."""
        if not self.owns(req.group_id):
            return self._send(src, OffsetDeleteResponse(req.correlation_id, NOT_COORDINATOR))
        g = self.groups.get(req.group_id)
        if g is None or g.state == DEAD:
            return self._send(src, OffsetDeleteResponse(req.correlation_id, GROUP_ID_NOT_FOUND))
        subscribed: set[str] = set()
        if g.state != EMPTY and g.protocol_type == "consumer":
            for m in g.members.values():
                try:
                    subscribed |= set(Subscription.decode(m.metadata(g.protocol)).topics)
                except Exception:  # unreadable metadata: treat every topic as in use
                    subscribed = {t for t, _ in req.partitions}
        elif g.state != EMPTY:
            subscribed = {t for t, _ in req.partitions}  # not a consumer group: nothing is known free
        results, records = [], []
        for topic, partition in req.partitions:
            if topic in subscribed:
                results.append((topic, partition, GROUP_SUBSCRIBED_TO_TOPIC))
                continue
            if (topic, partition) in g.offsets:
                del g.offsets[(topic, partition)]
                records.append((OffsetKey(g.group_id, topic, partition).encode(), None))
            results.append((topic, partition, NO_ERROR))
        if records:
            self._append(g, records, lambda error: None)
        self._send(src, OffsetDeleteResponse(req.correlation_id, NO_ERROR, tuple(results)))

    def delete_groups(self, src: Any, req: DeleteGroupsRequest) -> None:
        results = []
        for gid in req.groups:
            if not self.owns(gid):
                results.append((gid, NOT_COORDINATOR))
                continue
            g = self.groups.get(gid)
            if g is None:
                results.append((gid, GROUP_ID_NOT_FOUND))
            elif g.state != EMPTY:
                results.append((gid, NON_EMPTY_GROUP))
            else:
                records = [(OffsetKey(gid, t, p).encode(), None) for t, p in sorted(g.offsets)]
                records += self._consumer_tombstones(g)
                records.append((GroupKey(gid).encode(), None))
                del self.groups[gid]
                self._append(g, records, lambda error: None)
                results.append((gid, NO_ERROR))
        self._send(src, DeleteGroupsResponse(req.correlation_id, tuple(results)))


# Kafka's MemberState bytes in ConsumerGroupCurrentMemberAssignmentValue.
_MEMBER_STATE_BYTES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
_MEMBER_STATES = {b: state for state, b in _MEMBER_STATE_BYTES.items()}


def _fields(response: JoinGroupResponse) -> tuple:
    return (response.correlation_id, response.error, response.generation_id, response.protocol_name,
            response.leader, response.member_id, response.members)
