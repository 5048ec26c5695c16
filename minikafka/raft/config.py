"""The quorum's settings: Kafka's ``QuorumConfig`` (``controller.quorum.*``).

Theory of operation
-------------------
``DEFAULT_CONFIG`` holds Kafka's names and defaults for the timeouts and sizes the Raft
client runs on (``client.py`` reads them once, when it is made); ``parse_quorum_voters``
reads ``controller.quorum.voters`` (``"1@localhost:9093,2@host:9094"``) and refuses a
malformed entry, a voter named twice or an empty list with an ``IllegalArgumentError``
that names what was wrong. No clock, no I/O.
"""

from __future__ import annotations

from minikafka.errors import IllegalArgumentError

# Kafka's names and defaults. The last two are ours: Kafka fixes them in code.
DEFAULT_CONFIG: dict[str, int] = {
    "controller.quorum.election.timeout.ms": 1000,
    "controller.quorum.fetch.timeout.ms": 2000,
    "controller.quorum.election.backoff.max.ms": 1000,
    "controller.quorum.request.timeout.ms": 2000,
    "controller.quorum.retry.backoff.ms": 20,
    "controller.quorum.fetch.max.wait.ms": 500,
    "controller.quorum.fetch.max.bytes": 1024 * 1024,
}


def parse_quorum_voters(value: str) -> dict[int, tuple[str, int]]:
    """Kafka's ``controller.quorum.voters`` (``"1@localhost:9093,2@host:9094"``) as
    ``{id: (host, port)}``."""
    voters: dict[int, tuple[str, int]] = {}
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        try:
            node, address = entry.split("@", 1)
            host, port = address.rsplit(":", 1)
            node_id, port_number = int(node), int(port)
        except ValueError:
            raise IllegalArgumentError(
                f"controller.quorum.voters entry {entry!r} is not id@host:port (e.g. 1@localhost:9093)"
            ) from None
        if node_id in voters:
            raise IllegalArgumentError(f"controller.quorum.voters names voter {node_id} twice")
        voters[node_id] = (host.strip("[]"), port_number)
    if not voters:
        raise IllegalArgumentError("controller.quorum.voters is empty: a quorum needs at least one voter")
    return voters


__all__ = ["DEFAULT_CONFIG", "parse_quorum_voters"]
