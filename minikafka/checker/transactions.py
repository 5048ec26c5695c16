"""Transactions judged by what the clients saw: KIP-98's promises as a checker.

Theory of operation
-------------------
A ``TransactionHistory`` records every transaction a run began: the values it sent (each
value unique in the run, and, for read-process-write, the input it was made from) and its
outcome as the producer knew it:

- ``committed``: ``commit_transaction()`` returned;
- ``aborted``: ``abort_transaction()`` returned, or the producer crashed or was fenced
  before committing (the coordinator aborts such a transaction);
- ``unknown``: the commit raised (Jepsen's ``:info``: it may or may not have happened).

``analyse_transactions(history, read_committed, inputs=None)`` compares that with a final
read_committed read of the output (every value, in any order) and counts Kafka's anomalies:

- ``lost-committed``: a value of a committed transaction is missing;
- ``duplicate``: a value is read more than once;
- ``aborted-visible``: a value of an aborted transaction is read;
- ``not-atomic``: a transaction (whatever its outcome) is read in part, not all or nothing;
- ``input-not-once`` (read-process-write, given ``inputs``): an input whose outputs read
  are not exactly one (lost, or counted twice).

Never: look at the brokers. Only what the clients were told and what a reader read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

TXN_ANOMALIES = ("lost-committed", "duplicate", "aborted-visible", "not-atomic", "input-not-once")
OUTCOMES = ("committed", "aborted", "unknown", "open")


@dataclass
class Txn:
    number: int
    values: list = field(default_factory=list)  # (value, input or None)
    outcome: str = "open"


class TransactionHistory:
    def __init__(self) -> None:
        self.transactions: list[Txn] = []

    def begin(self) -> Txn:
        txn = Txn(len(self.transactions))
        self.transactions.append(txn)
        return txn

    @staticmethod
    def sent(txn: Txn, value, input=None) -> None:  # noqa: A002 (the input record's value)
        txn.values.append((value, input))

    @staticmethod
    def end(txn: Txn, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
        txn.outcome = outcome


@dataclass
class TxnReport:
    counts: dict
    anomalies: dict  # name -> number found
    examples: dict  # name -> a few examples

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def table(self) -> str:
        lines = ["transactions: " + ", ".join(f"{k} {v}" for k, v in self.counts.items())]
        lines += [f"  {name:<16} {self.anomalies[name]:>5}  {self.examples.get(name, [])[:3]}"
                  for name in TXN_ANOMALIES]
        lines.append("verdict: " + ("OK" if self.ok else "ANOMALIES"))
        return "\n".join(lines)


def analyse_transactions(history: TransactionHistory, read_committed, inputs=None) -> TxnReport:
    seen = Counter(read_committed)
    anomalies = dict.fromkeys(TXN_ANOMALIES, 0)
    examples: dict[str, list] = {name: [] for name in TXN_ANOMALIES}

    def found(name: str, example) -> None:
        anomalies[name] += 1
        examples[name].append(example)

    for value, n in sorted(seen.items()):
        if n > 1:
            found("duplicate", (value, n))
    for txn in history.transactions:
        visible = [v for v, _ in txn.values if seen[v]]
        if txn.outcome == "committed":
            for v, _ in txn.values:
                if not seen[v]:
                    found("lost-committed", (txn.number, v))
        elif txn.outcome == "aborted":
            for v in visible:
                found("aborted-visible", (txn.number, v))
        if visible and len(visible) != len(txn.values):
            found("not-atomic", (txn.number, len(visible), len(txn.values)))
    if inputs is not None:
        made_from = {v: i for txn in history.transactions for v, i in txn.values}
        per_input = Counter(made_from.get(v) for v in read_committed)
        for i in inputs:
            if per_input[i] != 1:
                found("input-not-once", (i, per_input[i]))
    counts = Counter(txn.outcome for txn in history.transactions)
    return TxnReport({o: counts.get(o, 0) for o in OUTCOMES}, anomalies, examples)
