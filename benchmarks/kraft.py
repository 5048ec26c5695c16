"""The controller quorum (KRaft): how long metadata changes fail after the active controller
is SIGKILLed (real processes), and fault campaigns with controller kills and quorum splits."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.common import Section, fig, met, runs

FAILOVER_ROUNDS = 10
CAMPAIGN_SCHEDULES = 1000


def _admin(bootstrap: str):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5_000)


def _create(admin, name: str) -> int:
    from kafka.admin import NewTopic

    try:
        return admin.create_topics([NewTopic(name, 1, 3)], raise_errors=False)["topics"][0]["error_code"]
    except Exception:  # a timeout or a dropped connection: not yet
        return -1


def failover_rounds(rounds: int, scratch: Path) -> list[float]:
    """Seconds from SIGKILL of the active controller to the next CreateTopics that succeeds."""
    from minikafka.tools.metadata_quorum import describe_quorum
    from minikafka.wire.process import launch

    out = []
    with launch(brokers=3, dir=scratch / "kraft") as cluster:
        admin = _admin(cluster.bootstrap_servers)
        try:
            for r in range(rounds):
                deadline = time.monotonic() + 60
                while _create(admin, f"warm-{r}") != 0:  # every voter up and a change commits
                    if time.monotonic() > deadline:
                        raise RuntimeError("no metadata change committed before the kill")
                    time.sleep(0.05)
                active = describe_quorum(cluster.bootstrap_servers).leader_id
                killed = time.monotonic()
                cluster.kill(active)
                while _create(admin, f"after-{r}") != 0:
                    if time.monotonic() - killed > 60:
                        raise RuntimeError("no metadata change committed within 60 s of the kill")
                    time.sleep(0.01)
                out.append(time.monotonic() - killed)
                cluster.restart(active)
        finally:
            admin.close()
    return out


def run(scratch: Path, quick: bool, repeats: int) -> Section:
    from minikafka.checker import fault_campaign

    rounds = 3 if quick else FAILOVER_ROUNDS
    times = failover_rounds(rounds, scratch)
    median = statistics.median(times)
    rows = [[
        "SIGKILL of the active controller -> next CreateTopics committed", f"{rounds} rounds",
        fig(times, "{:.2f} s"), f"median {median:.2f} s", runs(rounds),
    ]]
    schedules = 20 if quick else CAMPAIGN_SCHEDULES
    start = time.perf_counter()
    report = fault_campaign(schedules=schedules, seed=1, acks="all", min_insync_replicas=2, replication_factor=3,
                            enable_idempotence=True, controllers=3)
    seconds = time.perf_counter() - start
    rows.append([
        "fault campaign with 3 controllers (kills of the active one, quorum splits)", f"{schedules:,} schedules",
        f"{schedules / seconds * 60:,.0f} schedules/min ({seconds:,.0f} s)",
        f"anomalies {sum(report.anomalies.values())}, Raft violations {report.raft_violations} "
        f"({report.raft_elections:,} epochs)", "1 run",
    ])
    return Section(
        name="kraft",
        title="The controller quorum (KRaft)",
        method=[
            f"`minikafka.wire.launch(brokers=3)`: 3 controller processes (a 3-voter Raft quorum, Kafka's default "
            "quorum timeouts: election 1 s, fetch 2 s) and 3 brokers. Each round: a CreateTopics (kafka-python "
            "admin, RF 3) that succeeds, DescribeQuorum for the active controller, SIGKILL it, then CreateTopics "
            "every 10 ms until one succeeds; the time from the kill to that success. The killed controller is "
            "restarted before the next round. Most of it is `controller.quorum.fetch.timeout.ms` (2 s, plus a "
            "seeded jitter) before the followers stand for election.",
            f"`fault_campaign(schedules={schedules}, seed=1, acks='all', min_insync_replicas=2, "
            "enable_idempotence=True, controllers=3)`: each schedule's faults are drawn from broker kills, "
            "leader kills, strands, isolations, slow links, kills of the active (or another) controller and a "
            "controller cut off from the other voters; the producer checker judges the records, the Raft checker "
            "(`minikafka.checker.raft`) every controller's and broker's view of the metadata log.",
        ],
        columns=["what", "size", "measured", "result", "runs"],
        rows=rows,
        targets=[
            ("0 anomalies and 0 Raft violations with controller faults",
             f"{sum(report.anomalies.values())} / {report.raft_violations}",
             met(sum(report.anomalies.values()) == 0 and report.raft_violations == 0)),
        ],
    )
