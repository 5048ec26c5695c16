"""The simulated cluster: records per second through RF=3 replication, and fault-campaign
schedules per minute (how many random failures a student can replay in a coffee break)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from minikafka import Cluster, KafkaProducer

from benchmarks.common import Section, fig, met, runs

CAMPAIGN_TARGET_SCHEDULES = 1000
CAMPAIGN_TARGET_SECONDS = 60  # issue 16 (was 5 min)


def replication_run(records: int, seed: int) -> tuple[float, int]:
    """(wall seconds, simulated ms) to produce ``records`` with acks=all through RF=3."""
    cluster = Cluster(brokers=3, seed=seed, record_history=False)
    try:
        cluster.create_topic("bench", partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        producer = KafkaProducer(bootstrap_servers=cluster, acks="all", linger_ms=5)
        value = b"x" * 100
        start_wall, start_sim = time.perf_counter(), cluster.now
        for i in range(records):
            producer.send("bench", value=value, key=b"k%d" % (i % 100))
        producer.flush()
        return time.perf_counter() - start_wall, cluster.now - start_sim
    finally:
        cluster.close()


def campaign_run(schedules: int, seed: int, jobs: int = 1) -> tuple[float, dict, str]:
    from minikafka.checker import fault_campaign

    start = time.perf_counter()
    report = fault_campaign(schedules=schedules, seed=seed, acks="all", min_insync_replicas=2,
                            replication_factor=3, enable_idempotence=True, jobs=jobs)
    return time.perf_counter() - start, dict(report.anomalies), report.table()


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    records = 5_000 if quick else 100_000
    walls, sims = [], []
    for r in range(repeats):
        wall, sim_ms = replication_run(records, seed=r)
        walls.append(wall)
        sims.append(sim_ms)
    rows = [[
        "produce, acks=all, RF=3, 3 partitions, linger 5 ms",
        f"{records:,}", fig([records / w for w in walls]), fig([records / (s / 1000) for s in sims]),
        runs(repeats),
    ]]
    targets = []
    method = [
        f"{records:,} records of 100 bytes sent by one minikafka `KafkaProducer` (acks=all, linger_ms=5) "
        "to a simulated 3-broker `Cluster` (topic with 3 partitions, RF=3, min.insync.replicas=2), then "
        "`flush()`. Wall records/s: how fast this machine runs the simulation (brokers, followers' "
        "fetches, logs on disk). Simulated records/s: records over the simulated time they took.",
    ]
    try:
        schedules = 20 if quick else CAMPAIGN_TARGET_SCHEDULES
        cores = os.cpu_count() or 1
        tables = set()
        for jobs in (1, cores) if cores > 1 else (1,):
            seconds, anomalies, table = campaign_run(schedules, seed=1, jobs=jobs)
            tables.add(table)
            per_minute = schedules / seconds * 60
            rows.append([
                f"fault campaign, acks=all, idempotent, min.insync=2, RF=3, jobs={jobs}", f"{schedules:,} schedules",
                f"{per_minute:,.0f} schedules/min", f"anomalies: {sum(anomalies.values())}", "1 run",
            ])
            projected = CAMPAIGN_TARGET_SCHEDULES / per_minute * 60
            targets.append((
                f"{CAMPAIGN_TARGET_SCHEDULES:,} fault-campaign schedules in < {CAMPAIGN_TARGET_SECONDS} s (jobs={jobs})",
                f"{projected:,.0f} s" + ("" if schedules == CAMPAIGN_TARGET_SCHEDULES else f" (projected from {schedules})"),
                met(projected < CAMPAIGN_TARGET_SECONDS),
            ))
        if len(tables) != 1:
            raise RuntimeError("the campaign's report changed with the number of jobs")
        method.append(
            "`minikafka.checker.fault_campaign(schedules=N, seed=1, acks='all', min_insync_replicas=2, "
            "replication_factor=3, enable_idempotence=True, jobs=J)`: N random fault schedules (kills, restarts, partitions, slow links), "
            "each a fresh seeded cluster, workload, final read and analysis; wall time for all of them. "
            f"J=1 is one process; J={cores} (this machine's cores) runs schedules in forked worker processes, "
            "and the benchmark checks that both runs report the same table."
        )
    except ImportError:
        method.append("The fault campaign was not measured: minikafka.checker is not available.")
    return Section(
        name="simulation",
        title="The simulated cluster",
        method=method,
        columns=["What", "Amount", "Wall (this machine)", "Simulated", "Runs"],
        rows=rows,
        targets=targets,
    )
