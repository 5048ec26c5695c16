"""minikafka.widgets.Dashboard, headless: buttons clicked, ticks stepped by hand, the
thread started and stopped. No kernel and no browser needed."""

import time

import pytest

from minikafka.clients.future import Future
from minikafka.cluster import Cluster
from minikafka.widgets import Dashboard

CONFIG = {"replica.lag.time.max.ms": 2_000}


@pytest.fixture
def make_dashboard(tmp_path):
    made = []

    def make(**kwargs):
        c = Cluster(3, seed=7, config=CONFIG, dir=tmp_path / f"cluster-{len(made)}")
        c.create_topic("t", partitions=3, replication_factor=3)
        d = Dashboard(c, "t", **kwargs)
        made.append((c, d))
        return c, d

    yield make
    for c, d in made:
        d.close()
        c.close()


def ticks(d, n, wall_ms=500):
    for _ in range(n):
        d.tick(wall_ms)


def log_text(d):
    return "".join(o["text"] for o in d.log.outputs)


def test_kill_the_leader_and_restart_it(make_dashboard):
    c, d = make_dashboard(rate_per_s=50)
    ticks(d, 4)
    assert d.counters["acknowledged"] > 0 and d.counters["under_replicated"] == 0
    leader = d.counters["leaders"][0]
    button = d.broker_buttons[leader]
    assert button.description == f"kill broker {leader}"

    button.click()
    assert not c.alive(leader)
    assert button.description == f"restart broker {leader}"
    assert f'label="broker {leader}  dead"' in d.diagram_source
    assert f"you killed broker {leader}" in log_text(d)

    ticks(d, 24)  # 12 s: past broker.session.timeout.ms
    new = d.counters["leaders"][0]
    assert new not in (leader, -1)
    assert f'"b{new}/t/0" [label="p0 L' in d.diagram_source
    assert d.counters["under_replicated"] > 0
    assert d.counters["isr_sizes"] == {0: 2, 1: 2, 2: 2}
    assert d.counters["elections"] >= 1
    text = log_text(d)
    assert f"controller: broker {leader} is dead" in text and "election t-0" in text
    assert "under-replicated partitions" in d.counters_html.value and "<svg" in d.diagram.value

    button.click()
    assert c.alive(leader) and button.description == f"kill broker {leader}"
    ticks(d, 10)
    assert d.counters["under_replicated"] == 0
    assert d.counters["lost"] == 0 and d.counters["failed"] == 0  # acks=all, a clean election


@pytest.mark.parametrize("acks, loses", [("1", True), ("all", False)])
def test_a_stale_leader_loses_acks1_writes_only(make_dashboard, acks, loses):
    c, d = make_dashboard(rate_per_s=50, acks=acks)
    ticks(d, 2)
    leader = d.counters["leaders"][0]
    d.isolate_broker.value = leader
    d.isolate_from.value = "cluster"  # clients still reach it
    d.cut_button.click()
    assert d.diagram_source.count("label=cut") == 3  # two brokers and the controller
    ticks(d, 24)
    assert f'"b{leader}/t/0" [label="p0 L?  stale' in d.diagram_source
    d.heal_button.click()
    assert "label=cut" not in d.diagram_source
    ticks(d, 30)  # the stale leader rejoins, truncates; retried writes go through
    assert (d.counters["lost"] > 0) is loses
    assert d.counters["acknowledged"] > 0


def test_producer_controls(make_dashboard):
    c, d = make_dashboard(rate_per_s=40, producing=False)
    ticks(d, 2)
    assert d.counters["sent"] == 0
    d.produce_toggle.value = True
    d.tick(1000)  # 1 s simulated: 40 records
    assert d.counters["sent"] == 40
    d.speed.value = 2.0
    d.tick(1000)  # 2 s simulated: 80 more
    assert d.counters["sent"] == 120
    d.acks.value = "0"
    ticks(d, 2)
    assert sorted(d._own_producers) == ["0", "all"]
    assert d.counters["acknowledged"] == d.counters["sent"] - d.counters["pending"]


def test_a_given_producer_is_used_as_is(make_dashboard):
    class Fake:
        def __init__(self):
            self.sent = []

        def send(self, topic, value=None, key=None):
            self.sent.append((topic, value, key))
            future = Future()
            if len(self.sent) % 2:
                future.failure(RuntimeError("no"))
            return future  # the other half never completes

    fake = Fake()
    fake.config = {"acks": 1}
    c, d = make_dashboard(producer=fake, rate_per_s=10)
    assert d.acks.disabled and d.acks.value == "1"
    d.tick(1000)
    assert len(fake.sent) == 10 and fake.sent[0] == ("t", b"0", b"truck-0")
    assert d.counters["failed"] == 5 and d.counters["pending"] == 5
    assert d.counters["errors"] == {"RuntimeError": 5}


def test_the_thread_ticks_and_stops(make_dashboard):
    c, d = make_dashboard(rate_per_s=20, tick_ms=50)
    before, t0 = d.ticks, c.now
    d.start()
    assert d.running and d.run_toggle.value and d.run_toggle.description == "pause"
    time.sleep(0.4)
    d.stop()
    assert not d.running and not d.run_toggle.value
    assert d._thread_error is None
    assert d.ticks - before >= 2
    assert c.now > t0  # paced by the wall clock: about 400 ms went by
    frozen = (d.ticks, c.now)
    time.sleep(0.1)
    assert (d.ticks, c.now) == frozen

    d.run_toggle.value = True  # the run button starts and stops it too
    assert d.running
    d.run_toggle.value = False
    assert not d.running


def test_clicks_while_running(make_dashboard):
    c, d = make_dashboard(rate_per_s=50, tick_ms=20, speed=10.0)
    d.start()
    try:
        for _ in range(3):
            d.broker_buttons[1].click()
            time.sleep(0.05)
    finally:
        d.close()
    assert not d.running and d._thread_error is None
    assert not c.alive(1) and d.broker_buttons[1].description == "restart broker 1"


def test_display(make_dashboard):
    c, d = make_dashboard()
    bundle = d._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == "Dashboard(topic='t', running=False, ticks=0)"  # nbval-safe


def test_dashboards_on_one_cluster_share_its_lock(make_dashboard):
    c, d = make_dashboard()
    other = Dashboard(c, "t", producing=False)
    try:
        assert other.lock is d.lock
    finally:
        other.close()
