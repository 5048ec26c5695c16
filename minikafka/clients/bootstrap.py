"""What a client's ``bootstrap_servers`` may be, checked the same way by every client.

Two worlds, one client (DESIGN.md): a simulated ``Cluster`` object puts the client's node
into that cluster's world; a real address, ``"host:port"``, a comma-separated string or a
list of them (as kafka-python takes), or a ``launch()`` cluster (its ``bootstrap_servers``),
puts the same node into the TCP client runtime (``minikafka.wire.client_runtime``), which
speaks Kafka's protocol to any Kafka broker. ``check_bootstrap_servers`` refuses anything
else, and an address that is not ``host:port``, by name, before any socket is opened;
``cluster_for`` then returns what the client runs in.

This module opens no socket: the runtime does (its bootstrap names each address that
failed, and why). ``parse_addresses`` is shared with the CLI tools and the truck feed.
"""

from __future__ import annotations

from typing import Any, Iterable

from minikafka.errors import KafkaConfigurationError


def _is_simulated(servers: Any) -> bool:
    return all(hasattr(servers, name) for name in ("world", "add_client", "broker_ids"))


def _address_entries(servers: Any) -> list[str] | None:
    """The host:port entries ``servers`` names, or None if it names no network address."""
    if isinstance(servers, str):
        return servers.split(",")
    if isinstance(servers, (list, tuple)) and all(isinstance(s, str) for s in servers):
        return [entry for s in servers for entry in s.split(",")]
    address = getattr(servers, "bootstrap_servers", None)  # a launch() LocalCluster
    if isinstance(address, str) and not _is_simulated(servers):
        return address.split(",")
    return None


def check_bootstrap_servers(servers: Any, client: str) -> None:
    """Raise ``KafkaConfigurationError`` unless ``servers`` is a simulated cluster, a
    ``launch()`` cluster, or host:port address(es)."""
    if _is_simulated(servers):
        return
    entries = _address_entries(servers)
    if entries is None:
        raise KafkaConfigurationError(
            f"bootstrap_servers must be a minikafka Cluster, a launch() cluster or 'host:port' "
            f"(or a list of them), not {type(servers).__name__}: {servers!r:.80}")
    try:
        parse_addresses(entries)
    except ValueError as e:
        raise KafkaConfigurationError(f"{client}: {e}") from None


def cluster_for(servers: Any, client: str, config: dict | None = None) -> Any:
    """What the client's node runs in: the simulated cluster itself, or a ``WireCluster``
    (the TCP runtime, bootstrapped from the addresses within the client's ``bootstrap_timeout_ms``).
    Call ``check_bootstrap_servers`` first."""
    if _is_simulated(servers):
        return servers
    # The one reference from the clients to a runtime below them: the address chooses it, as
    # the Cluster object chooses the simulated one. Imported here, so chapters 1-8 never load it.
    from minikafka.wire.client_runtime import WireCluster
    timeout = (config or {}).get("bootstrap_timeout_ms", 30000)
    return WireCluster(parse_addresses(_address_entries(servers)), client=client, bootstrap_timeout_ms=timeout)


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
