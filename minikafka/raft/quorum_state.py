"""What a Raft voter must never forget: its epoch, whom it voted for, whom it followed.

Theory of operation
-------------------
Raft is safe only if a voter never votes twice in one epoch and never goes back to an
older epoch, across crashes too. So the *election state* (Kafka's ``ElectionState``:
epoch, leader id, voted id) lives in the file ``quorum-state`` in the metadata log's
directory, as Kafka keeps it (JSON: ``leaderId``, ``leaderEpoch``, ``votedId``,
``appliedOffset``, ``currentVoters``, ``data_version``), and every change is written to a
temporary file, fsync'd, renamed over the old one and the directory fsync'd, *before* the
client acts on it (answers a vote, sends a vote request, leads, follows).

``QuorumStateStore`` is only that file. The states built on it (unattached, voted,
prospective, candidate, leader, follower, resigned, observer) are the client's
(``client.py``); ``ElectionState`` says which of them a restarted node comes back in:
it led the epoch -> resigned (an epoch has one LeaderChange and one leader's history: a
restarted leader no longer knows what its followers hold, so it hands the epoch on);
it voted for itself -> candidate again in that epoch; it voted for another -> voted; it
knew a leader -> follower; else unattached.

Invariants: the stored epoch never decreases; within one epoch the stored vote, once
set, never changes to another candidate and the stored leader, once set, never changes.
Writes are the only I/O here, and nothing reads a clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from minikafka.errors import IllegalStateError
from minikafka.storage.disk import OS_DISK, Disk

QUORUM_STATE_FILE = "quorum-state"
DATA_VERSION = 0


@dataclass(frozen=True)
class ElectionState:
    epoch: int = 0
    leader_id: int | None = None
    voted_id: int | None = None

    def with_vote(self, candidate: int) -> "ElectionState":
        return replace(self, voted_id=candidate)


class QuorumStateStore:
    """The ``quorum-state`` file of one metadata log directory."""

    def __init__(self, directory: Path | str, voters: Sequence[int], *, disk: Disk = OS_DISK) -> None:
        self.dir = Path(directory)
        self.disk = disk  # the log directory's (a simulated broker's may fill up or fail)
        self.path = self.dir / QUORUM_STATE_FILE
        self.voters = tuple(voters)
        self.writes = 0  # how many times it was persisted (tests count fsyncs with it)

    def read(self) -> ElectionState:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return ElectionState()
        except ValueError as e:
            # Written atomically, so a torn file is damage, not a crash: refuse to guess,
            # a guessed epoch or vote could make this voter vote twice.
            raise IllegalStateError(f"{self.path}: unreadable quorum state: {e}") from None
        leader = int(data.get("leaderId", -1))
        voted = int(data.get("votedId", -1))
        return ElectionState(
            epoch=int(data.get("leaderEpoch", 0)),
            leader_id=None if leader < 0 else leader,
            voted_id=None if voted < 0 else voted,
        )

    def write(self, state: ElectionState, *, applied_offset: int = 0) -> None:
        body = {
            "clusterId": "",
            "leaderId": -1 if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": -1 if state.voted_id is None else state.voted_id,
            "appliedOffset": applied_offset,
            "currentVoters": [{"voterId": v} for v in self.voters],
            "data_version": DATA_VERSION,
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        # Atomic: a crash leaves the old state or the new one; a failed write leaves the old.
        self.disk.replace_file(self.path, json.dumps(body, separators=(",", ":")).encode())
        self.disk.sync_dir(self.dir)  # and the rename itself survives a power loss
        self.writes += 1


__all__ = ["DATA_VERSION", "QUORUM_STATE_FILE", "ElectionState", "QuorumStateStore"]
