"""minikafka.widgets.ProcessDashboard on a real 3-broker cluster (one OS process each),
headless: buttons clicked, ticks stepped by hand, the threads started and stopped.

Wall-clock time makes every run different, so nothing here asserts a time or an exact
sequence: each test waits (with a generous deadline) for a *state* the cluster must reach,
and the broker timeouts are short so that it reaches them in seconds. One cluster serves
the module (a launch is about a second); each test has its own topic, and whatever a test
killed or paused is brought back before the next one starts.
"""

import logging
import threading
import time

import pytest

pytest.importorskip("kafka")

from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from minikafka.errors import IllegalArgumentError  # noqa: E402
from minikafka.widgets import ProcessDashboard  # noqa: E402
from minikafka.wire.process import launch  # noqa: E402

# The controller declares a silent broker dead after 2 s, a leader drops a silent follower
# from the ISR after 2 s: a failover takes ~3 s instead of Kafka's ~10-30.
CONFIG = {"broker.session.timeout.ms": 2_000, "broker.heartbeat.interval.ms": 300,
          "replica.lag.time.max.ms": 2_000}
DEADLINE_S = 20  # ten times what any awaited state takes here; only a broken build waits this long


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=3, config=CONFIG) as c:
        yield c


@pytest.fixture
def make_dashboard(cluster, request):
    made = []

    def make(**kwargs):
        topic = f"{request.node.name.replace('[', '-').rstrip(']')}-{len(made)}"
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        try:
            admin.create_topics([NewTopic(topic, 3, 3)])
        finally:
            admin.close()
        d = ProcessDashboard(cluster, topic, **kwargs)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()
    for b in cluster.broker_ids:  # the next test starts with every broker up
        if cluster.alive(b):
            cluster.resume(b)  # harmless on a running process
        else:
            cluster.restart(b)


def until(d, check, what, wall_ms=250):
    """Tick until ``check(d.counters)`` holds; fail saying ``what`` was awaited."""
    deadline = time.monotonic() + DEADLINE_S
    while not check(d.counters):
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S} s: {what}; counters {d.counters}\n{log_text(d)}")
        d.tick(wall_ms)


def wait_for(check, what):
    """For a running dashboard: wait (without ticking) until ``check()`` holds."""
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S} s: {what}")
        time.sleep(0.05)


def log_text(d):
    return "\n".join(d.events)


def full(c):
    return c["under_replicated"] == 0 and c["offline"] == 0 and len(c["live_brokers"]) == 3


# --- the picture, from plain data ---------------------------------------------------------------------


def test_metadata_view_draws_what_a_client_can_know():
    from minikafka import viz

    P = viz.PartitionView
    parts = [P("t", 1, 2, 1, (2,), (2, 3, 1)), P("t", 0, 2, 1, (2, 3), (1, 2, 3))]
    view = viz.metadata_view("t", parts, brokers=[3, 1, 2], alive={1: False, 2: True, 3: True}, live=[3, 2],
                             now_ms=1500, high_watermarks={0: 12}, status={3: "paused (SIGSTOP)", 1: "ignored"})
    assert [p.partition for p in view.partitions] == [0, 1] and view.controller_live_brokers == (2, 3)
    assert view.under_replicated == 2 and view.offline == 0
    roles = {(b.broker_id, r.partition): r.role for b in view.brokers for r in b.replicas}
    assert roles == {(1, 0): viz.DOWN, (1, 1): viz.DOWN, (2, 0): viz.LEADER, (2, 1): viz.LEADER,
                     (3, 0): viz.FOLLOWER, (3, 1): viz.OUT_OF_ISR}
    dot = viz.draw(view).source
    assert 'label="broker 1  dead"' in dot and 'label="broker 3  paused (SIGSTOP)"' in dot  # dead: no status
    assert '"b2/t/0" [label="p0 L\nHW 12"' in dot and '"b2/t/1" [label="p1 L\nHW ?"' in dot
    assert '"b3/t/0" [label="p0 F"' in dot and '"b3/t/1" [label="p1 F  out of ISR"' in dot
    assert "live brokers: 2, 3" in dot and "t = 1.500 s" in dot


# --- what it refuses -------------------------------------------------------------------------------------


def test_refuses_a_simulated_cluster_and_an_unknown_topic(cluster):
    from minikafka.cluster import Cluster

    level = logging.getLogger("kafka").level
    sim = Cluster(1)
    try:
        with pytest.raises(IllegalArgumentError, match="LocalCluster"):
            ProcessDashboard(sim, "t")
    finally:
        sim.close()
    with pytest.raises(IllegalArgumentError, match="no-such-topic.*UnknownTopicOrPartition"):
        ProcessDashboard(cluster, "no-such-topic")
    assert logging.getLogger("kafka").level == level  # a failed construction gives the loggers back


# --- load and looking ----------------------------------------------------------------------------------


def test_every_acknowledged_record_is_below_the_high_watermarks(make_dashboard, cluster):
    d = make_dashboard(rate_per_s=100)
    c = d.counters
    assert c["alive"] == {1: True, 2: True, 3: True} and c["live_brokers"] == [1, 2, 3]
    assert sorted(c["leaders"].values()) == [1, 2, 3] and c["isr_sizes"] == {0: 3, 1: 3, 2: 3}
    assert [d.broker_buttons[b].description for b in (1, 2, 3)] == [f"kill broker {b}" for b in (1, 2, 3)]
    assert [d.pause_buttons[b].description for b in (1, 2, 3)] == [f"pause broker {b}" for b in (1, 2, 3)]
    assert "live brokers: 1, 2, 3" in d.diagram_source and "<svg" in d.diagram.value
    assert repr(d) == f"ProcessDashboard(topic={d.topic!r}, running=False, looks=1)"
    assert d._repr_mimebundle_()["text/plain"].startswith(f"Live dashboard of 3 broker processes (topic {d.topic}). ")

    until(d, lambda c: c["acknowledged"] >= 50, "50 records acknowledged")
    d.produce_toggle.value = False
    until(d, lambda c: c["pending"] == 0, "nothing in flight")
    d.refresh()
    c = d.counters
    # acks=all and an idempotent producer on a fresh topic: each acknowledged record is
    # exactly one offset below some partition's high watermark, as ListOffsets tells it.
    assert c["failed"] == 0 and c["sent"] == c["acknowledged"] == sum(c["end_offsets"].values())
    for p, hw in c["end_offsets"].items():
        assert f"HW {hw}" in d.diagram_source
    assert "acknowledged" in d.counters_html.value and "end offset" in d.partitions_html.value


# --- faults ---------------------------------------------------------------------------------------------


def test_kill_the_leader_and_restart_it(make_dashboard, cluster):
    d = make_dashboard(rate_per_s=50)
    until(d, lambda c: c["acknowledged"] >= 10, "records acknowledged")
    leader = d.counters["leaders"][0]
    button = d.broker_buttons[leader]
    assert button.description == f"kill broker {leader}"

    button.click()
    assert not cluster.alive(leader)
    assert button.description == f"restart broker {leader}" and d.pause_buttons[leader].disabled
    assert f'label="broker {leader}  dead"' in d.diagram_source
    assert f"you killed broker {leader}" in log_text(d)

    # The controller notices (no heartbeat for 2 s), elects another leader from the ISR.
    until(d, lambda c: c["leaders"][0] not in (leader, -1), "a new leader for partition 0")
    new = d.counters["leaders"][0]
    assert f'"b{new}/{d.topic}/0" [label="p0 L' in d.diagram_source
    assert f'label="broker {leader}  dead"' in d.diagram_source
    until(d, lambda c: leader not in c["live_brokers"] and c["under_replicated"] == 3,
          "the dead broker out of the live brokers and every ISR")
    text = log_text(d)
    assert f"{d.topic}-0 leader {leader} -> broker {new}" in text
    assert f"metadata: broker {leader} is no longer live" in text
    assert d.counters["leader_changes"] >= 1

    acked = d.counters["acknowledged"]
    until(d, lambda c: c["acknowledged"] >= acked + 20, "acknowledgements go on on two brokers")

    button.click()
    assert cluster.alive(leader) and button.description == f"kill broker {leader}"
    assert f"you restarted broker {leader}" in log_text(d)
    until(d, full, "the restarted broker back in every ISR")
    acked = d.counters["acknowledged"]
    until(d, lambda c: c["acknowledged"] >= acked + 20, "acknowledgements go on after the recovery")
    assert d.counters["failed"] == 0  # acks=all, clean elections: nothing given up on
    assert f"metadata: broker {leader} is live" in log_text(d)


def test_pause_a_broker_until_the_controller_drops_it_then_resume(make_dashboard, cluster):
    d = make_dashboard(rate_per_s=50)
    until(d, lambda c: c["acknowledged"] >= 10, "records acknowledged")
    b = d.counters["leaders"][1]
    d.pause_buttons[b].click()
    assert cluster.alive(b) and d.counters["paused"] == [b] and d.counters["alive"][b]
    assert d.pause_buttons[b].description == f"resume broker {b}"
    assert d.broker_buttons[b].description == f"kill broker {b}"  # paused is alive
    assert f'label="broker {b}  paused (SIGSTOP)"' in d.diagram_source
    assert f"you paused broker {b}" in log_text(d)

    # Alive but silent: no heartbeats, so to the controller it is dead like a killed one.
    until(d, lambda c: b not in c["live_brokers"] and c["leaders"][1] not in (b, -1),
          "the paused broker dropped, partition 1 led by another")
    d.pause_buttons[b].click()
    assert d.counters["paused"] == [] and d.pause_buttons[b].description == f"pause broker {b}"
    assert f"you resumed broker {b}" in log_text(d)
    until(d, full, "the resumed broker back among the live brokers and in every ISR")
    acked = d.counters["acknowledged"]
    until(d, lambda c: c["acknowledged"] >= acked + 20, "acknowledgements go on after the resume")


# --- the threads -----------------------------------------------------------------------------------------


def dashboard_threads(d):
    return [t for t in threading.enumerate() if t.name.startswith(f"minikafka-dashboard-{d.topic}-")]


def test_the_threads_send_and_look_until_stopped_and_close_leaves_the_cluster(make_dashboard, cluster):
    d = make_dashboard(rate_per_s=50, tick_ms=200)
    looks = d.looks
    d.run_toggle.value = True  # what the "run" button does
    assert d.running and len(dashboard_threads(d)) == 2 and d.run_toggle.description == "pause"
    wait_for(lambda: d.counters["acknowledged"] >= 10 and d.looks >= looks + 3, "the threads send and look")

    # A click while the threads run acts at once and leaves the looking to the refresher.
    victim = d.counters["leaders"][2]
    d.broker_buttons[victim].click()
    assert not cluster.alive(victim)
    wait_for(lambda: d.counters["alive"][victim] is False and f"broker {victim}  dead" in d.diagram_source,
             "the refresher draws the killed broker dead")
    d.broker_buttons[victim].click()
    wait_for(lambda: full(d.counters), "the restarted broker back in every ISR")

    d.run_toggle.value = False
    assert not d.running and not dashboard_threads(d) and d._thread_error is None
    sent = d.counters["sent"]
    time.sleep(0.3)
    assert d.sent == sent  # stopped means stopped

    d.close()
    assert not d.running
    with pytest.raises(IllegalArgumentError, match="closed"):
        d.tick(10)
    assert all(cluster.alive(b) for b in cluster.broker_ids)  # the caller's cluster lives on
    # ... and still serves: another client's metadata lists every broker.
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        assert sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"]) == [1, 2, 3]
    finally:
        admin.close()
