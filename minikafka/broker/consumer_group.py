"""KIP-848's consumer group on the broker side: the members, the target assignment and the one
rule that moves a member toward it (Kafka's ``modern/consumer/ConsumerGroup``,
``ConsumerGroupMember`` and ``CurrentAssignmentBuilder``).

Theory of operation
-------------------
In the classic protocol the *client* leader computes the assignment and every member stops in a
join and a sync phase. In the new protocol (``ConsumerGroupHeartbeat``, api key 68) the broker
does it, in three epochs:

- the **group epoch** goes up whenever what the assignment depends on changes: a member
  joins, leaves or is fenced, a subscription changes, a subscribed topic gains partitions;
- the **target assignment** is computed by a *server-side assignor* (``uniform``: balanced and
  sticky; ``range``) whenever the group epoch is ahead of it, and takes the group epoch;
- each member has a **member epoch**: it reaches the target's epoch one heartbeat at a time,
  through ``reconcile``. A partition moves in two steps: first its old owner is told to give it
  up (it stays in ``UnrevokedPartitions`` until a heartbeat says it no longer owns it), and only
  then is the new owner given it (until then the new owner waits in ``UnreleasedPartitions``).
  Nobody else stops: members that keep their partitions keep fetching.

Everything here is a plain function or dataclass: no clock, no I/O, no timers. The group
coordinator (``broker/group_coordinator.py``) owns the groups, answers heartbeats, and fences a
member whose session timeout passes or who does not revoke within its rebalance timeout.

The coordinator writes the group to ``__consumer_offsets`` as Kafka does (ConsumerGroup* records,
key versions 3-8: ``broker/group_metadata.py``) and answers a heartbeat once its change is
written; a new coordinator replays them and knows every member at its epoch, with its
partitions, so the members carry on without a new group epoch.

Simplifications (vs Kafka): no regex subscriptions, no racks, no client-side assignors; a failed
write is answered with its error but the change stays in memory (Kafka reverts it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from minikafka.assignors import RangeAssignor, StickyAssignor, Subscription
from minikafka.group_state import ConsumerGroupState, MemberState, consumer_group_state
from minikafka.topic import TopicPartition

Partitions = frozenset[tuple[str, int]]
NONE: Partitions = frozenset()

LEAVE_EPOCH = -1  # MemberEpoch in a heartbeat: the member leaves for good
STATIC_LEAVE_EPOCH = -2  # a static member leaves and means to come back (same group.instance.id)

# Kafka's server assignors (group.consumer.assignors): the first is the default.
SERVER_ASSIGNORS = {"uniform": StickyAssignor(), "range": RangeAssignor()}
DEFAULT_ASSIGNOR = "uniform"


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topics: tuple[str, ...]
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = NONE  # the member may fetch these
    revoking: Partitions = NONE  # told to give these up; not yet confirmed
    sent: Partitions | None = None  # the assignment in our last answer (None: none sent yet)


@dataclass
class ConsumerGroup:
    group_epoch: int = 0
    assignment_epoch: int = 0
    target: dict[str, Partitions] = field(default_factory=dict)  # member id -> target partitions
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)  # of subscribed topics, at the last assignment

    def state(self) -> ConsumerGroupState:
        return consumer_group_state({m.member_id: (m.member_epoch, m.state) for m in self.members.values()
                                     if m.member_epoch >= 0}, self.group_epoch, self.assignment_epoch)

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topics}

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def owned_elsewhere(self, member_id: str) -> Partitions:
        """Partitions another member still owns or has not yet confirmed giving up."""
        return frozenset().union(*(m.assigned | m.revoking for m in self.members.values() if m.member_id != member_id))

    def assignor(self) -> str:
        """The assignor most members ask for (Kafka's vote), else the default."""
        names = [m.server_assignor for m in self.members.values() if m.server_assignor]
        return max(sorted(set(names)), key=names.count) if names else DEFAULT_ASSIGNOR


def compute_target(group: ConsumerGroup, partition_counts: dict[str, int]) -> dict[str, Partitions]:
    """The target assignment: the group's server assignor over every member's subscription. The
    ``uniform`` assignor is sticky: it starts from the current target, so a member that stays
    keeps what it had and only the partitions of members that left (or the surplus) move."""
    assignor = SERVER_ASSIGNORS[group.assignor()]
    subs = {mid: Subscription(m.subscribed_topics,
                              owned_partitions=tuple(TopicPartition(t, p) for t, p in sorted(group.target.get(mid, NONE))))
            for mid, m in group.members.items()}
    result = assignor.assign(partition_counts, subs)
    return {mid: frozenset((tp.topic, tp.partition) for tp in tps) for mid, tps in result.items()}


def reconcile(member: ConsumerMember, target: Partitions, target_epoch: int, owned_elsewhere: Partitions,
              reported: Partitions | None) -> ConsumerMember:
    """Kafka's ``CurrentAssignmentBuilder``: the member's next step toward ``target``.

    ``reported`` is what the member's heartbeat says it owns (None: not said). A member still
    owning a partition it was told to revoke stays put. Otherwise it loses what is not in its
    target (``UnrevokedPartitions``: at its old epoch, until it confirms) or, with nothing to
    give up, takes the target's epoch and every target partition nobody else holds
    (``UnreleasedPartitions`` while some are still held elsewhere, else ``Stable``)."""
    if member.state == MemberState.UNREVOKED_PARTITIONS and (reported is None or reported & member.revoking):
        return member  # still waiting for the member to say it gave them up
    if member.state == MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    keep = member.assigned & target
    revoke = member.assigned - target
    if revoke:
        return dataclasses.replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=keep, revoking=revoke)
    free = (target - keep) - owned_elsewhere
    unreleased = (target - keep) & owned_elsewhere
    return dataclasses.replace(
        member, state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        previous_member_epoch=(member.member_epoch if member.member_epoch != target_epoch
                               else member.previous_member_epoch), member_epoch=target_epoch, assigned=keep | free, revoking=NONE)


__all__ = [
    "DEFAULT_ASSIGNOR", "LEAVE_EPOCH", "SERVER_ASSIGNORS", "STATIC_LEAVE_EPOCH", "ConsumerGroup", "ConsumerMember",
    "compute_target", "reconcile",
]
