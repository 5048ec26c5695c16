"""A leader whose log directory fills up, on real processes (issue 37, item 2).

Measured before: with the leader's log directory full (a tmpfs), the broker answered
KAFKA_STORAGE_ERROR to every produce but stayed leader although two healthy replicas were in
the ISR, and clients saw only ``Local: Message timed out``. Kafka takes the directory offline,
tells the controller, and the controller moves leadership to an in-sync replica and takes
the broker out of the ISR; clients follow the new leader. If the record saying so cannot
be written to broker 1's own metadata log, in the same full directory, broker 1 halts, as
Kafka's broker does when its metadata log directory fails (KIP-858), rather than answer
Metadata from a view that no longer moves (it once named itself leader for a client, which
then read a high watermark of 500 from it while 604 records were acknowledged). Here: three brokers, broker 1's log
directory a small tmpfs, a partition led by broker 1 with replicas on 2 and 3 and
min.insync.replicas=2, and kafka-python producing with acks=all throughout (every send and
its outcome in the checker's ``History``). The tmpfs is filled; the test waits for the
metadata to show another leader and broker 1 out of the ISR, for broker 1 to have halted or
to name the new leader itself, for the producer to be acked by the new leader, reads everything back, and the checker
finds no acknowledged write lost. Then the space comes back, broker 1 is restarted, and it
rejoins the ISR.

Mounting a tmpfs needs root (the CI runs as root); elsewhere the test is skipped and says so.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from minikafka.checker import History, analyse
from minikafka.errors import IllegalArgumentError
from minikafka.wire.process import launch

from wire_helpers import (
    NumberedProducer,
    fill_up,
    halted_or_following,
    isr_of,
    leader_of,
    now_ms,
    read_partitions,
    tolerant,
    wait_until,
)

TMPFS_BYTES = 16 * 1024 * 1024
# Heartbeats every 500 ms: a directory's failure reaches the controller within one.
CONFIG = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500}


def test_a_leader_whose_log_dir_fills_up_hands_over_to_an_in_sync_replica_and_loses_nothing(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (to fill a disk for real) needs root")
    mount = tmp_path / "broker-1"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount)], check=True)
    topic = "ledger"
    history = History(clock=now_ms)
    try:
        with launch(brokers=3, controllers=1, dir=tmp_path, config=CONFIG) as c:
            admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)

            def isr() -> list[int] | None:
                return tolerant(lambda: isr_of(admin, topic))

            def leader() -> int | None:
                return tolerant(lambda: leader_of(admin, topic))

            try:
                admin.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [1, 2, 3]},
                                              topic_configs={"min.insync.replicas": "2"})])
                wait_until(lambda: isr() == [1, 2, 3] and leader() == 1, 20, "broker 1 leading an ISR of three")
                load = NumberedProducer(c, topic, history)
                load.start()
                try:
                    wait_until(lambda: load.acked_after(0) >= 200, 30, "200 acks before the disk fills")
                    filled_at = now_ms()
                    fill_up(mount / "filler")
                    new_leader = wait_until(lambda: leader() in (2, 3) and leader(), 30, "a new leader")
                    wait_until(lambda: isr() == [2, 3], 30, "broker 1 out of the ISR")
                    wait_until(lambda: halted_or_following(c, 1, topic, (2, 3)), 30,
                               "broker 1 halted (its metadata log full) or naming the new leader")
                    wait_until(lambda: load.acked_after(filled_at) >= 200, 60,
                               "acks for values sent after the disk filled")
                finally:
                    load.stop()
                out = c.out_file(1).read_text(errors="replace")
                assert "log directory" in out and "is offline" in out
                halted = "halting: the metadata log cannot be written" in out
                if halted:
                    wait_until(lambda: not c.alive(1), 30, "broker 1's process to end after halting")
                everything = read_partitions(c.bootstrap_servers, topic, [0])[0]
                history.poll("after", topic, 0, everything)
                history.final_read(topic, 0, everything, log_start=0, high_watermark=len(everything))
                report = analyse(history)
                print(f"\nbroker 1's disk filled: {new_leader} leads; {history.counts()['ok']} values acked; "
                      f"broker 1 {'halted' if halted else 'follows its metadata log'}")
                print(report.table())
                assert report.ok, report.table()  # no acknowledged write lost, none twice
                assert [o for o, _ in everything] == list(range(len(everything)))

                # Space back and a restart: the directory is online again and broker 1 rejoins.
                (mount / "filler").unlink()
                if c.alive(1):
                    with contextlib.suppress(IllegalArgumentError):  # (unless it halted just now)
                        c.kill(1)
                c.restart(1)
                wait_until(lambda: isr() == [1, 2, 3], 30, "broker 1 back in the ISR")
            finally:
                admin.close()
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
