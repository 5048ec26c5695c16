"""The Raft quorum's requests and responses (KIP-595), as immutable dataclasses.

Theory of operation
-------------------
KRaft's voters talk with four RPCs: ``Vote`` (an election; with ``pre_vote`` the KIP-996
probe that changes nothing on the receiver), ``BeginQuorumEpoch`` (a new leader announces
itself), ``EndQuorumEpoch`` (a leader steps down gracefully and names its preferred
successors) and ``Fetch`` (followers and observers *pull* the metadata log from the
leader; a fetch is also how the leader learns how far each replica got). Kafka sends the
last one as Fetch (api 1) on the partition ``__cluster_metadata-0``; ours is a type of its
own, ``RaftFetchRequest``, so it can never be mistaken for a partition's fetch.

Conventions, as in ``minikafka.messages``: every request's first field is
``correlation_id`` and its response echoes it; errors are Kafka's numeric codes; an
unknown leader is ``-1``; record batches travel as opaque ``bytes``. Field types are only
those the wire codec's private frames carry (int, str, bool, bytes, tuples of them and
``X | None``), so both runtimes move these messages unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_LEADER = -1  # a leader id nobody has (Kafka's -1)


@dataclass(frozen=True)
class VoteRequest:
    correlation_id: int
    candidate_epoch: int  # the epoch the candidate asks to lead (pre-vote: the one it would ask for)
    candidate_id: int
    last_offset_epoch: int  # the epoch of the candidate's last batch (-1: empty log)
    last_offset: int  # the candidate's log end offset
    pre_vote: bool = False


@dataclass(frozen=True)
class VoteResponse:
    correlation_id: int
    error: int
    leader_id: int  # the leader the voter knows in its epoch, or -1
    leader_epoch: int  # the voter's epoch
    vote_granted: bool


@dataclass(frozen=True)
class BeginQuorumEpochRequest:
    correlation_id: int
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True)
class BeginQuorumEpochResponse:
    correlation_id: int
    error: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class EndQuorumEpochRequest:
    correlation_id: int
    leader_epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]  # the other voters, longest log first


@dataclass(frozen=True)
class EndQuorumEpochResponse:
    correlation_id: int
    error: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class RaftFetchRequest:
    correlation_id: int
    replica_id: int  # a voter or an observer (a broker)
    current_leader_epoch: int  # the epoch the fetcher believes in (fencing, KIP-320)
    fetch_offset: int  # the fetcher's log end offset: everything below it is flushed
    last_fetched_epoch: int  # the epoch of the fetcher's last batch (-1: empty log)
    max_wait_ms: int  # long poll: the leader may park the fetch this long


@dataclass(frozen=True)
class RaftFetchResponse:
    correlation_id: int
    error: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    records: bytes
    # (epoch, end offset): the fetcher's log diverges from the leader's; truncate there.
    diverging_epoch: tuple[int, int] | None = None


RAFT_MESSAGES: tuple[type, ...] = (
    VoteRequest, VoteResponse,
    BeginQuorumEpochRequest, BeginQuorumEpochResponse,
    EndQuorumEpochRequest, EndQuorumEpochResponse,
    RaftFetchRequest, RaftFetchResponse,
)
RAFT_REQUESTS: tuple[type, ...] = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, RaftFetchRequest)

__all__ = [
    "NO_LEADER", "RAFT_MESSAGES", "RAFT_REQUESTS",
    "BeginQuorumEpochRequest", "BeginQuorumEpochResponse", "EndQuorumEpochRequest", "EndQuorumEpochResponse",
    "RaftFetchRequest", "RaftFetchResponse", "VoteRequest", "VoteResponse",
]
