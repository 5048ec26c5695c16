"""The Raft client's states and timers, named once (Kafka's ``QuorumState`` names the states).

Theory of operation
-------------------
A voter is in one of seven states, an observer (a broker) always in the eighth; ``client.py``
moves between them (its header says when) and the ``quorum-state`` file (``quorum_state.py``)
says which one a restarted node comes back in. The client sets its timers on the host as
``("raft", name)`` or ``("raft", name, replica)``; the names are these. Plain strings, so
the checker, the dashboards and the logs print them as they are. No clock, no I/O.
"""

UNATTACHED = "unattached"
VOTED = "voted"
PROSPECTIVE = "prospective"
CANDIDATE = "candidate"
LEADER = "leader"
FOLLOWER = "follower"
RESIGNED = "resigned"
OBSERVER = "observer"
STATES = (UNATTACHED, VOTED, PROSPECTIVE, CANDIDATE, LEADER, FOLLOWER, RESIGNED, OBSERVER)

# Timer names, each set as ("raft", name) or ("raft", name, replica).
_ELECTION = "election"  # election timeout; as follower, the fetch timeout
_BACKOFF = "backoff"  # between a failed election round and the next
_FETCH = "fetch"  # send the next fetch (after a retry backoff)
_FETCH_REQUEST = "fetch-request"  # the in-flight fetch's request timeout
_PARKED = "parked"  # a follower's parked fetch has waited max_wait_ms
_CHECK_QUORUM = "check-quorum"
_BEGIN_QUORUM = "begin-quorum"  # resend BeginQuorumEpoch to voters that never fetched
_DELIVER = "deliver"  # hand commits and leader changes to the listener


__all__ = ["CANDIDATE", "FOLLOWER", "LEADER", "OBSERVER", "PROSPECTIVE", "RESIGNED", "STATES", "UNATTACHED", "VOTED"]
