"""The Raft client's request plumbing: correlation ids, timers, retries, replies, parked fetches.

Theory of operation
-------------------
Raft's rules (``client.py``) decide what to ask and what to answer; this is how asking and
answering is done, as Kafka's ``RequestManager`` and its fetch purgatory do it:

- One fetch in flight at a time (``_fetch_in_flight``: correlation id, destination), with a
  request timeout. A fetch that fails (timeout, refused connection, an error answer) is
  retried after ``controller.quorum.retry.backoff.ms``. A follower fetches from its leader;
  an observer from the leader it knows, or, once that failed, from the voters in turn (one
  of them names the leader): a blip is not a leader change.
- A leader parks a fetch that has nothing to tell (``_parked``) until it appends, the high
  watermark moves, or ``max_wait_ms`` passes; then it answers with records from the
  fetcher's offset and its high watermark (``_answer_fetch``).
- Every answer names the leader this node knows (``NO_LEADER``: none) and its epoch, so a
  node that asked the wrong one learns whom to ask.

``RequestPlumbing`` is one part of ``KafkaRaftClient`` (``client.py``), kept here so that
client.py reads as Raft; it uses the client's ``host`` (``send``, ``set_timer``,
``cancel_timer``), ``log``, ``state``, ``epoch``, ``leader_id``, ``high_watermark`` and the
fields named above. Sans-I/O: it sends and sets timers through the host only.
"""

from __future__ import annotations

import logging
from typing import Any

from minikafka.messages import NO_ERROR
from minikafka.raft.messages import NO_LEADER, RaftFetchRequest, RaftFetchResponse
from minikafka.raft.states import _FETCH, _FETCH_REQUEST, _PARKED, FOLLOWER, OBSERVER

logger = logging.getLogger("minikafka.raft")


class RequestPlumbing:
    """Asking and answering: a part of ``KafkaRaftClient`` (see above)."""

    def _set_timer(self, name: str, delay_ms: int) -> None:
        self.host.set_timer(("raft", name), delay_ms)

    def _fetch_target(self) -> int | None:
        if self.state == FOLLOWER and not self._leader_resigned:
            return self.election.leader_id
        if self.state == OBSERVER:
            if self._observer_leader is not None and not self._observer_lost_leader:
                return self._observer_leader
            return self.voters[self._voter_cursor % len(self.voters)]
        return None

    def _cancel_fetch(self) -> None:
        self._fetch_in_flight = None
        self.host.cancel_timer(("raft", _FETCH_REQUEST))
        self.host.cancel_timer(("raft", _FETCH))

    def _fetch_failed(self, why: str) -> None:
        logger.debug("raft %s: fetch failed: %s", self.node_id, why)
        self._cancel_fetch()
        if self.state == OBSERVER:
            # Ask the voters, in turn, who leads now. The leader we knew stays what we report
            # until one of them names another: a blip is not a leader change.
            if self._observer_lost_leader or self._observer_leader is None:
                self._voter_cursor += 1
            self._observer_lost_leader = True
        self._set_timer(_FETCH, self.retry_backoff_ms)

    def _on_disconnected(self, node: Any) -> bool:
        if self._fetch_in_flight is not None and self._fetch_in_flight[1] == node:
            self._fetch_failed(f"{node} refused the connection")
            return True
        return node in self.voters

    def _complete_parked(self) -> None:
        parked, self._parked = self._parked, {}
        for replica, (src, req) in sorted(parked.items()):
            self.host.cancel_timer(("raft", _PARKED, replica))
            self._answer_fetch(src, req)

    def _answer_fetch(self, src: Any, req: RaftFetchRequest) -> None:
        replica = self._replicas.get(req.replica_id) or self._observers.get(req.replica_id)
        if replica is not None:
            replica.sent_high_watermark = self.high_watermark
        records = b""
        if req.fetch_offset < self.log.log_end_offset:
            records = self.log.read_bytes(req.fetch_offset, self.fetch_max_bytes)
        self.host.send(src, RaftFetchResponse(
            req.correlation_id, NO_ERROR, self.node_id, self.epoch, self.high_watermark,
            self.log.log_start_offset, records,
        ))

    def _reply_fetch_error(self, src: Any, req: RaftFetchRequest, error: int, *, leader: int | None = None) -> None:
        if leader is None:
            leader = NO_LEADER if self.leader_id is None else self.leader_id
        self.host.send(src, RaftFetchResponse(
            req.correlation_id, error, leader, self.epoch,
            self.high_watermark, self.log_start_offset, b"",
        ))

    def _reply(self, src: Any, cls: type, req: Any, error: int) -> None:
        leader = self.leader_id
        self.host.send(src, cls(req.correlation_id, error, NO_LEADER if leader is None else leader, self.epoch))

    def _next_correlation(self) -> int:
        self._correlation += 1
        return self._correlation


__all__ = ["RequestPlumbing"]
