"""The consumer's side of a group: Kafka's ``ConsumerCoordinator`` (with ``AbstractCoordinator``).

Theory of operation
-------------------
Two threads share this object in Kafka, and the split is the chapter's point:

- the *heartbeat thread* (here: timers of the consumer's node) finds the coordinator
  (FindCoordinator), carries the JoinGroup/SyncGroup exchange once it has started, and
  sends a Heartbeat every ``heartbeat_interval_ms`` so the coordinator knows the process is
  alive. A heartbeat answered REBALANCE_IN_PROGRESS means "rejoin"; UNKNOWN_MEMBER_ID or
  ILLEGAL_GENERATION mean "you were thrown out". It also watches the *user* thread: if
  ``poll()`` has not been called for ``max_poll_interval_ms`` it leaves the group, so a
  consumer stuck in processing gives its partitions up instead of holding them hostage;
- the *user thread* (``KafkaConsumer.poll``, see ``minikafka.clients.consumer``) does what
  runs user code or must be ordered with it: before joining, commits (with auto commit on)
  and calls ``on_partitions_revoked``; after the assignment arrives, takes it and calls
  ``on_partitions_assigned``; and fires auto commits every ``auto_commit_interval_ms``.

The rebalance is Kafka's *eager* protocol: every member gives up all its partitions, joins
(JoinGroup carries its subscription for each assignor it supports), the coordinator picks a
leader, the leader runs the assignor (``minikafka.assignors``) on everyone's subscriptions
and sends the result in its SyncGroup; each member gets its part from SyncGroup.

Commits (OffsetCommit) carry the generation and member id, so the coordinator refuses a
commit from a member that has been replaced. A consumer with ``assign()`` (no group
membership) makes *simple* commits with generation -1.

Nothing here blocks or reads a clock: it sends through its ``ConsumerNetworkClient``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from minikafka.assignors import Assignment, PartitionAssignor, Subscription
from minikafka.errors import (
    CommitFailedError,
    KafkaError,
    RebalanceInProgressError,
)
from minikafka.clients.sender import error_for_code
from minikafka.messages import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    MEMBER_ID_REQUIRED,
    NO_ERROR,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    REQUEST_TIMED_OUT,
    UNKNOWN_MEMBER_ID,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from minikafka.topic import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:
    from minikafka.clients.consumer_network_client import ConsumerNetworkClient

log = logging.getLogger(__name__)

UNJOINED, PREPARING, JOINING, SYNCING, STABLE = "UNJOINED", "PREPARING", "JOINING", "SYNCING", "STABLE"
NO_GENERATION = -1
_COORDINATOR_ERRORS = (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, REQUEST_TIMED_OUT)


class ConsumerCoordinator:
    def __init__(self, client: "ConsumerNetworkClient", config: dict, assignors: list[PartitionAssignor],
                 rules: Any = None) -> None:
        self.client = client
        self.config = config
        self.group_id: str = config["group_id"]
        self.assignors = assignors
        self.rules = rules  # the assignors' rules (minikafka.rules); None: Kafka's
        self.subscriptions = client.subscriptions
        self.coordinator: Any = None
        self._finding = False
        self._find_not_before = 0
        self.state = UNJOINED
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.need_rejoin = False  # set by the heartbeat thread; acted on by poll()
        self.rejoin_reason = ""
        self.pending_assignment: list[TopicPartition] | None = None  # for poll() to take
        self.previous_assignment: list[TopicPartition] = []  # the last generation's, for sticky
        self.joined_topics: dict[str, int] = {}  # the metadata the assignment was made from
        self._awaiting_metadata_for: JoinGroupResponse | None = None
        self._heartbeat_in_flight = False
        self.next_auto_commit_ms: int | None = None
        self.rebalances = 0
        self.events: list[tuple[int, str]] = []  # (time, what): the story of this member

    def _event(self, text: str) -> None:
        self.events.append((self.client.now, text))
        log.info("%s [%s] %s", self.client.node_id, self.group_id, text)

    # --- the coordinator ---------------------------------------------------------------------------------

    def coordinator_unknown(self) -> bool:
        return self.coordinator is None

    def ensure_coordinator(self) -> int | None:
        """Find the coordinator if we don't know it; returns when to try again."""
        if self.coordinator is not None or self._finding:
            return None
        if self._find_not_before > self.client.now:
            return self._find_not_before
        node = self.client.least_loaded_node()
        if node is None:
            return self.client.now + self.config["retry_backoff_ms"]
        self._finding = True
        self.client.send_request(node, lambda corr: FindCoordinatorRequest(corr, self.group_id),
                                 self._on_find_coordinator, self._on_find_failed)
        return None

    def _on_find_coordinator(self, response: FindCoordinatorResponse) -> None:
        self._finding = False
        if response.error == NO_ERROR:
            self.coordinator = response.node_id
            self._event(f"coordinator is broker {response.node_id}")
        else:
            self._find_not_before = self.client.now + self.config["retry_backoff_ms"]

    def _on_find_failed(self, error: KafkaError) -> None:
        self._finding = False
        self._find_not_before = self.client.now + self.config["retry_backoff_ms"]

    def coordinator_dead(self, why: str) -> None:
        if self.coordinator is not None:
            self._event(f"marking coordinator {self.coordinator} dead ({why})")
            self.coordinator = None
            self._find_not_before = self.client.now + self.config["retry_backoff_ms"]
            # A join or sync in flight died with it: start the exchange again once found.
            if self.state in (JOINING, SYNCING):
                self.state = PREPARING

    # --- joining: the user thread starts it, the heartbeat thread carries it -------------------------------

    def needs_join_prepare(self) -> bool:
        """poll() must revoke and rejoin: never joined, or told to rejoin while stable."""
        if not self.subscriptions.partitions_auto_assigned:
            return False
        return self.state == UNJOINED or (self.state == STABLE and self.need_rejoin)

    def start_join(self) -> None:
        """After the user thread revoked everything: let the node run the join."""
        self.state = PREPARING
        self.need_rejoin = False
        self.pending_assignment = None
        self.rebalances += 1
        self.client.wakeup()

    def maybe_send_join(self) -> int | None:
        if self.state != PREPARING:
            return None
        if self.coordinator is None:
            return self.ensure_coordinator()
        self.state = JOINING
        topics = tuple(sorted(self.subscriptions.subscription))
        # What we owned before the (eager) revoke emptied the assignment: the sticky assignor
        # keeps partitions where they were. (Kafka's eager StickyAssignor sends the same thing
        # in its userData; the cooperative protocol sends owned_partitions.)
        owned = tuple(sorted(self.subscriptions.assignment)) or tuple(self.previous_assignment)
        protocols = tuple((a.name, a.metadata(topics, owned).encode(version=a.version)) for a in self.assignors)
        c = self.config
        self.client.send_request(
            self.coordinator,
            lambda corr: JoinGroupRequest(corr, self.group_id, c["session_timeout_ms"], c["max_poll_interval_ms"],
                                          self.member_id, "consumer", protocols, c["client_id"],
                                          group_instance_id=c["group_instance_id"]),
            self._on_join, self._on_join_failed,
            # The coordinator holds JoinGroup until the rebalance completes: up to the timeout.
            timeout_ms=max(c["request_timeout_ms"], c["max_poll_interval_ms"] + 5000))
        return None

    def _on_join_failed(self, error: KafkaError) -> None:
        if self.state == JOINING:
            self.coordinator_dead(f"JoinGroup failed: {error}")
            self.state = PREPARING

    def _on_join(self, response: JoinGroupResponse) -> None:
        if self.state != JOINING:
            return
        error = response.error
        if error == MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self.state = PREPARING
            self.client.wakeup()
            return
        if error == NO_ERROR:
            self.member_id, self.generation = response.member_id, response.generation_id
            self.protocol, self.leader_id = response.protocol_name, response.leader
            self._event(f"joined generation {self.generation} as "
                        f"{'leader' if self.member_id == self.leader_id else 'follower'}")
            if self.member_id == self.leader_id:
                self._leader_sync(response)
            else:
                self._send_sync(())
            return
        if error in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
            self._reset_generation(f"JoinGroup: {error_for_code(error)}")
            self.state = PREPARING
        elif error in _COORDINATOR_ERRORS:
            self.coordinator_dead(str(error_for_code(error)))
            self.state = PREPARING
        elif error == REBALANCE_IN_PROGRESS:
            self.state = PREPARING
        else:  # INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED, ...
            self.state = UNJOINED
            self.client.fatal.append(error_for_code(error, f"JoinGroup for group {self.group_id!r}"))
            return
        self.client.wakeup()

    def _leader_sync(self, response: JoinGroupResponse) -> None:
        subscriptions = {mid: Subscription.decode(meta) for mid, meta in response.members}
        topics = set().union(*(set(s.topics) for s in subscriptions.values()))
        md = self.client.metadata
        missing = [t for t in sorted(topics) if md.partitions_for_topic(t) is None]
        if missing:
            # The leader assigns every member's topics: it needs their metadata first.
            for t in missing:
                md.add_topic(t)
            md.request_update()
            self._awaiting_metadata_for = response
            self.state = SYNCING
            return
        assignor = next(a for a in self.assignors if a.name == response.protocol_name)
        counts = {t: len(md.partitions_for_topic(t) or ()) for t in topics}
        result = assignor.assign(counts, subscriptions, self.rules)
        self._event("assigned: " + "; ".join(
            f"{mid}: {','.join(str(tp) for tp in tps) or '-'}" for mid, tps in sorted(result.items())))
        self._send_sync(tuple((mid, Assignment(tuple(tps)).encode()) for mid, tps in sorted(result.items())))

    def maybe_finish_leader_sync(self) -> None:
        response = self._awaiting_metadata_for
        if response is None or self.state != SYNCING:
            return
        md = self.client.metadata
        topics = set().union(*(set(Subscription.decode(m).topics) for _, m in response.members))
        if all(md.partitions_for_topic(t) is not None for t in topics):
            self._awaiting_metadata_for = None
            self._leader_sync(response)

    def _send_sync(self, assignments: tuple) -> None:
        self.state = SYNCING
        generation, member = self.generation, self.member_id
        self.client.send_request(
            self.coordinator, lambda corr: SyncGroupRequest(corr, self.group_id, generation, member, assignments,
                                                            self.config["group_instance_id"]),
            self._on_sync, self._on_join_failed_sync)

    def _on_join_failed_sync(self, error: KafkaError) -> None:
        if self.state == SYNCING:
            self.coordinator_dead(f"SyncGroup failed: {error}")
            self.state = PREPARING

    def _on_sync(self, response: SyncGroupResponse) -> None:
        if self.state != SYNCING:
            return
        error = response.error
        if error == NO_ERROR:
            assignment = Assignment.decode(response.assignment) if response.assignment else Assignment(())
            self.pending_assignment = list(assignment.partitions)
            self.previous_assignment = sorted(assignment.partitions)
            self.joined_topics = {t: len(self.client.metadata.partitions_for_topic(t) or ())
                                  for t in self.subscriptions.subscription}
            self.state = STABLE
            self._event(f"generation {self.generation}: got {', '.join(map(str, assignment.partitions)) or 'nothing'}")
            self.client.schedule_heartbeat()
            return
        if error == FENCED_INSTANCE_ID:
            return self._fenced_instance("SyncGroup")
        if error in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
            self._reset_generation(f"SyncGroup: {error_for_code(error)}")
        elif error in _COORDINATOR_ERRORS:
            self.coordinator_dead(str(error_for_code(error)))
        self.state = PREPARING  # REBALANCE_IN_PROGRESS included: join again at once
        self.client.wakeup()

    def _reset_generation(self, why: str) -> None:
        self._event(f"reset generation and member id ({why})")
        self.generation, self.member_id = NO_GENERATION, ""

    def auto_commit_due(self, now: int) -> bool:
        """An auto commit poll() would fire now (only as a stable member: during a rebalance
        the commit happens before rejoining instead)."""
        return (self.config["enable_auto_commit"] and self.state == STABLE and not self.need_rejoin
                and self.next_auto_commit_ms is not None and self.next_auto_commit_ms <= now)

    def take_assignment(self) -> list[TopicPartition] | None:
        partitions, self.pending_assignment = self.pending_assignment, None
        return partitions

    def metadata_changed(self) -> None:
        """A subscribed topic appeared, vanished or grew partitions: the assignment is stale."""
        if self.state != STABLE or not self.subscriptions.partitions_auto_assigned:
            return
        now = {t: len(self.client.metadata.partitions_for_topic(t) or ()) for t in self.subscriptions.subscription}
        if now != self.joined_topics and not self.need_rejoin:
            self.request_rejoin(f"metadata changed: {self.joined_topics} -> {now}")

    def request_rejoin(self, why: str) -> None:
        self.need_rejoin = True
        self.rejoin_reason = why
        self._event(f"rejoin needed ({why})")

    # --- heartbeats ------------------------------------------------------------------------------------------

    def leave_if_poll_timer_expired(self) -> bool:
        """Kafka's poll timer, checked at each heartbeat tick (both group protocols): a user thread
        that has not called ``poll()`` for ``max_poll_interval_ms`` is stuck, so the member leaves
        the group and its partitions go to the others. True if it just left."""
        limit = self.config["max_poll_interval_ms"]
        if self.client.now - self.client.last_poll_ms <= limit:
            return False
        self._event(f"poll() not called for more than max_poll_interval_ms={limit}: leaving the group")
        self.leave_group()
        return True

    def heartbeat(self) -> None:
        """The heartbeat thread's tick (every ``heartbeat_interval_ms``)."""
        if self.state != STABLE or self.generation == NO_GENERATION:
            return
        if self.leave_if_poll_timer_expired():
            return
        if self.coordinator is None:
            self.ensure_coordinator()
            return
        if self._heartbeat_in_flight:
            return
        self._heartbeat_in_flight = True
        generation, member = self.generation, self.member_id
        self.client.send_request(
            self.coordinator, lambda corr: HeartbeatRequest(corr, self.group_id, generation, member,
                                                            self.config["group_instance_id"]),
            self._on_heartbeat, self._on_heartbeat_failed)

    def _on_heartbeat_failed(self, error: KafkaError) -> None:
        self._heartbeat_in_flight = False
        self.coordinator_dead(f"heartbeat failed: {error}")

    def _on_heartbeat(self, response: HeartbeatResponse) -> None:
        self._heartbeat_in_flight = False
        error = response.error
        if error == NO_ERROR or self.state != STABLE:
            return
        if error == REBALANCE_IN_PROGRESS:
            if not self.need_rejoin:
                self.request_rejoin("the group is rebalancing")
        elif error in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
            self._reset_generation(f"heartbeat: {error_for_code(error)}")
            self.request_rejoin("no longer a member")
        elif error in _COORDINATOR_ERRORS:
            self.coordinator_dead(str(error_for_code(error)))
        elif error == FENCED_INSTANCE_ID:
            self._fenced_instance("Heartbeat")

    def _fenced_instance(self, request: str) -> None:
        """A newer process joined with our group.instance.id and took our place: we are a zombie.
        Fatal, as in Kafka (``FencedInstanceIdException``): rejoining would fence the other."""
        self._event(f"fenced: another consumer joined with group_instance_id "
                    f"{self.config['group_instance_id']!r}")
        self._reset_generation(f"{request}: FENCED_INSTANCE_ID")
        self.state = UNJOINED
        self.client.fatal.append(error_for_code(
            FENCED_INSTANCE_ID, f"{request} for group {self.group_id!r}: group_instance_id "
                                f"{self.config['group_instance_id']!r} is used by a newer member"))

    def leave_group(self) -> None:
        """LeaveGroup (fire and forget), so the group rebalances now rather than after the
        session timeout; then we are a new consumer."""
        # A static member (group_instance_id) does not leave, as in Kafka: its partitions wait
        # for it (it is back with the same instance id) until its session timeout passes.
        if self.coordinator is not None and self.member_id and self.generation != NO_GENERATION \
                and self.config["group_instance_id"] is None:
            member = self.member_id
            self.client.send_request(self.coordinator, lambda corr: LeaveGroupRequest(corr, self.group_id, member),
                                     lambda response: None, lambda error: None)
            self._event("left the group")
        self._reset_generation("left the group")
        if self.state == STABLE:
            self.need_rejoin = True
            self.rejoin_reason = "left the group"

    # --- offsets ----------------------------------------------------------------------------------------------

    def commit_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                       callback: Callable[[Exception | None], None]) -> None:
        """Send one OffsetCommit; ``callback(None)`` on success, else the error."""
        if not offsets:
            callback(None)
            return
        if self.coordinator is None:
            self.ensure_coordinator()
            callback(error_for_code(COORDINATOR_NOT_AVAILABLE, "coordinator unknown"))
            return
        if self.subscriptions.partitions_auto_assigned:
            if self.generation == NO_GENERATION or self.state in (JOINING, SYNCING):
                callback(CommitFailedError() if self.generation == NO_GENERATION
                         else RebalanceInProgressError("the group is rebalancing"))
                return
            generation, member = self.generation, self.member_id
            instance = self.config["group_instance_id"]
        else:
            generation, member, instance = NO_GENERATION, "", None  # a simple commit: no membership
        parts = tuple(OffsetCommitPartition(tp.topic, tp.partition, om.offset, om.leader_epoch, om.metadata)
                      for tp, om in sorted(offsets.items()))

        def answered(response: OffsetCommitResponse) -> None:
            failure = None
            for _t, _p, error in response.partitions:
                if error == NO_ERROR:
                    continue
                if error in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION) and not member:
                    failure = CommitFailedError(
                        f"group {self.group_id!r} has active members: a consumer that assign()s its "
                        "partitions (no membership) may only commit while the group has no members")
                elif error in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                    self._reset_generation(f"OffsetCommit: {error_for_code(error)}")
                    self.request_rejoin("commit refused")
                    failure = CommitFailedError()
                elif error == REBALANCE_IN_PROGRESS:
                    self.request_rejoin("commit during a rebalance")
                    failure = RebalanceInProgressError()
                else:
                    if error in _COORDINATOR_ERRORS:
                        self.coordinator_dead(str(error_for_code(error)))
                    failure = failure or error_for_code(error)
            callback(failure)

        def failed(error: KafkaError) -> None:
            self.coordinator_dead(f"OffsetCommit failed: {error}")
            callback(error)

        self.client.send_request(
            self.coordinator, lambda corr: OffsetCommitRequest(corr, self.group_id, generation, member, parts,
                                                               instance),
            answered, failed)

    def fetch_committed(self, partitions: list[TopicPartition],
                        callback: Callable[[dict[TopicPartition, OffsetAndMetadata] | None], None]) -> None:
        """OffsetFetch; ``callback(None)`` if it must be retried."""
        if self.coordinator is None:
            self.ensure_coordinator()
            callback(None)
            return

        def answered(response: OffsetFetchResponse) -> None:
            if response.error != NO_ERROR:
                if response.error in _COORDINATOR_ERRORS:
                    self.coordinator_dead(str(error_for_code(response.error)))
                callback(None)
                return
            callback({TopicPartition(p.topic, p.partition): OffsetAndMetadata(p.offset, p.metadata or "", p.leader_epoch)
                      for p in response.partitions if p.error == NO_ERROR})

        def failed(error: KafkaError) -> None:
            self.coordinator_dead(f"OffsetFetch failed: {error}")
            callback(None)

        self.client.send_request(
            self.coordinator, lambda corr: OffsetFetchRequest(corr, self.group_id,
                                                              tuple((tp.topic, tp.partition) for tp in partitions)),
            answered, failed)
