"""Rules: the decisions a lecture teaches, as plain functions the brokers call through one seam.

Theory of operation
-------------------
A broker is mostly bookkeeping around a few small decisions, each one a rule of Kafka's that
fits in a few lines: what the high watermark is now, whether a follower's fetch shows it was
caught up, where a returning replica cuts its log. Each is a ``Rule`` here: a name, the
function's signature (the exercise's signature, word for word), Kafka's rule in one sentence,
its *reference* implementation, and a contract on what it may return.

The package calls every rule through a ``Rules`` object, one attribute per rule:
``Partition`` asks ``rules.high_watermark(...)`` and ``rules.last_caught_up(...)``,
``ReplicaManager`` asks ``rules.truncation_offset(...)``. ``REFERENCE`` (the default everywhere)
holds the reference functions themselves, unwrapped, so the seam costs one attribute lookup and
changes nothing (``benchmarks/sim_fingerprint.txt`` proves it). There is no second code path:
the reference *is* what the brokers run.

``Rules({"high_watermark": my_fn}, node=2, clock=...)`` puts a student's function in place of
the reference, wrapped in a guard (``_Guarded``). The guard treats the function as untrusted:

- it passes copies of the arguments (a function that mutates them cannot corrupt the broker);
- an exception, a value of the wrong type or one that breaks the rule's contract (a high
  watermark above the log end or below the old one, a caught-up time in the future...) stops
  the run with one ``RuleError`` naming the rule, the node, the simulated time, the
  arguments, what the function returned and what Kafka's rule returns;
- a call that runs longer than ``budget_s`` of wall time (a loop that never ends) is
  interrupted and reported the same way, where the platform can interrupt a running
  function (``_deadline``: a Unix interval timer in the main thread; elsewhere no budget);
- every call is counted, and each call whose answer differs from Kafka's is kept in a
  ``RuleTrace`` (the first ``RuleTrace.keep``): the judge's timeline shows them.

A ``RuleError`` raised inside the simulated world propagates out of ``Cluster.advance`` /
``run_until``, which close the cluster first: the run stops cleanly, and the notebook shows
the message.

The rules of notebook 04 (replication and the ISR):

==================  ===========================================================================
high_watermark      ``Partition.maybe_increment_high_watermark``: the least LEO in the maximal
                    ISR, never backwards
last_caught_up      ``Partition.update_follower_fetch_state``: the follower's last caught-up
                    time after one more of its fetches
truncation_offset   ``ReplicaManager.handle_fetch_response``: where a follower cuts its log when
                    the leader answers "diverging at (epoch, end)"
==================  ===========================================================================

The rules of notebook 06 (consumer groups), called by the group's *leader* (a consumer: in
Kafka's classic protocol the coordinator only collects the members and passes their
subscriptions to one of them), in the shape of kafka-python's
``AbstractPartitionAssignor.assign(cluster, members) -> {member: assignment}`` cut down to
what the rule needs (partition counts for the cluster, topic lists for the members):

==================  ===========================================================================
range_assign        ``RangeAssignor.assign``: ``{member: [(topic, partition)]}`` for
                    ``{topic: partition count}`` and ``{member: [topics]}``
reassign            ``StickyAssignor.assign`` for one topic every member reads:
                    ``{member: [partitions]}`` for (partitions, what each owned, the members)
==================  ===========================================================================
"""

from __future__ import annotations

import inspect
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from minikafka.assignors import range_assign, reassign
from minikafka.errors import IllegalArgumentError

# --- the reference implementations (Kafka's rules) -------------------------------------------------


def high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr):
    """The leader's new high watermark: the least log end offset among the leader and the
    followers of the maximal ISR (committed or pending, KIP-497), never below ``hw``.
    ``follower_leos``: {broker: LEO at its last fetch, -1 before any}."""
    candidate = leader_leo
    members = isr if pending_isr is None else set(isr).union(pending_isr)
    for b in members:
        if b != leader:
            leo = follower_leos.get(b, -1)
            if leo < candidate:
                candidate = leo
    return candidate if candidate > hw else hw


def last_caught_up(last_caught_up_ms, fetch, previous_fetch):
    """A follower's last caught-up time after one more fetch. ``fetch`` and
    ``previous_fetch`` are ``(time_ms, fetch_offset, leader_leo)``; ``previous_fetch`` is
    None before the follower's first fetch to this leader."""
    time_ms, fetch_offset, leader_leo = fetch
    if fetch_offset >= leader_leo:
        return time_ms if time_ms > last_caught_up_ms else last_caught_up_ms
    if previous_fetch is not None and fetch_offset >= previous_fetch[2]:
        return previous_fetch[0] if previous_fetch[0] > last_caught_up_ms else last_caught_up_ms
    return last_caught_up_ms


def end_offset_for(entries, epoch, log_end_offset):
    """In a leader epoch cache ``[(epoch, start_offset), ...]``: (the largest epoch <=
    ``epoch``, the offset where it ends), or (-1, -1) if there is none."""
    found = -1
    for i, (e, _) in enumerate(entries):
        if e <= epoch:
            found = i
    if found < 0:
        return -1, -1
    end = entries[found + 1][1] if found + 1 < len(entries) else log_end_offset
    return entries[found][0], end


def truncation_offset(leader_epoch, leader_end_offset, follower_epochs, follower_leo, follower_log_start):
    """Where a follower cuts its log when its leader answers "diverging at (``leader_epoch``,
    ``leader_end_offset``)": at the end of that epoch in the follower's own cache, or the
    leader's end if that is lower; at its log start if it has no epoch at or below the
    leader's (nothing in common)."""
    my_epoch, my_end = end_offset_for(follower_epochs, leader_epoch, follower_leo)
    target = min(leader_end_offset, my_end) if my_epoch >= 0 else follower_log_start
    return max(target, 0)


# --- the rules: names, signatures, statements, contracts -----------------------------------------------


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_high_watermark(args: dict, value: Any) -> str | None:
    if not _int(value):
        return f"it returned {type(value).__name__} {value!r}, not an int offset"
    if value < args["hw"]:
        return f"it moved the high watermark backwards, from {args['hw']} to {value}"
    if value > args["leader_leo"]:
        return f"it put the high watermark at {value}, above the leader's log end {args['leader_leo']}"
    return None


def _check_last_caught_up(args: dict, value: Any) -> str | None:
    if not _int(value):
        return f"it returned {type(value).__name__} {value!r}, not a time in ms"
    if value < args["last_caught_up_ms"]:
        return f"it moved the caught-up time backwards, from {args['last_caught_up_ms']} to {value}"
    if value > args["fetch"][0]:
        return f"it says the follower was caught up at {value}, after the fetch at {args['fetch'][0]}"
    return None


def _check_truncation_offset(args: dict, value: Any) -> str | None:
    if not _int(value):
        return f"it returned {type(value).__name__} {value!r}, not an int offset"
    if value < 0:
        return f"it cut the log at a negative offset ({value})"
    if value > args["follower_leo"]:
        return f"it cut the log at {value}, past its end {args['follower_leo']}: a cut never lengthens a log"
    return None


def _check_assignment(value: Any, members: Any, partition_ok: Callable[[Any], str | None], what: str) -> str | None:
    """What is wrong with an assignor's answer as a data structure (which member gets what is
    the tester's to judge: two owners, none, unbalanced reach the members as they are)."""
    if not isinstance(value, dict):
        return f"it returned {type(value).__name__} {value!r}, not a dict {{member: [{what}]}}"
    for member, assigned in value.items():
        if member not in members:
            return f"it assigned to {member!r}, who is not a member of the group"
        if not isinstance(assigned, (list, tuple)):
            return f"it gave {member!r} {type(assigned).__name__} {assigned!r}, not a list of {what}"
        for item in assigned:
            problem = partition_ok(item)
            if problem is not None:
                return f"it gave {member!r} {item!r}: {problem}"
    return None


def _check_range_assign(args: dict, value: Any) -> str | None:
    counts = args["partitions_per_topic"]

    def ok(item: Any) -> str | None:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            return "not a (topic, partition) pair"
        topic, p = item
        if topic not in counts:
            return f"the leader knows no topic {topic!r}"
        if not _int(p) or not 0 <= p < counts[topic]:
            return f"{topic!r} has partitions 0 to {counts[topic] - 1}"
        return None
    return _check_assignment(value, args["subscriptions"], ok, "(topic, partition)")


def _check_reassign(args: dict, value: Any) -> str | None:
    n = args["num_partitions"]

    def ok(p: Any) -> str | None:
        return None if _int(p) and 0 <= p < n else f"the topic has partitions 0 to {n - 1}"
    return _check_assignment(value, args["members"], ok, "partitions")


@dataclass(frozen=True)
class Rule:
    """One decision of Kafka's: its reference implementation and its contract."""

    name: str
    lecture: str  # the notebook whose exercise it is
    reference: Callable
    statement: str  # Kafka's rule, in one sentence
    where: str  # the package's caller
    check: Callable[[dict, Any], str | None]  # None, or what is wrong with a returned value

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.reference).parameters)

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.parameters)})"


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("high_watermark", "04", high_watermark,
         "the least log end offset among the leader and the followers in the ISR, counting a pending "
         "ISR change too (KIP-497); it never moves backwards",
         "Partition.maybe_increment_high_watermark", _check_high_watermark),
    Rule("last_caught_up", "04", last_caught_up,
         "a fetch at or past the leader's log end makes the follower caught up now; one at or past the "
         "leader's log end at its previous fetch, caught up then; the time never moves backwards",
         "Partition.update_follower_fetch_state", _check_last_caught_up),
    Rule("truncation_offset", "04", truncation_offset,
         "cut at the end of the leader's diverging epoch as the follower's own epoch cache has it "
         "(the lower of the two ends), or at the log start if nothing is in common (KIP-101, KIP-279)",
         "ReplicaManager.handle_fetch_response", _check_truncation_offset),
    Rule("range_assign", "06", range_assign,
         "per topic, its subscribers sorted by member id get contiguous ranges, n // m partitions each and "
         "one more for the first n % m; every member is in the answer",
         "RangeAssignor.assign, run by the group's leader (ConsumerCoordinator._leader_sync)", _check_range_assign),
    Rule("reassign", "06", reassign,
         "balanced (counts differ by at most one), keeping every partition with its previous owner that "
         "balance allows: only the surplus of members over their quota moves",
         "StickyAssignor.assign, run by the group's leader (ConsumerCoordinator._leader_sync)", _check_reassign),
)}


def _on(node: Any) -> str:
    """Where a rule ran: a broker's id, or a client's node ("consumer-7")."""
    return f"broker {node}" if isinstance(node, int) else str(node)


# --- a student's rule under guard ----------------------------------------------------------------------


class RuleError(Exception):
    """A rule raised, hung, or returned something no broker could act on."""

    def __init__(self, call: "RuleCall", problem: str) -> None:
        self.call = call
        self.problem = problem
        super().__init__(self._message())

    def _message(self) -> str:
        c = self.call
        rule = RULES[c.rule]
        args = ", ".join(f"{k}={v!r}" for k, v in c.args.items())
        return (f"your rule {c.rule} broke on {_on(c.node)} at t={c.time_ms} ms: {self.problem}\n"
                f"  called with: {c.rule}({args})\n"
                f"  it returned: {c.returned_text}\n"
                f"  Kafka's rule returns: {c.reference!r} ({rule.statement})\n"
                f"  the cluster is stopped.")


@dataclass(frozen=True)
class RuleCall:
    time_ms: int
    node: Any
    rule: str
    args: dict
    returned: Any
    reference: Any
    raised: str | None = None  # what happened instead of a value: "raised ...", "nothing: ..."

    @property
    def returned_text(self) -> str:
        return f"({self.raised})" if self.raised is not None else repr(self.returned)

    def line(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return (f"t={self.time_ms:>6} ms  {_on(self.node)}: {self.rule}({args}) -> {self.returned_text}; "
                f"Kafka's rule: {self.reference!r}")


@dataclass
class RuleTrace:
    """What a cluster's guarded rules did: calls per rule, and the calls whose answer
    differed from Kafka's (the first ``keep``)."""

    keep: int = 200
    calls: dict[str, int] = field(default_factory=dict)
    differing: list[RuleCall] = field(default_factory=list)
    differing_count: int = 0
    error: RuleError | None = None
    on_error: Callable[[RuleError], None] | None = None  # the cluster's: stop every node

    def note(self, call: RuleCall) -> None:
        self.differing_count += 1
        if len(self.differing) < self.keep:
            self.differing.append(call)


class RuleTimeout(BaseException):
    """Raised into a rule that ran past its budget (a BaseException: ``except Exception`` in
    the student's code cannot swallow it)."""


@contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Interrupt the body after ``seconds`` of wall time, where the platform allows: a Unix
    interval timer, in the main thread, restoring any timer and handler already set (a test
    runner's). Elsewhere (Windows, another thread) the body runs without a budget."""
    if (seconds is None or not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()):
        yield
        return

    def expired(signum, frame):
        raise RuleTimeout()

    old_handler = signal.signal(signal.SIGALRM, expired)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay:
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - started), 1e-3), old_interval)


def _copy(value: Any, depth: int = 1) -> Any:
    """A copy of an argument, and of the lists and dicts inside it (one level: an assignor's
    ``{member: [topics]}``)."""
    if isinstance(value, dict):
        return {k: _copy(v, depth - 1) for k, v in value.items()} if depth > 0 else dict(value)
    if isinstance(value, list):
        return [_copy(v, depth - 1) for v in value] if depth > 0 else list(value)
    return value


class _Guarded:
    """A student's function in a rule's place (see the module docstring)."""

    __slots__ = ("rule", "fn", "node", "clock", "trace", "budget_s")

    def __init__(self, rule: Rule, fn: Callable, node: Any, clock: Callable[[], int], trace: RuleTrace,
                 budget_s: float | None) -> None:
        self.rule, self.fn, self.node, self.clock, self.trace, self.budget_s = rule, fn, node, clock, trace, budget_s

    def __call__(self, *args: Any) -> Any:
        rule = self.rule
        named = dict(zip(rule.parameters, args))
        self.trace.calls[rule.name] = self.trace.calls.get(rule.name, 0) + 1
        reference = rule.reference(*args)
        raised, value, problem = None, None, None
        try:
            with _deadline(self.budget_s):
                value = self.fn(*(_copy(a) for a in args))
        except RuleTimeout:
            raised = f"nothing: still running after {self.budget_s} s"
            problem = f"it was still running after {self.budget_s} s of wall time (a loop that never ends?)"
        except Exception as e:  # the student's code: anything it raises is reported
            raised = f"raised {type(e).__name__}: {e}"
            problem = f"it {raised}"
        call = RuleCall(self.clock(), self.node, rule.name, named, value, reference, raised)
        if problem is None:
            problem = rule.check(named, value)
        if problem is not None:
            error = RuleError(call, problem)
            error.trace = self.trace  # what the rules did before: the judge's timeline
            self.trace.error = error
            if self.trace.on_error is not None:
                self.trace.on_error(error)
            raise error
        if value != reference:
            self.trace.note(call)
        return value


class Rules:
    """The rules one node calls, one attribute per rule (``rules.high_watermark(...)``).

    ``Rules()`` is Kafka's (the references); ``Rules({"high_watermark": fn}, node=..., clock=...)``
    runs ``fn`` under guard in its place and the references for the rest."""

    def __init__(self, overrides: Mapping[str, Callable] | None = None, *, node: Any = None,
                 clock: Callable[[], int] = lambda: -1, trace: RuleTrace | None = None,
                 budget_s: float | None = 2.0) -> None:
        overrides = validate(overrides)
        self.trace = trace if trace is not None else RuleTrace()
        self.custom = tuple(sorted(overrides))
        for name, rule in RULES.items():
            fn = overrides.get(name)
            setattr(self, name, rule.reference if fn is None or fn is rule.reference
                    else _Guarded(rule, fn, node, clock, self.trace, budget_s))

    def __repr__(self) -> str:
        if not self.custom:
            return "<Rules: Kafka's>"
        return f"<Rules: yours for {', '.join(self.custom)}; Kafka's for the rest>"


def validate(overrides: Mapping[str, Callable] | None) -> dict[str, Callable]:
    """Check a ``rules=`` argument: known names, callables taking the rule's arguments."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise IllegalArgumentError(f"rules must be a dict {{rule name: function}}, not {overrides!r}")
    out = {}
    for name, fn in overrides.items():
        rule = RULES.get(name)
        if rule is None:
            raise IllegalArgumentError(f"no rule named {name!r}; the rules are {', '.join(RULES)}")
        if not callable(fn):
            raise IllegalArgumentError(f"rules[{name!r}] must be a function {rule.signature}, not {fn!r}")
        try:
            inspect.signature(fn).bind(*rule.parameters)
        except TypeError:
            raise IllegalArgumentError(
                f"rules[{name!r}] must take the arguments {rule.signature}, "
                f"but {getattr(fn, '__name__', fn)}{inspect.signature(fn)} cannot") from None
        except ValueError:  # no signature to read (a builtin): let the call tell
            pass
        out[name] = fn
    return out


REFERENCE = Rules()


def table() -> str:
    """The rules, their signatures and Kafka's statement of each."""
    return "\n".join(f"{r.lecture}  {r.signature}\n    {r.statement}\n    called in {r.where}"
                     for r in RULES.values())

