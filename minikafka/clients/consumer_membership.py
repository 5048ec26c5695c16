"""The consumer's side of KIP-848's group protocol (``group_protocol="consumer"``): Kafka's
``ConsumerMembershipManager`` and ``ConsumerHeartbeatRequestManager`` in one small class.

Theory of operation
-------------------
There is no join, no sync and no leader: the member sends ConsumerGroupHeartbeat every
``heartbeat_interval_ms`` (epoch 0 to join, with its subscription; afterwards its member epoch
and the partitions it owns now), and the *broker* answers with the member's epoch and, when it
changed, the partitions the member should own. The user thread (``KafkaConsumer.poll``) applies
a new assignment: partitions that left it are revoked (committed first with auto commit, then
``on_partitions_revoked`` for just those), new ones are taken (``on_partitions_assigned`` for
just those, called even when there are none, as Kafka's ``ConsumerMembershipManager`` does); the
next heartbeat, sent at once, reports what the member owns, which is how the broker learns a
revocation is done and can give those partitions to their new owner. Partitions that stay are never given up: the
member keeps fetching them through any change in the group.

FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID mean the broker threw the member out (its session
timeout passed): it loses every partition and joins again with epoch 0. Leaving sends epoch -1
(-2 for a static member, ``group_instance_id``, which means "I will be back"). A member that left
(``close()``, or a user thread stuck past ``max_poll_interval_ms``) joins again only after its user
thread polls again, as in Kafka; never by itself in the background, which would put a closing
static member back in its own place.

It reuses ``ConsumerCoordinator``'s finding of the coordinator and its commits (OffsetCommit
carries the member epoch where the classic protocol carries the generation). Nothing here
blocks or reads a clock.
"""

from __future__ import annotations

from typing import Any

from minikafka.clients.consumer_coordinator import (
    _COORDINATOR_ERRORS,
    NO_GENERATION,
    STABLE,
    UNJOINED,
    ConsumerCoordinator,
)
from minikafka.clients.sender import error_for_code
from minikafka.errors import KafkaError
from minikafka.messages import (
    FENCED_MEMBER_EPOCH,
    NO_ERROR,
    UNKNOWN_MEMBER_ID,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from minikafka.topic import TopicPartition

JOINING = "JOINING"  # epoch 0 sent, no answer yet
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2


class ConsumerMembershipManager(ConsumerCoordinator):
    protocol = "consumer"

    def __init__(self, client: Any, config: dict, assignors: list, rules: Any = None) -> None:
        super().__init__(client, config, assignors, rules)
        self.member_epoch = 0
        self._subscription_sent: tuple[str, ...] | None = None
        self._heartbeat_now = False  # an assignment was applied: report it at once
        self._left_at: int | None = None  # when we left the group: no join before the next poll()

    # --- what KafkaConsumer.poll asks --------------------------------------------------------------------

    def needs_join_prepare(self) -> bool:
        return False  # never an eager "give everything up": partitions move one by one

    def request_rejoin(self, why: str) -> None:
        """A new subscription: the next heartbeat carries it (no rejoin in this protocol)."""
        self._event(f"subscription changed ({why})")
        self._subscription_sent = None
        self._heartbeat_now = True
        self.client.wakeup()

    def metadata_changed(self) -> None:
        pass  # the broker sees new partitions itself and moves the group epoch

    def maybe_finish_leader_sync(self) -> None:
        pass

    def take_assignment(self) -> list[TopicPartition] | None:
        partitions = super().take_assignment()
        if partitions is not None:
            self._heartbeat_now = True  # tell the broker what we own now
            self.client.wakeup()
        return partitions

    # --- the heartbeat ----------------------------------------------------------------------------------------

    def maybe_send_join(self) -> int | None:
        """Each background round: join once subscribed; report a reconciliation at once."""
        polled_since_leaving = self._left_at is None or self.client.last_poll_ms > self._left_at
        if (self.state == UNJOINED and polled_since_leaving and self.subscriptions.partitions_auto_assigned
                and self.subscriptions.subscription):
            if self.coordinator is None:
                return self.ensure_coordinator()
            self.state = JOINING
            self.member_epoch = 0
            self._subscription_sent = None
            self._send_heartbeat()
            return None
        if self._heartbeat_now and self.state == STABLE and self.coordinator is not None:
            self._send_heartbeat()
        return None

    def heartbeat(self) -> None:
        """The heartbeat thread's tick (every ``heartbeat_interval_ms``)."""
        if self.state not in (JOINING, STABLE):
            return
        if self.leave_if_poll_timer_expired():
            return
        if self.coordinator is None:
            self.ensure_coordinator()
            return
        self._send_heartbeat()

    def _send_heartbeat(self) -> None:
        if self._heartbeat_in_flight:
            return
        self._heartbeat_in_flight = True
        self._heartbeat_now = False
        c = self.config
        topics = tuple(sorted(self.subscriptions.subscription))
        joining = self.member_epoch == 0
        send_topics = topics if joining or topics != self._subscription_sent else None
        owned = tuple(sorted((tp.topic, tp.partition) for tp in self.subscriptions.assignment))
        request = dict(group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
                       instance_id=c["group_instance_id"], rebalance_timeout_ms=c["max_poll_interval_ms"],
                       subscribed_topic_names=send_topics, server_assignor=c["group_remote_assignor"],
                       topic_partitions=() if joining else owned, client_id=c["client_id"] or "")
        self._subscription_sent = topics
        self.client.send_request(self.coordinator, lambda corr: ConsumerGroupHeartbeatRequest(corr, **request),
                                 self._on_heartbeat, self._on_heartbeat_failed)

    def _on_heartbeat_failed(self, error: KafkaError) -> None:
        self._heartbeat_in_flight = False
        self.coordinator_dead(f"heartbeat failed: {error}")
        if self.state == JOINING:
            self.state = UNJOINED

    def _on_heartbeat(self, response: ConsumerGroupHeartbeatResponse) -> None:
        self._heartbeat_in_flight = False
        if self.state not in (JOINING, STABLE):
            return
        error = response.error
        if error == NO_ERROR:
            if self.state == JOINING:
                self._event(f"joined as member {response.member_id} at epoch {response.member_epoch}")
            elif response.member_epoch != self.member_epoch:
                self._event(f"member epoch {self.member_epoch} -> {response.member_epoch}")
            self.member_id = response.member_id or self.member_id
            self.member_epoch = self.generation = response.member_epoch
            self.state = STABLE
            if response.assignment is not None:
                new = sorted(TopicPartition(t, p) for t, p in response.assignment)
                if set(new) != set(self.subscriptions.assignment):
                    self.pending_assignment = new
                    self.previous_assignment = new
                    self._event(f"the broker assigned (epoch {response.member_epoch}): "
                                f"{', '.join(map(str, new)) or 'nothing'}")
            self.client.schedule_heartbeat()
            return
        if error in (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
            self._event(f"fenced ({error_for_code(error)}): every partition is lost; joining again")
            self.pending_assignment = []
            self._reset_generation("fenced")
            self.member_epoch = 0
            self.state = UNJOINED
            self.client.wakeup()
        elif error in _COORDINATOR_ERRORS:
            self.coordinator_dead(str(error_for_code(error)))
            if self.state == JOINING:
                self.state = UNJOINED
        else:  # INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, GROUP_ID_NOT_FOUND (a classic group), ...
            self.state = UNJOINED
            self.client.fatal.append(error_for_code(
                error, f"ConsumerGroupHeartbeat for group {self.group_id!r}: {response.error_message}"))

    def leave_group(self) -> None:
        """Epoch -1 (fire and forget), so the broker moves our partitions now; a static member
        sends -2 and keeps them until it is back or its session timeout passes."""
        if self.coordinator is not None and self.member_id and self.state == STABLE:
            static = self.config["group_instance_id"] is not None
            request = dict(group_id=self.group_id, member_id=self.member_id,
                           member_epoch=STATIC_LEAVE_EPOCH if static else LEAVE_EPOCH,
                           instance_id=self.config["group_instance_id"], client_id=self.config["client_id"] or "")
            self.client.send_request(self.coordinator, lambda corr: ConsumerGroupHeartbeatRequest(corr, **request),
                                     lambda response: None, lambda error: None)
            self._event("left the group")
        self.generation, self.member_id, self.member_epoch = NO_GENERATION, "", 0
        self.state = UNJOINED
        self._left_at = self.client.now
