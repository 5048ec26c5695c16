"""minikafka.widgets.Dashboard, headless: buttons clicked, ticks stepped by hand, the
thread started and stopped. No kernel and no browser needed."""

import re
import threading
import time

import pytest

from minikafka.checker import INCONSISTENT_OFFSETS, LOST_WRITE, History, analyse, final_read, settle
from minikafka.clients.future import Future
from minikafka.cluster import Cluster
from minikafka.errors import IllegalArgumentError
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
    return "\n".join(d.events)


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
@pytest.mark.campaign
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


@pytest.mark.campaign
def test_lost_is_what_the_checker_counts_and_never_goes_down(make_dashboard):
    """One history, two judges: the dashboard's live count and the checker's final read.
    A stale leader (cut off from the cluster, still reached by the producer) acknowledges
    acks=1 records at offsets the new leader then fills with other acknowledged records:
    the case where one value kept per offset used to hide the losses."""
    c, d = make_dashboard(rate_per_s=50, acks="1")
    seen = []

    def step(n):
        for _ in range(n):
            d.tick(500)
            seen.append(d.counters["lost"])

    step(2)
    leader = d.counters["leaders"][0]
    d.isolate(leader, "cluster")
    step(24)
    d.heal()
    step(30)
    d.produce_toggle.value = False
    step(20)
    assert d.counters["pending"] == 0
    assert seen == sorted(seen) and seen[-1] > 0  # it only ever goes up

    # Overwritten offsets: two acknowledged records at one offset, one of them lost.
    records = d.losses.records[("t", 0)]
    lost = {(o, v) for t, p, o, v in d.losses.lost_records() if p == 0}
    offsets = [o for o, _, _ in records]
    overwritten = {o for o in offsets if offsets.count(o) > 1}
    assert overwritten and {o for o, _ in lost} & overwritten

    history = History()
    for (topic, partition), acked in d.losses.records.items():
        for offset, value, _ in acked:
            history.ok(history.invoke(topic, value, partition=partition), partition, offset)
    assert settle(c, "t") and final_read(c, "t", history)
    d.refresh()
    report = analyse(history)
    assert report.anomalies[INCONSISTENT_OFFSETS] > 0  # the checker sees the overwritten offsets too
    assert report.anomalies[LOST_WRITE] == d.counters["lost"] == len(d.losses.lost_records())
    assert {(a.partition, a.offsets[0], a.values[0]) for a in report.examples(LOST_WRITE)} == \
        {(p, o, v.decode()) for _, p, o, v in d.losses.lost_records()}
    assert d.counters["lost_by_acks"] == {"1": d.counters["lost"]}


@pytest.mark.campaign
def test_acks_all_loses_nothing_and_shows_no_red(make_dashboard):
    c, d = make_dashboard(rate_per_s=50, acks="all")
    ticks(d, 2)
    for victim in (d.counters["leaders"][0], d.counters["leaders"][1]):
        d.toggle_broker(victim)  # kill a leader, then restart it
        ticks(d, 24)
        d.toggle_broker(victim)
        ticks(d, 12)
        assert d.counters["lost"] == 0
        assert "color:#cb181d" not in _counter_cell(d, "lost (so far)")
    assert d.counters["elections"] >= 2 and d.counters["acknowledged"] > 500


@pytest.mark.campaign
def test_switching_acks_says_which_setting_lost_what(make_dashboard):
    c, d = make_dashboard(rate_per_s=50, acks="1")
    ticks(d, 2)
    d.isolate(d.counters["leaders"][0], "cluster")
    ticks(d, 24)
    d.heal()
    ticks(d, 30)
    lost = d.counters["lost"]
    assert lost > 0
    d.acks.value = "all"
    ticks(d, 20)
    assert d.counters["lost_by_acks"] == {"1": lost, "all": 0}
    assert "lost with acks=all" in d.counters_html.value
    assert "color:#cb181d" not in _counter_cell(d, "&nbsp;&nbsp;lost with acks=all")
    assert "color:#cb181d" in _counter_cell(d, "&nbsp;&nbsp;lost with acks=1")


def _counter_cell(d, name):
    """The value cell of counter ``name`` in the dashboard's counters table."""
    m = re.search(f"<span>{re.escape(name)}</span>(<span[^>]*>[^<]*</span>)</div>", d.counters_html.value)
    assert m, f"no counter {name!r} in {d.counters_html.value}"
    return m.group(1)


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


SAVED_TEXT = ("Live dashboard of 3 simulated brokers (topic t). It shows only while the kernel that made it "
              "runs: run the cells above, then this one, to see it and use its buttons.")


def test_display(make_dashboard):
    c, d = make_dashboard()
    bundle = d._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    # What a saved notebook shows in the dashboard's place: a sentence, not the repr.
    assert bundle["text/plain"] == SAVED_TEXT
    assert repr(d) == "Dashboard(topic='t', running=False, ticks=0)"


def test_the_saved_text_does_not_follow_the_live_state(make_dashboard):
    """nbval compares text/plain: a broker killed, time passing, the thread started and
    stopped leave the sentence as it was made."""
    c, d = make_dashboard(rate_per_s=50)
    d.broker_buttons[1].click()
    ticks(d, 4)
    d.start()
    d.stop()
    assert d.ticks >= 4 and not c.alive(1)
    assert d._repr_mimebundle_()["text/plain"] == SAVED_TEXT


def test_dashboards_on_one_cluster_share_its_lock(make_dashboard):
    c, d = make_dashboard()
    other = Dashboard(c, "t", producing=False)
    try:
        assert other.lock is d.lock
    finally:
        other.close()


# --- consumers --------------------------------------------------------------------------------------------

# Small and quick: three __consumer_offsets partitions, no initial rebalance delay.
GROUP_CONFIG = {**CONFIG, "offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}
FAST = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 2_000, "auto_offset_reset": "earliest"}


@pytest.fixture
def make_group_dashboard(tmp_path):
    made = []

    def make(partitions=4, **kwargs):
        c = Cluster(3, seed=7, config=GROUP_CONFIG, dir=tmp_path / f"cluster-{len(made)}")
        c.create_topic("t", partitions=partitions, replication_factor=2)
        d = Dashboard(c, "t", group="g", consumer_config=dict(FAST), **kwargs)
        made.append((c, d))
        return c, d

    yield make
    for c, d in made:
        d.close()
        c.close()


def tick_until(d, done, limit=40, wall_ms=500):
    for _ in range(limit):
        if done():
            return
        d.tick(wall_ms)
    assert done(), d.counters.get("assignment")


def settled(d, expected):
    """The group is stable with ``expected`` as its assignment (every consumer took its part)."""
    g = d.counters["group"]
    return g["state"] == "Stable" and d.counters["assignment"] == expected and all(
        c["state"] == "STABLE" and c["generation"] == g["generation"]
        for c in d.counters["consumers"].values() if c["alive"])


@pytest.mark.campaign
def test_kill_a_consumer_its_partitions_move_restart_it_it_rejoins(make_group_dashboard):
    c, d = make_group_dashboard(consumers=2, rate_per_s=40)
    assert [k.node_id for k in d.consumers] == ["consumer-2", "consumer-3"]
    both = {"consumer-2": [0, 1], "consumer-3": [2, 3]}
    tick_until(d, lambda: settled(d, both))
    ticks(d, 2)
    consumed = dict(d.consumed)
    assert consumed["consumer-2"] > 0 and consumed["consumer-3"] > 0  # the dashboard polls them
    assert d.counters["consumed"] == sum(consumed.values())
    assert '"group/g/consumer-2" -> "b' in d.diagram_source and "<svg" in d.diagram.value

    button = d.consumer_buttons["consumer-2"]
    assert button.description == "kill consumer-2"
    button.click()
    killed_at = c.now
    assert not d.consumer("consumer-2").alive and button.description == "restart consumer-2"
    assert '"group/g/consumer-2" [label="consumer-2\ndead\nstill a member' in d.diagram_source
    assert "you killed consumer-2" in log_text(d)

    ticks(d, 4)  # 2 s: the coordinator waits for the session timeout; nobody reads p0, p1
    assert d.counters["assignment"] == {"consumer-3": [2, 3]}
    assert "not read by anyone: p0, p1" in d.diagram_source
    assert d.consumed["consumer-2"] == consumed["consumer-2"]  # a dead consumer is not polled
    tick_until(d, lambda: settled(d, {"consumer-3": [0, 1, 2, 3]}))
    # session_timeout_ms after its last heartbeat, which was at most heartbeat_interval_ms before
    assert c.now - killed_at >= 6_000 - 2_000
    for p in range(4):
        leader = c.partition_state("t", p).leader
        assert f'"group/g/consumer-3" -> "b{leader}/t/{p}" [label="pos ' in d.diagram_source
    assert "label=held" not in d.diagram_source
    assert "group g generation" in log_text(d) and "consumer-3 p0,p1,p2,p3" in log_text(d)

    button.click()  # restart: a new member, from the committed offsets
    assert d.consumer("consumer-2").alive and button.description == "kill consumer-2"
    tick_until(d, lambda: settled(d, both))
    ticks(d, 2)
    assert d.consumed["consumer-2"] > consumed["consumer-2"]
    assert "you restarted consumer-2" in log_text(d)
    # What consumer-2 read after its last commit, consumer-3 read again: named, not hidden in "consumed".
    positions = {tp: k.position(tp) for k in d.consumers if k.alive for tp in k.assignment()}
    assert len(positions) == 4  # every record below these was read once, from offset 0 (earliest)
    assert d.counters["redelivered"] > 0
    assert d.counters["consumed"] - d.counters["redelivered"] == sum(positions.values())
    assert "of which read again" in d.counters_html.value
    assert d.counters["consumers"]["consumer-2"]["lag"] is not None


@pytest.mark.campaign
def test_add_consumer_joins_and_gets_partitions(make_group_dashboard):
    c, d = make_group_dashboard(consumers=1, rate_per_s=20)
    tick_until(d, lambda: settled(d, {"consumer-2": [0, 1, 2, 3]}))
    assert list(d.consumer_buttons) == ["consumer-2"]

    d.add_consumer_button.click()
    new = d.consumers[-1]
    assert len(d.consumers) == 2 and new.config["session_timeout_ms"] == 6_000  # the template
    assert new.config["group_id"] == "g" and new.subscription() == {"t"}
    assert list(d.consumer_buttons) == ["consumer-2", new.node_id]
    assert len(d.consumer_rows.children) == 2
    assert d.consumer_buttons[new.node_id].description == f"kill {new.node_id}"
    tick_until(d, lambda: settled(d, {"consumer-2": [0, 1], new.node_id: [2, 3]}))

    third = d.add_consumer(client_id="late")  # overrides on top of the template
    assert third.config["client_id"] == "late" and d.consumer("late") is third
    tick_until(d, lambda: settled(d, {"consumer-2": [0, 1], new.node_id: [2], third.node_id: [3]}))
    assert d.consumer_buttons[third.node_id].description == "kill late"
    assert 'label="late\n(' in d.diagram_source  # client id, then node id


def test_lag_samples(make_group_dashboard):
    # One record per poll, ten polls per simulated second: a producer of 100 records/s
    # outruns the single consumer.
    c, d = make_group_dashboard(consumers=0, rate_per_s=100)
    consumer = d.add_consumer(max_poll_records=1)
    n = len(d.lag_samples)
    ticks(d, 10)
    assert len(d.lag_samples) == n + 10  # one sample per step, none for a click or a refresh
    d.refresh()
    assert len(d.lag_samples) == n + 10
    samples = d.lag_samples[-10:]
    assert [s["time_ms"] for s in samples] == sorted(s["time_ms"] for s in samples)
    assert all(set(s["lag"]) == {consumer.node_id} for s in samples)
    lags = [s["lag"][consumer.node_id] for s in samples]
    assert all(later > earlier for earlier, later in zip(lags, lags[1:]))  # it falls behind
    assert lags[-1] == d.counters["consumers"][consumer.node_id]["lag"]
    # lag = HW - position, summed; it started from the beginning, so position = records read
    hws = sum(c.replica(s.leader, "t", s.partition).high_watermark for s in c.partitions_of("t"))
    assert lags[-1] == hws - d.consumed[consumer.node_id]

    d.consume_toggle.value = False  # the application stops polling: lag only grows
    before = d.consumed[consumer.node_id]
    ticks(d, 2)
    assert d.consumed[consumer.node_id] == before
    assert d.lag_samples[-1]["lag"][consumer.node_id] > d.lag_samples[-3]["lag"][consumer.node_id]

    c.kill_consumer(consumer)
    ticks(d, 1)
    assert d.lag_samples[-1]["lag"] == {consumer.node_id: None}  # dead: a gap in the chart
    assert d.draw_lag_chart().startswith("<svg") and d.lag_chart_svg[4:] in d.lag_chart.value


def test_the_thread_drives_the_consumers(make_group_dashboard):
    c, d = make_group_dashboard(consumers=2, rate_per_s=50, tick_ms=20, speed=20.0)
    d.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not settled(d, {"consumer-2": [0, 1], "consumer-3": [2, 3]}):
            time.sleep(0.05)
        d.consumer_buttons["consumer-3"].click()  # a click while the thread runs
    finally:
        d.close()
    assert not d.running and d._thread_error is None
    assert sum(d.consumed.values()) > 0 and len(d.lag_samples) == d.ticks
    assert not d.consumer("consumer-3").alive
    assert d._chart_drawn is d.lag_samples[-1]  # stop() drew the last step


def test_without_a_group_there_is_no_consumer_section(make_dashboard):
    c, d = make_dashboard()
    ticks(d, 1)
    assert d.group is None and d.consumers == [] and d.lag_samples == []
    assert "assignment" not in d.counters and "group/" not in d.diagram_source
    assert d.add_consumer_button not in _walk_widgets(d.widget)
    with pytest.raises(IllegalArgumentError):
        d.add_consumer()
    with pytest.raises(IllegalArgumentError):
        Dashboard(c, "t", consumers=1)
    with pytest.raises(IllegalArgumentError):
        Dashboard(c, "t", group="g", consumer_config={"group_id": "other"})


def _walk_widgets(widget):
    from minikafka.widgets import _walk

    return _walk(widget)


# --- a controller quorum: buttons for the controllers -------------------------------------------------


@pytest.fixture
def make_quorum_dashboard(tmp_path):
    made = []

    def make(**kwargs):
        c = Cluster(3, controllers=3, seed=7, config=CONFIG, dir=tmp_path / f"quorum-{len(made)}")
        c.create_topic("t", partitions=3, replication_factor=3)
        d = Dashboard(c, "t", **kwargs)
        made.append((c, d))
        return c, d

    yield make
    for c, d in made:
        d.close()
        c.close()


def test_the_saved_text_names_the_controllers_and_the_group(make_quorum_dashboard, make_group_dashboard):
    assert make_quorum_dashboard()[1]._repr_mimebundle_()["text/plain"].startswith(
        "Live dashboard of 3 simulated brokers and 3 controllers (topic t). ")
    assert make_group_dashboard()[1]._repr_mimebundle_()["text/plain"].startswith(
        "Live dashboard of 3 simulated brokers (topic t, consumer group g). ")


def test_kill_the_active_controller_a_new_one_is_named_restart_it(make_quorum_dashboard):
    c, d = make_quorum_dashboard(rate_per_s=50)
    assert sorted(d.controller_buttons) == c.controller_ids
    ticks(d, 2)
    first = c.controller.node_id
    epoch = c.controller.raft.epoch
    button = d.controller_buttons[first]
    assert button.description == f"kill controller {first} (active)"
    assert d.counters["active_controller"] == first
    assert f"active controller: {first}" in d.diagram_source

    button.click()
    assert not c.world.alive(first)
    assert button.description == f"restart controller {first}"
    assert f"you killed controller {first} (the active controller)" in log_text(d)
    assert f'"voter/{first}" [label="{first}\ndead"' in d.diagram_source

    ticks(d, 10)  # 5 s: past controller.quorum.fetch.timeout.ms, an election
    new = c.controller.node_id
    assert new != first and c.controller.raft.epoch > epoch
    assert d.counters["active_controller"] == new
    assert f"controller quorum: {new} is the active controller (epoch {c.controller.raft.epoch})" in log_text(d)
    assert f"active controller: {new}" in d.diagram_source
    assert d.controller_buttons[new].description == f"kill controller {new} (active)"
    # The brokers never noticed: no partition changed leader, the producer went on.
    assert d.counters["elections"] == 0 and d.counters["failed"] == 0
    acked = d.counters["acknowledged"]
    ticks(d, 2)
    assert d.counters["acknowledged"] > acked

    button.click()
    assert c.world.alive(first) and button.description == f"kill controller {first}"
    assert f"you restarted controller {first}" in log_text(d)
    ticks(d, 4)
    assert f'"voter/{first}" [label="{first} follower' in d.diagram_source


def test_the_last_live_controller_stays(make_quorum_dashboard):
    c, d = make_quorum_dashboard(producing=False)
    a, b, last = c.controller_ids
    d.controller_buttons[a].click()
    d.controller_buttons[b].click()
    assert d.controller_buttons[last].disabled
    d.toggle_controller(last)  # from code: refused with a note, nothing killed
    assert c.world.alive(last) and "is the last one alive" in log_text(d)
    ticks(d, 8)  # 4 s, past check-quorum (1.5 x fetch.timeout.ms): no majority, no active controller
    assert d.counters["active_controller"] is None
    assert "no active controller" in d.diagram_source
    d.controller_buttons[a].click()
    assert not d.controller_buttons[last].disabled
    ticks(d, 10)
    assert d.counters["active_controller"] in c.controller_ids


def test_one_controller_no_controller_buttons(make_dashboard):
    c, d = make_dashboard()
    assert d.controller_buttons == {} and "active_controller" not in d.counters


def test_isolate_a_broker_from_the_whole_quorum(make_quorum_dashboard):
    c, d = make_quorum_dashboard(producing=False)
    d.isolate(2, "controller")
    assert {frozenset((2, n)) for n in c.controller_ids} <= set(c.world.network.cut)
    d.heal()


# --- what a projector shows: the event log, the layout, the lag chart, one thread -----------------------


def test_the_event_log_keeps_its_newest_line_in_sight(make_dashboard):
    c, d = make_dashboard(rate_per_s=20)
    assert d.events == [] and "(no events yet)" in d.log.value
    for b in (1, 2, 1, 2):
        d.toggle_broker(b)
    assert d.events[-1].endswith("you restarted broker 2") and len(d.events) == 4
    value = d.log.value
    # A reversed flex column around one block of lines, oldest first: the browser keeps
    # such a box scrolled to its end (tests/test_browser.py checks it on screen).
    assert "flex-direction:column-reverse" in value and "overflow-y:auto" in value
    assert value.index("you killed broker 1") < value.index("you restarted broker 2")
    for i in range(300):
        d._note(f"line {i}")
    assert len(d.events) == 200 and d.events[-1].endswith("line 299") and "line 99" not in d.log.value


def test_a_layout_for_a_projector_the_picture_scaled_to_the_window(make_group_dashboard):
    c, d = make_group_dashboard(consumers=2)
    kids = d.widget.children
    picture = next(k for k in kids if d.diagram in getattr(k, "children", ()))
    side = picture.children[1]
    assert picture.children[0] is d.diagram and picture.layout.flex_flow == "row wrap"  # beside, or under
    assert list(side.children)[2:] == [d.consumer_rows, d.lag_chart, d.partitions_html]
    assert kids.index(d.counters_html) < kids.index(picture) < kids.index(d.log)  # counters above, never beside
    # Every button has a fixed width: a label that changes never moves its neighbours.
    buttons = [k for k in _walk_widgets(d.widget) if type(k).__name__ in ("Button", "ToggleButton")]
    assert len(buttons) >= 9 and all(str(b.layout.width).endswith("px") for b in buttons), buttons
    # The diagram: no wider than its box or its natural size, and no taller than the window
    # less what the controls take, but never under 60% of its natural size.
    natural = re.search(r'<svg [^>]*\bwidth="([\d.]+)pt" height="([\d.]+)pt"', d.diagram.value)
    width, height = float(natural.group(1)) * 4 / 3, float(natural.group(2)) * 4 / 3
    style = re.match(r'<svg style="([^"]*)"', d.diagram.value).group(1)
    assert style == (f"width:min(100%,{width:.0f}px,max({width * 0.6:.0f}px,calc((100vh - 285px) * "
                     f"{width / height:.4f})));height:auto;display:block"), style
    assert "viewBox=" in d.diagram.value  # what keeps its proportions as it shrinks
    assert "the lag chart appears after the first step" in d.lag_chart.value  # no broken image
    d.tick(500)
    assert d.lag_chart.value.startswith('<svg style="max-width:100%') and "<image" not in d.lag_chart.value


def test_the_lag_chart_counts_whole_records_from_zero(make_group_dashboard):
    c, d = make_group_dashboard(consumers=2, producing=False)
    ticks(d, 4)
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", d.lag_chart_svg)
    y = labels[labels.index("simulated time (s)") + 1:labels.index("lag (records)")]
    assert y == ["0", "1"]  # all lags 0: an axis 0..1, not 0..0.05
    d.produce_toggle.value = True
    d.rate.value = 200
    d.consume_toggle.value = False  # a backlog builds up
    ticks(d, 4)
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", d.lag_chart_svg)
    y = [int(v) for v in labels[labels.index("simulated time (s)") + 1:labels.index("lag (records)")]]
    top = max(v for s in d.lag_samples for v in s["lag"].values() if v is not None)
    assert y[0] == 0 and y == sorted(y) and y[-1] <= top * 1.05 and y[-1] > top / 2


def dashboard_threads():
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("minikafka-dashboard"))


def test_a_dashboard_whose_last_view_goes_stops(make_dashboard):
    """The page counts the dashboard's views (ipywidgets' ``_view_count``, set from the page as
    it draws and removes them; set here as the page would). Without a page it is never counted."""
    _, d = make_dashboard(tick_ms=20)
    assert d.widget._view_count == 0  # counting asked for
    d.start()
    d.widget._view_count = 1  # the page drew it
    d.widget._view_count = 2  # a second view (the same output in another tab)
    d.widget._view_count = 1
    assert d.running  # one view is left
    d.widget._view_count = 0  # the output cleared
    assert not d.running and dashboard_threads() == []
    assert "paused: no page shows this dashboard any more" in log_text(d)
    assert d.run_toggle.value is False and d.run_toggle.description == "run"
    d.start()  # "run" again (from a new view) runs again
    assert d.running
    d.close()


def test_one_thread_a_dashboard_made_again_pauses_the_old_one(make_dashboard):
    assert dashboard_threads() == []
    c1, old = make_dashboard(tick_ms=20)
    old.start()
    assert dashboard_threads() == ["minikafka-dashboard-t"]
    c2, new = make_dashboard(tick_ms=20)  # the cell run a second time
    assert not old.running and dashboard_threads() == []
    assert "paused: another dashboard was made or started" in log_text(old)
    assert old.run_toggle.value is False and old.run_toggle.description == "run"
    new.start()
    old.start()  # pressing "run" on the old one pauses the new one
    assert old.running and not new.running and dashboard_threads() == ["minikafka-dashboard-t"]
    old.close()
    assert dashboard_threads() == []
    assert old.widget.comm is None and old.diagram.layout.comm is None  # closed, layouts too
