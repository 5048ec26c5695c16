"""What a client's ``bootstrap_servers`` may be, checked the same way by every client.

In the simulated world a client is a node of one ``Cluster``'s world, so it is given the
cluster object itself; a ``"host:port"`` string names a real network address, which is the
TCP runtime's business (``minikafka.wire``). Either mistake gets one clear message naming the
client, so the fix is obvious from the notebook.
"""

from __future__ import annotations

from typing import Any

from minikafka.errors import KafkaConfigurationError


def check_bootstrap_servers(servers: Any, client: str) -> None:
    """Raise ``KafkaConfigurationError`` unless ``servers`` is a simulated cluster."""
    if isinstance(servers, (str, list, tuple)):
        raise KafkaConfigurationError(
            f"bootstrap_servers={servers!r} is a network address: the TCP runtime (minikafka.wire) "
            "is a later chapter. For now pass the simulated cluster itself: "
            f"{client}(bootstrap_servers=cluster) with cluster = minikafka.Cluster(...)")
    if not all(hasattr(servers, name) for name in ("world", "add_client", "broker_ids")):
        raise KafkaConfigurationError(
            f"bootstrap_servers must be a minikafka Cluster, not {type(servers).__name__}: {servers!r}")
