"""Hidden properties: verdicts the student's code cannot reach, on inputs it cannot know.

Theory of operation
-------------------
An exercise whose logic the package contains is found *from the package*: a function the
exercise's solution defines whose name is one of Kafka's rules (``minikafka.rules.RULES``) of
the same lecture. For each such rule this module holds a generator, ``DRAWS[name](rng)``, that
draws the ``i``-th argument tuple, taking the cases the rule's statement names in turn
(boundaries, empty inputs, every branch, ``i`` modulo their number) with random values around
them, as plain data and namedtuples.

An exercise whose function is not one of the rules (lecture 09's ``parse_request``,
``api_versions``, ``predict``: the wire protocol, which has no seam in the nodes) is found the
same way, by the name of a function its solution defines, in ``EXERCISES`` (keyed by name and
lecture: ``wire_properties.py``, and lecture 10's Spark functions in ``capstone_properties.py``,
called on drawn fleets and printed as plain rows; each module's theory of operation says what
it draws and where its answer comes from). It is judged by the same call cells;
``api_versions`` is called with the address of a broker the grader serves in its own process
(``grader_broker.py``), whose drawn answer the kernel never holds before the student's code
reads it.

The grader (``grade.py``) draws ``CALLS`` inputs per rule from ``random.Random`` seeded by the
grading run's seed (new per run, unknown to the submission) and the rule's name, and sends them to
the kernel *one at a time*, after the student's code has run: each call cell only calls the
student's function on one input and prints the result as plain data after a nonce (``call_cell``).
The kernel never holds the reference implementation's answer, nor an input before it is used. The
grader parses the printed value (``ast.literal_eval``: plain data only) and compares it with what
the rule's reference, run in the grader's own process, returns (``expected``/``same``). The
verdict is the grader's: a student's code that patches ``print``, the judge or the checks can
only print an answer, and the answer must be Kafka's on inputs drawn after it ran.

Each call also watches the call (``watch.py``: an audit hook installed before the notebook's
first cell, armed around that one call only): running the package's own implementation of the
rule (the rule's reference, found from ``RULES``, and the notebook's ``minikafka.references``)
during the call is reported, so delegating to the package fails the property. The hook signs its
verdict with the answer's text, so a forged or replayed "ok" line fails too (``parse``).

What this does not reach: the package's code run in a thread or process of the function's own,
or re-typed (its answers must still be Kafka's).
``reassign`` (the sticky assignor) has many right answers, so its property is Kafka's contract,
balance, and "moves no more than Kafka's".

Rules with effects (lecture 07's application loops, ``Rule.effects``) return nothing: what they
*do* is their answer. Their draws (``ACTS``) are cases for ``standins.py``: partitions with their
positions, a poll's size, where the process crashes; the call cell runs the student's functions
on the stand-ins (a consumer, a producer, a sink that record every call), sent to the kernel as
source, and prints what they did as plain data. The grader judges it by the guarantee the
exercise states (``judge``), on the same stand-ins running Kafka's recipe in its own process
where a reference is needed: at-least-once commits nothing it has not processed and everything
by the end of the iteration; at-most-once commits before each effect; read-process-write commits
outputs and offsets together, never through ``consumer.commit``; the sink's counts equal the
topic's reports after crashes and rebalances (``count_reports`` runs with the student's
``on_assigned``: one property for the pair). Each accepts every right answer the exercise
accepts (a commit per record, an idempotent sink), not only the recipe's.
"""

from __future__ import annotations

import ast
import functools
import importlib
import random
import struct
from collections import namedtuple
from pathlib import Path
from typing import Any, Callable

from minikafka.course import ast_guard, capstone_properties, standins, watch, wire_properties
from minikafka.rules import RULES, Request, Voter

CALLS = 20  # inputs drawn per rule and grading run (a Spark exercise's: capstone_properties.CALLS)

# The exercise functions that are not rules: lecture 09's wire protocol, lecture 10's Spark pipeline.
EXERCISES = {**wire_properties.EXERCISES, **capstone_properties.EXERCISES}

# The 01 rules' arguments, as the exercises' namedtuples have them (the rules read the fields).
Segment = namedtuple("Segment", "base_offset size first_timestamp")
Batch = namedtuple("Batch", "size max_timestamp last_offset")
LogConfig = namedtuple("LogConfig", "segment_bytes segment_ms")
SegmentInfo = namedtuple("SegmentInfo", "base_offset size newest_timestamp")


def _index(rng: random.Random, i: int) -> tuple:
    base = (0, rng.randrange(1, 10**6), 2**40 + rng.randrange(100))[i % 3]
    n = (0, 1, rng.randrange(2, 12), rng.randrange(2, 12))[i % 4]
    offsets = sorted(rng.sample(range(base, base + 60), n))
    entries = [(o, k * 4096 + rng.randrange(4096)) for k, o in enumerate(offsets)]
    exact = [o for o, _ in entries] or [base]
    target = (base - 1, base, base + rng.randrange(70), rng.choice(exact), rng.choice(exact) + 1)[i % 5]
    return entries, target, base


def _roll(rng: random.Random, i: int) -> tuple:
    """Cases in turn: an empty segment, segment.bytes exactly and one over, segment.ms exactly and
    one over, a relative offset of 2**31 - 1 and 2**31, anything."""
    case = i % 8
    config = LogConfig(rng.randrange(100, 2000), rng.randrange(10, 5000))
    base = rng.choice([0, rng.randrange(1, 10**6), 2**40])
    size = 0 if case == 0 else rng.randrange(1, config.segment_bytes)
    first = rng.randrange(10**6)
    room = config.segment_bytes - size
    bsize = {1: room, 2: room + 1}.get(case, rng.randrange(1, max(2, room)))
    ts = first + {3: config.segment_ms, 4: config.segment_ms + 1}.get(case, rng.randrange(config.segment_ms))
    last = base + {5: 2**31 - 1, 6: 2**31}.get(case, rng.randrange(1000))
    if case == 7:
        bsize, ts = rng.randrange(1, 3000), first + rng.randrange(2 * config.segment_ms)
    return Segment(base, size, first), Batch(bsize, ts, last), config


def _retention(rng: random.Random, i: int) -> tuple:
    """Cases in turn: time only, size only, both, neither; empty segments among them."""
    now = 10**6 + rng.randrange(10**5)
    segments, base, t = [], 0, now - rng.randrange(5000, 20000)
    for _ in range(rng.randrange(2, 7)):
        size = rng.randrange(1, 400)  # only the active segment can be empty, as the exercise says
        t += rng.randrange(0, 4000)
        segments.append(SegmentInfo(base, size, t if size else -1))
        base += rng.randrange(1, 50)
    if i % 4 == 1:  # the active segment holds records: size retention must still keep it
        segments[-1] = segments[-1]._replace(size=rng.randrange(3, 400), newest_timestamp=t)
    total = sum(s.size for s in segments)
    ms = (rng.randrange(0, 20000), -1, rng.randrange(0, 20000), -1)[i % 4]
    nbytes = (-1, (i // 4) % 3, rng.randrange(0, total + 2), -1)[i % 4]
    return segments, now, ms, nbytes


def _murmur(rng: random.Random, i: int) -> tuple:
    return (rng.randbytes((0, 1, 2, 3, 4, 5, 6, 7, 8, rng.randrange(9, 64))[i % 10]),)


def _partition(rng: random.Random, i: int) -> tuple:
    return rng.randbytes(rng.randrange(0, 24)), (1, 2, 3, rng.randrange(4, 1000))[i % 4]


def _assign(rng: random.Random, i: int) -> tuple:
    brokers = rng.sample(range(0, 100), rng.randrange(1, 7))
    rf = rng.randrange(1, len(brokers) + 1)
    return ((0, 1, rng.randrange(2, 30))[i % 3], rf, brokers,
            rng.randrange(len(brokers)), rng.randrange(len(brokers)))


def _elect(rng: random.Random, i: int) -> tuple:
    """Cases in turn: an ISR in another order than the replicas, no live ISR member (clean and
    unclean), unclean allowed while an ISR member lives behind a live out-of-sync replica,
    anything; as lists or tuples."""
    case = i % 4
    replicas = rng.sample(range(1, 9), rng.randrange(2, 5))
    live = set(rng.sample(range(1, 9), rng.randrange(0, 9)))
    if case == 0:
        isr = list(reversed(replicas))
        live |= set(replicas[:2])
    elif case == 1:
        isr = rng.sample(replicas, rng.randrange(0, len(replicas) + 1))
        live = (live - set(isr)) | {replicas[-1]}
    elif case == 2:
        isr = replicas[1:]
        live |= set(replicas[:2])
    else:
        isr = rng.sample(replicas, rng.randrange(0, len(replicas) + 1))
    shape = (list, tuple)[rng.randrange(2)]
    return shape(replicas), shape(isr), shape(sorted(live)), case in (1, 2) or rng.random() < 0.5


def _hw(rng: random.Random, i: int) -> tuple:
    """Cases in turn: no ISR change pending, a pending expansion to a lagging follower, a pending
    shrink, a high watermark above every follower."""
    case = i % 4
    brokers = rng.sample(range(1, 7), rng.randrange(2, 5))
    leader = brokers[0]
    leo = rng.randrange(5, 50)
    follower_leos = {b: rng.randrange(-1, leo + 1) for b in brokers[1:] if rng.random() < 0.85}
    isr = tuple(b for b in brokers if b == leader or rng.random() < 0.6)
    if case == 1 and len(isr) == len(brokers):
        isr = isr[:-1]
    outside = [b for b in brokers if b not in isr]
    pending = None
    if case == 1:  # the ISR is caught up; the follower joining it is not
        for b in isr[1:]:
            follower_leos[b] = rng.randrange(leo // 2 + 1, leo + 1)
        laggard = rng.choice(outside)
        follower_leos[laggard] = rng.randrange(0, leo // 2 + 1)
        pending = isr + (laggard,)
    elif case == 2:
        pending = tuple(b for b in isr if b == leader or rng.random() < 0.5)
    hw = {1: 0, 3: leo + rng.randrange(0, 3)}.get(case, rng.randrange(0, leo + 1))
    return hw, leader, leo, follower_leos, isr, pending


def _caught_up(rng: random.Random, i: int) -> tuple:
    """Cases in turn: a first fetch, a fetch at the leader's end, one at the previous end only,
    one behind both."""
    case = i % 4
    last = rng.randrange(0, 1000)
    end = rng.randrange(1, 60)
    prev = None if case == 0 else (rng.randrange(0, 2000), rng.randrange(0, 50), rng.randrange(0, end))
    offset = {1: end + rng.randrange(0, 2), 2: rng.randrange(prev[2], end) if prev else 0}.get(
        case, rng.randrange(0, (prev[2] if prev else end)) if (prev[2] if prev else end) else 0)
    return last, (rng.randrange(0, 3000), offset, end), prev


def _epochs(rng: random.Random, start: int = 0) -> list:
    entries, offset, epoch = [], start, 0
    for _ in range(rng.randrange(0, 5)):
        epoch += rng.randrange(1, 4)
        entries.append((epoch, offset))
        offset += rng.randrange(0, 20)
    return entries


def _truncation(rng: random.Random, i: int) -> tuple:
    start = rng.choice([0, 0, rng.randrange(1, 10)])
    follower = _epochs(rng, start)
    leo = (follower[-1][1] if follower else start) + rng.randrange(0, 15)
    return rng.randrange(0, 12), rng.randrange(0, 80), follower, leo, start


def _vote(rng: random.Random, i: int) -> tuple:
    """Cases in turn: an older epoch, a newer one (the voter's vote and leader forgotten), the same
    epoch with a vote or a leader, a candidate whose log is behind, level or ahead."""
    case = i % 6
    epoch = rng.randrange(2, 8)
    voter = Voter(epoch, rng.choice([None, 3001, 3002]) if case in (0, 1, 2) else None,
                  3003 if case == 2 and rng.random() < 0.5 else None,
                  rng.randrange(0, epoch + 1), rng.randrange(1, 30))
    request_epoch = epoch + {0: -1, 1: 1}.get(case, 0)
    last_epoch, log_end = {3: (voter.last_epoch - 1, voter.log_end + 5), 4: (voter.last_epoch, voter.log_end - 1),
                           5: (voter.last_epoch, voter.log_end)}.get(
        case, (voter.last_epoch + rng.choice([-1, 0, 1]), voter.log_end + rng.choice([-1, 0, 1])))
    return voter, Request(rng.choice([3001, 3002]), request_epoch, last_epoch, log_end)


def _check_batch(rng: random.Random, i: int) -> tuple:
    """Cases in turn: no producer id, an unknown producer, an older, a newer and the same epoch:
    the next batch (across the 31-bit wrap too), a remembered one, a gap."""
    case = i % 7
    state = {}
    for pid in rng.sample(range(0, 6), rng.randrange(1, 3)):
        first = 2**31 - rng.randrange(1, 12) if rng.random() < 0.4 else rng.randrange(0, 2**31 - 20)
        batches = []
        for _ in range(rng.randrange(1, 4)):
            count = rng.randrange(1, 6)
            batches.append((first, (first + count - 1) % 2**31))
            first = (first + count) % 2**31
        state[pid] = (rng.randrange(1, 5), batches)
    pid = {0: -1, 1: 7}.get(case, rng.choice(sorted(state)))
    known = state.get(pid, (rng.randrange(0, 5), [(0, 0)]))
    epoch = known[0] + {2: -1, 3: 1}.get(case, 0)
    count = rng.randrange(1, 6)
    if case == 4:
        if pid in state and (i // 7) % 2 == 0:  # the sequence wraps after 2**31 - 1
            state[pid] = (known[0], known[1][:-1] + [(2**31 - 3, 2**31 - 1)])
            known = state[pid]
        first = (known[1][-1][1] + 1) % 2**31
    elif case == 5:
        f, l = rng.choice(known[1])
        first, count = f, (l - f) % 2**31 + 1
    elif case == 6:
        first = (known[1][-1][1] + rng.randrange(2, 5)) % 2**31
    else:
        first = rng.choice([0, rng.randrange(0, 2**31)])
    return state, pid, epoch, first, count


def _ready(rng: random.Random, i: int) -> tuple:
    """Cases in turn: one reason at a time (full, batches behind, linger.ms reached, flushing),
    none, anything."""
    case = i % 6
    size, linger = rng.randrange(2, 20000), rng.randrange(1, 200)
    full, behind, waited, flushing = rng.randrange(0, size), 0, rng.randrange(0, linger), False
    if case == 0:
        full = size + rng.randrange(0, 2)
    elif case == 1:
        behind = rng.randrange(1, 4)
    elif case == 2:
        waited = linger + rng.randrange(0, 2)
    elif case == 3:
        flushing = True
    elif case == 5:
        full, behind, waited = rng.randrange(0, size + 10), rng.choice([0, 2]), rng.randrange(0, 300)
        flushing = rng.random() < 0.3
    return full, size, behind, waited, linger, flushing


def _range(rng: random.Random, i: int) -> tuple:
    topics = {f"t{k}": (0, 1, rng.randrange(2, 12), rng.randrange(3, 12))[(i + k) % 4]
              for k in range(rng.randrange(1, 4))}
    members = [f"consumer-{rng.randrange(100)}-{k}" for k in range(rng.randrange(2, 6))]
    rng.shuffle(members)
    return topics, {m: sorted(rng.sample(sorted(topics) + ["ghost"], rng.randrange(1, len(topics) + 2)))
                    for m in members}


def _reassign(rng: random.Random, i: int) -> tuple:
    n = rng.randrange(0, 16)
    old = [f"m{k}" for k in range(rng.randrange(1, 5))]
    previous = {m: [] for m in old}
    for p in range(n):
        previous[rng.choice(old)].append(p)
    members = sorted(set(rng.sample(old, rng.randrange(0, len(old) + 1))) | {f"n{k}" for k in range(rng.randrange(0, 3))})
    return n, previous, members or ["n0"]


def _decode_key(rng: random.Random, i: int) -> tuple:
    def string(text: str) -> bytes:
        data = text.encode()
        return struct.pack(">h", len(data)) + data
    group = "".join(rng.choice("abcxyz-_.é") for _ in range(rng.randrange(0, 12)))
    version = i % 3
    if version < 2:
        return (struct.pack(">h", version) + string(group)
                + string(f"topic{rng.randrange(9)}") + struct.pack(">i", rng.randrange(0, 2**31)),)
    return (struct.pack(">h", 2) + string(group),)


DRAWS: dict[str, Callable[[random.Random, int], tuple]] = {
    "index_lookup": _index, "roll_reason": _roll, "segments_to_delete": _retention,
    "murmur2": _murmur, "partition_for_key": _partition,
    "assign_replicas": _assign, "elect_leader": _elect,
    "high_watermark": _hw, "last_caught_up": _caught_up, "truncation_offset": _truncation,
    "check_batch": _check_batch, "batch_ready": _ready,
    "range_assign": _range, "reassign": _reassign, "decode_key": _decode_key,
    "grant_vote": _vote, "metadata_truncation_offset": _truncation,
}


# --- rules with effects (lecture 07): cases for standins.py --------------------------------------


def _positions(rng: random.Random, empty: bool) -> dict:
    """{partition: (position, end)}: 1 to 3 partitions, each with 0 to 8 records past its position."""
    return {p: (start, start + (0 if empty else rng.randrange(0, 9)))
            for p in range(rng.randrange(1, 4)) for start in [rng.choice([0, rng.randrange(1, 500)])]}


def _iteration_case(rng: random.Random, i: int) -> tuple:
    """Cases in turn: no crash, a crash at the first, the last and a middle record of the poll
    (in ``process`` or ``transform``), an empty poll."""
    case = i % 5
    while True:
        partitions = _positions(rng, case == 4)
        max_records = rng.randrange(1, 11)
        n = min(max_records, sum(end - start for start, end in partitions.values()))
        if n or case == 4:
            break
    crash_at = {0: None, 1: 1, 2: n, 3: rng.randrange(1, n + 1) if n else None}.get(case)
    return partitions, max_records, crash_at


def _sink_case(rng: random.Random, i: int) -> tuple:
    """A run of the counting sink: 1 to 3 partitions of 0 to 8 reports of four trucks, a crash
    before (even ``i``) or after (odd) one of the transactions, and every third run a rebalance
    after 1 to 3 polls of the first process."""
    trucks = tuple(tuple(f"truck-{rng.randrange(1, 5)}" for _ in range(rng.randrange(0, 9)))
                   for _ in range(rng.randrange(1, 4)))
    total = sum(len(t) for t in trucks)
    crash_at = rng.randrange(1, total + 1) if total else None
    polls = (rng.randrange(1, 4),) if i % 3 == 0 else ()
    return trucks, rng.randrange(1, 6), crash_at, i % 2 == 1, polls


ACTS: dict[str, Callable[[random.Random, int], tuple]] = {
    "no_record_lost": _iteration_case, "no_record_twice": _iteration_case,
    "transactional_step": _iteration_case, "count_reports": _sink_case,
}
# A property that runs more than the rule it is named after: count_reports's sink needs the
# exercise's on_assigned (the student's in the kernel, Kafka's recipe here).
WITH = {"count_reports": ("on_assigned",)}


def rules_of(lecture: str | None, names: list[str]) -> list[str]:
    """The rules among ``names`` (functions an exercise defines) that the package holds for that
    lecture and that have a property, in the order given: found from ``RULES``, not from a list of
    exercises. A rule with effects counts when the exercise defines every function its property
    runs (``WITH``). An exercise function that is not a rule counts when
    ``EXERCISES`` has a property for it in that lecture."""
    return [n for n in names if (n in RULES and RULES[n].lecture == lecture
            and (not RULES[n].effects or (n in ACTS and all(w in names for w in WITH.get(n, ())))))
            or (n in EXERCISES and EXERCISES[n].lecture == lecture)]


def statement(name: str) -> str:
    """What the property of ``name`` checks, in words (a rule's statement)."""
    return RULES[name].statement if name in RULES else EXERCISES[name].statement


def served(name: str) -> bool:
    """Is ``name`` called with the address of the grader's broker (``grader_broker.py``)?"""
    return name in EXERCISES and EXERCISES[name].served is not None


def call_args(name: str, case: Any, address: tuple[str, int] | None = None) -> tuple:
    """The arguments a call cell passes for ``case``: the case itself, or, for a property
    served by the grader's broker, the call's part of it with the broker's ``address``."""
    if served(name):
        return EXERCISES[name].served(case, address)
    return tuple(case)


def draw(name: str, seed: int, n: int | None = None) -> list[tuple]:
    """``n`` argument tuples (for a rule with effects: cases) for rule ``name``, from the grading
    run's ``seed``; by default ``CALLS``, or the exercise's own number (a Spark call costs seconds)."""
    if n is None:
        n = (EXERCISES[name].calls if name in EXERCISES else None) or CALLS
    generator = DRAWS.get(name) or ACTS.get(name)
    if generator is None and name in EXERCISES:
        generator = EXERCISES[name].draw
    if generator is None:
        raise KeyError(f"no hidden property for rule {name!r}: add a generator to properties.DRAWS")
    rng = random.Random(f"{seed}/{name}")
    return [generator(rng, i) for i in range(n)]


def plain(value: Any) -> Any:
    """A value as plain data, the way the kernel prints it: namedtuples and lists as tuples, sets sorted."""
    if isinstance(value, (list, tuple)):
        return tuple(plain(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return tuple(sorted(plain(v) for v in value))
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    return value


def expected(name: str, args: tuple) -> Any:
    """The rule's answer, by the package's reference, in the grader's process (for a rule with
    effects: what Kafka's recipe does on the stand-ins)."""
    if name in capstone_properties.EXERCISES:
        raise ValueError(f"{name}'s property is judged by its guarantee (capstone_properties), not one answer")
    if name in EXERCISES:
        return wire_properties.expected(name, args)
    if RULES[name].effects:
        return plain(standins.act(name, args, {n: RULES[n].reference for n in (name,) + WITH.get(name, ())}))
    return RULES[name].reference(*args)


def judge(name: str, args: tuple, theirs: Any) -> str | None:
    """Why the student's plain answer ``theirs`` breaks Kafka's rule on ``args``, in words that
    name the call and what Kafka's rule does but never the input; None if it keeps the rule.
    (For a property served by the grader's broker, ``args`` is (case, what the broker received).)"""
    if name in EXERCISES:
        return EXERCISES[name].judge(args, theirs)
    if RULES[name].effects:
        return _JUDGES[name](args, theirs)
    return None if same(name, args, theirs) else "your code's answer differs from the rule's on one of the drawn inputs"


def same(name: str, args: tuple, theirs: Any) -> bool:
    """Does the student's plain answer ``theirs`` agree with Kafka's rule on ``args``?"""
    if name in EXERCISES:
        return judge(name, args, theirs) is None
    rule = RULES[name]
    if rule.effects:
        return judge(name, args, theirs) is None
    ref = expected(name, args)
    if name == "range_assign":  # {member: partitions}: the order within a member's list is free
        return isinstance(theirs, dict) and {m: sorted(v) for m, v in plain(ref).items()} == \
            {m: sorted(v) for m, v in theirs.items() if isinstance(v, tuple)} and len(theirs) == len(ref)
    if name == "reassign":  # many right answers: Kafka's contract, balanced, moving no more than Kafka's
        if rule.check(dict(zip(rule.parameters, args)), theirs) is not None:
            return False
        owned = sorted(p for ps in theirs.values() for p in ps)
        counts = [len(theirs.get(m, ())) for m in args[2]]
        if owned != list(range(args[0])) or max(counts) - min(counts) > 1:
            return False
        return _moves(args[1], theirs) <= _moves(args[1], ref)
    return theirs == plain(ref)


def _poll_end(case: tuple) -> dict:
    """Each partition's position after the iteration's one poll, as ``standins.Consumer`` polls."""
    partitions, max_records, _ = case
    end, room = {}, max_records
    for p in sorted(partitions):
        start, last = partitions[p]
        taken = min(room, last - start)
        end[p], room = start + taken, room - taken
    return end


def _events(log: Any) -> list[tuple]:
    if not isinstance(log, tuple) or not all(isinstance(e, tuple) and e and isinstance(e[0], str) for e in log):
        raise ValueError("not a log of calls")
    return list(log)


ONE_POLL = "it called consumer.poll {n} times in one iteration; Kafka's loop polls once, then handles what that poll returned"


def _iteration(case: tuple, log: Any) -> tuple[list, dict, dict, str | None]:
    """One iteration's calls, each partition's position before its poll and after it, and
    what is wrong if it did not poll exactly once."""
    events = _events(log)
    start = {p: s for p, (s, _) in case[0].items()}
    polls = sum(e == ("poll",) for e in events)
    return events, start, _poll_end(case), ONE_POLL.format(n=polls) if polls != 1 else None


def _judge_loop(name: str, case: tuple, log: Any) -> str | None:
    """at-least-once (``no_record_lost``) or at-most-once (``no_record_twice``) on one iteration."""
    events, start, end, error = _iteration(case, log)
    if error:
        return error
    processed = [e[1:] for e in events if e[0] == "process"]
    if processed != [e[1:] for e in expected(name, case) if e[0] == "process"]:
        return ("its calls of process(record) differ from Kafka's loop: every record the poll returned, in "
                "order, once, and none after a Crash (let it through: do not catch it)")
    committed, done = dict(start), dict(start)
    for event in events:
        if event[0] == "process":
            p, offset = event[1:]
            done[p] = offset + 1
            if name == "no_record_twice" and committed[p] <= offset:
                return ("it called process(record) on a record whose offset it had not committed yet: a crash "
                        "after that effect processes the record again; Kafka's rule for at-most-once commits "
                        "the poll's positions first, then processes")
        elif event[0] == "commit":
            for p, offset in event[1]:
                if p not in start:
                    return "it committed an offset for a partition the consumer was not given"
                if offset < start[p]:
                    return ("it committed an offset below the partition's position before the poll: a crash "
                            "then repeats records of earlier iterations; Kafka's rule commits the next offset to read")
                if name == "no_record_lost" and offset > done[p]:
                    return ("it called commit with an offset past a record it had not processed yet: a crash "
                            "there loses that record; Kafka's rule for at-least-once processes every record "
                            "the poll returned, then commits")
                if offset > end[p]:
                    return "it committed an offset past the records its poll returned: those records are lost"
                committed[p] = offset
    if ("crash",) not in events and committed != end:
        return ("by the end of an iteration that did not crash, its progress was not committed (each "
                "partition's last record + 1, as commit() with no arguments does): the next crash would "
                "reach into records of earlier iterations")
    return None


def _judge_transactional(case: tuple, log: Any) -> str | None:
    """read-process-write on one iteration: what the committed transactions hold."""
    events, start, end, error = _iteration(case, log)
    if error:
        return error
    if any(e[0] == "commit" for e in events):
        return ("it called consumer.commit: the consumer's offsets then leave outside the transaction, so a "
                "crash between the two loses or repeats outputs; Kafka's rule sends them in the transaction "
                "(producer.send_offsets_to_transaction(offsets, 'upper')), never consumer.commit()")
    outputs: dict[int, list] = {p: [] for p in start}
    offsets = dict(start)
    pending_out: list = []
    pending_offsets: dict = {}
    for event in events:
        kind = event[0]
        if kind in ("send", "offsets") and not event[-1]:
            return (f"it called producer.{'send' if kind == 'send' else 'send_offsets_to_transaction'} with no "
                    f"transaction open; Kafka's rule calls begin_transaction first")
        if kind == "send":
            _, topic, value, p, _ = event
            if topic != "out" or p not in outputs:
                return "it sent an output to another topic or partition than 'out' and the record's own partition"
            pending_out.append((p, value))
        elif kind == "offsets":
            _, items, group, _ = event
            if group != "upper":
                return "it sent the offsets for another group than 'upper' (send_offsets_to_transaction's group)"
            for p, offset in items:
                if p not in start:
                    return "it sent an offset for a partition the consumer was not given"
                pending_offsets[p] = offset
        elif kind in ("begin", "abort transaction"):
            pending_out, pending_offsets = [], {}
        elif kind == "commit transaction" and event[1]:
            for p, value in pending_out:
                outputs[p].append(value)
            offsets.update(pending_offsets)
            pending_out, pending_offsets = [], {}
    for p in start:
        want = [f"order {p}-{k}".encode().upper() for k in range(start[p], offsets[p])]
        if offsets[p] < start[p] or outputs[p] != want:
            return ("the outputs its committed transactions hold and the offsets committed with them disagree "
                    "(an output without its offset, or an offset without its output): Kafka's rule puts every "
                    "output and each partition's last record + 1 in one transaction, then commits it")
    if ("crash",) not in events and offsets != end:
        return ("by the end of an iteration that did not crash, its transaction did not commit the consumer's "
                "progress (each partition's last record + 1, with send_offsets_to_transaction)")
    return None


def _judge_sink(case: tuple, counts: Any) -> str | None:
    """The counting sink's whole run: every truck's count equals its reports in the topic."""
    if not isinstance(counts, dict):
        raise ValueError("not the sink's counts")
    truth: dict[str, int] = {}
    for keys in case[0]:
        for key in keys:
            truth[key] = truth.get(key, 0) + 1
    kafka = ("Kafka's rule stores each partition's next offset in the same sink transaction as the count "
             "and seeks there in on_assigned (or makes the count idempotent)")
    if any(counts.get(t, 0) < n for t, n in truth.items()):
        return (f"after the drawn crashes and rebalances, a truck's count is below its reports in the "
                f"topic: a report was lost; {kafka}")
    if counts != truth:
        return (f"after the drawn crashes and rebalances, a truck's count is above its reports in the "
                f"topic: a report was counted twice; {kafka}")
    return None


_JUDGES: dict[str, Callable[[tuple, Any], str | None]] = {
    "no_record_lost": lambda case, log: _judge_loop("no_record_lost", case, log),
    "no_record_twice": lambda case, log: _judge_loop("no_record_twice", case, log),
    "transactional_step": _judge_transactional, "count_reports": _judge_sink,
}


def _moves(previous: dict, assignment: dict) -> int:
    before = {}
    for member in sorted(previous):
        for p in previous[member]:
            before.setdefault(p, member)
    return sum(1 for member, ps in assignment.items() for p in ps if before.get(p) != member)


def source(value: Any) -> str:
    """Python source that rebuilds ``value`` in the kernel (namedtuples by ``_mk_nt``)."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = " ".join(value._fields)
        return f"_mk_nt({type(value).__name__!r}, {fields!r})({', '.join(source(v) for v in value)})"
    if isinstance(value, tuple):
        return "(" + "".join(source(v) + ", " for v in value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(source(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{source(k)}: {source(v)}" for k, v in value.items()) + "}"
    return repr(value)


# Sent once per call. _mk_plain mirrors plain(); the watch (watch.py) is armed around this call only,
# strictly (the package's implementation must not run at all), and its verdict is signed with the
# answer's text, which is worked out while the watch is armed (a lazy object's repr runs watched).
# Once a call of a rule failed (raised, was interrupted at its time limit), the rule's later calls
# stop at once: an endless loop costs one cell's time limit, not the notebook's budget. (The flag
# is the kernel's: clearing it only runs more calls, which must answer right.)
_CALL = r"""
if globals().get(%(flag)r):
    raise RuntimeError("an earlier call of this function failed")
globals()[%(flag)r] = True
import collections as _mk_c
def _mk_nt(name, fields):
    return _mk_c.namedtuple(name, fields)
def _mk_plain(v):
    if isinstance(v, (list, tuple)):
        return tuple(_mk_plain(x) for x in v)
    if isinstance(v, (set, frozenset)):
        return tuple(sorted(_mk_plain(x) for x in v))
    if isinstance(v, dict):
        return {_mk_plain(k): _mk_plain(x) for k, x in v.items()}
    return v
_mk_args = %(args)s
_mk_out, _mk_text = [], ""
%(arm)stry:
    _mk_r = %(name)s(*_mk_args)
    _mk_text = repr(_mk_plain(_mk_r))
finally:
    __import__("sys").audit(%(event)r, "verdict", _mk_out, %(nonce)r, _mk_text)
print(%(nonce)r + repr((tuple(_mk_out), _mk_text)))
globals()[%(flag)r] = False
"""


# A rule with effects: the stand-ins' source run in a namespace of their own, the student's
# functions called on them by standins.act, what they did printed as plain data.
_ACT = _CALL.replace("_mk_r = %(name)s(*_mk_args)", "_mk_r = _mk_ns['act'](%(name)r, _mk_args, {%(functions)s})").replace(
    "_mk_args = %(args)s", "_mk_ns = {'__name__': '_minikafka_standins'}\nexec(%(standins)r, _mk_ns)\n_mk_args = %(args)s")
assert _ACT != _CALL and "%(standins)r" in _ACT and "_mk_ns['act']" in _ACT

# An exercise whose statement says to refuse some inputs with ValueError (``parse_request``):
# raising it is an answer, printed as ("raised", "ValueError"); any other answer as ("returned", it).
_REFUSING = _CALL.replace("    _mk_r = %(name)s(*_mk_args)\n", """    try:
        _mk_r = ('returned', %(name)s(*_mk_args))
    except ValueError:
        _mk_r = ('raised', 'ValueError')
""")
assert _REFUSING != _CALL


def call_cell(name: str, args: tuple, specs: list[str], names: list[str], nonce: str) -> str:
    """The source of one call: the student's ``name`` on ``args``, watched (``specs`` must not
    run; the program's first cell is ``watch.seal_cell`` with them), its answer printed after
    ``nonce`` with the watch's signed verdict (``parse``); for a rule with effects, the student's
    functions run on the stand-ins with the case ``args``, and the answer is what they did."""
    fields = {"args": source(tuple(args)), "name": name, "nonce": nonce, "event": watch.EVENT,
              "arm": watch.arm_source(specs, names, strict=True), "flag": f"_mk_property_failed_{name}"}
    if name in RULES and RULES[name].effects:
        functions = (name,) + WITH.get(name, ())
        fields.update(standins=Path(standins.__file__).read_text(encoding="utf-8"),
                      functions=", ".join(f"{f!r}: {f}" for f in functions))
        return _ACT % fields
    if name in EXERCISES and EXERCISES[name].refusals:
        return _REFUSING % fields
    if name in EXERCISES and EXERCISES[name].kernel:  # a call of its own (lecture 10: Spark rows as plain data)
        block = "".join(f"    {line}\n" for line in EXERCISES[name].kernel.strip().splitlines())
        return _CALL.replace("    _mk_r = %(name)s(*_mk_args)\n", block.replace("%", "%%")) % fields
    return _CALL % fields


def parse(text: str, nonce: str, key: bytes, armed: str) -> tuple[str, Any] | None:
    """(the watch's verdict, the answer) from a call's stdout; None if it printed no plain answer.
    The verdict is ``watch.UNSIGNED`` unless the grader's hook signed it for this call and answer,
    on a watch armed as ``armed`` (``watch.armed_text``)."""
    said = watch.read(text, nonce, key, armed)
    if said is None:
        return None
    verdict, answer = said
    try:
        return verdict, ast_guard.literal_eval(answer)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


PACKAGE = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def _package_functions() -> dict[str, tuple[str, ...]]:
    """{name: ("module:name", ...)}: the package's top-level functions, read from its source (not
    imported), the course's own modules left out."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "course" in parts:
            continue
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            tree = ast_guard.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.setdefault(node.name, []).append(f"{module}:{node.name}")
    return {name: tuple(specs) for name, specs in found.items()}


def package_specs(names: list[str]) -> list[str]:
    """The package's own functions named as the exercise's are (``to_positive``,
    ``end_offset_for``, ...): found from the package's source, so a new exercise needs no list."""
    table = _package_functions()
    return [spec for name in names for spec in table.get(name, ()) if _importable(spec)]


@functools.lru_cache(maxsize=None)
def _importable(spec: str) -> bool:
    """Can the watch import it (the kernel has the grader's environment)? A module needing an
    optional dependency that is missing is left out rather than failing every call."""
    module, _, qualname = spec.partition(":")
    try:
        return callable(getattr(importlib.import_module(module), qualname, None))
    except Exception:  # noqa: BLE001 - any import failure means: not watchable here
        return False


def reference_specs(name: str) -> list[str]:
    """The package's own code that must not run inside the student's ``name``: the rule's
    reference, or what ``wire_properties.forbidden`` finds for an exercise that is not a rule."""
    if name in EXERCISES:
        return [spec for spec in wire_properties.forbidden(EXERCISES[name]) if _importable(spec)]
    return [reference_spec(name)]


def reference_spec(name: str) -> str:
    """The package's own implementation of rule ``name`` as the watch names it, module:qualname."""
    ref = RULES[name].reference
    return f"{ref.__module__}:{ref.__qualname__}"
