"""``launch(rules=...)``: real broker and controller processes run on a student's rules.

The functions travel by cloudpickle (``minikafka/wire/node_rules.py``); each node builds its
``Rules`` as the simulated cluster does, guard included. Each test waits for a state (a
record acknowledged and read back, a node's process gone with its message written), never for
a guessed time.
"""

from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("kafka")

from kafka import KafkaAdminClient, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from minikafka.errors import IllegalArgumentError  # noqa: E402
from minikafka.rules import grant_vote, high_watermark  # noqa: E402
from minikafka.wire.node_rules import RULE_ERROR_EXIT, NodeStopped  # noqa: E402
from minikafka.wire.process import launch  # noqa: E402

from wire_helpers import read_partitions, tolerant, wait_until  # noqa: E402

FAST = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500,
        "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3, "request.timeout.ms": 8000}


def callers(marker_dir) -> set[int]:
    """The pids that wrote a marker (one file per calling process)."""
    return {int(name) for name in os.listdir(marker_dir)}


def test_every_broker_and_controller_process_calls_the_students_functions_and_clients_see_a_kafka(tmp_path):
    marks = tmp_path / "calls"
    marks.mkdir()
    hw_marks, vote_marks = marks / "hw", marks / "vote"
    hw_marks.mkdir()
    vote_marks.mkdir()

    # A student's rules, defined here as in a notebook: Kafka's answers, plus a trace of who asked.
    def my_high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        (hw_marks / str(os.getpid())).touch()
        return high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr)

    def my_grant_vote(voter, request):
        (vote_marks / str(os.getpid())).touch()
        return grant_vote(voter, request)

    with launch(brokers=3, config=FAST, rules={"high_watermark": my_high_watermark,
                                                "grant_vote": my_grant_vote}) as c:
        assert c.rules_file is not None and oct(c.rules_file.stat().st_mode & 0o777) == "0o600"
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
        producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all")
        try:
            admin.create_topics([NewTopic("t", 3, 3)])
            wait_until(lambda: tolerant(lambda: "t" in admin.list_topics()), 20, "the topic")
            for i in range(30):
                producer.send("t", str(i).encode(), partition=i % 3).get(timeout=30)
        finally:
            producer.close()
            admin.close()
        # Every partition's leader moved its high watermark with the student's function.
        wait_until(lambda: len(callers(hw_marks)) == 3, 20, "each broker's leader calling high_watermark")
        brokers = {c.pid(b) for b in c.broker_ids}
        assert callers(hw_marks) == brokers
        # The controllers elected their leader with the student's vote rule.
        assert callers(vote_marks) and callers(vote_marks) <= {c.pid(n) for n in c.controller_ids}
        read = read_partitions(c.bootstrap_servers, "t", [0, 1, 2])
        assert sorted(int(v) for p in read.values() for _, v in p) == list(range(30))
        c.check()  # healthy: nothing to say


def test_a_rule_that_raises_stops_its_broker_and_the_health_check_names_node_and_rule():
    def my_high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        return leader_leo // (len(isr) - len(isr))  # ZeroDivisionError, as soon as it is asked

    with launch(brokers=3, config=FAST, rules={"high_watermark": my_high_watermark}) as c:
        c.check()  # no partition yet: nobody asked
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
        try:  # the new leader may ask its rule (and stop) before the answer to CreateTopics is out
            tolerant(lambda: admin.create_topics([NewTopic("t", 1, 3)]))
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all", retries=0,
                                 request_timeout_ms=5000, max_block_ms=5000, delivery_timeout_ms=6000)
        sent = threading.Thread(target=lambda: tolerant(lambda: producer.send("t", b"x").get(timeout=10)))
        sent.start()
        stopped = wait_until(lambda: [b for b in c.broker_ids if c.stopped_by_rule(b)], 30,
                             "the leader stopped by its rule")
        leader = stopped[0]
        assert c._proc(leader).returncode == RULE_ERROR_EXIT
        with pytest.raises(NodeStopped) as raised:
            c.check()
        error = raised.value
        assert (error.node, error.rule) == (leader, "high_watermark")
        text = str(error)
        assert f"broker {leader} stopped" in text and "wall-clock ms since the launch" in text
        assert f"your rule high_watermark broke on broker {leader} at t=" in text
        assert "it raised ZeroDivisionError: integer division or modulo by zero" in text
        assert "Kafka's rule returns:" in text
        assert text.endswith("this node has stopped; the others run on.")
        # The node's own log says it too (what a student reads in broker-N.out).
        assert f"your rule high_watermark broke on broker {leader}" in c.out_file(leader).read_text()
        sent.join()
        producer.close(timeout=0)


def test_a_vote_rule_that_never_returns_stops_launch_with_the_controllers_message():
    def my_grant_vote(voter, request):
        while True:  # a loop that never ends: the guard's budget interrupts it
            pass

    with pytest.raises(NodeStopped) as raised:
        launch(brokers=1, config=FAST, rules={"grant_vote": my_grant_vote})
    text = str(raised.value)
    assert raised.value.rule == "grant_vote" and raised.value.node in (3000, 3001, 3002)
    assert f"your rule grant_vote broke on controller {raised.value.node} at t=" in text
    assert "it was still running after 2.0 s of wall time" in text


def test_rules_are_checked_before_any_process_starts():
    with pytest.raises(IllegalArgumentError, match="no rule named 'high_water'"):
        launch(brokers=1, rules={"high_water": high_watermark})
    with pytest.raises(IllegalArgumentError, match="must take the arguments"):
        launch(brokers=1, rules={"high_watermark": lambda hw: hw})
    lock = threading.Lock()

    def unshippable(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        with lock:
            return hw
    with pytest.raises(IllegalArgumentError, match="could not ship your rules"):
        launch(brokers=1, rules={"high_watermark": unshippable})


def test_a_lone_combined_mode_server_runs_a_rules_file_too(tmp_path):
    """``minikafka server --rules-file`` without a quorum (Kafka 4's quickstart shape): the broker
    and its controller in one process, each with its own label; the broker's rule stops it."""
    import subprocess
    import sys
    import time

    from minikafka.wire import node_rules
    from minikafka.wire.process import free_ports, wait_for_port

    def my_high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        raise ValueError("not yet")

    shipped = node_rules.save(node_rules.pickled({"high_watermark": my_high_watermark},
                                                 launched_at_ms=time.time_ns() // 1_000_000), tmp_path)
    port, controller_port = free_ports(2)
    out = open(tmp_path / "server.out", "wb")
    server = subprocess.Popen([sys.executable, "-m", "minikafka.cli", "server", "--port", str(port),
                               "--controller-port", str(controller_port), "--log-dir", str(tmp_path / "data"),
                               "--rules-file", str(shipped), "--exit-with-parent"],
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out.close()
    try:
        wait_for_port("127.0.0.1", port, 60, server)
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks=1, retries=0,
                                 request_timeout_ms=5000, max_block_ms=10_000, delivery_timeout_ms=6000)
        tolerant(lambda: producer.send("t", b"x").get(timeout=10))
        producer.close(timeout=0)
        assert server.wait(timeout=60) == RULE_ERROR_EXIT
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    stopped = node_rules.read_stopped(node_rules.error_file(tmp_path, 1, controller=False), 1)
    assert stopped is not None and stopped.rule == "high_watermark"
    assert "your rule high_watermark broke on broker 1 at t=" in str(stopped)
    assert "it raised ValueError: not yet" in str(stopped)


def test_node_rules_guard_a_nodes_calls_on_the_launch_clock_and_stop_it_with_the_message(tmp_path):
    """Without processes: the Rules a node builds from a rules file, its clock, and what ``stop``
    writes before it ends the process (``exit`` stands in for ``os._exit``)."""
    from minikafka.rules import RuleError
    from minikafka.wire import node_rules

    def my_high_watermark(hw, leader, leader_leo, follower_leos, isr, pending_isr):
        return leader_leo + 1  # above the log end: no broker could act on it

    shipped = node_rules.save(node_rules.pickled({"high_watermark": my_high_watermark}, launched_at_ms=1_000),
                              tmp_path)
    assert node_rules.save(node_rules.pickled({}, launched_at_ms=1_000), tmp_path / "none") is None
    exits = []
    error_path = node_rules.error_file(tmp_path, 2, controller=False)
    rules = node_rules.node_rules(shipped, 2, error_path, clock_ms=lambda: 3_500, exit=exits.append)
    assert rules.grant_vote is grant_vote  # every rule not given is Kafka's, unwrapped
    with pytest.raises(RuleError):
        rules.high_watermark(0, 2, 8, {1: 8, 3: 8}, (1, 2, 3), None)
    assert exits == [RULE_ERROR_EXIT]
    stopped = node_rules.read_stopped(error_path, 2)
    assert (stopped.node, stopped.rule) == (2, "high_watermark")
    lines = str(stopped).splitlines()
    assert lines[0] == "broker 2 stopped by your rule high_watermark (t= below counts wall-clock ms since the launch)"
    assert lines[1] == ("your rule high_watermark broke on broker 2 at t=2500 ms: it put the high watermark "
                        "at 9, above the leader's log end 8")
    assert lines[-1] == "  this node has stopped; the others run on."
    assert node_rules.read_stopped(node_rules.error_file(tmp_path, 3, controller=False), 3) is None
