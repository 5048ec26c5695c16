"""A student's rules in real broker and controller processes: shipped, loaded, and reported.

Theory of operation
-------------------
``Cluster(rules={...})`` hands a student's functions (``minikafka.rules``) to its nodes in the
same Python process. ``launch(rules={...})`` starts the nodes as *other* processes, so the
functions must travel. They are shipped the way PySpark ships a lambda to its workers: pickled
with ``cloudpickle``, which writes a function defined in a notebook (or in ``my_rules``'s
namespace of its own) *by value*: its code, its defaults, the globals it reads. Three steps:

1. **The launcher** (``LocalCluster``) checks the rules as ``Cluster`` does (``rules.validate``:
   known names, callables of the right arity), pickles them (``pickled``) and ``save`` writes them once, to
   ``DIR/rules.pickle`` (mode 0600: it is code, and the nodes run it), with the wall-clock time
   of the launch. Every node gets ``--rules-file DIR/rules.pickle``; a restarted node reads the
   same file.
2. **A node process** (``minikafka server``/``controller``) ``load``s the file and builds its
   ``Rules`` with ``node_rules``, exactly as the simulated cluster builds each node's: the
   student's functions under the same guard (``rules._Guarded``: copies of the arguments, the
   contract checked, the wall-time budget for a call that hangs, the reference's answer beside
   theirs), the references for every rule not given. Only the clock differs: the simulated
   time becomes *wall-clock milliseconds since the launch*, so ``t=`` in the message is the
   time on the launcher's own clock, the same for every node and across restarts.
3. **A rule that breaks** (raises, hangs, returns nonsense) raises ``RuleError`` in the node,
   whose guard first calls ``trace.on_error``: here ``stop``, which writes the rule's name and
   the one RuleError message to ``DIR/<node>.rule-error`` (JSON) and the message to the
   process's log (``broker-2.out``), then ends the process with ``RULE_ERROR_EXIT``. The node stops as a crashed one does (its log
   directory stays, ``restart`` recovers it), and says why. The launcher reads that file:
   ``LocalCluster.check()`` (the health check) raises ``NodeStopped`` naming the node and the
   rule, with the message; ``wait_until_ready`` and ``restart`` raise it as soon as a node
   stops that way, instead of waiting out a timeout.

What does not travel: a rule that a *client* calls (``murmur2``, ``partition_for_key``, the
assignors) runs in the client, and the clients of a launched cluster are kafka-python or
librdkafka, which have their own; the nodes only call the rules brokers and controllers call.

Never: a rules file is only ever read by the nodes of the launch that wrote it (unpickling runs
code: the file lives in the cluster's own directory, written by the student's own Python).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from minikafka.errors import IllegalArgumentError
from minikafka.rules import RuleError, Rules, RuleTrace, node_name, validate

RULES_FILE = "rules.pickle"
RULE_ERROR_EXIT = 3  # a node's exit code when a student's rule stopped it
RULE_ERROR_SUFFIX = ".rule-error"


class NodeStopped(RuntimeError):
    """A node of a launched cluster stopped because a student's rule broke in it: the message
    is the rule's ``RuleError`` message, as that node wrote it. ``node``: its id; ``rule``: the
    rule's name."""

    def __init__(self, node: Any, rule: str, message: str) -> None:
        self.node = node
        self.rule = rule
        super().__init__(message)

    def _render_traceback_(self) -> list[str]:  # IPython: the message, not a traceback
        return [f"NodeStopped: {self}"]


def pickled(overrides: Mapping[str, Callable] | None, launched_at_ms: int) -> bytes | None:
    """Check ``overrides`` as ``Cluster(rules=)`` does and pickle them by value, with the launch's
    wall-clock time; None when there are none (the nodes run Kafka's rules)."""
    rules = validate(overrides)
    if not rules:
        return None
    try:
        import cloudpickle
    except ImportError:  # pragma: no cover - a dependency of the package
        raise IllegalArgumentError("launch(rules=...) ships the functions with cloudpickle: pip install cloudpickle")
    try:
        return cloudpickle.dumps({"rules": rules, "launched_at_ms": launched_at_ms})
    except Exception as e:
        raise IllegalArgumentError(
            f"launch(rules=...) could not ship your rules to the node processes: {type(e).__name__}: {e} "
            f"(a rule's function, or something it reads, cannot be pickled: an open file, a lock, a cluster?)"
        ) from None


def save(data: bytes | None, directory: str | Path) -> Path | None:
    """Write what ``pickled`` made to ``directory/rules.pickle`` (mode 0600); None if nothing."""
    if data is None:
        return None
    path = Path(directory) / RULES_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def load(path: str | Path) -> tuple[dict[str, Callable], int]:
    """The rules in a file ``save`` wrote, and the launch's wall-clock time in ms."""
    import pickle

    import cloudpickle  # noqa: F401 - the file refers to its helpers

    with open(path, "rb") as f:
        shipped = pickle.load(f)
    return validate(shipped["rules"]), int(shipped["launched_at_ms"])


def error_file(directory: str | Path, node: Any, controller: bool) -> Path:
    """Where a node writes the message of the rule that stopped it."""
    return Path(directory) / f"{'controller' if controller else 'broker'}-{node}{RULE_ERROR_SUFFIX}"


def stop(error: RuleError, path: Path, exit: Callable[[int], Any] = os._exit) -> None:
    """A node's ``RuleTrace.on_error``: write the rule and its message (to ``path`` as JSON,
    whole or not at all, and to the log), then end the process."""
    # The simulated cluster stops as a whole; here only this process does.
    message = str(error).replace("  the cluster is stopped.", "  this node has stopped; the others run on.")
    text = (f"{node_name(error.call.node)} stopped by your rule {error.call.rule} "
            f"(t= below counts wall-clock ms since the launch)\n{message}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"rule": error.call.rule, "message": text}))
    os.replace(tmp, path)
    print(text, file=sys.stderr, flush=True)
    sys.stdout.flush()
    exit(RULE_ERROR_EXIT)


def node_rules(path: str | Path, node: Any, error_path: Path, *, clock_ms: Callable[[], int] | None = None,
               exit: Callable[[int], Any] = os._exit) -> Rules:
    """The ``Rules`` a node process runs on: the student's from ``path`` under guard, labelled
    ``node`` as the simulated cluster labels it (a broker's id, "controller 3000"), on the
    wall clock since the launch; a broken rule ``stop``s the process."""
    overrides, launched_at_ms = load(path)
    now = clock_ms if clock_ms is not None else (lambda: time.time_ns() // 1_000_000)
    trace = RuleTrace(on_error=lambda error: stop(error, error_path, exit))
    return Rules(overrides, node=node, clock=lambda: now() - launched_at_ms, trace=trace)


def read_stopped(path: Path, node: Any) -> NodeStopped | None:
    """The ``NodeStopped`` a node's error file describes, or None if it wrote none."""
    try:
        said = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return NodeStopped(node, said["rule"], said["message"])
