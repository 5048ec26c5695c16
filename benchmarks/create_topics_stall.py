"""Issue 13: how long a large CreateTopics holds the brokers' other clients.

    .venv/bin/python -m benchmarks.create_topics_stall [PARTITIONS] [--runs N]

A ``launch(brokers=3)`` cluster; kafka-python's admin creates one topic of PARTITIONS
partitions (2,000 by default: Kafka's ``max.request.partition.size.limit``), replication
factor 3, while a watcher sends a small Metadata request to broker 1 every 10 ms on its own
connection. Reported: how long ``create_topics`` took, the watcher's longest and median wait
(how long the broker held everyone else), and when every broker had opened every replica
(its log directories on disk). Not part of ``make bench``: run it by hand, before and after
a change, alternating (the other commit from a ``git archive`` tree, run from there).
"""

from __future__ import annotations

import argparse
import time

from benchmarks.metadata_cost import MetadataWatcher


def one_run(partitions: int) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    from minikafka.wire.process import launch

    with launch(brokers=3) as cluster:
        address = (cluster.host, cluster.ports[1])
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        watcher = MetadataWatcher(address).start()
        time.sleep(1.0)
        t = time.perf_counter()
        admin.create_topics([NewTopic("wide", partitions, 3)])
        created = time.perf_counter() - t
        dirs = [cluster.dir / f"broker-{b}" for b in (1, 2, 3)]
        while sum(1 for d in dirs for p in d.iterdir() if p.name.startswith("wide-")) < 3 * partitions:
            time.sleep(0.05)  # every replica's log directory is there
        opened = time.perf_counter() - t
        time.sleep(1.0)
        watcher.stop()
        admin.close()
    return (f"{partitions:,} partitions, RF 3: create_topics {created:.2f} s; every replica open after {opened:.2f} s; "
            f"on broker 1, {watcher.summary()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="How long a large CreateTopics holds a broker's other clients.")
    parser.add_argument("partitions", nargs="?", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=1)
    options = parser.parse_args()
    for _ in range(options.runs):
        print(one_run(options.partitions), flush=True)
