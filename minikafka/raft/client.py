"""Raft as KRaft does it (KIP-595, with KIP-996's pre-vote): Kafka's ``KafkaRaftClient``.

Theory of operation
-------------------
The rules a student writes in notebook 08 (``minikafka.rules``, asked through ``self.rules``,
Kafka's own by default) are called here, each from one place: ``grant_vote`` in
``_handle_vote_request`` (does this voter grant its vote?) and ``metadata_truncation_offset``
in ``_truncate_to_diverging`` (where a log that diverged from the leader's is cut). Who *can*
be elected is what the voters' ``grant_vote`` answers add up to (``_maybe_won``).

This file is Raft's core: the states and their transitions, the election rounds, the vote,
the fetch on both sides, the truncation and the commit rule. The rest is beside it, each a
part of this class in a module of its own: ``leader_state.py`` (what a leader knows of the
replicas; check-quorum), ``quorum_epoch.py`` (BeginQuorumEpoch/EndQuorumEpoch),
``listener.py`` (the delivery of commits and leader changes), ``requests.py`` (correlation
ids, retries, replies, parked fetches), ``states.py`` (the states, the events and the one
table of transitions between them), ``config.py`` (the settings) and ``quorum_state.py``
(the persisted election state).

A fixed set of *voters* keeps one replicated log, ``__cluster_metadata-0``, stored by the
storage layer like any partition (v2 batches; each batch's ``partitionLeaderEpoch`` is the
Raft epoch, so the leader-epoch cache is Raft's term index). Anyone else (a broker) is an
*observer*: it copies the log, never votes, never counts for the high watermark.

States (Kafka's ``QuorumState``; ``state`` names them): **unattached** (an epoch, no vote, no
leader), **voted** (voted in this epoch), **prospective** (KIP-996: asking for pre-votes; the
epoch is unchanged and nothing is persisted, so a voter that was cut off and comes back
cannot bump the epoch and depose a healthy leader), **candidate** (epoch + 1, voted for
itself), **leader**, **follower**, **resigned** (a leader stepping down: it never leads the
epoch again), **observer**. Transitions (``states.TRANSITIONS`` is their table, and the only
place a move is allowed: each ``_become_*`` asks it first, naming the event):

- election timeout (randomised in [t, 2t), seeded) as unattached/voted/resigned, or no good
  fetch answer for ``fetch.timeout.ms`` (plus a seeded jitter of up to t/2, so followers
  that lost the same leader at the same instant do not split the vote) as follower ->
  prospective; a majority of pre-votes -> candidate; a majority of votes -> leader. A round
  that fails (timeout, or a majority says no) backs off randomly up to
  ``election.backoff.max.ms`` and starts a new pre-vote; a prospective that a majority
  refuses while it still knows its epoch's leader follows that leader again (it was the one
  cut off). A quorum of one skips all this and leads at once.
- any message showing a higher epoch -> follower of its leader, or unattached in it if it
  names none; a leader named in our own epoch -> follower (one leader per epoch).
- a leader resigns (``resign()``, or check-quorum: no fetch from a majority within
  1.5 x ``fetch.timeout.ms``) and tells the voters with EndQuorumEpoch, longest log first;
  the first successor campaigns at once, the others after an exponential backoff.

Vote rule (Raft's; the rule ``grant_vote`` of ``minikafka.rules``, asked through ``self.rules``):
granted iff the candidate's epoch is >= ours (a higher one first moves us
to unattached in it), we know no leader and voted for nobody else in that epoch, and its
log is at least as up to date as ours ((last epoch, log end) compared). A pre-vote is judged
the same way without changing anything, and refused also by a leader and while we follow a
leader we have heard from within ``fetch.timeout.ms``. The quorum state is persisted
(``quorum_state.py``) before any vote is answered or sent and before a new epoch is acted on.

Replication is pulled: followers and observers fetch (fetch offset = their log end, which
they flushed first; last fetched epoch) and the leader answers with records, or parks the
fetch up to ``max_wait_ms`` when it has nothing new for the fetcher (no records, and the
fetcher already has its HW), answering at once when it appends or the HW moves; or, if
the fetcher's history disagrees with its leader-epoch cache, with ``diverging_epoch``: the
fetcher truncates there and fetches again (the same KIP-320 rule the partitions use). A
non-leader answers NOT_LEADER_OR_FOLLOWER and names the leader it knows: that is how an
observer finds the leader, asking voters in turn.

Restart: the quorum state decides (``quorum_state.py``): a node that led its epoch comes
back resigned (it never leads that epoch again), a vote stands, a known leader is followed.

Commit: the leader's high watermark is the largest offset a majority of voters (its own
flushed log end included) have, and it moves only once that offset is past the start of the
leader's epoch (its LeaderChange record): Raft's rule that a leader commits entries of
earlier epochs only by committing one of its own. Followers take min(leader's HW, own log
end), and never move it backwards. The listener then hears of every committed record
once, in order, and of every change of leader (``listener.py`` says how and when).

Invariants (the checker in ``minikafka.checker.raft`` tests them): at most one leader per
epoch; a committed record is never truncated (asserted: a follower never truncates below
what it has delivered) and is the same at its offset everywhere; the stored epoch never
decreases and a voter never votes twice in an epoch.

Sans-I/O: the client sends with ``host.send``, sets timers ``("raft", name)`` with
``host.set_timer``, reads time only from ``host.now``; its only I/O is its ``Log`` and its
``quorum-state`` file. The listener is never called from inside ``append``, ``resign`` or
``start`` (a zero-delay timer delivers instead).
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any, Hashable, Mapping, Sequence

from minikafka.errors import BrokerResponseError, IllegalArgumentError, KafkaStorageError, NotLeaderForPartitionError
from minikafka.messages import (
    FENCED_LEADER_EPOCH,
    NO_ERROR,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_LEADER_EPOCH,
    Disconnected,
)
from minikafka.raft.config import DEFAULT_CONFIG, parse_quorum_voters
from minikafka.raft.leader_state import LeaderState, ReplicaState
from minikafka.raft.listener import CommittedRecord, ListenerContext, RaftListener
from minikafka.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    RaftFetchRequest,
    RaftFetchResponse,
    VoteRequest,
    VoteResponse,
)
from minikafka.raft.quorum_epoch import QuorumEpochMessages
from minikafka.raft.quorum_state import ElectionState, QuorumStateStore
from minikafka.raft.requests import RequestPlumbing
from minikafka.raft.states import _BACKOFF, _BEGIN_QUORUM, _CHECK_QUORUM, _DELIVER, _ELECTION, _FETCH, _FETCH_REQUEST
from minikafka.raft.states import _PARKED, CANDIDATE, FOLLOWER, LEADER, OBSERVER, PROSPECTIVE, RESIGNED, UNATTACHED, VOTED
from minikafka.raft.states import STATES  # (importable from here too, as before)
from minikafka.raft.states import RaftEvent, RaftState, next_state
from minikafka.records import MemoryRecords, RecordBatch
from minikafka.rules import REFERENCE, Request, Rules, Voter
from minikafka.storage.disk import OS_DISK
from minikafka.storage.log import Log

logger = logging.getLogger("minikafka.raft")

LEADER_CHANGE_KEY = b"LeaderChange"


class NotLeaderError(NotLeaderForPartitionError):
    """``append`` on a client that is not the leader (the caller should find the leader).
    A subclass of Kafka's errno-6 error, never a second one: ``errors.for_code(6)`` must
    keep naming ``NotLeaderForPartitionError`` for every client."""

    def __init__(self, detail: str = "", *, leader_id: int | None = None, epoch: int = -1) -> None:
        super().__init__(detail)
        self.leader_id = leader_id
        self.epoch = epoch


class KafkaRaftClient(LeaderState, QuorumEpochMessages, ListenerContext, RequestPlumbing):
    METADATA_DIR = "__cluster_metadata-0"

    def __init__(
        self,
        host: Any,
        node_id: int,
        voters: Sequence[int],
        log_dir: Path | str,
        *,
        config: Mapping[str, Any] | None = None,
        seed: int | str = 0,
        listener: RaftListener | None = None,
        rules: Rules = REFERENCE,
    ) -> None:
        voters = tuple(sorted(set(int(v) for v in voters)))
        if not voters:
            raise IllegalArgumentError("a Raft quorum needs at least one voter")
        unknown = set(config or {}) - set(DEFAULT_CONFIG)
        self.config = dict(DEFAULT_CONFIG)
        for key, value in (config or {}).items():
            if key in DEFAULT_CONFIG:
                self.config[key] = int(value)
        if unknown:
            logger.debug("raft client %s ignores config keys %s", node_id, sorted(unknown))
        self.host = host
        self.node_id = node_id
        self.voters = voters
        self.is_voter = node_id in voters
        self.listener = listener
        self.rules = rules  # the vote rule and the cut (minikafka.rules): Kafka's by default
        self.dir = Path(log_dir) / self.METADATA_DIR
        self.rng = random.Random(f"raft/{seed}/{node_id}")  # never the clock: runs replay
        self.majority = len(voters) // 2 + 1
        self.election_timeout_ms = self.config["controller.quorum.election.timeout.ms"]
        self.fetch_timeout_ms = self.config["controller.quorum.fetch.timeout.ms"]
        self.backoff_max_ms = self.config["controller.quorum.election.backoff.max.ms"]
        self.request_timeout_ms = self.config["controller.quorum.request.timeout.ms"]
        self.retry_backoff_ms = self.config["controller.quorum.retry.backoff.ms"]
        self.fetch_max_wait_ms = self.config["controller.quorum.fetch.max.wait.ms"]
        self.fetch_max_bytes = self.config["controller.quorum.fetch.max.bytes"]

        self.log: Log | None = None
        # The host's log-directory disk, where it has one (a broker's, which the simulated
        # world may fill up or fail); a controller writes straight to the OS.
        self.disk = getattr(host, "disk", OS_DISK)
        self.store = QuorumStateStore(self.dir, voters, disk=self.disk)
        self.election = ElectionState()
        self.state = OBSERVER if not self.is_voter else UNATTACHED
        self.high_watermark = 0
        self._correlation = 0
        self._closed = False
        # The listener's position: every record below it was delivered, once.
        self._next_delivery = 0
        self._notified: tuple[int | None, int] | None = None
        self._in_api = 0  # > 0 inside a public call: the listener waits for a timer
        # Elections: the current round's requests (correlation id -> voter) and its tallies.
        self._round: dict[int, int] = {}
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        self._backing_off = False
        # Following: the one fetch in flight (correlation id, destination).
        self._fetch_in_flight: tuple[int, int] | None = None
        self._last_leader_contact = -1  # when the leader last answered us well (pre-vote rule)
        self._leader_resigned = False  # our leader sent EndQuorumEpoch: elect, don't fetch
        self._observer_leader: int | None = None
        self._observer_lost_leader = False  # its last fetch failed: ask the voters
        self._voter_cursor = 0
        # Leading.
        self._epoch_start_offset = -1
        self._leader_since = 0
        self._replicas: dict[int, ReplicaState] = {}
        self._observers: dict[int, ReplicaState] = {}
        self._parked: dict[int, tuple[Any, RaftFetchRequest]] = {}

    # --- queries ---------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.election.epoch

    @property
    def leader_id(self) -> int | None:
        """The leader now serving this epoch, as far as this node knows (None: none known)."""
        if self.state == LEADER:
            return self.node_id
        if self.state == FOLLOWER:
            return None if self._leader_resigned else self.election.leader_id
        if self.state == OBSERVER:
            return self._observer_leader
        return None

    @property
    def is_leader(self) -> bool:
        return self.state == LEADER

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset if self.log is not None else 0

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset if self.log is not None else 0

    @property
    def last_fetched_epoch(self) -> int:
        return self.log.leader_epoch_cache.latest_epoch if self.log is not None else -1

    @property
    def epoch_start_offset(self) -> int:
        """On the leader: the offset of its epoch's LeaderChange record; else -1."""
        return self._epoch_start_offset if self.state == LEADER else -1

    @property
    def delivered_offset(self) -> int:
        """The listener has every committed record below this offset."""
        return self._next_delivery

    def __repr__(self) -> str:
        return (
            f"KafkaRaftClient(node={self.node_id}, state={self.state}, epoch={self.epoch}, "
            f"leader={self.leader_id}, leo={self.log_end_offset}, hw={self.high_watermark})"
        )

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the log and the quorum state, and take up the state they say."""
        self._in_api += 1
        try:
            self.log = Log(self.dir, clock=lambda: self.host.now, disk=self.disk)
            self.high_watermark = self._next_delivery = self.log.log_start_offset
            self.election = self.store.read()
            me = self.node_id
            if not self.is_voter:
                self.state = OBSERVER
                self._observer_leader = self.election.leader_id
                self._voter_cursor = self.rng.randrange(len(self.voters))
                self._send_fetch()
            elif self.election.leader_id == me:
                # It led this epoch before it went down: it must not lead it again.
                self.state = self._next(RaftEvent.START_LED)
                self._send_end_quorum_epoch(self._preferred_successors())
                self._set_election_timer()
            elif self.election.voted_id == me and self.election.leader_id is None:
                self._become_candidate_again()
            elif self.election.voted_id is not None and self.election.leader_id is None:
                self.state = self._next(RaftEvent.START_VOTED)
                self._set_election_timer()
            elif self.election.leader_id is not None:
                self.state = self._next(RaftEvent.START_LEADER_KNOWN)
                self._set_fetch_timer()
                self._send_fetch()
            else:
                self.state = self._next(RaftEvent.START_NOTHING_KNOWN)
                self._set_election_timer()
            if self.voters == (me,) and self.state != LEADER:
                # A quorum of one needs nobody's word: lead at once.
                self._become_prospective(RaftEvent.ALONE)
            logger.info("raft %s: started %s in epoch %d", me, self.state, self.epoch)
            self._schedule_delivery()
        finally:
            self._in_api -= 1

    def close(self) -> None:
        """Let go of the files (a shutdown or a crash: every appended byte is already flushed)."""
        if self._closed:
            return
        self._closed = True
        if self.log is not None:
            try:
                self.log.close()
            except OSError:  # the directory may already be gone (a test's tmp dir)
                pass

    # --- inputs ----------------------------------------------------------------------------------------

    def handle(self, src: Any, message: Any) -> bool:
        """Handle ``message`` from ``src`` if it is the client's; True if it was."""
        handler = self._HANDLERS.get(type(message))
        if handler is None:
            if type(message) is Disconnected:
                return self._on_disconnected(message.node)
            return False
        if not self._closed and self.log is not None:
            getattr(self, handler)(src, message)
        return True

    def on_timer(self, key: Hashable) -> bool:
        """Handle the timer ``key`` if it is one of the client's ``("raft", ...)`` ones."""
        if not (isinstance(key, tuple) and len(key) >= 2 and key[0] == "raft"):
            return False
        if self._closed or self.log is None:
            return True
        name = key[1]
        if name == _ELECTION:
            self._on_election_timeout()
        elif name == _BACKOFF:
            if self._backing_off and self.state in (PROSPECTIVE, CANDIDATE):
                self._become_prospective(RaftEvent.BACKOFF_OVER)
        elif name == _FETCH:
            if self._fetch_in_flight is None:
                self._send_fetch()
        elif name == _FETCH_REQUEST:
            if self._fetch_in_flight is not None:
                self._fetch_failed(f"no answer from {self._fetch_in_flight[1]} in {self.request_timeout_ms} ms")
        elif name == _PARKED:
            parked = self._parked.pop(key[2], None)
            if parked is not None and self.state == LEADER:
                self._answer_fetch(*parked)
        elif name == _CHECK_QUORUM:
            self._check_quorum()
        elif name == _BEGIN_QUORUM:
            if self.state == LEADER:
                self._send_begin_quorum_epoch(only_silent=True)
        elif name == _DELIVER:
            self._deliver()
        return True

    # --- the public write path -------------------------------------------------------------------------

    def append(self, records: Sequence[tuple[bytes | None, bytes | None]]) -> int:
        """Append ``records`` ((key, value) pairs) as one batch of this leader's epoch and
        return its last offset. They commit later, when a majority has them; the listener
        hears of it then, never inside this call."""
        if self.state != LEADER:
            raise NotLeaderError(
                f"node {self.node_id} is {self.state} in epoch {self.epoch}, not the leader",
                leader_id=self.leader_id, epoch=self.epoch,
            )
        records = list(records)
        if not records:
            raise IllegalArgumentError("nothing to append: no records")
        self._in_api += 1
        try:
            return self._append_as_leader(records)
        finally:
            self._in_api -= 1

    def resign(self) -> None:
        """Step down gracefully: tell the other voters (longest log first) to elect."""
        self._in_api += 1
        try:
            if self.state == LEADER:
                self._resign("asked to")
        finally:
            self._in_api -= 1

    # --- state transitions -------------------------------------------------------------------------------
    # Where an event leads is the table's answer (``states.TRANSITIONS``), looked up before anything
    # changes; each ``_become_*`` then does what the new state needs (timers, fetches, a round).

    def _next(self, event: RaftEvent) -> RaftState:
        """The state ``event`` moves this client to; ``IllegalStateError`` (naming the state and
        the event) if the table does not allow it."""
        return next_state(self.state, event)

    def _persist(self, election: ElectionState) -> None:
        """The one door to a new election state: on disk (fsync'd) before anyone hears of it."""
        if election.epoch < self.election.epoch:
            raise AssertionError(f"raft {self.node_id}: epoch would go back from {self.election.epoch} to {election.epoch}")
        if election != self.election:
            try:
                self.store.write(election, applied_offset=self._next_delivery)
            except OSError as e:
                if self.is_voter:
                    raise  # a vote not on disk could be cast twice: a voter must not go on
                # An observer's election state is only where it last saw the leader; it
                # finds the leader again after a restart without it.
                logger.warning("raft %s: could not write the quorum state (%s); going on without it",
                               self.node_id, e.strerror or e)
            self.election = election

    def _leave_state(self) -> None:
        """Undo what the current state set up, before taking another."""
        if self.state == LEADER:
            for replica in list(self._parked):
                src, request = self._parked.pop(replica)
                self.host.cancel_timer(("raft", _PARKED, replica))
                self._reply_fetch_error(src, request, NOT_LEADER_OR_FOLLOWER, leader=NO_LEADER)
            self.host.cancel_timer(("raft", _CHECK_QUORUM))
            self.host.cancel_timer(("raft", _BEGIN_QUORUM))
            self._replicas.clear()
            self._observers.clear()
            self._epoch_start_offset = -1
        self._cancel_fetch()
        self._round.clear()
        self._granted.clear()
        self._rejected.clear()
        self._backing_off = False
        self._leader_resigned = False
        self.host.cancel_timer(("raft", _BACKOFF))

    def _become_unattached(self, epoch: int) -> None:
        state = self._next(RaftEvent.HIGHER_EPOCH)
        self._leave_state()
        self._persist(ElectionState(epoch))
        self.state = state
        self._set_election_timer()
        self._log_transition()

    def _become_voted(self, candidate: int) -> None:
        state = self._next(RaftEvent.VOTE_GRANTED)
        self._leave_state()
        self._persist(self.election.with_vote(candidate))
        self.state = state
        self._set_election_timer()
        self._log_transition()

    def _become_follower(self, leader: int, epoch: int, event: RaftEvent, *, heard_from_leader: bool = False) -> None:
        state = self._next(event)
        self._leave_state()
        voted = self.election.voted_id if epoch == self.epoch else None
        self._persist(ElectionState(epoch, leader, voted))
        self.state = state
        self._last_leader_contact = self.host.now if heard_from_leader else -1
        self._set_fetch_timer()
        self._log_transition()
        self._send_fetch()

    def _become_prospective(self, event: RaftEvent) -> None:
        state = self._next(event)
        self._leave_state()
        self.state = state
        self._log_transition()
        self._start_round(pre_vote=True)

    def _become_candidate(self) -> None:
        state = self._next(RaftEvent.PRE_VOTES_WON)
        self._leave_state()
        self._persist(ElectionState(self.epoch + 1, None, self.node_id))
        self.state = state
        self._log_transition()
        self._start_round(pre_vote=False)

    def _become_candidate_again(self) -> None:
        # Restarted after voting for itself: the vote stands, so ask again in that epoch.
        self.state = self._next(RaftEvent.START_VOTED_FOR_ITSELF)
        self._start_round(pre_vote=False)

    def _become_leader(self) -> None:
        state = self._next(RaftEvent.VOTES_WON)
        self._leave_state()
        self._persist(ElectionState(self.epoch, self.node_id, self.node_id))
        self.state = state
        self.host.cancel_timer(("raft", _ELECTION))
        self._leader_since = self.host.now
        self._epoch_start_offset = self.log.log_end_offset
        self._replicas = {v: ReplicaState(v) for v in self.voters if v != self.node_id}
        self._observers = {}
        self._log_transition()
        # The epoch's first record: it fixes where the epoch starts in every log that has it,
        # and committing it commits everything before it (Raft's no-op entry).
        body = {"leaderId": self.node_id, "leaderEpoch": self.epoch, "voters": list(self.voters)}
        self._append_as_leader([(LEADER_CHANGE_KEY, json.dumps(body, separators=(",", ":")).encode())])
        self._send_begin_quorum_epoch()
        self._check_quorum()
        self._set_timer(_BEGIN_QUORUM, self.request_timeout_ms)
        self._schedule_delivery()

    def _resign(self, why: str) -> None:
        logger.info("raft %s: leader of epoch %d resigns (%s)", self.node_id, self.epoch, why)
        state = self._next(RaftEvent.RESIGN)
        successors = self._preferred_successors()
        self._leave_state()
        self.state = state  # the stored election keeps us as this epoch's leader: never again
        self._send_end_quorum_epoch(successors)
        self._set_election_timer()
        self._schedule_delivery()

    def _log_transition(self) -> None:
        logger.debug("raft %s: %s in epoch %d (leader %s)", self.node_id, self.state, self.epoch, self.leader_id)
        self._schedule_delivery()

    def _observe(self, leader: int, epoch: int, *, heard_from_leader: bool = False) -> bool:
        """Another node says ``leader`` (-1: none) leads ``epoch``: move there if that is news.
        True if this changed our state (the caller's request is then moot)."""
        leader_id = None if leader is None or leader < 0 else leader
        if not self.is_voter:
            if epoch > self.epoch or (epoch == self.epoch and leader_id is not None and leader_id != self._observer_leader):
                self._persist(ElectionState(epoch, leader_id))
                self._observer_leader = leader_id
                self._schedule_delivery()
                return True
            return False
        if epoch > self.epoch:
            if leader_id is not None and leader_id != self.node_id:
                self._become_follower(leader_id, epoch, RaftEvent.HIGHER_EPOCH_LEADER, heard_from_leader=heard_from_leader)
            else:
                self._become_unattached(epoch)
            return True
        if epoch == self.epoch and leader_id is not None and leader_id != self.node_id:
            if self.state == PROSPECTIVE and leader_id == self.election.leader_id:
                return False  # the leader we timed out on: no news (see _maybe_won)
            if self.state in (UNATTACHED, VOTED, PROSPECTIVE, CANDIDATE):
                self._become_follower(leader_id, epoch, RaftEvent.LEADER_OF_EPOCH, heard_from_leader=heard_from_leader)
                return True
            if self.state in (LEADER, RESIGNED):
                # Two leaders in one epoch would break Raft: only a bug gets here.
                logger.error("raft %s: %s claims epoch %d, which this node leads", self.node_id, leader_id, epoch)
        return False

    # --- timers --------------------------------------------------------------------------------------

    def _set_fetch_timer(self) -> None:
        # fetch.timeout.ms, plus a seeded jitter: followers that last heard the leader at the
        # same moment (one HW move answers all their parked fetches) would otherwise start
        # their elections together and split the vote.
        self._set_timer(_ELECTION, self.fetch_timeout_ms + self.rng.randint(0, self.election_timeout_ms // 2))

    def _set_election_timer(self) -> None:
        t = self.election_timeout_ms
        self._set_timer(_ELECTION, self.rng.randint(t, max(t, 2 * t - 1)))

    def _on_election_timeout(self) -> None:
        if self.state in (UNATTACHED, VOTED, FOLLOWER, RESIGNED):
            self._become_prospective(RaftEvent.ELECTION_TIMEOUT)
        elif self.state in (PROSPECTIVE, CANDIDATE) and not self._backing_off:
            self._back_off("the election timed out")

    def _back_off(self, why: str) -> None:
        logger.debug("raft %s: %s round of epoch %d failed (%s)", self.node_id, self.state, self.epoch, why)
        self._round.clear()
        self._backing_off = True
        self.host.cancel_timer(("raft", _ELECTION))
        self._set_timer(_BACKOFF, self.rng.randint(0, self.backoff_max_ms))

    # --- elections -------------------------------------------------------------------------------------

    def _start_round(self, *, pre_vote: bool) -> None:
        self._round.clear()
        self._granted = {self.node_id}
        self._rejected = set()
        self._backing_off = False
        self._set_election_timer()
        if self._maybe_won(pre_vote):
            return
        epoch = self.epoch + 1 if pre_vote else self.epoch
        for voter in self.voters:
            if voter != self.node_id:
                corr = self._next_correlation()
                self._round[corr] = voter
                self.host.send(voter, VoteRequest(
                    corr, epoch, self.node_id, self.last_fetched_epoch, self.log_end_offset, pre_vote,
                ))

    def _maybe_won(self, pre_vote: bool) -> bool:
        if len(self._granted) >= self.majority:
            if pre_vote:
                self._become_candidate()
            else:
                self._become_leader()
            return True
        if len(self._rejected) >= len(self.voters) - self.majority + 1:
            leader = self.election.leader_id
            if self.state == PROSPECTIVE and leader is not None and leader != self.node_id:
                # A majority still follows the leader we lost touch with (KIP-996): it is
                # alive, so follow it again rather than campaign against it.
                self._become_follower(leader, self.epoch, RaftEvent.LEADER_ALIVE)
                return False
            self._back_off("a majority said no")
        return False

    def _handle_vote_request(self, src: Any, req: VoteRequest) -> None:
        granted = False
        if not self.is_voter or req.candidate_id not in self.voters:
            pass  # observers have no vote, and a non-voter cannot be elected
        else:
            # The vote rule (``rules.grant_vote``), on what this voter knows before the request
            # moves it to a newer epoch; a pre-vote is judged by the same rule and changes nothing.
            e = self.election
            granted = self.rules.grant_vote(
                Voter(e.epoch, e.voted_id, e.leader_id, self.last_fetched_epoch, self.log_end_offset),
                Request(req.candidate_id, req.candidate_epoch, req.last_offset_epoch, req.last_offset))
            if req.pre_vote:
                granted = granted and self._may_grant_pre_vote(req)
            else:
                if req.candidate_epoch > self.epoch:
                    self._become_unattached(req.candidate_epoch)
                if granted and self.election.voted_id != req.candidate_id:
                    self._become_voted(req.candidate_id)  # persisted before the answer leaves
        leader = self.leader_id
        self.host.send(src, VoteResponse(
            req.correlation_id, NO_ERROR, NO_LEADER if leader is None else leader, self.epoch, granted,
        ))

    def _may_grant_pre_vote(self, req: VoteRequest) -> bool:
        """What refuses a pre-vote besides the vote rule (KIP-996): a leader refuses, and so
        does a follower that heard from its leader within ``fetch.timeout.ms``."""
        if self.state == LEADER:
            return False
        return not (
            req.candidate_epoch > self.epoch
            and self.state == FOLLOWER and not self._leader_resigned
            and self._last_leader_contact >= 0
            and self.host.now - self._last_leader_contact < self.fetch_timeout_ms
        )

    def _handle_vote_response(self, src: Any, resp: VoteResponse) -> None:
        voter = self._round.pop(resp.correlation_id, None)
        if self._observe(resp.leader_id, resp.leader_epoch):
            return
        if voter is None or self.state not in (PROSPECTIVE, CANDIDATE) or self._backing_off:
            return  # an answer to an earlier round
        (self._granted if resp.vote_granted else self._rejected).add(voter)
        self._maybe_won(pre_vote=self.state == PROSPECTIVE)

    # --- fetching (followers and observers) --------------------------------------------------------------------

    def _send_fetch(self) -> None:
        if self._fetch_in_flight is not None:
            return
        target = self._fetch_target()
        if target is None or target == self.node_id:
            return
        corr = self._next_correlation()
        self._fetch_in_flight = (corr, target)
        self.host.send(target, RaftFetchRequest(
            corr, self.node_id, self.epoch, self.log_end_offset, self.last_fetched_epoch, self.fetch_max_wait_ms,
        ))
        self._set_timer(_FETCH_REQUEST, self.request_timeout_ms)

    def _handle_fetch_response(self, src: Any, resp: RaftFetchResponse) -> None:
        if self._fetch_in_flight is None or self._fetch_in_flight[0] != resp.correlation_id:
            return  # an answer to a fetch we gave up on
        self._fetch_in_flight = None
        self.host.cancel_timer(("raft", _FETCH_REQUEST))
        if resp.error != NO_ERROR:
            if resp.error in (FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER):
                if self.is_voter and self._observe(resp.leader_id, resp.leader_epoch):
                    return  # following the leader it named (fetching already)
                if not self.is_voter and resp.leader_id >= 0:
                    self._observe(resp.leader_id, resp.leader_epoch)
                    self._observer_lost_leader = False
                    if resp.leader_id == src:
                        self._send_fetch()  # the leader itself: only our epoch was stale
                    else:
                        # After a backoff: a voter may name a leader that just died.
                        self._set_timer(_FETCH, self.retry_backoff_ms)
                    return
            self._fetch_failed(f"{src} answered error {resp.error}")
            return
        if self.is_voter:
            if resp.leader_epoch != self.epoch or resp.leader_id != self.election.leader_id:
                if not self._observe(resp.leader_id, resp.leader_epoch):
                    self._fetch_failed(f"{src} answered for epoch {resp.leader_epoch}, not ours ({self.epoch})")
                return
            self._last_leader_contact = self.host.now
            self._set_fetch_timer()
        else:
            if resp.leader_epoch > self.epoch or resp.leader_id != self._observer_leader:
                self._observe(resp.leader_id, resp.leader_epoch)
            self._observer_lost_leader = False
        if resp.diverging_epoch is not None:
            # Only the next fetch shows whether what is left agrees with the leader: its HW
            # means nothing for this log until then.
            self._truncate_to_diverging(*resp.diverging_epoch)
            self._send_fetch()
            return
        if resp.records:
            try:
                self._append_as_follower(resp.records)
            except KafkaStorageError as e:
                if self.is_voter:
                    raise  # its fetch offset counts toward the high watermark: Kafka halts
                # An observer's disk refused them (full, failing). Kafka's broker halts when
                # its metadata log directory fails (KIP-858): staying up, it would answer
                # Metadata from a view that no longer moves, naming itself leader of
                # partitions the controller has moved away, and clients asking it would
                # read a stale end. Restarted (with space), it fetches the rest.
                logger.error("raft %s: appending fetched metadata failed: %s", self.node_id, e)
                self.host.halt(f"the metadata log cannot be written ({e})")
                return
        hw = min(resp.high_watermark, self.log.log_end_offset)
        if hw > self.high_watermark:
            self.high_watermark = hw
            self._deliver()
        self._send_fetch()  # the next long poll

    def _truncate_to_diverging(self, epoch: int, end_offset: int) -> None:
        # The cut is a rule (``rules.metadata_truncation_offset``, the partitions' own): the end
        # of that epoch in our cache or the leader's end, the lower; no epoch of ours at or below
        # the leader's means every record we have was written in an epoch the leader's log does
        # not hold there, so all of it goes.
        target = self.rules.metadata_truncation_offset(
            epoch, end_offset, self.log.leader_epoch_cache.entries(), self.log.log_end_offset,
            self.log.log_start_offset)
        logger.info("raft %s: log diverges from the leader's at epoch %d: truncating to %d", self.node_id, epoch, target)
        self.log.truncate_to(target)
        if self.log.log_end_offset < max(self._next_delivery, self.high_watermark):
            raise AssertionError(
                f"raft {self.node_id}: truncation to {self.log.log_end_offset} would lose committed records "
                f"(high watermark {self.high_watermark}, delivered up to {self._next_delivery})"
            )

    def _append_as_follower(self, records: bytes) -> None:
        end = self.log.log_end_offset
        batches = [b for b in MemoryRecords(records).batches() if b.base_offset >= end]
        if not batches:
            return
        self.log.append(MemoryRecords.of(batches), assign_offsets=False)
        self.log.flush()  # the next fetch offset tells the leader these are ours: durably

    # --- leading ----------------------------------------------------------------------------------------------

    def _append_as_leader(self, records: list) -> int:
        batch = RecordBatch.build(records, timestamp=self.host.now, partition_leader_epoch=self.epoch)
        info = self.log.append(batch, leader_epoch=self.epoch)
        self.log.flush()  # our own log end counts toward the HW only once it is on disk
        if self._maybe_advance_high_watermark():
            self._schedule_delivery()
        self._complete_parked()
        return info.last_offset

    def _maybe_advance_high_watermark(self) -> bool:
        ends = [self.log.log_end_offset]
        ends += [self._replicas[v].log_end_offset for v in self.voters if v != self.node_id]
        ends.sort(reverse=True)
        candidate = ends[self.majority - 1]
        if candidate > self._epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def _handle_fetch_request(self, src: Any, req: RaftFetchRequest) -> None:
        if self.state != LEADER:
            self._reply_fetch_error(src, req, NOT_LEADER_OR_FOLLOWER)
            return
        if req.current_leader_epoch < self.epoch:
            self._reply_fetch_error(src, req, FENCED_LEADER_EPOCH)
            return
        if req.current_leader_epoch > self.epoch:
            self._reply_fetch_error(src, req, UNKNOWN_LEADER_EPOCH)
            return
        diverging = self._diverging(req)
        if diverging is not None:
            self.host.send(src, RaftFetchResponse(
                req.correlation_id, NO_ERROR, self.node_id, self.epoch, self.high_watermark,
                self.log.log_start_offset, b"", diverging,
            ))
            return
        old = self._parked.pop(req.replica_id, None)
        if old is not None:
            self.host.cancel_timer(("raft", _PARKED, req.replica_id))
        replica = self._update_replica(req.replica_id, req.fetch_offset)
        # Park only if there is nothing to tell: no records, and the fetcher already has our
        # HW (else the fetcher whose fetch completed a commit would be the last to hear of it).
        if (
            req.fetch_offset >= self.log.log_end_offset and req.max_wait_ms > 0
            and replica.sent_high_watermark == self.high_watermark
        ):
            self._parked[req.replica_id] = (src, req)
            self.host.set_timer(("raft", _PARKED, req.replica_id), req.max_wait_ms)
        else:
            self._answer_fetch(src, req)

    def _diverging(self, req: RaftFetchRequest) -> tuple[int, int] | None:
        if req.fetch_offset > self.log.log_end_offset and req.last_fetched_epoch < 0:
            return (-1, self.log.log_start_offset)  # a log with no epochs, longer than ours
        if req.last_fetched_epoch < 0 or req.fetch_offset == 0:
            return None
        epoch, end = self.log.leader_epoch_cache.end_offset_for(req.last_fetched_epoch, self.log.log_end_offset)
        if epoch < 0:
            return (-1, self.log.log_start_offset)
        if epoch != req.last_fetched_epoch or end < req.fetch_offset:
            return (epoch, end)
        return None

    # --- which handler takes which message (the plumbing is in requests.py) ----------------------------------

    # By name, so a subclass (or a test's mutant) can replace a handler.
    _HANDLERS = {
        VoteRequest: "_handle_vote_request",
        VoteResponse: "_handle_vote_response",
        BeginQuorumEpochRequest: "_handle_begin_quorum_epoch",
        BeginQuorumEpochResponse: "_handle_quorum_epoch_response",
        EndQuorumEpochRequest: "_handle_end_quorum_epoch",
        EndQuorumEpochResponse: "_handle_quorum_epoch_response",
        RaftFetchRequest: "_handle_fetch_request",
        RaftFetchResponse: "_handle_fetch_response",
    }


__all__ = [
    "CANDIDATE", "DEFAULT_CONFIG", "FOLLOWER", "LEADER", "LEADER_CHANGE_KEY", "OBSERVER", "PROSPECTIVE",
    "RESIGNED", "STATES", "UNATTACHED", "VOTED", "CommittedRecord", "KafkaRaftClient", "NotLeaderError",
    "RaftListener", "ReplicaState", "parse_quorum_voters",
]
