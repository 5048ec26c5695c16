"""The layers of DESIGN.md held against the package's imports, so mended drifts stay mended.

Each layer imports only from the layers above it (records, storage, messages, broker,
controller, clients, runtimes, teaching). The drifts issue 36 named, and what now forbids
each from coming back:

- the clients took ListOffsets' special timestamps from ``storage/log.py``: they are the
  protocol's (``minikafka.messages``), and nothing outside storage takes them from storage
  (the Spark stream reader's plain-socket ``offset_client`` writes its own, to import no more
  than it must: issue 16);
- the consumer's network client took ``ClusterMetadata`` from the producer's ``sender.py``:
  it has its own module, and every import of it names that module;
- the sans-I/O clients must open no socket and start no thread: no client module imports an
  I/O or clock module, and the one reference to a runtime below them is ``bootstrap``'s
  ``cluster_for`` choosing the TCP runtime for a ``host:port`` address;
- the Raft quorum state fsynced its directory itself: the raft package reaches the disk only
  through storage's ``Disk`` (no ``os``, no platform layer of its own);
- the group and transaction coordinators reached through the whole broker
  (``self.broker.replica_manager.partitions``, 51 times): they are given a
  ``CoordinatorContext`` (time, timers, metadata, their internal partitions) and may neither import
  the broker nor keep a reference to it.

The checks read the source (``ast``), so they run nothing of the package.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "minikafka"

# What the clients layer may not import: the layers below it and the runtimes and teaching beside them.
BELOW_CLIENTS = ("minikafka.storage", "minikafka.broker", "minikafka.controller", "minikafka.raft",
                 "minikafka.metadata", "minikafka.sim", "minikafka.wire", "minikafka.cluster", "minikafka.spark",
                 "minikafka.tools", "minikafka.course", "minikafka.checker", "minikafka.dashboards",
                 "minikafka.viz", "minikafka.widgets", "minikafka.feed", "minikafka.cli", "minikafka.platform")
IO_AND_CLOCKS = ("socket", "selectors", "ssl", "select", "asyncio", "threading", "subprocess", "multiprocessing",
                 "os", "time", "datetime", "shutil")
# The one runtime a client module may name, where it may name it: the address chooses the TCP runtime.
CLIENT_RUNTIME_DOOR = ("bootstrap.py", "cluster_for", "minikafka.wire.client_runtime")


@functools.cache  # every test walks the same files: each is parsed once
def imports(path: Path) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(enclosing function or "", module, names) for every import in ``path``."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Import):
                found.extend((function, alias.name, ()) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((function, child.module, tuple(alias.name for alias in child.names)))
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), "")
    return tuple(found)


def modules(*parts: str) -> list[Path]:
    return sorted(PACKAGE.joinpath(*parts).rglob("*.py"))


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_clients_import_no_layer_below_them_but_the_tcp_runtime_their_bootstrap_chooses():
    drifts = []
    for path in modules("clients"):
        for function, module, _ in imports(path):
            if under(module, BELOW_CLIENTS) and (path.name, function, module) != CLIENT_RUNTIME_DOOR:
                drifts.append(f"clients/{path.name} ({function or 'module level'}) imports {module}")
    assert drifts == []


def test_the_clients_open_no_socket_start_no_thread_and_read_no_clock():
    drifts = [f"clients/{path.name} imports {module}" for path in modules("clients")
              for _, module, _ in imports(path) if under(module, IO_AND_CLOCKS)]
    assert drifts == []


def test_listoffsets_special_timestamps_come_from_the_protocol_not_from_storage():
    specials = {"EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP"}
    drifts = []
    for path in modules():
        inside_storage = PACKAGE / "storage" in path.parents
        for _, module, names in imports(path):
            if specials & set(names) and under(module, ("minikafka.storage",)) and not inside_storage:
                drifts.append(f"{path.relative_to(PACKAGE)} takes {sorted(specials & set(names))} from {module}")
    assert drifts == []


def test_cluster_metadata_is_imported_from_its_own_module_only():
    drifts = [f"{path.relative_to(PACKAGE)} takes ClusterMetadata from {module}" for path in modules()
              for _, module, names in imports(path)
              if "ClusterMetadata" in names and module != "minikafka.clients.cluster_metadata"]
    assert drifts == []


def test_raft_reaches_the_disk_only_through_storage():
    drifts = [f"raft/{path.name} imports {module}" for path in modules("raft")
              for _, module, _ in imports(path)
              if under(module, ("os", "shutil", "fcntl", "minikafka.platform", "socket"))]
    assert drifts == []


COORDINATORS = ("group_coordinator.py", "transaction_coordinator.py", "transaction_state_manager.py")


def test_the_coordinators_ask_their_context_never_the_broker():
    drifts = []
    for name in COORDINATORS:
        path = PACKAGE / "broker" / name
        drifts += [f"broker/{name} imports {module}" for _, module, _ in imports(path)
                   if under(module, ("minikafka.broker.broker", "minikafka.broker.replica_manager"))]
        drifts += [f"broker/{name}:{node.lineno} reaches {ast.unparse(node)}"
                   for node in ast.walk(ast.parse(path.read_text(), str(path)))
                   if isinstance(node, ast.Attribute) and node.attr in ("broker", "replica_manager")]
    assert drifts == []
