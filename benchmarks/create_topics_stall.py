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

import socket
import sys
import threading
import time

from benchmarks.metadata_cost import small_metadata


def one_run(partitions: int) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    from minikafka.wire.process import launch

    with launch(brokers=3) as cluster:
        address = (cluster.host, cluster.ports[1])
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        waits: list[float] = []
        stop = threading.Event()

        def watch() -> None:
            with socket.create_connection(address, timeout=120) as sock:
                corr = 0
                while not stop.is_set():
                    corr += 1
                    t = time.perf_counter()
                    small_metadata(sock, corr)
                    waits.append(time.perf_counter() - t)
                    time.sleep(0.01)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(1.0)
        t = time.perf_counter()
        admin.create_topics([NewTopic("wide", partitions, 3)])
        created = time.perf_counter() - t
        dirs = [cluster.dir / f"broker-{b}" for b in (1, 2, 3)]
        while sum(1 for d in dirs for p in d.iterdir() if p.name.startswith("wide-")) < 3 * partitions:
            time.sleep(0.05)  # every replica's log directory is there
        opened = time.perf_counter() - t
        time.sleep(1.0)
        stop.set()
        watcher.join(timeout=60)
        admin.close()
    return (f"{partitions:,} partitions, RF 3: create_topics {created:.2f} s; every replica open after {opened:.2f} s; "
            f"broker 1's other client waited at most {max(waits) * 1000:.0f} ms "
            f"(median {sorted(waits)[len(waits) // 2] * 1000:.1f} ms, {len(waits)} requests)")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 1
    if "--runs" in sys.argv:
        args.remove(str(runs))
    for _ in range(runs):
        print(one_run(int(args[0]) if args else 2_000), flush=True)
