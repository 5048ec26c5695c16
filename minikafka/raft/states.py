"""The Raft client's states, the events that move it, and the one table of transitions
(Kafka's ``QuorumState`` names the states); its timers, named once.

Theory of operation
-------------------
Everything that says which state a Raft client may move to lives here, as data: ``TRANSITIONS``
maps a state and an event to the next state, and ``next_state`` is the only way ``client.py``
finds where it goes (h11's ``_state.py`` keeps HTTP's states so). An event the table does not
list for the current state is a bug in the client, not a message to ignore: ``next_state``
raises ``IllegalStateError`` naming the state and the event.

A voter is in one of seven states, an observer (a broker) always in the eighth, and no event
moves it. A voter is built ``unattached``; ``start`` then moves it where the ``quorum-state``
file (``quorum_state.py``) says it was: the ``start: ...`` events. What each state sets up
(timers, fetches, an election round) is in ``client.py``'s ``_become_*`` methods; this file
only says which moves are allowed.

Two rows are wider than Kafka's own rule needs. ``vote granted`` is allowed from every voter
state: whether to grant is a rule a student writes (``rules.grant_vote``), and a wrong rule
that grants as a leader must be judged by the checker (two leaders in an epoch), not crash the
node. ``higher epoch ...`` is allowed from every voter state: a message from a newer epoch
moves anyone.

States and events are ``str`` enums whose value, ``str`` and ``repr`` are the plain names, so
the checker, the dashboards, the logs and the notebooks print them as before. The client sets
its timers on the host as ``("raft", name)`` or ``("raft", name, replica)``; the names are at
the end of this file. No clock, no I/O.
"""

from __future__ import annotations

import enum

from minikafka.errors import IllegalStateError


class RaftState(enum.StrEnum):
    UNATTACHED = "unattached"  # an epoch, no vote, no leader
    VOTED = "voted"  # voted in this epoch
    PROSPECTIVE = "prospective"  # asking for pre-votes (KIP-996): nothing persisted
    CANDIDATE = "candidate"  # epoch + 1, voted for itself
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"  # a leader stepping down: it never leads this epoch again
    OBSERVER = "observer"  # not a voter (a broker): copies the log, never votes

    def __repr__(self) -> str:
        return repr(self.value)


class RaftEvent(enum.StrEnum):
    START_LED = "start: led its epoch"  # the file names this node as the epoch's leader
    START_VOTED_FOR_ITSELF = "start: voted for itself"
    START_VOTED = "start: voted"
    START_LEADER_KNOWN = "start: leader known"
    START_NOTHING_KNOWN = "start: nothing known"
    ALONE = "quorum of one"  # at start: nobody else's word is needed
    ELECTION_TIMEOUT = "election timeout"  # as a follower: no good fetch answer in time
    BACKOFF_OVER = "backoff over"  # after a failed round: the next pre-vote round
    PRE_VOTES_WON = "pre-votes won"
    VOTES_WON = "votes won"
    LEADER_ALIVE = "majority follows the leader"  # a refused pre-vote round names a live leader
    LEADER_OF_EPOCH = "leader of our epoch"  # a message names a leader of our own epoch
    HIGHER_EPOCH_LEADER = "higher epoch, leader named"
    HIGHER_EPOCH = "higher epoch, no leader"
    VOTE_GRANTED = "vote granted"
    RESIGN = "resign"  # resign(), or check-quorum: no fetch from a majority

    def __repr__(self) -> str:
        return repr(self.value)


S, E = RaftState, RaftEvent
VOTER_STATES = (S.UNATTACHED, S.VOTED, S.PROSPECTIVE, S.CANDIDATE, S.LEADER, S.FOLLOWER, S.RESIGNED)


def _rows() -> dict[RaftState, dict[RaftEvent, RaftState]]:
    table: dict[RaftState, dict[RaftEvent, RaftState]] = {s: {} for s in RaftState}
    table[S.UNATTACHED].update({
        E.START_LED: S.RESIGNED, E.START_VOTED_FOR_ITSELF: S.CANDIDATE, E.START_VOTED: S.VOTED,
        E.START_LEADER_KNOWN: S.FOLLOWER, E.START_NOTHING_KNOWN: S.UNATTACHED,
    })
    for s in (S.UNATTACHED, S.VOTED, S.FOLLOWER, S.RESIGNED):
        table[s][E.ALONE] = S.PROSPECTIVE
        table[s][E.ELECTION_TIMEOUT] = S.PROSPECTIVE
    for s in (S.PROSPECTIVE, S.CANDIDATE):
        table[s][E.BACKOFF_OVER] = S.PROSPECTIVE
    table[S.PROSPECTIVE][E.PRE_VOTES_WON] = S.CANDIDATE
    table[S.CANDIDATE][E.VOTES_WON] = S.LEADER
    table[S.PROSPECTIVE][E.LEADER_ALIVE] = S.FOLLOWER
    for s in (S.UNATTACHED, S.VOTED, S.PROSPECTIVE, S.CANDIDATE):
        table[s][E.LEADER_OF_EPOCH] = S.FOLLOWER
    for s in VOTER_STATES:
        table[s][E.HIGHER_EPOCH_LEADER] = S.FOLLOWER
        table[s][E.HIGHER_EPOCH] = S.UNATTACHED
        table[s][E.VOTE_GRANTED] = S.VOTED
    table[S.LEADER][E.RESIGN] = S.RESIGNED
    return table


TRANSITIONS: dict[RaftState, dict[RaftEvent, RaftState]] = _rows()


def next_state(state: RaftState, event: RaftEvent) -> RaftState:
    """Where ``event`` takes a client in ``state``; ``IllegalStateError`` if the table has no
    such move (the message names both)."""
    try:
        return TRANSITIONS[state][event]
    except KeyError:
        raise IllegalStateError(f"raft: event {event.value!r} is not allowed in state {state.value!r}") from None


def transition_table() -> list[tuple[str, str, str]]:
    """``TRANSITIONS`` as rows (state, event, next state), in the enums' order: what
    notebook 08 prints."""
    return [(s.value, e.value, TRANSITIONS[s][e].value) for s in RaftState for e in RaftEvent if e in TRANSITIONS[s]]


UNATTACHED, VOTED, PROSPECTIVE, CANDIDATE = S.UNATTACHED, S.VOTED, S.PROSPECTIVE, S.CANDIDATE
LEADER, FOLLOWER, RESIGNED, OBSERVER = S.LEADER, S.FOLLOWER, S.RESIGNED, S.OBSERVER
STATES = tuple(RaftState)

# Timer names, each set as ("raft", name) or ("raft", name, replica).
_ELECTION = "election"  # election timeout; as follower, the fetch timeout
_BACKOFF = "backoff"  # between a failed election round and the next
_FETCH = "fetch"  # send the next fetch (after a retry backoff)
_FETCH_REQUEST = "fetch-request"  # the in-flight fetch's request timeout
_PARKED = "parked"  # a follower's parked fetch has waited max_wait_ms
_CHECK_QUORUM = "check-quorum"
_BEGIN_QUORUM = "begin-quorum"  # resend BeginQuorumEpoch to voters that never fetched
_DELIVER = "deliver"  # hand commits and leader changes to the listener


__all__ = [
    "CANDIDATE", "FOLLOWER", "LEADER", "OBSERVER", "PROSPECTIVE", "RESIGNED", "STATES", "TRANSITIONS", "UNATTACHED",
    "VOTED", "VOTER_STATES", "RaftEvent", "RaftState", "next_state", "transition_table",
]
