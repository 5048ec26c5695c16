"""Transactions under faults: the read-process-write fault campaign (simulated), judged by
``minikafka.checker.transactions``, and its at-least-once negative control.

``fault_campaign(schedules=N, seed=1, workload="transactions")`` (N:
``MINIKAFKA_BENCH_TXN_SCHEDULES``, default 1,000; 20 with ``--quick``): each schedule
processes 120 input values three at a time, each batch in one transaction with its input
offsets, while the nemesis kills the producer mid-transaction (crashed, or stalled as a
zombie that a new instance must fence), the transaction coordinator's broker and the
output's leaders, on top of the campaign's usual faults. Then the same schedules with
``workload="at-least-once"`` (the loop without transactions), which must show inputs
counted twice. Figures are counts, and the campaign's wall time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks.common import Section, met

SCHEDULES = int(os.environ.get("MINIKAFKA_BENCH_TXN_SCHEDULES", "1000"))


def _row(label: str, report, seconds: float) -> list[str]:
    c = report.counts
    anomalies = ", ".join(f"{k} {v}" for k, v in report.anomalies.items())
    faults = ", ".join(f"{k} {v}" for k, v in sorted(report.faults.items()))
    return [label, f"{report.schedules:,}", f"{c.get('committed', 0):,} / {c.get('aborted', 0):,} / "
            f"{c.get('unknown', 0):,}", faults, anomalies, f"{len(report.failing_seeds)}", f"{seconds:,.0f} s"]


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    from minikafka.checker import fault_campaign

    schedules = 20 if quick else SCHEDULES
    start = time.perf_counter()
    txn = fault_campaign(schedules=schedules, seed=1, workload="transactions")
    txn_seconds = time.perf_counter() - start
    start = time.perf_counter()
    control = fault_campaign(schedules=schedules, seed=1, workload="at-least-once")
    control_seconds = time.perf_counter() - start
    found = sum(txn.anomalies.values())
    return Section(
        name="transactions",
        title="Transactions: read-process-write under faults (simulated), judged by the checker",
        method=[
            f"`fault_campaign(schedules={schedules}, seed=1, workload='transactions')`: per schedule a 3-broker "
            "cluster, topics `in` and `out` (1-3 partitions, RF 3, min.insync.replicas 2), 120 input values "
            "written before the faults; a consumer (read_committed) and a transactional producer process "
            "three inputs per transaction with the input offsets in it (`send_offsets_to_transaction`), paced "
            "over 6 simulated seconds, while 1-4 faults strike: kill-producer (the application crashes, or "
            "stalls as a zombie whose later commit must be fenced, after its sends and offsets, before its "
            "commit), kill-coordinator (the leader of the transactional id's `__transaction_state` partition), "
            "kill-leader (of an `out` partition), and the campaign's broker kills, strands, isolations, "
            "controller isolation and slow links. Then heal, restart, drain the rest, and a read_committed "
            "read of `out` to its end offsets; `checker.transactions` counts lost-committed, duplicate, "
            "aborted-visible, not-atomic and input-not-once.",
            "Transactions column: committed / aborted / unknown (the commit raised: may or may not have "
            "happened). Faults column: times each kind struck over all schedules (kill-producer appears as "
            "producer-crash and zombie; init-retried: an instance whose init_transactions timed out and was "
            "started again).",
            "Negative control: the same seeds with `workload='at-least-once'` (idempotent producer, flush, then "
            "the consumer commits the offsets itself): a crash between the two must show as input-not-once. "
            "There is no transaction coordinator there, so no kill-coordinator.",
        ],
        columns=["workload", "schedules", "transactions", "faults", "anomalies", "failing schedules", "wall"],
        rows=[_row("transactions", txn, txn_seconds), _row("at-least-once (control)", control, control_seconds)],
        targets=[
            ("0 anomalies in the transactional fault campaign", f"{found}", met(found == 0 and txn.ok)),
            ("the at-least-once control is caught (input-not-once > 0)",
             f"{control.anomalies['input-not-once']}", met(control.anomalies["input-not-once"] > 0)),
        ],
    )
