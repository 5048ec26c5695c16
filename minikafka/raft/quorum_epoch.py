"""How a Raft leader announces its epoch and hands it on: KIP-595's BeginQuorumEpoch and
EndQuorumEpoch.

Theory of operation
-------------------
Classic Raft learns of a new leader from its first AppendEntries. KRaft's followers *pull*,
so a new leader tells the voters itself:

- BeginQuorumEpoch: sent to every other voter when a node becomes leader, and again every
  ``request.timeout.ms`` to those that have not fetched yet. A voter in an older epoch, or
  one without a leader in this epoch, follows the sender; one in a newer epoch answers
  FENCED_LEADER_EPOCH. An observer only notes who leads.
- EndQuorumEpoch: a leader that resigns (``resign()``, check-quorum, or a restart after
  leading) tells the voters, naming its preferred successors, longest log first. A follower
  of that leader stops fetching; the first successor campaigns at once, the others after
  an exponential backoff (``retry.backoff.ms << position``, at most
  ``election.backoff.max.ms``), the rest after a normal election timeout. An observer
  forgets the leader and asks the voters who leads now.

Any answer carries the answerer's (leader, epoch), which the sender takes as news
(``_observe``). The vote and the election rounds stay in ``client.py``.

``QuorumEpochMessages`` is one part of ``KafkaRaftClient`` (``client.py``), kept here so
that client.py reads as Raft's core; it uses the client's state, election, timers and
``_observe``/``_become_follower``. Sans-I/O: it sends and sets timers through the host only.
"""

from __future__ import annotations

from typing import Any

from minikafka.messages import FENCED_LEADER_EPOCH, NO_ERROR
from minikafka.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
)
from minikafka.raft.states import _BEGIN_QUORUM, _ELECTION, _FETCH, CANDIDATE, FOLLOWER, PROSPECTIVE, UNATTACHED, VOTED
from minikafka.raft.states import RaftEvent


class QuorumEpochMessages:
    """BeginQuorumEpoch and EndQuorumEpoch: a part of ``KafkaRaftClient`` (see above)."""

    def _send_begin_quorum_epoch(self, *, only_silent: bool = False) -> None:
        for voter in self.voters:
            if voter == self.node_id:
                continue
            if only_silent and self._replicas[voter].last_fetch_ms >= 0:
                continue
            self.host.send(voter, BeginQuorumEpochRequest(self._next_correlation(), self.epoch, self.node_id))
        if only_silent:
            self._set_timer(_BEGIN_QUORUM, self.request_timeout_ms)

    def _handle_begin_quorum_epoch(self, src: Any, req: BeginQuorumEpochRequest) -> None:
        if not self.is_voter:
            self._observe(req.leader_id, req.leader_epoch)
        elif req.leader_epoch < self.epoch:
            self._reply(src, BeginQuorumEpochResponse, req, FENCED_LEADER_EPOCH)
            return
        elif req.leader_epoch > self.epoch or self.state in (UNATTACHED, VOTED, PROSPECTIVE, CANDIDATE):
            self._observe(req.leader_id, req.leader_epoch, heard_from_leader=True)
        elif self.state == FOLLOWER and self.election.leader_id == req.leader_id:
            self._last_leader_contact = self.host.now
        self._reply(src, BeginQuorumEpochResponse, req, NO_ERROR)

    def _send_end_quorum_epoch(self, successors: tuple[int, ...]) -> None:
        for voter in self.voters:
            if voter == self.node_id:
                continue
            self.host.send(voter, EndQuorumEpochRequest(self._next_correlation(), self.epoch, self.node_id, successors))

    def _handle_end_quorum_epoch(self, src: Any, req: EndQuorumEpochRequest) -> None:
        if not self.is_voter:
            if req.leader_epoch >= self.epoch and req.leader_id == self._observer_leader:
                self._observer_leader = None  # find the next leader by asking the voters
                self._cancel_fetch()
                self._set_timer(_FETCH, self.retry_backoff_ms)
                self._schedule_delivery()
            self._reply(src, EndQuorumEpochResponse, req, NO_ERROR)
            return
        if req.leader_epoch < self.epoch:
            self._reply(src, EndQuorumEpochResponse, req, FENCED_LEADER_EPOCH)
            return
        if req.leader_epoch > self.epoch:
            # Its epoch had that leader: remember it, or we could vote in that epoch again.
            self._become_follower(req.leader_id, req.leader_epoch, RaftEvent.HIGHER_EPOCH_LEADER)
        if self.state == FOLLOWER and self.election.leader_id == req.leader_id:
            self._leader_resigned = True
            self._cancel_fetch()
            succ = req.preferred_successors
            if self.node_id in succ:
                position = succ.index(self.node_id)
                delay = 0 if position == 0 else min(self.retry_backoff_ms << position, self.backoff_max_ms)
                self._set_timer(_ELECTION, delay)
            else:
                self._set_election_timer()
            self._schedule_delivery()
        self._reply(src, EndQuorumEpochResponse, req, NO_ERROR)

    def _handle_quorum_epoch_response(self, src: Any, resp: Any) -> None:
        self._observe(resp.leader_id, resp.leader_epoch)


__all__ = ["QuorumEpochMessages"]
