"""``minikafka.raft``: the metadata quorum's consensus, Raft as KRaft does it (KIP-595).

Theory of operation
-------------------
Nine rooms:

- ``messages``: Vote (with KIP-996's pre-vote), BeginQuorumEpoch, EndQuorumEpoch and the
  pull-based RaftFetch, as frozen dataclasses (``RAFT_MESSAGES`` lists them);
- ``quorum_state``: the ``quorum-state`` file (epoch, vote, leader), written atomically and
  fsync'd before the client acts on it;
- ``config``: ``DEFAULT_CONFIG`` (Kafka's ``controller.quorum.*`` names and defaults) and
  ``parse_quorum_voters``;
- ``states``: the client's eight states and its timers, named once;
- ``listener``: ``RaftListener`` (what the state machine on top implements) and the
  delivery of committed records and leader changes to it;
- ``leader_state``: what a leader knows of the replicas (``ReplicaState``), check-quorum
  and DescribeQuorum's view;
- ``quorum_epoch``: BeginQuorumEpoch and EndQuorumEpoch, how a leader announces its epoch
  and hands it on;
- ``requests``: the request plumbing (correlation ids, retries, replies, parked fetches);
- ``client``: ``KafkaRaftClient``, a sans-I/O state machine a host node embeds: the host
  routes messages (``handle``) and timers (``on_timer``) to it; it replicates the
  ``__cluster_metadata-0`` log and tells a ``RaftListener`` what committed, in order.

A controller is a ``RaftListener`` on a voter's client (it ``append`` s records while it
leads); a broker is a listener on an observer's client. ``minikafka.checker.raft`` checks
a run of them: at most one leader per epoch, committed records never lost or changed.
"""

from minikafka.raft.client import LEADER_CHANGE_KEY, KafkaRaftClient, NotLeaderError
from minikafka.raft.leader_state import ReplicaState
from minikafka.raft.listener import CommittedRecord, RaftListener
from minikafka.raft.states import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    OBSERVER,
    PROSPECTIVE,
    RESIGNED,
    STATES,
    UNATTACHED,
    VOTED,
)
from minikafka.raft.config import DEFAULT_CONFIG, parse_quorum_voters
from minikafka.raft.messages import (
    NO_LEADER,
    RAFT_MESSAGES,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    RaftFetchRequest,
    RaftFetchResponse,
    VoteRequest,
    VoteResponse,
)
from minikafka.raft.quorum_state import QUORUM_STATE_FILE, ElectionState, QuorumStateStore

__all__ = [
    "CANDIDATE", "DEFAULT_CONFIG", "FOLLOWER", "LEADER", "LEADER_CHANGE_KEY", "NO_LEADER", "OBSERVER",
    "PROSPECTIVE", "QUORUM_STATE_FILE", "RAFT_MESSAGES", "RESIGNED", "STATES", "UNATTACHED", "VOTED",
    "BeginQuorumEpochRequest", "BeginQuorumEpochResponse", "CommittedRecord", "ElectionState",
    "EndQuorumEpochRequest", "EndQuorumEpochResponse", "KafkaRaftClient", "NotLeaderError",
    "QuorumStateStore", "RaftFetchRequest", "RaftFetchResponse", "RaftListener", "ReplicaState",
    "VoteRequest", "VoteResponse", "parse_quorum_voters",
]
