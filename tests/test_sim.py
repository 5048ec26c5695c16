"""The simulated world on its own: virtual clock, timers, crashes, and the faulty network.

Toy state machines only (no broker), so each test pins one promise of ``minikafka.sim``:
same seed -> same history, timers replace and cancel, a crash voids what was addressed to
the dead incarnation, links are FIFO, partitions cut both ways until ``heal``, loss is
seeded.
"""

from __future__ import annotations


from minikafka.messages import Disconnected
from minikafka.node import CancelTimer, Send, SetTimer, StateMachine
from minikafka.sim import Network, World


# --- toy nodes ------------------------------------------------------------------------------------


class Recorder(StateMachine):
    """Keeps every message and timer it gets, with the time it got it."""

    def __init__(self, node_id, *, start_timers=(), log=None):
        super().__init__(node_id)
        self.got: list[tuple[int, object, object]] = []
        self.fired: list[tuple[int, object]] = []
        self.start_timers = start_timers
        self.log = log  # a list shared across incarnations, to see what each one saw

    def on_start(self):
        for key, delay in self.start_timers:
            self.set_timer(key, delay)

    def on_message(self, src, message):
        self.got.append((self.now, src, message))
        if self.log is not None:
            self.log.append(("msg", self.now, src, message))

    def on_timer(self, key):
        self.fired.append((self.now, key))
        if self.log is not None:
            self.log.append(("timer", self.now, key))


class Pinger(StateMachine):
    """Sends ``count`` numbered pings to ``peer`` on start, and one more per pong."""

    def __init__(self, node_id, peer, count):
        super().__init__(node_id)
        self.peer, self.count = peer, count
        self.pongs: list[int] = []

    def on_start(self):
        for i in range(self.count):
            self.send(self.peer, ("ping", i))

    def on_message(self, src, message):
        kind, i = message
        if kind == "pong":
            self.pongs.append(i)
            if i < 50:
                self.send(self.peer, ("ping", 1000 + i))


class Ponger(StateMachine):
    def on_message(self, src, message):
        kind, i = message
        if kind == "ping":
            self.send(src, ("pong", i))


def ping_pong_world(seed, *, jitter_ms=5, loss=0.2):
    w = World(seed, latency_ms=3, jitter_ms=jitter_ms)
    w.network.set_link("a", "b", latency_ms=3, jitter_ms=jitter_ms, loss=loss)
    w.add("b", lambda: Ponger("b"))
    w.add("a", lambda: Pinger("a", "b", 40))
    w.advance(1_000)
    return w


# --- determinism ----------------------------------------------------------------------------------


def test_same_seed_same_history_with_jitter_and_loss():
    first, second = ping_pong_world(11), ping_pong_world(11)
    assert first.history == second.history
    assert first.nodes["a"].pongs == second.nodes["a"].pongs
    assert first.events_processed == second.events_processed
    # the scenario really exercised the randomness: some pings were lost, arrival times vary
    assert any(e[1] == "drop" for e in first.history)
    assert len({e[0] for e in first.history if e[1] == "recv"}) > 10


def test_different_seeds_give_different_histories():
    histories = {tuple(ping_pong_world(seed).history) for seed in range(5)}
    assert len(histories) == 5
    # with no randomness in play (no jitter, no loss) the seed does not matter
    quiet = {tuple(ping_pong_world(seed, jitter_ms=0, loss=0.0).history) for seed in range(3)}
    assert len(quiet) == 1


# --- clock, run_until, advance ------------------------------------------------------------------------


def test_clock_advance_and_run_until():
    w = World(0)
    node = w.add("n", lambda: Recorder("n", start_timers=[("t", 100)]))
    assert w.now == 0
    assert w.run_until(lambda: bool(node.fired), 50) is False
    assert w.now == 50  # a timeout leaves the clock at the deadline
    assert w.run_until(lambda: bool(node.fired), 100) is True
    assert node.fired == [(100, "t")] and w.now == 100
    w.advance(1_000)  # nothing to do: the clock still moves
    assert w.now == 1_100
    assert w.run_until(lambda: False, None) is False  # the queue ran dry
    assert w.now == 1_100


def test_advance_processes_events_due_exactly_at_the_deadline():
    w = World(0)
    node = w.add("n", lambda: Recorder("n", start_timers=[("a", 10), ("b", 11)]))
    w.advance(10)
    assert node.fired == [(10, "a")]
    w.advance(1)
    assert node.fired == [(10, "a"), (11, "b")]


def test_call_at_runs_scripted_actions_in_time_order_and_never_in_the_past():
    w = World(0)
    seen = []
    w.call_at(30, lambda: seen.append(("x", w.now)))
    w.call_at(10, lambda: seen.append(("y", w.now)))
    w.call_at(10, lambda: seen.append(("z", w.now)))  # same time: insertion order
    w.advance(20)
    w.call_at(5, lambda: seen.append(("past", w.now)))  # in the past: runs now
    w.advance(20)
    assert seen == [("y", 10), ("z", 10), ("past", 20), ("x", 30)]


def test_call_node_schedules_the_effects_of_an_outside_call():
    w = World(0, latency_ms=7)
    b = w.add("b", lambda: Recorder("b"))
    w.add("a", lambda: Recorder("a"))
    w.advance(3)
    w.call_node("a", lambda n: n.send("b", "hello"))
    w.advance(100)
    assert b.got == [(10, "a", "hello")]


def test_deliver_from_a_driver_that_is_not_a_node():
    w = World(0, latency_ms=2)
    b = w.add("b", lambda: Recorder("b"))
    w.deliver("outside", "b", "hi")
    w.advance(5)
    assert b.got == [(2, "outside", "hi")]


# --- timers -------------------------------------------------------------------------------------------


class TimerScript(StateMachine):
    """Runs a script of timer effects at start, then records firings."""

    def __init__(self, node_id, script):
        super().__init__(node_id)
        self.script = script
        self.fired = []

    def on_start(self):
        for op, key, *delay in self.script:
            if op == "set":
                self.set_timer(key, delay[0])
            else:
                self.cancel_timer(key)

    def on_message(self, src, message):
        for op, key, *delay in message:
            if op == "set":
                self.set_timer(key, delay[0])
            else:
                self.cancel_timer(key)

    def on_timer(self, key):
        self.fired.append((self.now, key))


def test_setting_a_timer_again_replaces_it_earlier_or_later():
    w = World(0)
    n = w.add("n", lambda: TimerScript("n", [
        ("set", "later", 50), ("set", "later", 200),   # moved later: fires once, at 200
        ("set", "sooner", 300), ("set", "sooner", 20),  # moved sooner: fires once, at 20
        ("set", "other", 100),
    ]))
    w.advance(1_000)
    assert n.fired == [(20, "sooner"), (100, "other"), (200, "later")]


def test_cancel_timer_drops_it_and_a_new_set_after_cancel_still_fires():
    w = World(0)
    n = w.add("n", lambda: TimerScript("n", [("set", "x", 50), ("cancel", "x"), ("set", "y", 60)]))
    w.advance(55)
    assert n.fired == []
    w.deliver("driver", "n", [("set", "x", 10), ("cancel", "y")])
    w.advance(1_000)
    assert n.fired == [(55 + 1 + 10, "x")]  # the message took the default 1 ms


def test_timer_keys_are_per_node():
    w = World(0)
    a = w.add("a", lambda: TimerScript("a", [("set", "k", 10)]))
    b = w.add("b", lambda: TimerScript("b", [("set", "k", 20), ("cancel", "k")]))
    w.advance(100)
    assert a.fired == [(10, "k")] and b.fired == []


def test_effect_types_are_what_the_contract_says():
    n = Recorder("n")
    n.send("x", 1)
    n.set_timer("t", -5)  # a negative delay is clamped to 0
    n.cancel_timer("t")
    assert n._take() == [Send("x", 1), SetTimer("t", 0), CancelTimer("t")]
    assert n._take() == []


# --- crashes ------------------------------------------------------------------------------------------


def test_crash_voids_the_old_incarnations_timers():
    w = World(0)
    log: list = []
    incarnations = []

    def make():
        node = Recorder("n", start_timers=[("old-only", 100)] if not incarnations else [("fresh", 30)], log=log)
        incarnations.append(node)
        return node

    w.add("n", make)
    w.advance(50)
    w.crash("n")
    assert not w.alive("n")
    w.advance(10)
    w.restart("n")  # at 60: a new object; its own timer fires at 90
    w.advance(1_000)
    assert len(incarnations) == 2
    assert log == [("timer", 90, "fresh")]  # 'old-only' (due at 100) never fired
    assert incarnations[0].fired == []


def test_crash_voids_timers_even_when_the_new_incarnation_reuses_the_key():
    w = World(0)
    made = []

    def make():
        node = Recorder("n", start_timers=[("k", 100 if not made else 500)])
        made.append(node)
        return node

    w.add("n", make)
    w.advance(20)
    w.restart("n")  # a restart of a live node is a crash then a start
    w.advance(1_000)
    assert made[0].fired == []
    assert made[1].fired == [(520, "k")]
    assert [e[1:] for e in w.history if e[1] in ("crash", "start")] == [
        ("start", "n"), ("crash", "n"), ("start", "n")
    ]


def test_crash_drops_messages_in_flight_to_the_old_incarnation():
    w = World(0, latency_ms=10)
    made = []

    def make_b():
        node = Recorder("b")
        made.append(node)
        return node

    w.add("b", make_b)
    w.add("a", lambda: Recorder("a"))
    w.call_node("a", lambda n: n.send("b", "in-flight"))  # due at 10
    w.advance(5)
    w.crash("b")
    w.call_node("a", lambda n: n.send("b", "to-the-dead"))  # sent while b is down, due at 15
    w.advance(2)
    w.restart("b")  # at 7: the new b must see neither
    w.call_node("a", lambda n: n.send("b", "to-the-new-one"))  # due at 17
    w.advance(100)
    assert made[0].got == []
    assert made[1].got == [(17, "a", "to-the-new-one")]
    assert [e for e in w.history if e[1] == "recv" and e[3] == "b"] == [(17, "recv", "a", "b", "str")]


def test_a_message_to_a_dead_node_is_refused_after_a_round_trip():
    w = World(0, latency_ms=10)
    w.add("b", lambda: Recorder("b"))
    a = w.add("a", lambda: Recorder("a"))
    c = w.add("c", lambda: Recorder("c"))
    w.crash("b")
    w.advance(5)
    w.call_node("a", lambda n: n.send("b", "hello?"))
    w.deliver("driver", "b", "from outside")  # not a node: nobody to tell
    w.add("never", lambda: Recorder("never"), start=False)
    w.call_node("a", lambda n: n.send("never", "hi"))  # known but not running: refused too
    w.network.partition(["a"], ["c"])
    w.call_node("a", lambda n: n.send("c", "cut"))  # alive but partitioned: silence
    w.advance(100)
    assert a.got == [(25, "b", Disconnected("b")), (25, "never", Disconnected("never"))]
    assert c.got == []


def test_crash_of_a_dead_node_is_a_no_op_and_the_world_goes_on():
    w = World(0)
    w.add("n", lambda: Recorder("n"))
    w.crash("n")
    w.crash("n")
    assert [e[1] for e in w.history] == ["start", "crash"]
    w.advance(10)
    assert w.now == 10


def test_add_without_start():
    w = World(0)
    assert w.add("n", lambda: Recorder("n"), start=False) is None
    assert not w.alive("n")
    w.deliver("x", "n", "lost")  # nobody there: dropped on arrival
    w.advance(5)
    node = w.restart("n")
    w.advance(5)
    assert w.alive("n") and node.got == []


# --- the network: FIFO, latency, partitions, loss -----------------------------------------------------------


def test_links_are_fifo_even_with_jitter():
    w = World(3, latency_ms=5, jitter_ms=40)
    b = w.add("b", lambda: Recorder("b"))
    w.add("a", lambda: Recorder("a"))
    for i in range(200):
        w.call_node("a", lambda n, i=i: n.send("b", i))
        w.advance(1)
    w.advance(1_000)
    assert [m for _, _, m in b.got] == list(range(200))
    times = [t for t, _, _ in b.got]
    assert times == sorted(times)
    delays = {t - i for i, t in enumerate(times)}
    assert len(delays) > 5  # jitter was real: FIFO is not a constant latency in disguise


def test_fifo_survives_a_slow_link_turning_fast():
    w = World(0)
    b = w.add("b", lambda: Recorder("b"))
    w.add("a", lambda: Recorder("a"))
    w.network.set_link("a", "b", latency_ms=100)
    w.call_node("a", lambda n: n.send("b", "slow"))
    w.network.set_link("a", "b", latency_ms=1)
    w.call_node("a", lambda n: n.send("b", "fast"))
    w.advance(200)
    assert [(t, m) for t, _, m in b.got] == [(100, "slow"), (100, "fast")]


def test_links_are_independent_per_direction_and_per_pair():
    w = World(0, latency_ms=2)
    nodes = {x: w.add(x, lambda x=x: Recorder(x)) for x in "abc"}
    w.network.set_link("a", "b", latency_ms=50)
    w.call_node("a", lambda n: (n.send("b", "ab"), n.send("c", "ac")))
    w.call_node("b", lambda n: n.send("a", "ba"))
    w.advance(100)
    assert nodes["b"].got == [(50, "a", "ab")]
    assert nodes["c"].got == [(2, "a", "ac")]
    assert nodes["a"].got == [(2, "b", "ba")]


def test_a_node_sends_to_itself_without_delay():
    w = World(0, latency_ms=9)
    n = w.add("n", lambda: Recorder("n"))
    w.call_node("n", lambda node: node.send("n", "me"))
    w.advance(0)
    assert n.got == [(0, "n", "me")]


def test_partition_cuts_both_ways_until_heal_and_spares_other_links():
    w = World(0)
    nodes = {x: w.add(x, lambda x=x: Recorder(x)) for x in "abc"}
    w.network.partition(["a"], ["b"])
    assert not w.network.connected("a", "b") and not w.network.connected("b", "a")
    w.call_node("a", lambda n: (n.send("b", 1), n.send("c", 2)))
    w.call_node("b", lambda n: (n.send("a", 3), n.send("c", 4)))
    w.advance(10)
    assert nodes["b"].got == [] and nodes["a"].got == []
    assert sorted(m for _, _, m in nodes["c"].got) == [2, 4]
    drops = [e for e in w.history if e[1] == "drop"]
    assert drops == [(0, "drop", "a", "b", "int"), (0, "drop", "b", "a", "int")]
    assert w.network.describe() == [("a <-/-> b", "partitioned")]
    w.network.heal()
    assert w.network.describe() == []
    w.call_node("a", lambda n: n.send("b", 5))
    w.advance(10)
    assert nodes["b"].got == [(11, "a", 5)]


def test_isolate_cuts_one_node_from_all_the_others():
    w = World(0)
    nodes = {x: w.add(x, lambda x=x: Recorder(x)) for x in "abc"}
    w.network.isolate("a", "abc")
    w.call_node("a", lambda n: (n.send("b", 1), n.send("c", 1), n.send("a", "self")))
    w.call_node("b", lambda n: n.send("c", 2))
    w.advance(10)
    assert nodes["b"].got == [] and [m for _, _, m in nodes["c"].got] == [2]
    assert [m for _, _, m in nodes["a"].got] == ["self"]


def test_heal_restores_default_links():
    w = World(0, latency_ms=3)
    b = w.add("b", lambda: Recorder("b"))
    w.add("a", lambda: Recorder("a"))
    w.network.set_link("a", "b", latency_ms=500, loss=1.0)
    assert w.network.describe() == [("a -> b", "latency 500 ms, loss 100%")]
    w.network.heal()
    w.call_node("a", lambda n: n.send("b", "x"))
    w.advance(10)
    assert b.got == [(3, "a", "x")]


def test_loss_is_seeded_and_one_directional():
    def run(seed, loss):
        w = World(seed)
        b = w.add("b", lambda: Recorder("b"))
        a = w.add("a", lambda: Recorder("a"))
        w.network.set_link("a", "b", loss=loss)
        for i in range(1_000):
            w.call_node("a", lambda n, i=i: n.send("b", i))
            w.call_node("b", lambda n, i=i: n.send("a", i))
        w.advance(10)
        return [m for _, _, m in b.got], [m for _, _, m in a.got]

    got, back = run(5, 0.3)
    assert 600 < len(got) < 800  # about 70% of 1000 arrive
    assert got == sorted(got)  # the survivors keep their order
    assert back == list(range(1_000))  # b -> a is not lossy
    assert run(5, 0.3) == (got, back)
    assert run(6, 0.3)[0] != got
    assert run(5, 1.0)[0] == [] and run(5, 0.0)[0] == list(range(1_000))


def test_network_arrival_directly():
    import random

    net = Network(random.Random(0), latency_ms=4)
    assert net.arrival(10, "a", "a") == 10
    assert net.arrival(10, "a", "b") == 14
    net.set_link("a", "b", latency_ms=1)
    assert net.arrival(11, "a", "b") == 14  # not before the earlier message on the link
    assert net.arrival(20, "a", "b") == 21
    net.partition(["a"], ["b", "c"])
    assert net.arrival(30, "a", "b") is None and net.arrival(30, "c", "a") is None
    assert net.arrival(30, "b", "c") == 34
