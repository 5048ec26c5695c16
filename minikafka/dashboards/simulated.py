"""``Dashboard``: a live dashboard for the simulated cluster: kill brokers, cut the network, watch.

    from minikafka.widgets import Dashboard
    dash = Dashboard(cluster, "trucks_gps", rate_per_s=20, acks=1)
    dash              # shows it; press "run" (or call dash.start())

    # with a consumer group: two consumers to start with, more with "add consumer"
    dash = Dashboard(cluster, "trucks_gps", group="dispatch", consumers=2,
                     consumer_config={"auto_offset_reset": "earliest"})

``ProcessDashboard`` (``minikafka.dashboards.processes``, with its own theory of operation)
shares its look -- the controls of ``minikafka.dashboards.controls``, the diagram from
``minikafka.viz``, counters, the event log -- but not its engine: there the clock is the
wall's, the brokers are processes, and all it knows it asks over the Kafka protocol with
kafka-python.

Theory of operation
-------------------
The simulation has no clock of its own: it only moves when someone calls
``cluster.advance``. The dashboard is that someone. ``tick(wall_ms)`` is one step:

1. let ``wall_ms x speed`` simulated milliseconds pass, in up to ten slices, sending the
   producer's quota for each slice before it (``rate_per_s`` records per *simulated*
   second, so the cluster sees the same load at any speed);
2. note what changed (the controller declaring a broker dead, elections, ISR changes) in
   the event log, and count acknowledged, failed and lost records;
3. redraw: the diagram (``minikafka.viz``, as inline SVG in an HTML widget), the counters
   and the partition table.

With a consumer ``group``, the group's consumers are the lecture's *applications*, and
the dashboard is their main loop: in each slice of step 1, before the time passes, every
live consumer of the group (``cluster.consumers`` with that ``group_id``: the ones the
dashboard made and any the notebook made) calls ``poll(timeout_ms=poll_timeout_ms)``
(never past the slice's end), which is also what lets it join the group and take a new
assignment. Slices are then about 100 simulated ms long (ten at most per step), as in a
real poll loop. What each consumer got is counted (``consumed``, by consumer node id), and
what the group reads a second time (``redelivered``, "of which read again": a record below
the offset the group had read its partition up to, because its reader died or a rebalance
came before a commit). A poll blocks only when the consumer commits before a rebalance
(auto commit): that can run the world past the slice, as a blocked send can; time never
goes back.

With a controller quorum (``Cluster(controllers=3)``), a row of controller buttons kills
and restarts each voter (``cluster.kill``/``restart`` of a controller id; the active one is
marked); the event log notes each change of active controller (its node id and Raft epoch),
and a time with none. The last live controller cannot be killed from the dashboard: every
picture is read from a controller's copy of the metadata (the data plane would go on
without one, but there would be nothing to draw it from).

The consumers section has a row per consumer with a kill/restart button
(``cluster.kill_consumer``/``restart_consumer``: a killed consumer keeps its partitions
until ``session_timeout_ms`` passes), an "add consumer" button (``add_consumer()``: a new
``KafkaConsumer`` on the topic with ``consumer_config``), the group on the diagram
(``minikafka.viz``), and a lag chart. Each step records ``{"time_ms", "lag": {consumer:
HW - position summed over its partitions, None if dead or between assignments},
"committed_lag": HW - committed offset, summed}`` in ``lag_samples`` (a plain list);
matplotlib draws each consumer's line as SVG (whole records on the y axis, from 0), at
most twice a second while the thread runs (a chart takes ~50 ms), at every step by hand.
Consumers poll up to ``max_poll_records`` (500) records every ~100 ms, far more than the
producer sends: give them a small ``max_poll_records`` in ``consumer_config`` to watch lag
build up.

``start()`` runs ``tick`` from a background thread every ``tick_ms`` of wall time,
passing the wall time that really elapsed, so the simulation keeps pace with the clock
even when drawing is slow; ``stop()`` ends it (and ``close()`` calls ``stop()``). One
dashboard runs at a time in a kernel: making or starting a dashboard stops the others'
threads (``_RunToggle``), so a cell run twice never leaves an unseen dashboard running; and a
dashboard whose last view goes (its output cleared, its tab closed) stops itself.
Tests and notebooks that must be reproducible never start the thread: they call
``tick()`` and click the buttons (``button.click()``) themselves; a lecture notebook
shows its live dashboard after those cells, on a cluster of its own, so Run All leaves it
standing.

One lock, one writer: the thread, the button callbacks (which run on the kernel's main
thread) and any notebook code that goes through ``with dash.lock:`` touch the cluster only
while holding the cluster's lock (``cluster_lock(cluster)``, shared by every dashboard on
that cluster). A cell that calls ``cluster.advance`` while a dashboard runs without taking
the lock races with it: stop the dashboard first, or take the lock. The producer's callbacks run inside the simulation step that
completes their future, so they too run under the lock. Drawing happens *after* the lock
is released (``dot`` takes tens of milliseconds), from an immutable snapshot; a sequence
number keeps an older snapshot from overwriting a newer one on screen.

Widget output: every widget's state is a value set from Python (``HTML.value``), never an
``Output`` written with ``with out:``, which from a callback or a thread would leak the
text into whatever cell runs at that moment (and into nbval's outputs). The event log
(``EventLog``, ``dash.events``) keeps its newest line in sight; the diagram and the lag
chart are inline SVG scaled to the cell's width (``_fit_svg``), the diagram also to the
window's height. The layout (``minikafka.dashboards.controls``) fits a 1280x720 projector
with the file browser closed: controls, counters, the diagram and, beside it, the consumers
and their lag chart on one screen, the event log below; a click moves no button.

"Lost (so far)" counts what the checker would call lost writes, live (``LossTracker``,
``minikafka.dashboards.loss_tracker``):
every acknowledged record is kept (partition, offset, value), and one is lost once the
partition's current leader provably lacks it. The count never goes down; with the acks
switched during a run, the counters say which setting lost what. Records acknowledged
with ``acks=0`` have no offset and are not tracked. For the final word, run
``minikafka.checker`` with a final read.
"""

from __future__ import annotations

import html
import threading
import time
import weakref
from collections import Counter
from typing import Any, Callable

import ipywidgets as w

from minikafka import viz
from minikafka.dashboards.controls import (FIT_RESERVE_PX, ROW_PX, SLIDER_WIDTH, _close_widgets, _fit_svg,
                                           _ids, _redraw, _RunToggle, _table_html, build_controls,
                                           clock_and_load_row, picture_row, placeholder, row)
from minikafka.dashboards.loss_tracker import LossTracker
from minikafka.errors import IllegalArgumentError, KafkaError
from minikafka.messages import CONTROLLER_ID

_MAX_WALL_MS = 1000  # a stalled thread catches up by at most this much, never in one leap
_POLL_EVERY_MS = 100  # with consumers, a step's slices are about this long (the poll loop), ten at most
_MAX_SAMPLES = 5000  # lag samples kept (a class of an hour at 5 ticks/s keeps the last ~17 min)
_CHART_SAMPLES = 300  # the lag chart shows the last this many
_CHART_EVERY_S = 0.5  # the lag chart is redrawn at most this often (wall time)
_ISOLATE_TEXT = {
    "cluster": "from the rest of the cluster", "everyone": "from everyone, clients too",
    "brokers": "from the other brokers only", "controller": "from the controller only",
}


_LOCKS: "weakref.WeakKeyDictionary[Any, threading.RLock]" = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def cluster_lock(cluster) -> threading.RLock:
    """The one lock of ``cluster``: every dashboard on it shares it, and so should notebook
    code that touches the cluster while a dashboard runs (``with cluster_lock(c): ...``)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(cluster)
        if lock is None:
            lock = _LOCKS[cluster] = threading.RLock()
        return lock


class Dashboard(_RunToggle):
    """Buttons, a producer and a live diagram for one topic of a simulated cluster.

    ``producer``: anything with kafka-python's ``send(topic, value=, key=)`` returning a
    future with ``add_callback``/``add_errback`` (a ``KafkaProducer`` on this cluster, say).
    Left None, the dashboard makes a ``KafkaProducer(bootstrap_servers=cluster, acks=...)``
    (with ``producer_config`` on top) and the acks buttons switch between such producers.

    ``group``: a consumer group to show and drive (or ``consumer_config["group_id"]``);
    ``consumers`` consumers are made at once, more with ``add_consumer()``, each a
    ``KafkaConsumer(topic, bootstrap_servers=cluster, group_id=group, **consumer_config)``.
    ``poll_timeout_ms``: how long each consumer's ``poll()`` may wait for records.
    """

    def __init__(
        self,
        cluster,
        topic: str,
        producer: Any = None,
        *,
        rate_per_s: int = 20,
        acks: int | str = "all",
        speed: float = 1.0,
        tick_ms: int = 200,
        producing: bool = True,
        producer_config: dict | None = None,
        key: Callable[[int], bytes | None] | None = None,
        group: str | None = None,
        consumer_config: dict | None = None,
        consumers: int = 0,
        poll_timeout_ms: int = 10,
        consuming: bool = True,
    ) -> None:
        cluster.partitions_of(topic)  # fails now, clearly, on an unknown topic
        consumer_config = dict(consumer_config or {})
        given = consumer_config.pop("group_id", None)
        if group is not None and given is not None and given != group:
            raise IllegalArgumentError(f"group={group!r} but consumer_config has group_id={given!r}")
        self.group: str | None = group if group is not None else given
        if self.group is None and consumers:
            raise IllegalArgumentError("consumers need a group: Dashboard(..., group='name')")
        if "bootstrap_servers" in consumer_config:
            raise IllegalArgumentError("consumer_config must not set bootstrap_servers: "
                                       "the dashboard's cluster is used")
        self.consumer_config = consumer_config  # the template of add_consumer(), group_id aside
        self.poll_timeout_ms = poll_timeout_ms
        self.cluster = cluster
        self.topic = topic
        self.tick_ms = tick_ms
        # Per cluster, not per dashboard: a second dashboard on the same cluster (a cell run
        # twice) must not drive it at the same time as the first.
        self.lock = cluster_lock(cluster)
        self.ticks = 0
        self._producer_config = dict(producer_config or {})
        self._own_producers: dict[str, Any] = {}
        self._user_producer = producer
        self._key = key or (lambda n: f"truck-{n % 10}".encode())
        self._quota = 0.0
        self._next_value = 0
        self.sent = self.acknowledged = self.failed = 0
        self.errors: Counter[str] = Counter()
        self.losses = LossTracker()
        self._elections_seen = len(cluster.controller.elections)
        self._active_seen = self._active_controller()
        self._live_seen = tuple(cluster.controller.live_brokers)
        self._isr_seen = {s.partition: tuple(s.isr) for s in cluster.partitions_of(topic)}
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._thread_error: BaseException | None = None
        self._show_lock = threading.Lock()
        self._seq = 0
        self._shown_seq = -1
        self._last_dot = None
        self._syncing = False  # guards widget observers while code sets their values
        self.counters: dict[str, Any] = {}
        self.diagram_source = ""
        # Consumers, by node id (unique; client ids need not be): records each one's polls
        # returned, and its errors.
        self.consumed: Counter[str] = Counter()
        # Records read again (at-least-once: a reader died, or a rebalance came, before its commit).
        self.redelivered = 0
        self._read_to: dict[tuple[str, int], int] = {}  # (topic, partition) -> offset the group read up to
        self.consumer_errors: Counter[str] = Counter()
        self.lag_samples: list[dict[str, Any]] = []
        self.lag_chart_svg = ""
        self._events_seen: dict[str, tuple[Any, int]] = {}  # node id -> (its coordinator, events read)
        self._assignment_seen: tuple | None = None  # (live assignment, held by dead consumers)
        self._chart_drawn: dict | None = None  # the last sample the lag chart shows
        self._chart_error: BaseException | None = None
        self._chart_wall = 0.0  # time.monotonic() of the last chart drawn
        self._chart_pending: tuple | None = None  # (group view, samples) of the last refresh
        self._closed = False
        self._build(rate_per_s, str(acks), speed, producing, consuming)
        with self.lock:
            for _ in range(consumers):
                self._new_consumer()
        self.refresh()
        self._only_one_running()

    # --- widgets -------------------------------------------------------------------------------------

    def _build(self, rate_per_s: int, acks: str, speed: float, producing: bool, consuming: bool) -> None:
        c = self.cluster
        self.title = w.HTML(f"<b>minikafka</b> &nbsp; topic <code>{html.escape(self.topic)}</code>",
                            layout=w.Layout(margin="0 8px 0 2px"))
        self.broker_buttons: dict[int, w.Button] = {}
        for b in c.broker_ids:
            button = w.Button(layout=w.Layout(width="150px"))
            button.on_click(lambda _, b=b: self.toggle_broker(b))
            self.broker_buttons[b] = button
        # Controller buttons, only for a quorum: with one controller the lesson of notebook 03
        # (a controller that never fails) stays as it was.
        self.controller_buttons: dict[int, w.Button] = {}
        if len(c.controller_ids) > 1:
            for n in c.controller_ids:
                button = w.Button(layout=w.Layout(width="230px"))
                button.on_click(lambda _, n=n: self.toggle_controller(n))
                self.controller_buttons[n] = button
        self.power_loss = w.Checkbox(value=False, description="power loss (lose unflushed bytes)",
                                     indent=False, layout=w.Layout(width="260px"))

        self.isolate_broker = w.Dropdown(options=[(f"broker {b}", b) for b in c.broker_ids],
                                         description="isolate", layout=w.Layout(width="180px"))
        self.isolate_from = w.Dropdown(options=[(text, key) for key, text in _ISOLATE_TEXT.items()],
                                       layout=w.Layout(width="230px"))
        self.cut_button = w.Button(description="cut", button_style="warning", layout=w.Layout(width="80px"))
        self.cut_button.on_click(lambda _: self.isolate(self.isolate_broker.value, self.isolate_from.value))
        self.heal_button = w.Button(description="heal", button_style="info", layout=w.Layout(width="80px"))
        self.heal_button.on_click(lambda _: self.heal())

        build_controls(self, rate_per_s=rate_per_s, acks=acks, producing=producing,
                       step=lambda: self.tick(self.tick_ms))
        if self._user_producer is not None:
            # The acks are the given producer's own: show them, and do not offer to change them.
            given = getattr(self._user_producer, "config", {}).get("acks")
            if str(given) in ("-1", "all", "1", "0"):
                self.acks.value = {"-1": "all"}.get(str(given), str(given))
            self.acks.disabled = True

        self.speed = w.FloatSlider(value=speed, min=0.1, max=20.0, step=0.1, description="speed x",
                                   continuous_update=False, layout=w.Layout(width=SLIDER_WIDTH))

        # The consumers section (only with a group): a row per consumer, rebuilt when the
        # group's consumers change (see _show_consumers).
        self.consume_toggle = w.ToggleButton(value=consuming, description="consuming", icon="inbox",
                                             layout=w.Layout(width="120px"))
        self.add_consumer_button = w.Button(description="add consumer", icon="plus", button_style="info",
                                            layout=w.Layout(width="140px"))
        self.add_consumer_button.on_click(lambda _: self.add_consumer())
        self.consumer_buttons: dict[str, w.Button] = {}
        self.consumer_labels: dict[str, w.HTML] = {}
        self.consumer_rows = w.VBox()
        self.lag_chart = w.HTML(_NO_CHART_YET, layout=w.Layout(width="auto", max_width="100%"))

        # For a 1280x720 projector (controls.py's header): the controls in three rows (the
        # title and the brokers; the network; the clock and the load), the counters across,
        # then the diagram with the consumers, their lag chart and the partition table beside
        # it (under it when the cell is narrow), the event log last.
        children = [
            row(self.title, *self.broker_buttons.values(), self.power_loss),
            *([row(*self.controller_buttons.values())] if self.controller_buttons else []),
            row(self.isolate_broker, self.isolate_from, self.cut_button, self.heal_button),
            clock_and_load_row(self, self.speed),
            self.counters_html,
        ]
        side = [self.partitions_html]
        if self.group is not None:
            side = [
                w.HTML(f"<b>consumer group</b> <code>{html.escape(self.group)}</code>"),
                row(self.consume_toggle, self.add_consumer_button),
                self.consumer_rows,
                self.lag_chart,
                self.partitions_html,
            ]
        children.append(picture_row(self, *side))
        self.fit_reserve_px = FIT_RESERVE_PX + (ROW_PX if self.controller_buttons else 0)
        self.widget = w.VBox(children + [self.log], layout=w.Layout(width="100%"))
        self._stop_when_unseen()

    def _repr_mimebundle_(self, **kwargs: Any):
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        # The widget's own text/plain spells out every child's value (the SVG, the counters):
        # nbval compares text/plain, so a saved notebook would never match. Ours is a sentence
        # for a reader of the saved notebook, made from what the dashboard was built with.
        nodes = f"{len(self.broker_buttons)} simulated brokers"
        if self.controller_buttons:
            nodes += f" and {len(self.controller_buttons)} controllers"
        about = f"topic {self.topic}" + ("" if self.group is None else f", consumer group {self.group}")
        bundle["text/plain"] = placeholder(f"{nodes} ({about})")
        return bundle

    # --- actions (buttons call these; so can a notebook) ------------------------------------------------

    def toggle_broker(self, broker_id: int) -> None:
        """Kill a live broker, restart a dead one."""
        with self.lock:
            if self.cluster.alive(broker_id):
                self.cluster.kill(broker_id, power_loss=self.power_loss.value)
                self._note(f"you killed broker {broker_id}" + (" (power loss)" if self.power_loss.value else ""))
            else:
                self.cluster.restart(broker_id)
                self._note(f"you restarted broker {broker_id}")
        self.refresh()

    def toggle_controller(self, node_id: int) -> None:
        """Kill a live controller (a voter of the metadata quorum), restart a dead one. The
        last live controller is not killed (the dashboard reads the metadata from it)."""
        with self.lock:
            c = self.cluster
            if node_id not in c.controller_ids:
                raise IllegalArgumentError(f"no controller {node_id}; controllers are {c.controller_ids}")
            if c.world.alive(node_id):
                if not any(c.world.alive(n) for n in c.controller_ids if n != node_id):
                    self._note(f"controller {node_id} is the last one alive: the dashboard reads the "
                               "metadata from it, so it stays (restart another one first)")
                else:
                    was_active = self._active_controller() == node_id
                    c.kill(node_id)
                    self._note(f"you killed controller {node_id}" + (" (the active controller)" if was_active else ""))
            else:
                c.restart(node_id)
                self._note(f"you restarted controller {node_id}")
        self.refresh()

    def _active_controller(self) -> int | None:
        """The active controller's node id, or None while the quorum has none."""
        active = self.cluster._active_controller()
        return None if active is None else active.node_id

    def isolate(self, broker_id: int, from_: str = "cluster") -> None:
        """Cut ``broker_id`` off: from the ``"cluster"`` (other brokers and the controller;
        clients still reach it, so it can go on taking writes as a stale leader),
        ``"everyone"``, the other ``"brokers"`` only, or the ``"controller"`` only."""
        with self.lock:
            c = self.cluster
            others = [b for b in c.broker_ids if b != broker_id]
            controllers = list(getattr(c, "controller_ids", [CONTROLLER_ID]))  # the whole quorum
            clients = sorted((n for n in c.world.factories if n not in controllers and n not in c.broker_ids), key=str)
            side = {"cluster": others + controllers, "everyone": others + controllers + clients,
                    "brokers": others, "controller": controllers}[from_]
            c.partition([broker_id], side)
            self._note(f"you cut broker {broker_id} off {_ISOLATE_TEXT[from_]}")
        self.refresh()

    def heal(self) -> None:
        """Mend every cut link (and every slowed one)."""
        with self.lock:
            self.cluster.heal()
            self._note("you healed the network")
        self.refresh()

    # --- consumers (with a group) ----------------------------------------------------------------------

    @property
    def consumers(self) -> list:
        """The group's consumers, live or crashed (closed ones are gone), oldest first."""
        if self.group is None:
            return []
        return [c for c in self.cluster.consumers if c.config.get("group_id") == self.group]

    def consumer(self, name: str):
        """The group's consumer with node id (or else client id) ``name``."""
        for c in self.consumers:
            if str(c.node_id) == name:
                return c
        for c in self.consumers:
            if str(c.config.get("client_id")) == name:
                return c
        raise IllegalArgumentError(f"no consumer {name!r} in group {self.group!r}")

    def add_consumer(self, **overrides: Any):
        """A new ``KafkaConsumer`` in the group, subscribed to the topic, with
        ``consumer_config`` (and ``overrides`` on top); it joins at the next step's poll."""
        if self.group is None:
            raise IllegalArgumentError("this dashboard has no consumer group: Dashboard(..., group='name')")
        with self.lock:
            consumer = self._new_consumer(**overrides)
            self._note(f"you added {consumer.config['client_id']} to group {self.group}: it joins at its first poll")
        self.refresh()
        return consumer

    def _new_consumer(self, **overrides: Any):
        from minikafka.clients.consumer import KafkaConsumer

        config = {**self.consumer_config, **overrides, "group_id": self.group}
        return KafkaConsumer(self.topic, bootstrap_servers=self.cluster, **config)

    def toggle_consumer(self, consumer) -> None:
        """Kill a live consumer (a crash: no LeaveGroup), restart a dead one. ``consumer``:
        the ``KafkaConsumer`` or its node id."""
        if isinstance(consumer, str):
            consumer = self.consumer(consumer)
        name = consumer.config["client_id"]
        with self.lock:
            if consumer.alive:
                self.cluster.kill_consumer(consumer)
                self._note(f"you killed {name}: the group notices after session_timeout_ms="
                           f"{consumer.config['session_timeout_ms']} without a heartbeat")
            else:
                self.cluster.restart_consumer(consumer)
                self._note(f"you restarted {name}: it joins as a new member, from the committed offsets")
        self.refresh()

    def _poll_consumers(self, until: int) -> None:
        """Each live consumer of the group polls once (the applications' loop), waiting at
        most ``poll_timeout_ms`` and never past ``until``."""
        if self.group is None or not self.consume_toggle.value:
            return
        for consumer in self.consumers:
            if not consumer.alive:
                continue
            timeout = max(0, min(self.poll_timeout_ms, until - self.cluster.now))
            try:
                records = consumer.poll(timeout_ms=timeout)
            except KafkaError as e:  # the application would log it and poll again
                self.consumer_errors[f"{consumer.node_id}: {type(e).__name__}"] += 1
                self._note(f"{consumer.config['client_id']}: poll() raised {type(e).__name__}: {e}")
                continue
            self.consumed[str(consumer.node_id)] += sum(len(rs) for rs in records.values())
            for tp, rs in records.items():
                # A record below what the group already read of its partition is read again:
                # its reader died or lost it in a rebalance before committing past it.
                key = (tp.topic, tp.partition)
                read_to = self._read_to.get(key, 0)
                self.redelivered += sum(1 for r in rs if r.offset < read_to)
                if rs:
                    self._read_to[key] = max(read_to, rs[-1].offset + 1)

    # --- the producer ---------------------------------------------------------------------------------

    @property
    def producer(self) -> Any:
        if self._user_producer is not None:
            return self._user_producer
        acks = self.acks.value
        if acks not in self._own_producers:
            # A producer per acks setting: an abandoned one still finishes its in-flight
            # records (and they are still counted) instead of failing them on a close.
            from minikafka.clients.producer import KafkaProducer

            config = {"acks": {"all": "all", "1": 1, "0": 0}[acks], **self._producer_config}
            self._own_producers[acks] = KafkaProducer(bootstrap_servers=self.cluster, **config)
        return self._own_producers[acks]

    def _send_one(self) -> None:
        n = self._next_value
        self._next_value += 1
        value = f"{n}".encode()
        self.sent += 1
        try:
            future = self.producer.send(self.topic, value=value, key=self._key(n))
        except Exception as e:  # a send that could not even queue (metadata, buffer full)
            self._failed(e)
            return
        future.add_callback(self._acked, value, self.acks.value)
        future.add_errback(self._failed)

    def _acked(self, value: bytes, acks: str, metadata: Any) -> None:
        self.acknowledged += 1
        self.losses.acknowledged(metadata.topic, metadata.partition, metadata.offset, value, acks)

    def _failed(self, error: BaseException) -> None:
        self.failed += 1
        self.errors[type(error).__name__] += 1

    # --- time --------------------------------------------------------------------------------------------

    def tick(self, wall_ms: float | None = None) -> None:
        """One step: ``wall_ms`` (default ``tick_ms``) x speed of simulated time, with the
        producer's quota sent along the way, then a redraw."""
        wall_ms = self.tick_ms if wall_ms is None else wall_ms
        with self.lock:
            c = self.cluster
            sim_ms = max(0, round(wall_ms * self.speed.value))
            start = c.now
            if self.produce_toggle.value:
                self._quota += self.rate.value * sim_ms / 1000
            n, self._quota = int(self._quota), self._quota - int(self._quota)
            slices = max(1, min(n, 10))  # spread the records over the step, not all at its start
            if self.group is not None:  # consumers poll every _POLL_EVERY_MS or so
                slices = max(slices, min(10, -(-sim_ms // _POLL_EVERY_MS)))
            for i in range(slices):
                for _ in range(n * (i + 1) // slices - n * i // slices):
                    self._send_one()
                end = start + sim_ms * (i + 1) // slices
                self._poll_consumers(end)
                # A send that blocked (waiting for metadata) may already have run the world
                # past this point: time never goes back.
                if c.now < end:
                    c.advance(end - c.now)
            self.ticks += 1
        self._refresh(sample=True)

    def refresh(self) -> None:
        """Look at the cluster (under the lock), then redraw (outside it)."""
        self._refresh(sample=False)

    def _refresh(self, sample: bool) -> None:
        with self.lock:
            self._watch()
            self.losses.update(self.cluster)
            view = viz.snapshot(self.cluster, self.topic, group=self.group)
            alive = {b: self.cluster.alive(b) for b in self.cluster.broker_ids}
            alive.update({n: self.cluster.world.alive(n) for n in self.controller_buttons})
            active = self._active_controller()
            if view.group is not None:
                self._watch_group(view.group)
                if sample:
                    self._sample(view)
            self.counters = self._count(view)
            samples = self.lag_samples[-_CHART_SAMPLES:]
            self._seq += 1
            seq = self._seq
        self._show(seq, view, alive, dict(self.counters), samples, active)

    def _count(self, view: viz.ClusterView) -> dict[str, Any]:
        return {
            "time_ms": view.now_ms,
            "sent": self.sent,
            "acknowledged": self.acknowledged,
            "failed": self.failed,
            "pending": self.sent - self.acknowledged - self.failed,
            "lost": self.losses.lost,
            "lost_by_acks": self.losses.lost_by_acks(),
            "under_replicated": view.under_replicated,
            "offline": view.offline,
            "isr_sizes": {p.partition: len(p.isr) for p in view.partitions},
            "leaders": {p.partition: p.leader for p in view.partitions},
            "elections": len(self.cluster.controller.elections),
            **({"active_controller": self._active_seen,
                "controller_epoch": self.cluster.controller.raft.epoch} if self.controller_buttons else {}),
            "errors": dict(sorted(self.errors.items())),
            **(self._count_group(view.group) if view.group is not None else {}),
        }

    def _count_group(self, g: viz.GroupView) -> dict[str, Any]:
        return {
            "group": {"state": g.state, "generation": g.generation, "coordinator": g.coordinator,
                      "committed_lag": g.committed_lag},
            "assignment": g.assignment(),
            "consumers": {
                c.node_id: {"client_id": c.client_id, "alive": c.alive, "state": c.state,
                            "generation": c.generation, "partitions": [p.partition for p in c.owned],
                            "idle": c.idle, "lag": c.lag, "consumed": self.consumed[c.node_id]}
                for c in g.consumers},
            "consumed": sum(self.consumed.values()),
            "redelivered": self.redelivered,
            "consumer_errors": dict(sorted(self.consumer_errors.items())),
        }

    def _sample(self, view: viz.ClusterView) -> None:
        g = view.group
        lags = {c.node_id: (None if not c.alive else 0 if c.idle else c.lag) for c in g.consumers}
        self.lag_samples.append({"time_ms": view.now_ms, "lag": lags, "committed_lag": g.committed_lag})
        if len(self.lag_samples) > _MAX_SAMPLES:
            del self.lag_samples[:len(self.lag_samples) - _MAX_SAMPLES]

    def _watch(self) -> None:
        """Turn what the controller did since the last look into lines of the event log."""
        ctl = self.cluster.controller
        if self.controller_buttons:
            active = self._active_controller()
            if active != self._active_seen:
                if active is None:
                    self._note("controller quorum: no active controller (an election, or no majority)")
                else:
                    self._note(f"controller quorum: {active} is the active controller "
                               f"(epoch {self.cluster.controller_node(active).raft.epoch})")
                self._active_seen = active
        live = tuple(ctl.live_brokers)
        for b in sorted(set(self._live_seen) - set(live)):
            self._note(f"controller: broker {b} is dead (no heartbeat for broker.session.timeout.ms)")
        for b in sorted(set(live) - set(self._live_seen)):
            self._note(f"controller: broker {b} joined")
        self._live_seen = live
        # Stamped with the time we noticed (within one tick of it), so the log stays in order.
        for _, topic, p, old, new, unclean in ctl.elections[self._elections_seen:]:
            if topic == self.topic:
                how = "UNCLEAN election" if unclean else "election"
                new_text = "nobody: partition offline" if new < 0 else f"broker {new}"
                self._note(f"{how} {topic}-{p}: leader {old} -> {new_text}")
        # max: a controller that is not active may be a little behind; never note an election twice
        self._elections_seen = max(self._elections_seen, len(ctl.elections))
        for s in self.cluster.partitions_of(self.topic):
            old = self._isr_seen.get(s.partition)
            if old is not None and sorted(old) != sorted(s.isr):
                self._note(f"{self.topic}-{s.partition} ISR {_ids(old)} -> {_ids(s.isr)}")
            self._isr_seen[s.partition] = tuple(s.isr)
        for consumer in self.consumers:
            node = self.cluster.world.nodes.get(consumer.node_id)
            if node is None or node.coordinator is None:
                continue
            co = node.coordinator
            seen_co, seen = self._events_seen.get(str(consumer.node_id), (None, 0))
            if seen_co is not co:  # a restarted process: a new story
                seen = 0
            for _, text in co.events[seen:]:
                if not text.startswith("assigned: "):  # the leader's plan, by member id: the next line says it
                    self._note(f"{consumer.config['client_id']}: {text}")
            self._events_seen[str(consumer.node_id)] = (co, len(co.events))

    def _watch_group(self, g: viz.GroupView) -> None:
        """A line for each new settled assignment of the group."""
        live = [c for c in g.consumers if c.alive]
        if any(c.state != viz.STABLE or c.pending for c in live):
            return  # mid-rebalance: wait until everyone has its part
        held = {c.node_id: [p for _, p in c.held] for c in g.consumers if c.held}
        seen = (g.assignment(), held)
        if seen == self._assignment_seen:
            return
        self._assignment_seen = seen
        parts = [f"{c.client_id} " + (",".join(f"p{p.partition}" for p in c.owned) or "idle") for c in live]
        parts += [f"{c.client_id} (dead) still holds " + ",".join(f"p{p}" for _, p in c.held)
                  for c in g.consumers if c.held]
        generation = max((c.generation for c in live), default=-1)
        self._note(f"group {g.group_id} generation {generation}: " + ("; ".join(parts) or "no consumers"))

    def _note(self, text: str) -> None:
        self.event_log.add(f"t={self.cluster.now / 1000:9.3f}s  {text}")

    @property
    def events(self) -> list[str]:
        """The event log's lines, oldest first (the last ``_LOG_LINES``)."""
        return self.event_log.lines

    def _show(self, seq: int, view: viz.ClusterView, alive: dict[int, bool], counters: dict,
              samples: list[dict] = (), active: int | None = None) -> None:
        with self._show_lock:
            if seq <= self._shown_seq:
                return  # a newer picture is already on screen
            self._shown_seq = seq
            _redraw(self, view)
            for b, button in self.broker_buttons.items():
                button.description = f"kill broker {b}" if alive[b] else f"restart broker {b}"
                button.button_style = "danger" if alive[b] else "success"
                button.icon = "skull" if alive[b] else "redo"
            last = sum(alive[n] for n in self.controller_buttons) == 1
            for n, button in self.controller_buttons.items():
                role = " (active)" if n == active else ""
                button.description = f"kill controller {n}{role}" if alive[n] else f"restart controller {n}"
                button.button_style = "danger" if alive[n] else "success"
                button.icon = "skull" if alive[n] else "redo"
                button.disabled = alive[n] and last
                button.tooltip = "the last live controller: the dashboard reads the metadata from it" \
                    if button.disabled else ""
            self.counters_html.value = _counters_html(counters, self.running)
            self.partitions_html.value = _partitions_html(view)
            if view.group is not None:
                self._show_consumers(view.group, counters)
                self._show_chart(view.group, samples)

    def _show_consumers(self, g: viz.GroupView, counters: dict) -> None:
        names = [c.node_id for c in g.consumers]
        if names != list(self.consumer_buttons):
            # The group's consumers changed (added, closed): new rows, old buttons closed.
            for name in set(self.consumer_buttons) - set(names):
                self.consumer_buttons.pop(name).close()
                self.consumer_labels.pop(name).close()
            rows = []
            for name in names:
                if name not in self.consumer_buttons:
                    button = w.Button(layout=w.Layout(width="170px", flex="none"))
                    button.on_click(lambda _, name=name: self.toggle_consumer(name))
                    self.consumer_buttons[name] = button
                    # One line, whatever it says: a row that grew a line would move the buttons below.
                    self.consumer_labels[name] = w.HTML(layout=w.Layout(flex="1 1 0", min_width="0",
                                                                        overflow="hidden"))
                rows.append(w.HBox([self.consumer_buttons[name], self.consumer_labels[name]],
                                   layout=w.Layout(align_items="center")))
            self.consumer_buttons = {name: self.consumer_buttons[name] for name in names}
            old, self.consumer_rows.children = self.consumer_rows.children, rows
            for box in old:  # the rows' boxes only: their button and label may live on
                box.close()
        for i, c in enumerate(g.consumers):
            button = self.consumer_buttons[c.node_id]
            button.description = f"kill {c.client_id}" if c.alive else f"restart {c.client_id}"
            button.button_style = "danger" if c.alive else "success"
            button.icon = "skull" if c.alive else "redo"
            self.consumer_labels[c.node_id].value = _consumer_html(c, counters["consumers"][c.node_id]["consumed"], i)

    def _show_chart(self, g: viz.GroupView, samples: list[dict]) -> None:
        """Redraw the lag chart (under ``_show_lock``). While the thread runs, at most every
        ``_CHART_EVERY_S``: matplotlib takes ~50 ms, five ticks a second would spend a
        quarter of their time on it; a later tick (or ``stop()``) draws what was skipped.
        Stepped by hand, every step draws it."""
        self._chart_pending = (g, samples)
        if not samples or samples[-1] is self._chart_drawn:
            return
        if not self.running or time.monotonic() >= self._chart_wall + _CHART_EVERY_S:
            self._draw_chart(g, samples)

    def draw_lag_chart(self) -> str:
        """Draw the lag chart now, from every sample so far; returns the SVG (also in
        ``lag_chart_svg``). Steps draw it by themselves."""
        with self.lock:
            samples = self.lag_samples[-_CHART_SAMPLES:]
        with self._show_lock:
            if self._chart_pending is not None and samples:
                self._draw_chart(self._chart_pending[0], samples)
        return self.lag_chart_svg

    def _draw_chart(self, g: viz.GroupView, samples: list[dict]) -> None:
        self._chart_wall = time.monotonic()
        self._chart_drawn = samples[-1]  # this exact sample is drawn
        names = {c.node_id: (c.client_id, i) for i, c in enumerate(g.consumers)}
        try:
            self.lag_chart_svg = _lag_chart(samples, names)
        except Exception as e:  # no matplotlib: keep the dashboard usable
            self.lag_chart_svg = ""
            self.lag_chart.layout.display = "none"
            self._chart_error = e
            return
        self.lag_chart.value = _fit_svg(self.lag_chart_svg)

    # --- the thread ------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Tick every ``tick_ms`` of wall time from a background thread."""
        if self.running:
            return
        self._only_one_running()
        self._stop_event = threading.Event()
        self._thread_error = None
        self._thread = threading.Thread(target=self._run, args=(self._stop_event,),
                                        name=f"minikafka-dashboard-{self.topic}", daemon=True)
        self._thread.start()
        self._sync_run_toggle(True)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (the tick under way finishes first); the lag
        chart then shows the last step, which the thread may have skipped."""
        self._stop_event.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._sync_run_toggle(False)
        with self._show_lock:
            pending = self._chart_pending
            if pending is not None and pending[1] and pending[1][-1] is not self._chart_drawn and not self._closed:
                self._draw_chart(*pending)

    def _run(self, stop: threading.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            began = time.monotonic()
            elapsed_ms = min((began - last) * 1000, _MAX_WALL_MS)
            last = began
            try:
                self.tick(elapsed_ms)
            except Exception as e:  # show it and stop, rather than fail again five times a second
                self._thread_error = e
                with self.lock:
                    self._note(f"dashboard stopped: {type(e).__name__}: {e}")
                stop.set()
                break
            stop.wait(max(0.0, self.tick_ms / 1000 - (time.monotonic() - began)))
        self._sync_run_toggle(False)

    def _sync_run_toggle(self, running: bool) -> None:
        self._show_running(running)

    def close(self) -> None:
        """Stop the thread and close every widget (the consumers go on: they are the
        cluster's, in ``cluster.consumers``; close them for good with ``consumer.close()``)."""
        self.stop()
        with self._show_lock:
            self._closed = True
        _close_widgets(self.widget)

    def __repr__(self) -> str:
        return f"Dashboard(topic={self.topic!r}, running={self.running}, ticks={self.ticks})"


def _counters_html(c: dict, running: bool) -> str:
    rows = [
        ("simulated time", f"{c['time_ms'] / 1000:.1f} s" + ("" if running else " (paused)")),
        ("sent", c["sent"]), ("acknowledged", c["acknowledged"]), ("failed", c["failed"]),
        ("pending", c["pending"]), ("lost (so far)", c["lost"]),
    ]
    by_acks = c.get("lost_by_acks", {})
    if len(by_acks) > 1:  # acks switched during the run: which setting lost what
        rows += [(f"&nbsp;&nbsp;lost with acks={a}", n) for a, n in by_acks.items()]
    rows += [
        ("under-replicated partitions", c["under_replicated"]), ("offline partitions", c["offline"]),
        ("elections", c["elections"]),
    ]
    if "active_controller" in c:
        active = c["active_controller"]
        rows.append(("active controller", "none" if active is None else f"{active} (epoch {c['controller_epoch']})"))
    rows += [(f"&nbsp;&nbsp;{html.escape(k)}", v) for k, v in c["errors"].items()]
    if "consumed" in c:
        rows.append(("consumed", c["consumed"]))
        rows.append(("&nbsp;&nbsp;of which read again", c["redelivered"]))
        rows += [(f"&nbsp;&nbsp;{html.escape(k)}", v) for k, v in c["consumer_errors"].items()]
    red = {"lost (so far)", "offline partitions", "under-replicated partitions", "failed"}
    return _table_html(rows, red=red | {f"&nbsp;&nbsp;lost with acks={a}" for a in by_acks})


def _consumer_html(c: viz.ConsumerView, consumed: int, index: int) -> str:
    colour = viz.CONSUMER_COLOURS[index % len(viz.CONSUMER_COLOURS)]
    if not c.alive:
        state = "<b style='color:#cb181d'>dead</b>"
    elif c.idle:
        state = "<span style='color:#969696'>idle</span>"
    elif c.state != viz.STABLE or c.pending:
        state = "<span style='color:#636363'>rebalancing</span>"
    else:
        state = f"gen {c.generation}"
    partitions = ",".join(f"p{p.partition}" for p in c.owned) or "-"
    lag = "-" if c.lag is None else c.lag
    # The button beside it names the consumer; the square is its colour in the diagram and the chart.
    return (f"<div style='white-space:nowrap;overflow:hidden;text-overflow:ellipsis' "
            f"title='{html.escape(c.client_id)}'>"
            f"<span style='color:{colour};font-weight:bold'>&#9632;</span> {state} &nbsp;{partitions} &nbsp;"
            f"consumed {consumed} &nbsp;lag {lag}</div>")


_NO_CHART_YET = "<i style='color:#969696'>the lag chart appears after the first step</i>"


def _lag_chart(samples: list[dict], names: dict[str, tuple[str, int]]) -> str:
    """Each consumer's lag over simulated time, as an SVG document (matplotlib, no pyplot:
    no global figure state, safe from the dashboard's thread). Lags are whole records: the
    y axis has integer ticks from 0 to at least 1, so all-zero lags read 0, not 0-0.05."""
    import io

    from matplotlib import rc_context
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(5.2, 2.4))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.12, right=0.98, top=0.95, bottom=0.2)  # tight_layout: 4x slower
    times = [s["time_ms"] / 1000 for s in samples]
    top = 0
    for node_id, (client_id, i) in names.items():
        lags = [s["lag"].get(node_id) for s in samples]
        if all(v is None for v in lags):
            continue
        top = max([top, *(v for v in lags if v is not None)])
        # None (dead, or between two assignments) leaves a gap in the line.
        ax.plot(times, [float("nan") if v is None else v for v in lags], label=client_id,
                color=viz.CONSUMER_COLOURS[i % len(viz.CONSUMER_COLOURS)], linewidth=1.5)
    ax.set_xlabel("simulated time (s)", fontsize=9)
    ax.set_ylabel("lag (records)", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=2))
    ax.set_ylim(0, max(1, top) * 1.05)
    if len(times) > 1:
        ax.set_xlim(times[0], times[-1])
    if ax.lines:
        ax.legend(fontsize=8, loc="upper left")
    buf = io.StringIO()
    # Text as <text> (not glyph paths): crisp, a third of the size, and readable by a test.
    # No date: the same samples give the same SVG.
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "minikafka"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]  # inline: no XML prolog, no doctype


def _partitions_html(view: viz.ClusterView) -> str:
    head = "<tr><th>partition</th><th>leader</th><th>ISR</th><th>replicas</th></tr>"
    body = "".join(
        f"<tr><td>{p.partition}</td><td>{'<b style=color:#cb181d>none</b>' if p.leader < 0 else p.leader}</td>"
        f"<td>{','.join(map(str, sorted(p.isr)))} ({len(p.isr)}/{len(p.replicas)})</td>"
        f"<td>{','.join(map(str, p.replicas))}</td></tr>" for p in view.partitions)
    return f"<table style='font-size:90%;line-height:1.4'>{head}{body}</table>"


# --- the dashboard of a real cluster: processes, sockets and the wall clock --------------------------------
