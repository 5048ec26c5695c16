"""KRaft with real processes: the controller quorum under SIGKILL, restarts on the same
directory, a lone ``minikafka server`` in combined mode, and ``minikafka metadata-quorum``.

Every wait polls for a state Kafka defines (a leader named by DescribeQuorum, a topic in a
broker's Metadata, acknowledged records read back), never for a guessed time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("kafka")

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from minikafka.checker import LOST_WRITE, History, analyse  # noqa: E402
from minikafka.tools.metadata_quorum import describe_quorum  # noqa: E402
from minikafka.wire.process import PORTS_RESERVED_ENV, free_port, launch, reserve_port, wait_for_port  # noqa: E402

from wire_helpers import NumberedProducer, now_ms, read_partitions, ready_to_join, tolerant, wait_until  # noqa: E402

FAST = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500,
        "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3, "request.timeout.ms": 8000}


def quorum(cluster):
    return tolerant(lambda: describe_quorum(cluster.bootstrap_servers))


def active_controller(cluster) -> int | None:
    q = quorum(cluster)
    return None if q is None or q.leader_id < 0 else q.leader_id


def create(admin, name, partitions=1, rf=3):
    """CreateTopics; the (error code, message) of the topic."""
    topic = admin.create_topics([NewTopic(name, partitions, rf)], raise_errors=False)["topics"][0]
    return topic["error_code"], topic.get("error_message")


def topics_everywhere(cluster, admin, names) -> bool:
    listed = tolerant(lambda: set(admin.list_topics()))
    return listed is not None and set(names) <= listed


def test_sigkill_of_the_active_controller_under_acks_all_load_loses_nothing():
    history = History(clock=now_ms)
    with launch(brokers=3, config=FAST) as c:
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
        try:
            assert create(admin, "ledger")[0] == 0
            wait_until(lambda: topics_everywhere(c, admin, ["ledger"]), 20, "the topic")
            first = wait_until(lambda: active_controller(c), 20, "an active controller")
            epoch = quorum(c).leader_epoch
            load = NumberedProducer(c, "ledger", history)
            load.start()
            try:
                wait_until(lambda: load.acked_after(0) >= 200, 30, "acks before the kill")
                killed_at = now_ms()
                c.kill(first)
                wait_until(lambda: active_controller(c) not in (None, first), 30, "a new active controller")
                assert quorum(c).leader_epoch > epoch
                wait_until(lambda: load.acked_after(killed_at) >= 200, 30, "acks after the kill")
                # Metadata changes work again, and nothing was forgotten.
                assert create(admin, "after-failover")[0] == 0
                wait_until(lambda: topics_everywhere(c, admin, ["ledger", "after-failover"]), 20, "both topics")
                c.restart(first)  # it rejoins as a follower and catches up
                wait_until(lambda: sorted(r.replica_id for r in quorum(c).current_voters
                                          if r.log_end_offset == quorum(c).high_watermark) == c.controller_ids
                           or None, 30, "every voter caught up")
            finally:
                load.stop()
        finally:
            admin.close()
        everything = read_partitions(c.bootstrap_servers, "ledger", [0])[0]
        history.final_read("ledger", 0, everything, log_start=0, high_watermark=len(everything))
    report = analyse(history)
    assert report.anomalies[LOST_WRITE] == 0, report.table()
    assert all(count == 0 for count in report.anomalies.values()), report.table()


def test_a_minority_of_controllers_down_changes_nothing_a_majority_stops_metadata_changes_only():
    with launch(brokers=3, config=FAST) as c:
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=30_000)
        producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all")
        try:
            assert create(admin, "t")[0] == 0
            wait_until(lambda: topics_everywhere(c, admin, ["t"]), 20, "the topic")
            producer.send("t", b"before").get(timeout=30)
            active = wait_until(lambda: active_controller(c), 20, "an active controller")
            others = [n for n in c.controller_ids if n != active]
            c.kill(others[0])  # a minority: clients notice nothing
            assert create(admin, "minority")[0] == 0
            producer.send("t", b"minority").get(timeout=30)
            c.kill(others[1])  # a majority: the leader cannot commit, and soon steps down
            error, message = create(admin, "majority")
            assert error != 0 and "majority of the controller quorum" in (message or ""), (error, message)
            producer.send("t", b"majority").get(timeout=30)  # the data plane goes on
            c.restart(others[0])
            wait_until(lambda: active_controller(c), 30, "an active controller again")
            assert create(admin, "later")[0] == 0
            wait_until(lambda: topics_everywhere(c, admin, ["t", "minority", "later"]), 20, "the topics")
        finally:
            producer.close()
            admin.close()
        values = [v for _, v in read_partitions(c.bootstrap_servers, "t", [0])[0]]
        assert values == [b"before", b"minority", b"majority"]


def test_a_whole_cluster_restarted_on_the_same_dir_brings_every_topic_and_record_back(tmp_path):
    d = tmp_path / "cluster"
    with launch(brokers=3, dir=d, config=FAST) as c:
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
        try:
            assert create(admin, "kept", partitions=2)[0] == 0
            assert create(admin, "also", partitions=1, rf=2)[0] == 0
            wait_until(lambda: topics_everywhere(c, admin, ["kept", "also"]), 20, "the topics")
        finally:
            admin.close()
        p = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all")
        sent = [p.send("kept", b"%d" % i, partition=i % 2) for i in range(100)]
        p.flush()
        assert all(f.get(timeout=10) for f in sent)
        p.close()
    with launch(brokers=3, dir=d, config=FAST) as again:
        admin = KafkaAdminClient(bootstrap_servers=again.bootstrap_servers)
        try:
            wait_until(lambda: topics_everywhere(again, admin, ["kept", "also"]), 30, "the topics after the restart")
        finally:
            admin.close()
        back = read_partitions(again.bootstrap_servers, "kept", [0, 1])
        assert sorted(v for part in back.values() for _, v in part) == sorted(b"%d" % i for i in range(100))


def _server(port: int, log_dir, controller_port: int) -> subprocess.Popen:
    # Its ports are this test's reservations: it binds next to them as a launched node does
    # (SO_REUSEPORT, which BSD needs; see minikafka.wire.process).
    proc = subprocess.Popen([sys.executable, "-m", "minikafka.cli", "server", "--port", str(port),
                             "--controller-port", str(controller_port), "--log-dir", str(log_dir),
                             "--exit-with-parent"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, PORTS_RESERVED_ENV: "1"})
    wait_for_port("127.0.0.1", port, 30, proc)
    return proc


def test_a_lone_server_is_a_one_node_cluster_that_keeps_its_topics(tmp_path):
    """Kafka 4's quickstart: one process in combined mode; kafka-python and librdkafka use it
    at once, and the same command on the same directory brings every topic back."""
    # Two ports held by this test (its default, --port + 1, may be taken here): the server
    # binds next to the reservations, and nothing else can take them across its restart.
    held = [reserve_port(), reserve_port()]
    port, controller_port = (s.getsockname()[1] for s in held)
    proc = _server(port, tmp_path / "data", controller_port)
    bootstrap = f"127.0.0.1:{port}"
    try:
        admin = wait_until(lambda: tolerant(lambda: KafkaAdminClient(bootstrap_servers=bootstrap)), 30, "an admin")
        try:
            wait_until(lambda: create(admin, "quickstart-events", rf=1)[0] == 0, 30, "the topic created")
        finally:
            admin.close()
        p = KafkaProducer(bootstrap_servers=bootstrap)
        for i in range(10):
            p.send("quickstart-events", b"event-%d" % i)
        p.flush()
        p.close()
        confluent_kafka = pytest.importorskip("confluent_kafka")
        cp = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
        cp.produce("quickstart-events", b"from-librdkafka")
        assert cp.flush(30) == 0
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc = _server(port, tmp_path / "data", controller_port)  # the same command again
        consumer = ready_to_join(KafkaConsumer("quickstart-events", bootstrap_servers=bootstrap,
                                               auto_offset_reset="earliest", group_id="quickstart",
                                               consumer_timeout_ms=20_000), "quickstart-events", 1)
        got = []
        for record in consumer:
            got.append(record.value)
            if len(got) == 11:
                break
        consumer.close()
        assert got == [b"event-%d" % i for i in range(10)] + [b"from-librdkafka"]
    finally:
        proc.kill()
        proc.wait()
        for s in held:
            s.close()


def test_metadata_quorum_tool_describes_status_and_replication():
    with launch(brokers=2, config=FAST) as c:
        leader = wait_until(lambda: active_controller(c), 20, "an active controller")
        run = [sys.executable, "-m", "minikafka.cli", "metadata-quorum", "--bootstrap-server", c.bootstrap_servers,
               "describe"]
        status = subprocess.run(run + ["--status"], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        fields = dict(line.split(":", 1) for line in status.stdout.splitlines())
        assert [k for k in fields] == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                                       "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]
        assert int(fields["LeaderId"]) in c.controller_ids and int(fields["HighWatermark"]) > 0
        assert fields["CurrentVoters"].strip() == "[3000,3001,3002]"
        assert fields["CurrentObservers"].strip() == "[1,2]"
        replication = subprocess.run(run + ["--replication"], capture_output=True, text=True, timeout=60)
        assert replication.returncode == 0, replication.stderr
        rows = [line.split() for line in replication.stdout.splitlines()]
        assert rows[0] == ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
        statuses = {int(r[0]): r[-1] for r in rows[1:]}
        assert statuses[int(fields["LeaderId"])] == "Leader"
        assert sorted(n for n, s in statuses.items() if s == "Follower") == sorted(
            n for n in c.controller_ids if n != int(fields["LeaderId"]))
        assert sorted(n for n, s in statuses.items() if s == "Observer") == [1, 2]
        nowhere = subprocess.run([sys.executable, "-m", "minikafka.cli", "metadata-quorum", "--bootstrap-server",
                                  f"127.0.0.1:{free_port()}", "describe", "--status"],
                                 capture_output=True, text=True, timeout=60)
        assert nowhere.returncode == 1 and "no broker reachable" in nowhere.stderr
