"""What a Raft leader knows of the other replicas: Kafka's ``LeaderState``.

Theory of operation
-------------------
A leader keeps one ``ReplicaState`` per voter and per observer that fetched in its epoch,
made anew when it takes the epoch: the fetch offset (its log end, which it flushed before
asking), when it last fetched, and when it was last caught up (Kafka's rule, as the
partitions' ISR uses it: a fetch at the leader's log end, or at the end the leader had at
its previous fetch). From these:

- each voter's fetch may move the high watermark (``_maybe_advance_high_watermark`` in
  ``client.py``: the commit rule stays there, beside the vote and the fetch);
- check-quorum: a leader that has not been fetched from by a majority of voters (itself
  included) within 1.5 x ``fetch.timeout.ms`` resigns; it looks again exactly when that could
  first become true;
- DescribeQuorum's answer (``replica_states``), and the order in which a resigning leader
  names its successors (longest log first).

``LeaderState`` is one part of ``KafkaRaftClient`` (``client.py``), kept here so that
client.py reads as Raft; it uses the client's ``_replicas``, ``_observers``, ``voters``,
``majority``, ``_leader_since`` and ``host``. Time only from ``host.now``; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from minikafka.raft.states import _CHECK_QUORUM, LEADER


@dataclass
class ReplicaState:
    """What the leader knows of one replica, from its fetches in this epoch."""

    replica_id: int
    log_end_offset: int = -1  # unknown until it fetches
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_leo: int = -1  # the leader's log end at its previous fetch
    sent_high_watermark: int = -1  # the HW our last answer told it

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.replica_id, self.log_end_offset, self.last_fetch_ms, self.last_caught_up_ms)


class LeaderState:
    """The leader's view of the replicas: a part of ``KafkaRaftClient`` (see above)."""

    def replica_states(self) -> dict:
        """What DescribeQuorum shows: on the leader, each voter's and observer's
        (id, log end offset, last fetch ms, last caught-up ms); elsewhere, its own view."""
        now = self.host.now
        if self.state == LEADER:
            me = (self.node_id, self.log_end_offset, now, now)
            voters = [me if v == self.node_id else self._replicas[v].as_tuple() for v in self.voters]
            observers = [self._observers[o].as_tuple() for o in sorted(self._observers)]
        else:
            mine = (self.node_id, self.log_end_offset, -1, -1)
            voters = [mine] if self.is_voter else []
            observers = [] if self.is_voter else [mine]
        return {
            "leader_id": self.leader_id, "epoch": self.epoch, "high_watermark": self.high_watermark,
            "voters": voters, "observers": observers,
        }

    def _update_replica(self, replica_id: int, fetch_offset: int) -> ReplicaState:
        """Note a valid fetch (it may move the high watermark)."""
        now = self.host.now
        is_voter = replica_id in self.voters
        table = self._replicas if is_voter else self._observers
        replica = table.get(replica_id)
        if replica is None:
            replica = table[replica_id] = ReplicaState(replica_id)
        leader_end = self.log.log_end_offset
        # Kafka's caught-up rule (as the partitions' ISR uses it).
        if fetch_offset >= leader_end:
            replica.last_caught_up_ms = now
        elif fetch_offset >= replica.last_fetch_leader_leo >= 0:
            replica.last_caught_up_ms = max(replica.last_caught_up_ms, replica.last_fetch_ms)
        replica.last_fetch_leader_leo = leader_end
        replica.last_fetch_ms = now
        replica.log_end_offset = fetch_offset
        if is_voter and self._maybe_advance_high_watermark():
            self._deliver()
            self._complete_parked()  # followers learn the new HW without waiting out a long poll
        return replica

    def _check_quorum(self) -> None:
        """Resign if fewer than a majority of voters (us included) fetched within
        1.5 x fetch.timeout.ms; else look again exactly when that could first become true."""
        if self.state != LEADER or self.majority == 1:
            return
        window = self.fetch_timeout_ms * 3 // 2
        # A new leader gives every voter a full window to show up.
        heard = sorted((max(r.last_fetch_ms, self._leader_since) for r in self._replicas.values()), reverse=True)
        quorum_since = heard[self.majority - 2]  # the majority - 1 others fetched at or after this
        if self.host.now - quorum_since > window:
            self._resign(f"fewer than {self.majority} of {len(self.voters)} voters fetched in {window} ms (check-quorum)")
            return
        self._set_timer(_CHECK_QUORUM, quorum_since + window - self.host.now + 1)

    def _preferred_successors(self) -> tuple[int, ...]:
        # Longest log first: it is the likeliest to win, so it should try first. A restarted
        # leader knows nobody's log: the voters in id order, then.
        others = [v for v in self.voters if v != self.node_id]
        ends = {v: self._replicas[v].log_end_offset for v in others if v in self._replicas}
        return tuple(sorted(others, key=lambda v: (-ends.get(v, -1), v)))


__all__ = ["LeaderState", "ReplicaState"]
