"""What a client's ``bootstrap_servers`` may be, checked the same way by every client.

In the simulated world a client is a node of one ``Cluster``'s world, so it is given the
cluster object itself; a ``"host:port"`` string names a real network address, which is the
TCP runtime's business (``minikafka.wire``). Either mistake gets one clear message naming the
client, so the fix is obvious from the notebook.

The TCP side's clients (the CLI tools, the truck feed) share ``parse_addresses`` and
``unreachable``: kafka-python retries a refused connection until its bootstrap timeout and
then says only "Unable to bootstrap", so they try a plain TCP connection first and name each
address that failed, and why.
"""

from __future__ import annotations

import socket
from typing import Any, Iterable

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


CONNECT_TIMEOUT_S = 3.0  # per bootstrap address, for the reachability check


def parse_addresses(entries: Iterable[str], what: str = "bootstrap_servers") -> list[tuple[str, int]]:
    """``host:port`` entries (blank ones skipped) as (host, port); ValueError naming ``what``
    and the bad entry otherwise."""
    out = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        host = host.strip("[]")  # [::1]:9092
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad {what} entry {entry!r}: expected host:port, e.g. localhost:9092")
        out.append((host, int(port)))
    if not out:
        raise ValueError(f"{what} is empty: give host:port, e.g. localhost:9092")
    return out


def unreachable(addresses: Iterable[tuple[str, int]], timeout_s: float = CONNECT_TIMEOUT_S) -> list[str]:
    """``[]`` as soon as one address accepts a TCP connection; else each address with why it failed."""
    failures = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return []
        except TimeoutError:
            failures.append(f"{host}:{port} (no answer within {timeout_s:g} s)")
        except OSError as exc:
            failures.append(f"{host}:{port} ({exc.strerror or type(exc).__name__})")
    return failures
