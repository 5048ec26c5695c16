"""The analysis: from a history to a verdict, with Jepsen's Kafka anomalies.

Theory of operation
-------------------
Every offset of a partition holds one value, forever; every value is written once. A run
that keeps those promises shows none of the five anomalies Jepsen's ``kafka`` workload
names (``jepsen.tests.kafka``), each judged from the history alone:

=======================  ===================================================================
``lost-write``           a send was acknowledged, yet its value is nowhere in the final read
                         of its partition (log start to high watermark, after healing)
``duplicate``            one value read at two or more offsets
``inconsistent-offsets`` two different values at one offset: two reads disagree, or a read
                         disagrees with the offset the ack gave
``nonmonotonic-poll``    one reader's successive records of a partition go backwards (or
                         repeat) in offset
``poll-skip``            one reader's successive records jump over offsets that exist (some
                         read, the final one included, saw them)
=======================  ===================================================================

Every anomaly is kept as an ``Anomaly`` (kind, partition, offsets, values, reader) so a
report can show examples; counts are per value (lost, duplicate), per offset
(inconsistent) or per step of a reader (nonmonotonic, skip).

A partition whose final read did not complete cannot be judged for lost writes: the
report names it in ``unchecked`` and is not ``ok`` (a checker that cannot see must not
say "fine").

Everything is sorted before it is shown, so the same history gives the same table.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable

from minikafka.checker.history import OK, History

LOST_WRITE = "lost-write"
DUPLICATE = "duplicate"
INCONSISTENT_OFFSETS = "inconsistent-offsets"
NONMONOTONIC_POLL = "nonmonotonic-poll"
POLL_SKIP = "poll-skip"
ANOMALIES = (LOST_WRITE, DUPLICATE, INCONSISTENT_OFFSETS, NONMONOTONIC_POLL, POLL_SKIP)

_DIGITS = re.compile(r"(\d+)")


def natural_key(value: Hashable) -> tuple:
    """Sort "v-2" before "v-10" (values are numbered), and anything against anything."""
    text = str(value)
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in _DIGITS.split(text) if part)


def _tp_name(topic: str, partition: int | None) -> str:
    return f"{topic}-{partition}"


def _offsets_text(offsets: Iterable[int], limit: int = 6) -> str:
    offsets = list(offsets)
    shown = ", ".join(map(str, offsets[:limit]))
    return shown + (f", ... ({len(offsets)} in all)" if len(offsets) > limit else "")


@dataclass(frozen=True)
class Anomaly:
    """One instance of an anomaly, with what a reader needs to find it again."""

    kind: str
    topic: str
    partition: int
    offsets: tuple[int, ...]
    values: tuple[Hashable, ...]
    reader: str | None = None
    detail: str = ""

    @property
    def value(self) -> Hashable | None:
        return self.values[0] if self.values else None

    def sort_key(self) -> tuple:
        return (self.topic, self.partition, self.offsets, tuple(natural_key(v) for v in self.values),
                self.reader or "")

    def __str__(self) -> str:
        tp = _tp_name(self.topic, self.partition)
        if self.kind == LOST_WRITE:
            at = f" offset {self.offsets[0]}" if self.offsets and self.offsets[0] >= 0 else ""
            return f"{self.value} acked at {tp}{at}, not in the final read ({self.detail})"
        if self.kind == DUPLICATE:
            return f"{self.value} at {len(self.offsets)} offsets of {tp}: {_offsets_text(self.offsets)}{self.detail}"
        if self.kind == INCONSISTENT_OFFSETS:
            return f"{tp} offset {self.offsets[0]}: {self.detail}"
        if self.kind == NONMONOTONIC_POLL:
            (o1, o2), (v1, v2) = self.offsets, self.values
            return f"{self.reader} on {tp} went from offset {o1} ({v1}) back to {o2} ({v2})"
        if self.kind == POLL_SKIP:
            o1, o2 = self.offsets
            return f"{self.reader} on {tp} jumped from offset {o1} to {o2}, skipping {self.detail}"
        return f"{self.kind} {tp} {self.offsets} {self.values}"


@dataclass
class Report:
    """The verdict on one history: ``ok``, ``anomalies`` (name -> count, every name
    present), ``cases`` (name -> every ``Anomaly``, sorted), ``table()``."""

    anomalies: dict[str, int]
    cases: dict[str, list[Anomaly]]
    counts: dict[str, int] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    seed: int | None = None
    faults: list[tuple[int, str]] = field(default_factory=list)  # what a schedule did, when
    notes: list[str] = field(default_factory=list)
    params: Any = None  # a schedule's arguments (``ScheduleParams``)
    raft: Any = None  # the metadata quorum's verdict for a schedule (``checker.raft.RaftReport``)
    cluster: Any = field(default=None, repr=False)  # kept open by run_schedule(record_history=True)

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values()) and not self.unchecked

    def examples(self, kind: str) -> list[Anomaly]:
        if kind not in self.cases:
            raise KeyError(f"no anomaly {kind!r}; anomalies are {', '.join(ANOMALIES)}")
        return self.cases[kind]

    def table(self, width: int = 110) -> str:
        rows = [(kind, str(self.anomalies[kind]), str(self.cases[kind][0]) if self.cases[kind] else "-")
                for kind in ANOMALIES]
        lines = _table(("anomaly", "count", "example"), rows, width)
        c = self.counts
        if c:
            lines.append(
                f"sends: {c.get('ok', 0)} ok, {c.get('info', 0)} indeterminate, {c.get('fail', 0)} failed; "
                f"reads: {c.get('records polled', 0)} records in {c.get('polls', 0)} polls, "
                f"{c.get('records in final read', 0)} in the final read"
            )
        for name in self.unchecked:
            lines.append(f"unchecked: {name} (its final read did not complete)")
        lines.extend(self.notes)
        if self.seed is not None:
            lines.append(f"seed: {self.seed}" + (f"; replay: {self.params.call(self.seed)}" if self.params else ""))
        for at, what in self.faults:
            lines.append(f"  {at:>7} ms  {what}")
        lines.append("verdict: " + ("ok" if self.ok else "NOT ok"))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        found = ", ".join(f"{k}={v}" for k, v in self.anomalies.items() if v) or "no anomalies"
        seed = "" if self.seed is None else f" seed={self.seed}"
        return f"<Report{seed} {'ok' if self.ok else 'NOT ok'}: {found}>"

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython shows the table
        printer.text(self.table())


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], width: int) -> list[str]:
    """Columns padded to fit; the last one cut at ``width`` so a table stays a table."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    out = []
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:-1], widths[1:])]
        line = "  ".join(cells + [row[-1]])
        out.append(line if len(line) <= width else line[: width - 3] + "...")
    return out


def analyse(history: History) -> Report:
    """Judge a history; see the module docstring for what each anomaly means."""
    cases: dict[str, list[Anomaly]] = {kind: [] for kind in ANOMALIES}

    # Who saw which value where: (topic, partition, offset) -> value -> sources.
    seen: dict[tuple, dict[Hashable, set[str]]] = defaultdict(lambda: defaultdict(set))
    where: dict[Hashable, set[tuple]] = defaultdict(set)  # value -> (topic, partition, offset) read
    final_values: dict[tuple[str, int], set] = defaultdict(set)
    known_offsets: dict[tuple[str, int], set[int]] = defaultdict(set)
    for poll in history.polls:
        source = "final read" if poll.final else poll.reader
        for offset, value in poll.records:
            seen[(poll.topic, poll.partition, offset)][value].add(source)
            where[value].add((poll.topic, poll.partition, offset))
            known_offsets[poll.tp].add(offset)
            if poll.final:
                final_values[poll.tp].add(value)
    for op in history.sends:
        if op.status == OK and op.offset is not None and op.offset >= 0:
            seen[(op.topic, op.partition, op.offset)][op.value].add("ack")

    # inconsistent-offsets: one offset, several values.
    for (topic, partition, offset), values in seen.items():
        if len(values) > 1:
            ordered = sorted(values, key=natural_key)
            detail = " vs ".join(f"{v} ({', '.join(sorted(values[v]))})" for v in ordered)
            cases[INCONSISTENT_OFFSETS].append(
                Anomaly(INCONSISTENT_OFFSETS, topic, partition, (offset,), tuple(ordered), detail=detail))

    # duplicate: one value, several offsets (reads only: an ack that disagrees with a
    # read is an inconsistent offset, not a second copy).
    for value, places in where.items():
        if len(places) > 1:
            # Values are sent to one partition, so the places normally share it; if not,
            # the example names the first partition and counts the others.
            topic, partition, _ = min(places)
            offsets = tuple(sorted(o for (t, p, o) in places if (t, p) == (topic, partition)))
            others = len({(t, p) for (t, p, _) in places}) - 1
            detail = f", and in {others} other partition(s)" if others else ""
            cases[DUPLICATE].append(Anomaly(DUPLICATE, topic, partition, offsets, (value,), detail=detail))

    # lost-write: acknowledged, absent from the complete final read of its partition.
    unchecked = set()
    for op in history.sends:
        if op.status != OK:
            continue
        tp = (op.topic, op.partition)
        final = history.final_reads.get(tp)
        if final is None or not final.complete:
            unchecked.add(_tp_name(*tp))
            continue
        if op.value not in final_values[tp]:
            if final.high_watermark > final.log_start:
                detail = f"offsets {final.log_start}..{final.high_watermark - 1}"
            else:
                detail = "it is empty"
            cases[LOST_WRITE].append(Anomaly(
                LOST_WRITE, op.topic, op.partition, (op.offset if op.offset is not None else -1,), (op.value,),
                detail=detail))

    # nonmonotonic-poll and poll-skip: each reader's own sequence, partition by partition.
    sequences: dict[tuple[str, str, int], list[tuple[int, Hashable]]] = defaultdict(list)
    for poll in history.polls:
        sequences[(poll.reader, poll.topic, poll.partition)].extend(poll.records)
    sorted_known = {tp: sorted(offsets) for tp, offsets in known_offsets.items()}
    for (reader, topic, partition), records in sequences.items():
        known = sorted_known.get((topic, partition), [])
        for (o1, v1), (o2, v2) in zip(records, records[1:]):
            if o2 <= o1:
                cases[NONMONOTONIC_POLL].append(
                    Anomaly(NONMONOTONIC_POLL, topic, partition, (o1, o2), (v1, v2), reader=reader))
            elif o2 > o1 + 1:
                lo, hi = bisect.bisect_right(known, o1), bisect.bisect_left(known, o2)
                skipped = known[lo:hi]
                if skipped:
                    detail = f"{len(skipped)} offset(s) that exist: {_offsets_text(skipped, 4)}"
                    cases[POLL_SKIP].append(
                        Anomaly(POLL_SKIP, topic, partition, (o1, o2), (v1, v2), reader=reader, detail=detail))

    for kind in ANOMALIES:
        cases[kind].sort(key=Anomaly.sort_key)
    return Report(
        anomalies={kind: len(cases[kind]) for kind in ANOMALIES},
        cases=cases,
        counts=history.counts(),
        unchecked=sorted(unchecked),
    )
