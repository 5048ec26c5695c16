"""The strategies and what each promises (``GUARANTEES``), and the analysis of one history against
the topic's records: ``analyse_delivery`` gives a ``DeliveryReport`` (lost and duplicated records);
``delivery_table`` puts reports side by side.

The theory of operation of the whole is ``minikafka.checker.delivery``'s."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Hashable, Iterable

from minikafka.checker.analysis import natural_key
from minikafka.checker.delivery.history import ConsumerHistory, Processed, RecordKey, topic_records

if TYPE_CHECKING:
    from minikafka.checker.delivery.apps import ExternalStore
    from minikafka.checker.delivery.plan import DeliveryPlan, ScenarioParams

AT_MOST_ONCE, AT_LEAST_ONCE = "at-most-once", "at-least-once"
AUTO_COMMIT, EXACTLY_ONCE = "auto-commit", "exactly-once"
STRATEGIES = (AT_MOST_ONCE, AT_LEAST_ONCE, AUTO_COMMIT, EXACTLY_ONCE)
LOST, DUPLICATED = "lost", "duplicated"
# What each strategy promises: the counts that must be zero, crashes or not.
GUARANTEES: dict[str, tuple[str, ...]] = {
    AT_MOST_ONCE: (DUPLICATED,),
    AT_LEAST_ONCE: (LOST,),
    AUTO_COMMIT: (),  # with a hand-off, nothing
    EXACTLY_ONCE: (LOST, DUPLICATED),
}


# --- the analysis -------------------------------------------------------------------------------------------


def _ranges(offsets: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for o in offsets:
        if out and out[-1][1] == o - 1:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out


def _keys_text(keys: Iterable[RecordKey], limit: int = 8) -> str:
    """"work-0 offsets 3..7, 12; work-2 offset 9": compact, sorted, cut after ``limit`` runs."""
    by_tp: dict[tuple[str, int], list[int]] = {}
    for t, p, o in sorted(keys):
        by_tp.setdefault((t, p), []).append(o)
    parts, shown = [], 0
    for (t, p), offsets in by_tp.items():
        runs = [str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in _ranges(offsets)]
        if shown + len(runs) > limit:
            runs = runs[: max(0, limit - shown)] + ["..."]
        shown += len(runs)
        word = "offset" if len(offsets) == 1 else "offsets"
        parts.append(f"{t}-{p} {word} {', '.join(runs)}")
        if shown > limit:
            break
    return "; ".join(parts)


@dataclass
class DeliveryReport:
    """The verdict on one run: ``lost`` (records nobody processed, sorted (topic,
    partition, offset, value)), ``duplicates`` ({(topic, partition, offset): times
    processed}, only those processed more than once), ``kept`` (the strategy's guarantee
    held), ``table()``."""

    strategy: str | None
    records: int  # in the topic
    processed: int  # processings of those records, repeats included
    lost: list[tuple[str, int, int, Hashable]]
    duplicates: dict[RecordKey, int]
    unexpected: list[Processed] = field(default_factory=list)  # processed, yet not in the topic at that offset
    counts: dict[str, int] = field(default_factory=dict)
    unchecked: list[str] = field(default_factory=list)
    complete: bool = True  # False: the run hit its deadline before the consumers caught up
    seed: int | None = None
    plan: "DeliveryPlan | None" = None
    params: "ScenarioParams | None" = None
    timeline: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    history: ConsumerHistory | None = field(default=None, repr=False)
    store: "ExternalStore | None" = field(default=None, repr=False)  # exactly-once's
    cluster: Any = field(default=None, repr=False)  # kept open by run_delivery_scenario(record_history=True)

    @property
    def duplicated(self) -> int:
        """How many records were processed more than once."""
        return len(self.duplicates)

    @property
    def extra(self) -> int:
        """How many processings were repeats (a record processed 3 times counts 2)."""
        return sum(n - 1 for n in self.duplicates.values())

    @property
    def anomalies(self) -> dict[str, int]:
        return {LOST: len(self.lost), DUPLICATED: self.duplicated}

    @property
    def kept(self) -> bool | None:
        """The strategy's guarantee held (None: no strategy, or one that promises nothing).
        A run that could not see everything (unchecked partitions, deadline) keeps nothing."""
        promised = GUARANTEES.get(self.strategy or "", ())
        if not promised:
            return None
        seen_all = self.complete and not self.unchecked and not self.unexpected
        return seen_all and all(self.anomalies[kind] == 0 for kind in promised)

    def row(self) -> tuple[str, ...]:
        return (self.strategy or "-", str(self.records), str(self.processed), str(len(self.lost)),
                str(self.duplicated))

    def table(self, width: int = 110) -> str:
        lines = _table([self.row()])
        if self.lost:
            lines.append(f"lost: {_keys_text((t, p, o) for t, p, o, _ in self.lost)}")
        if self.duplicates:
            times = Counter(self.duplicates.values())
            how = ", ".join(f"{n} processed {k} times" for k, n in sorted(times.items()))
            lines.append(f"duplicated: {_keys_text(self.duplicates)} ({how})")
        for p in self.unexpected[:3]:
            lines.append(f"unexpected: {p.consumer} processed {p.value!r} as {p.topic}-{p.partition} "
                         f"offset {p.offset}, which the topic does not hold there")
        c = self.counts
        if c:
            lines.append(f"consumers: {c.get('consumers', 0)}; commits by the application: "
                         f"{c.get('commits ok', 0)} ok, {c.get('commits refused', 0)} refused; "
                         f"crashes: {c.get('crashes', 0)}, restarts: {c.get('restarts', 0)}")
        for name in self.unchecked:
            lines.append(f"unchecked: {name} (its final read did not complete)")
        lines.extend(self.notes)
        if self.plan is not None:
            lines.append(f"plan: {self.plan.describe()}")
            lines.append(f"crashes planned: {self.plan.crashes_text()}")
        if self.seed is not None:
            lines.append(f"seed: {self.seed}" + (f"; replay: {self.params.call(self.strategy, self.seed)}"
                                                  if self.params else ""))
        for at, what in self.timeline:
            lines.append(f"  {at:>7} ms  {what}")
        promised = GUARANTEES.get(self.strategy or "", ())
        if promised:
            what = " and ".join(f"no {'loss' if k == LOST else 'duplicates'}" for k in promised)
            lines.append(f"guarantee ({what}): " + ("kept" if self.kept else "BROKEN"))
        return "\n".join(line if len(line) <= width else line[: width - 3] + "..." for line in lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        seed = "" if self.seed is None else f" seed={self.seed}"
        return (f"<DeliveryReport {self.strategy}{seed}: {self.records} records, {self.processed} processed, "
                f"{len(self.lost)} lost, {self.duplicated} duplicated>")

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython shows the table
        printer.text(self.table())


def analyse_delivery(history: ConsumerHistory, records: Any, *, strategy: str | None = None) -> DeliveryReport:
    """Judge what the consumers processed against the topic's ``records`` (see
    ``topic_records``): lost = in the topic, never processed; duplicated = processed more
    than once. A processing of something the topic does not hold at that offset is
    ``unexpected`` (it would mean a consumer made a record up, or read a wrong one)."""
    in_topic, unchecked = topic_records(records)
    times: Counter = Counter()
    unexpected = []
    for p in history.processings:
        if in_topic.get(p.key, _MISSING) == p.value:
            times[p.key] += 1
        else:
            unexpected.append(p)
    lost = sorted(((t, pt, o, v) for (t, pt, o), v in in_topic.items() if (t, pt, o) not in times),
                  key=lambda r: (r[0], r[1], r[2]))
    duplicates = {k: n for k, n in sorted(times.items()) if n > 1}
    unexpected.sort(key=lambda p: (p.topic, p.partition, p.offset, natural_key(p.value), p.consumer, p.time_ms))
    return DeliveryReport(
        strategy=strategy, records=len(in_topic), processed=sum(times.values()), lost=lost,
        duplicates=duplicates, unexpected=unexpected, counts=history.counts(), unchecked=unchecked,
        timeline=history.timeline(), history=history)


_MISSING = object()


# --- tables -------------------------------------------------------------------------------------------------

TABLE_HEADER = ("strategy", "records", "processed", "lost", "duplicated")


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...] = TABLE_HEADER) -> list[str]:
    """The first column left-aligned, the numbers right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip()
            for r in [header, *rows]]


def _strategy_order(item: Any) -> tuple:
    strategy = item.strategy or ""
    rank = STRATEGIES.index(strategy) if strategy in STRATEGIES else len(STRATEGIES)
    return rank, strategy, item.row()


def delivery_table(items: Iterable[Any]) -> str:
    """Reports (``DeliveryReport``) and campaigns (``DeliveryCampaign``) side by side::

        strategy       records  processed  lost  duplicated
        at-most-once       200        187    13           0
        ...

    Rows in ``STRATEGIES`` order (then by name and numbers), so the same runs give the
    same table."""
    items = sorted(items, key=_strategy_order)
    return "\n".join(_table([item.row() for item in items]))
