"""A consumer group's states, the events that move it, and the one table of transitions
(Kafka's ``ClassicGroupState``; the names are the ones DescribeGroups and ListGroups answer).

Theory of operation
-------------------
The group coordinator (``broker/group_coordinator.py``) moves a group only through
``TRANSITIONS``: ``next_state(state, event)`` is the table lookup, and a move the table does
not list raises ``IllegalStateError`` naming the group's state and the event (h11's
``_state.py`` keeps HTTP's states so). The admin client (``clients/admin.py``) and the
``kafka-consumer-groups`` tool (``tools/consumer_groups.py``) read the same enum: the names
are written once.

    Empty --rebalance--> PreparingRebalance --join phase over--> CompletingRebalance --assignment stored--> Stable
      ^                     ^      |                                   |                                  |
      |                     |      +--join phase over, no member-------+-> Empty                          |
      |                     +------ rebalance: a member joins, rejoins or leaves, or the store failed -----+
      +-- offsets expired --> Dead (and the group is forgotten)

A group a broker loads from ``__consumer_offsets`` starts ``Dead`` (a group whose last word
was a tombstone stays dead) and takes the state its last metadata record says (``loaded``),
or ``Empty`` if it has only offsets. Events are what happened, not where to go: the table
says where.

``GroupState`` is a ``str`` enum whose value, ``str`` and ``repr`` are Kafka's names, so
messages, tables and notebooks print them as before. No clock, no I/O: the coordinator stamps
the time of a move.
"""

from __future__ import annotations

import enum

from minikafka.errors import IllegalStateError


class GroupState(enum.StrEnum):
    EMPTY = "Empty"  # no members (it may still have committed offsets)
    PREPARING_REBALANCE = "PreparingRebalance"  # the join phase: waiting for every member to rejoin
    COMPLETING_REBALANCE = "CompletingRebalance"  # the sync phase: waiting for the leader's assignment
    STABLE = "Stable"  # every member has its partitions
    DEAD = "Dead"  # no members, no offsets: unknown, or being forgotten

    def __repr__(self) -> str:
        return repr(self.value)


class GroupEvent(enum.StrEnum):
    CREATED = "created"  # a first JoinGroup or a simple commit names a new group
    LOADED_WITH_MEMBERS = "loaded with members"  # replay: a metadata record with members
    LOADED_EMPTY = "loaded without members"  # replay: a metadata record without members
    OFFSETS_LOADED = "offsets loaded"  # replay ended with offsets but no metadata record
    TXN_OFFSETS_COMMITTED = "transactional offsets committed"  # a commit marker gives a dead group offsets
    REBALANCE = "rebalance"  # a member joins, rejoins or leaves; the assignment could not be stored
    JOIN_PHASE_OVER = "join phase over"  # every member rejoined, or the rebalance timeout passed
    NO_MEMBER_LEFT = "join phase over, no member"
    ASSIGNMENT_STORED = "assignment stored"  # the leader's SyncGroup is on __consumer_offsets
    OFFSETS_EXPIRED = "offsets expired"  # empty for offsets.retention.minutes, nothing left

    def __repr__(self) -> str:
        return repr(self.value)


S, E = GroupState, GroupEvent
TRANSITIONS: dict[GroupState, dict[GroupEvent, GroupState]] = {
    S.EMPTY: {
        E.CREATED: S.EMPTY,
        E.LOADED_WITH_MEMBERS: S.STABLE, E.LOADED_EMPTY: S.EMPTY,
        E.REBALANCE: S.PREPARING_REBALANCE,
        E.OFFSETS_EXPIRED: S.DEAD,
    },
    S.PREPARING_REBALANCE: {
        E.JOIN_PHASE_OVER: S.COMPLETING_REBALANCE,
        E.NO_MEMBER_LEFT: S.EMPTY,
    },
    S.COMPLETING_REBALANCE: {
        E.ASSIGNMENT_STORED: S.STABLE,
        E.REBALANCE: S.PREPARING_REBALANCE,
    },
    S.STABLE: {
        E.LOADED_WITH_MEMBERS: S.STABLE, E.LOADED_EMPTY: S.EMPTY,
        E.REBALANCE: S.PREPARING_REBALANCE,
    },
    S.DEAD: {
        E.LOADED_WITH_MEMBERS: S.STABLE, E.LOADED_EMPTY: S.EMPTY,
        E.OFFSETS_LOADED: S.EMPTY, E.TXN_OFFSETS_COMMITTED: S.EMPTY,
    },
}


def next_state(state: GroupState, event: GroupEvent, group: str = "") -> GroupState:
    """Where ``event`` takes a group in ``state``; ``IllegalStateError`` if the table has no
    such move (the message names the group, its state and the event)."""
    try:
        return TRANSITIONS[state][event]
    except KeyError:
        who = f"group {group!r}" if group else "a group"
        raise IllegalStateError(f"{who}: event {GroupEvent(event).value!r} is not allowed in state "
                                f"{GroupState(state).value!r}") from None


def transition_table() -> list[tuple[str, str, str]]:
    """``TRANSITIONS`` as rows (state, event, next state), in the enums' order: what
    notebook 06 prints."""
    return [(s.value, e.value, TRANSITIONS[s][e].value) for s in GroupState for e in GroupEvent if e in TRANSITIONS[s]]


# --- KIP-848's consumer groups (Kafka's ``ConsumerGroup.ConsumerGroupState`` and ``MemberState``) ---
#
# A group of the new protocol has no join or sync phase, so no event table: its state is a
# *view* of its epochs and its members, computed by one rule after every heartbeat, as Kafka's
# ``ConsumerGroup.maybeUpdateGroupState`` does. A member's own state is what its reconciliation
# waits for (``minikafka.broker.consumer_group.reconcile`` moves it).


class ConsumerGroupState(enum.StrEnum):
    EMPTY = "Empty"  # no members (it may still have committed offsets)
    ASSIGNING = "Assigning"  # the group epoch moved past the target assignment's: compute a new one
    RECONCILING = "Reconciling"  # some member is not yet at the target assignment's epoch
    STABLE = "Stable"  # every member owns exactly its target partitions
    DEAD = "Dead"

    def __repr__(self) -> str:
        return repr(self.value)


class MemberState(enum.StrEnum):
    STABLE = "Stable"  # owns its target partitions, at the target epoch
    UNREVOKED_PARTITIONS = "UnrevokedPartitions"  # must first give some partitions up (and say so)
    UNRELEASED_PARTITIONS = "UnreleasedPartitions"  # waits for partitions others still own

    def __repr__(self) -> str:
        return repr(self.value)


def consumer_group_state(member_states: dict[str, tuple[int, "MemberState"]], group_epoch: int,
                         assignment_epoch: int) -> ConsumerGroupState:
    """Kafka's rule (``ConsumerGroup.maybeUpdateGroupState``): ``member_states`` maps each member
    to (its member epoch, its ``MemberState``)."""
    if not member_states:
        return ConsumerGroupState.EMPTY
    if group_epoch > assignment_epoch:
        return ConsumerGroupState.ASSIGNING
    if any(epoch != assignment_epoch or state != MemberState.STABLE for epoch, state in member_states.values()):
        return ConsumerGroupState.RECONCILING
    return ConsumerGroupState.STABLE


EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD = (
    S.EMPTY, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE, S.DEAD)
GROUP_STATES = tuple(GroupState)

__all__ = [
    "COMPLETING_REBALANCE", "DEAD", "EMPTY", "GROUP_STATES", "PREPARING_REBALANCE", "STABLE", "TRANSITIONS",
    "ConsumerGroupState", "GroupEvent", "GroupState", "MemberState", "consumer_group_state", "next_state",
    "transition_table",
]
