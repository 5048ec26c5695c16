"""``ProcessDashboard``: the dashboard's buttons on real broker processes
(``minikafka.wire.process.launch``), driven over the Kafka protocol with kafka-python. Its
theory of operation is the class's docstring; what it shares with the simulation's
``Dashboard`` is in ``minikafka.dashboards.controls``."""

from __future__ import annotations

import html
import threading
import time
from collections import Counter, defaultdict
from typing import Any, Callable

import ipywidgets as w

from minikafka import viz
from minikafka.dashboards.controls import (FIT_RESERVE_PX, ROW_PX, _close_widgets, _ids, _redraw, _RunToggle,
                                           _table_html, build_controls, clock_and_load_row, picture_row,
                                           placeholder, row)
from minikafka.errors import IllegalArgumentError

# The dashboard's own producers, paced for a lecture rather than a data centre (Kafka's
# defaults wait 60 s for metadata, 30 s per request and 2 min per record, and back off
# reconnects up to 30 s: a restarted broker would seem ignored for half a minute).
# producer_config goes on top of these.
_WIRE_PRODUCER_DEFAULTS = {
    "max_block_ms": 2_000, "request_timeout_ms": 5_000, "delivery_timeout_ms": 30_000,
    "reconnect_backoff_max_ms": 1_000,
}
_MAX_BURST_S = 1.0  # a producer that fell behind (a blocked send) catches up at most this much

_QUIET_GUARD = threading.Lock()
_QUIET = {"count": 0, "level": 0}


def _quiet_kafka_python(on: bool) -> None:
    """Silence kafka-python's loggers while at least one dashboard asks (reference-counted):
    every connection a killed broker resets is an ERROR line, and in a notebook those land in
    whatever cell runs at that moment. The event log says what happened instead."""
    import logging

    logger = logging.getLogger("kafka")
    with _QUIET_GUARD:
        if on:
            if _QUIET["count"] == 0:
                _QUIET["level"] = logger.level
                logger.setLevel(logging.CRITICAL + 1)
            _QUIET["count"] += 1
        elif _QUIET["count"] > 0:
            _QUIET["count"] -= 1
            if _QUIET["count"] == 0:
                logger.setLevel(_QUIET["level"])


class ProcessDashboard(_RunToggle):
    """Buttons, a producer and a live diagram for one topic of a real multi-process cluster
    (``minikafka.wire.process.launch``: a ``LocalCluster``), driven with kafka-python.

        from minikafka.wire.process import launch
        from minikafka.widgets import ProcessDashboard
        cluster = launch(brokers=3)
        ...create the topic (KafkaAdminClient)...
        dash = ProcessDashboard(cluster, "trucks_gps", rate_per_s=20, acks="all")
        dash          # press "run" (or dash.start()); dash.close() when done

    ``rate_per_s`` records per second of wall time (the slider), ``acks`` the producer's
    (the toggle switches between producers), ``tick_ms`` how often the threads look (and
    what one "step" is), ``producing`` the toggle's first state, ``producer_config`` on top
    of ``_WIRE_PRODUCER_DEFAULTS``, ``key(n)`` record n's key (ten trucks by default),
    ``request_timeout_ms`` the looking clients' timeout, ``quiet_clients`` see below.

    ``counters`` (as of the last look): ``sent``, ``acknowledged``, ``failed``, ``pending``,
    ``errors`` (failures by type), ``alive`` (process runs, by broker), ``paused``,
    ``live_brokers`` (by Metadata), ``leaders``/``isr``/``isr_sizes``/``end_offsets`` (by
    partition), ``under_replicated``, ``offline``, ``leader_changes``, ``metadata_error``.

    Theory of operation
    -------------------
    The simulated ``Dashboard`` *is* its cluster's clock; here time passes by itself, the
    brokers are other processes and everything the dashboard knows it learns the way any
    client does, over the Kafka protocol. Three kinds of work, each with its owner:

    - **Faults** (the buttons, or ``toggle_broker``/``toggle_pause`` from code): ``kill``
      (SIGKILL), ``restart`` (a new process on the same port and log directory), ``pause``
      and ``resume`` (SIGSTOP/SIGCONT: alive but silent, as in a long GC pause) through the
      ``LocalCluster``. Each is written in the event log at once; what the cluster makes of
      it shows up later, when the controller and the clients notice.
    - **Load**: a kafka-python ``KafkaProducer`` (one per acks setting, made on first use,
      as in ``Dashboard``) sends records numbered 0, 1, 2, ... at ``rate_per_s`` of *wall*
      time, with callbacks counting them acknowledged or failed (by error type). Those
      callbacks run on the producer's own I/O thread: the counters have a lock.
    - **Looking** (``refresh``): a ``KafkaAdminClient`` asks for the cluster's Metadata
      (live brokers; each partition's leader, epoch, replicas and ISR) and a group-less
      ``KafkaConsumer`` for each partition's end offset (``end_offsets``: ListOffsets,
      which the leader answers with its high watermark), asked only of leaders whose
      process runs and is not paused (one would make the request wait out its timeout).
      What changed since the last look (leaders, ISRs, live brokers, a process that died
      or came back without the dashboard) goes to the event log; then the diagram
      (``viz.metadata_view`` + ``viz.draw``), counters and partition table are redrawn.
      A look that fails (every broker dead or paused) keeps the last metadata and says so.

    ``tick(wall_ms)`` does one of each synchronously, for tests and for the "step" button:
    send at the rate for ``wall_ms`` of wall time, then refresh. ``start()`` instead runs
    two daemon threads until ``stop()``: one sends at the rate, the other refreshes every
    ``tick_ms`` (at once after a button, which wakes it) -- two, so that a slow look (a
    Metadata request waiting on a paused broker) never stalls the load, whose timing is
    part of what the lecture shows. A button pressed while the threads run only acts and
    wakes the refresher; stopped, it refreshes itself before returning.

    Wall-clock timing makes every run different: when the controller notices a death
    depends on ``broker.session.timeout.ms`` (a ``launch(config=...)`` key), when a client
    notices on its timeouts and backoffs. Test on states reached, with timeouts, never on
    times.

    Locks: ``_counts`` (the producer's callbacks vs everyone), ``_looking`` (one refresh at a
    time: kafka-python's admin client and consumer are not thread-safe, and the event log's
    "what changed" compares against the last look), ``_faults`` (one process action at a
    time, and the record of which brokers are paused), ``_showing`` (widget state).

    ``close()`` stops the threads and closes the dashboard's clients and widgets, never the
    cluster: whoever launched it owns it. ``quiet_clients`` (default) silences kafka-python's
    own loggers while the dashboard is open (see ``_quiet_kafka_python``).

    Pausing is known only when done through the dashboard: a ``LocalCluster`` does not say
    whether a process is stopped, and a broker paused from other code looks alive here
    (until the controller drops it from the live brokers).
    """

    def __init__(
        self,
        cluster,
        topic: str,
        *,
        rate_per_s: int = 20,
        acks: int | str = "all",
        tick_ms: int = 500,
        producing: bool = True,
        producer_config: dict | None = None,
        key: Callable[[int], bytes | None] | None = None,
        request_timeout_ms: int = 3_000,
        quiet_clients: bool = True,
    ) -> None:
        from kafka import KafkaAdminClient, KafkaConsumer

        for needed in ("bootstrap_servers", "broker_ids", "alive", "kill", "restart", "pause", "resume"):
            if not hasattr(cluster, needed):
                raise IllegalArgumentError(
                    f"ProcessDashboard drives a LocalCluster (minikafka.wire.process.launch), not "
                    f"{type(cluster).__name__}; a simulated Cluster has Dashboard")
        if "bootstrap_servers" in (producer_config or {}):
            raise IllegalArgumentError("producer_config must not set bootstrap_servers: the cluster's are used")
        self.cluster = cluster
        self.topic = topic
        self.tick_ms = tick_ms
        self.request_timeout_ms = request_timeout_ms
        self._producer_config = {**_WIRE_PRODUCER_DEFAULTS, **(producer_config or {})}
        self._key = key or (lambda n: f"truck-{n % 10}".encode())
        self._quiet = quiet_clients
        if quiet_clients:
            _quiet_kafka_python(True)
        self._t0 = time.monotonic()  # the event log's and the caption's t = 0

        self._counts = threading.Lock()
        self.sent = self.acknowledged = self.failed = 0
        self.errors: Counter[str] = Counter()
        self._next_value = 0
        self._quota = 0.0  # records owed (a fraction carried from one sending window to the next)

        self._faults = threading.Lock()
        self.paused: set[int] = set()  # paused through this dashboard
        self._expected_alive = {b: cluster.alive(b) for b in cluster.broker_ids}

        self._looking = threading.RLock()
        self._showing = threading.Lock()
        self._producers_lock = threading.Lock()
        self._own_producers: dict[str, Any] = {}
        self._admin = self._offsets = None
        self.view: viz.ClusterView | None = None  # the last look, as drawn
        self.partitions: dict[int, viz.PartitionView] = {}  # by the last Metadata that answered
        self.live_brokers: tuple[int, ...] = ()  # the brokers that Metadata listed
        self.end_offsets: dict[int, int | None] = {}
        self.leader_changes = 0
        self.metadata_error: str | None = None  # why the last look failed; None: it worked
        self.counters: dict[str, Any] = {}
        self.diagram_source = ""
        self._last_dot = None
        self.looks = 0
        self._looked = False  # a first look gives no "changed" lines: there was nothing before
        self._failed_seen = 0

        self._threads: list[threading.Thread] = []
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self._thread_error: BaseException | None = None
        self._syncing = False
        self._closed = False
        try:
            # Short timeouts and reconnect backoffs: a look must not hang on a paused broker
            # for Kafka's 30 s, nor ignore a restarted one for its 30 s of backoff.
            common = dict(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=request_timeout_ms,
                          reconnect_backoff_max_ms=1_000)
            self._admin = KafkaAdminClient(client_id="dashboard-admin", **common)
            self._offsets = KafkaConsumer(client_id="dashboard-offsets", group_id=None, enable_auto_commit=False,
                                          **common)
            self._check_topic()
            self._build(rate_per_s, str(acks), producing)
            self.refresh()
            self._only_one_running()
        except BaseException:
            self._close_clients()
            if quiet_clients:
                _quiet_kafka_python(False)
            raise

    def _check_topic(self) -> None:
        """Fail now, clearly, on a topic the cluster does not have."""
        (found,) = self._admin.describe_topics([self.topic])
        if found["error_code"] != 0:
            from kafka.errors import for_code

            raise IllegalArgumentError(f"topic {self.topic!r}: {for_code(found['error_code']).__name__} "
                                       "(create it first: KafkaAdminClient.create_topics)")

    # --- widgets -------------------------------------------------------------------------------------

    def _build(self, rate_per_s: int, acks: str, producing: bool) -> None:
        self.title = w.HTML(f"<b>minikafka</b> (real processes, {html.escape(self.cluster.bootstrap_servers)})"
                            f" &nbsp; topic <code>{html.escape(self.topic)}</code>")
        self.broker_buttons: dict[int, w.Button] = {}
        self.pause_buttons: dict[int, w.Button] = {}
        columns = []
        for b in self.cluster.broker_ids:
            kill = w.Button(layout=w.Layout(width="150px"))
            kill.on_click(lambda _, b=b: self._from_button(self.toggle_broker, b))
            pause = w.Button(layout=w.Layout(width="150px"))
            pause.on_click(lambda _, b=b: self._from_button(self.toggle_pause, b))
            self.broker_buttons[b], self.pause_buttons[b] = kill, pause
            columns.append(w.VBox([kill, pause]))
        build_controls(self, rate_per_s=rate_per_s, acks=acks, producing=producing,
                       step=lambda: self._from_button(self.tick, self.tick_ms))
        # The simulated Dashboard's layout (controls.py's header), with its engine's buttons.
        self.widget = w.VBox([
            self.title,
            row(*columns),
            clock_and_load_row(self),
            self.counters_html,
            picture_row(self, self.partitions_html),
            self.log,
        ], layout=w.Layout(width="100%"))
        # Its title has a row of its own and each broker two buttons: a row more above the picture.
        self.fit_reserve_px = FIT_RESERVE_PX + ROW_PX
        self._stop_when_unseen()
        self._show_buttons()

    def _repr_mimebundle_(self, **kwargs: Any):
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        # A sentence for a reader of the saved notebook, fixed when built (nbval compares it).
        bundle["text/plain"] = placeholder(f"{len(self.broker_buttons)} broker processes (topic {self.topic})")
        return bundle

    def _from_button(self, action: Callable, *args: Any) -> None:
        """A button's action; a failure goes to the event log (a traceback in a widget
        callback ends up in the browser console, where nobody in a lecture looks)."""
        try:
            action(*args)
        except Exception as e:
            self._note(f"{getattr(action, '__name__', 'action')}{args}: {type(e).__name__}: {e}")

    def _show_buttons(self) -> None:
        with self._showing:
            for b in self.cluster.broker_ids:
                alive, paused = self.cluster.alive(b), b in self.paused
                kill, pause = self.broker_buttons[b], self.pause_buttons[b]
                kill.description = f"kill broker {b}" if alive else f"restart broker {b}"
                kill.button_style = "danger" if alive else "success"
                kill.icon = "skull" if alive else "redo"
                pause.description = f"resume broker {b}" if paused else f"pause broker {b}"
                pause.button_style = "info" if paused else "warning"
                pause.icon = "play" if paused else "pause"
                pause.disabled = not alive

    # --- faults (buttons call these; so can a notebook) ------------------------------------------------

    def toggle_broker(self, broker_id: int) -> None:
        """Kill a live broker's process (SIGKILL), restart a dead one."""
        if self.cluster.alive(broker_id):
            self.kill(broker_id)
        else:
            self.restart(broker_id)

    def toggle_pause(self, broker_id: int) -> None:
        """Pause a running broker (SIGSTOP), resume a paused one (SIGCONT)."""
        if broker_id in self.paused:
            self.resume(broker_id)
        else:
            self.pause(broker_id)

    def kill(self, broker_id: int) -> None:
        with self._faults:
            self.cluster.kill(broker_id)
            self.paused.discard(broker_id)
            self._expected_alive[broker_id] = False
            self._note(f"you killed broker {broker_id} (SIGKILL: its connections reset, its log directory stays)")
        self._acted()

    def restart(self, broker_id: int) -> None:
        with self._faults:
            self.cluster.restart(broker_id)  # waits until it listens
            self._expected_alive[broker_id] = True
            self._note(f"you restarted broker {broker_id}: it recovers its log and registers with the controller")
        self._acted()

    def pause(self, broker_id: int) -> None:
        with self._faults:
            if not self.cluster.alive(broker_id):
                raise IllegalArgumentError(f"broker {broker_id} is not running")
            self.cluster.pause(broker_id)
            self.paused.add(broker_id)
            self._note(f"you paused broker {broker_id} (SIGSTOP: alive, silent, no heartbeats)")
        self._acted()

    def resume(self, broker_id: int) -> None:
        with self._faults:
            self.cluster.resume(broker_id)
            self.paused.discard(broker_id)
            self._note(f"you resumed broker {broker_id} (SIGCONT)")
        self._acted()

    def _acted(self) -> None:
        self._show_buttons()  # at once: no network involved
        if self.running:
            self._wake.set()  # the refresher looks now; the kernel's thread is free again
        else:
            self.refresh()

    # --- load ----------------------------------------------------------------------------------------

    @property
    def producer(self) -> Any:
        """The producer for the acks now selected (made on first use)."""
        acks = self.acks.value
        with self._producers_lock:
            if acks not in self._own_producers:
                # One per acks setting: an abandoned one still finishes (and counts) its
                # in-flight records instead of failing them on a close.
                from kafka import KafkaProducer

                config = {"acks": {"all": "all", "1": 1, "0": 0}[acks], "client_id": f"dashboard-acks-{acks}",
                          **self._producer_config}
                self._own_producers[acks] = KafkaProducer(bootstrap_servers=self.cluster.bootstrap_servers,
                                                          **config)
            return self._own_producers[acks]

    def _send_one(self) -> None:
        with self._counts:
            n = self._next_value
            self._next_value += 1
            self.sent += 1
        value = f"{n}".encode()
        try:
            future = self.producer.send(self.topic, value=value, key=self._key(n))
        except Exception as e:  # could not even queue: no metadata within max_block_ms, buffer full
            self._failed(e)
            return
        future.add_callback(self._acked)
        future.add_errback(self._failed)

    def _acked(self, metadata: Any) -> None:
        with self._counts:
            self.acknowledged += 1

    def _failed(self, error: BaseException) -> None:
        with self._counts:
            self.failed += 1
            self.errors[type(error).__name__] += 1

    def _produce_for(self, wall_ms: float, stop: threading.Event) -> None:
        """Send at the rate for ``wall_ms`` of wall time (or until ``stop``), one record at
        a time as each falls due, so the load is even rather than in bursts."""
        began = time.monotonic()
        end = began + wall_ms / 1000
        last = began
        while True:
            now = time.monotonic()
            rate = self.rate.value if self.produce_toggle.value else 0
            self._quota = min(self._quota + rate * (min(now, end) - last), max(1.0, rate * _MAX_BURST_S))
            last = min(now, end)
            while self._quota >= 1 and not stop.is_set():
                self._quota -= 1
                self._send_one()
            now = time.monotonic()
            if now >= end or stop.is_set():
                return
            due = (1 - self._quota) / rate if rate > 0 else end - now
            stop.wait(min(end - now, max(due, 0.001)))

    # --- time --------------------------------------------------------------------------------------------

    def tick(self, wall_ms: float | None = None) -> None:
        """Send at the rate for ``wall_ms`` (default ``tick_ms``) of wall time, then refresh."""
        self._check_open()
        self._produce_for(self.tick_ms if wall_ms is None else wall_ms, self._stop_event
                          if self.running else threading.Event())
        self.refresh()

    def refresh(self) -> None:
        """Look at the cluster over the protocol, log what changed, redraw."""
        self._check_open()
        with self._looking:
            alive, paused = self._watch_processes()
            self._look(alive, paused)
            self.looks += 1
            view = viz.metadata_view(
                self.topic, list(self.partitions.values()), brokers=self.cluster.broker_ids, alive=alive,
                live=self.live_brokers, now_ms=self._now_ms(), high_watermarks=self.end_offsets,
                status=self._status(alive, paused))
            self.view = view
            self.counters = self._count(view, alive, paused)
            self._show(view, dict(self.counters))

    def _now_ms(self) -> int:
        return int((time.monotonic() - self._t0) * 1000)

    def _status(self, alive: dict[int, bool], paused: set[int]) -> dict[int, str]:
        out = {b: "paused (SIGSTOP)" for b in paused if alive[b]}
        if self.metadata_error is None:
            for b, up in alive.items():
                if up and b not in out and b not in self.live_brokers:
                    out[b] = "not live yet (per metadata)"
        return out

    def _watch_processes(self) -> tuple[dict[int, bool], set[int]]:
        """Which processes run and which of them are paused; a line for a process that died,
        or came back, without this dashboard (a crash; other code). Read under ``_faults``:
        a kill between reading and comparing would otherwise look like someone else's."""
        with self._faults:
            alive = {b: self.cluster.alive(b) for b in self.cluster.broker_ids}
            for b, up in alive.items():
                if up != self._expected_alive.get(b, up):
                    self._note(f"broker {b}'s process " + ("is running again (not restarted from here)" if up
                                                           else "is gone (not killed from here)"))
                    if not up:
                        self.paused.discard(b)
                self._expected_alive[b] = up
            return alive, set(self.paused)

    def _look(self, alive: dict[int, bool], paused: set[int]) -> None:
        """Metadata, then end offsets; what changed goes to the event log."""
        try:
            brokers = self._admin.describe_cluster()["brokers"]
            (topic,) = self._admin.describe_topics([self.topic])
        except Exception as e:  # every broker dead or silent: keep the last picture, say so
            error = f"{type(e).__name__}: {e}"
            if error != self.metadata_error:
                self._note(f"metadata request failed ({error}): showing the last answer")
            self.metadata_error = error
        else:
            if self.metadata_error is not None:
                self._note("metadata answers again")
            self.metadata_error = None
            live = tuple(sorted(b["broker_id"] for b in brokers))
            partitions = {p["partition_index"]: viz.PartitionView(
                self.topic, p["partition_index"], p["leader_id"], p["leader_epoch"],
                tuple(p["isr_nodes"]), tuple(p["replica_nodes"])) for p in topic["partitions"]}
            if topic["error_code"] == 0 and partitions:
                if self._looked:
                    self._log_changes(live, partitions)
                self.live_brokers, self.partitions = live, partitions
                self._looked = True
        self.end_offsets = self._end_offsets(alive, paused)

    def _log_changes(self, live: tuple[int, ...], partitions: dict[int, viz.PartitionView]) -> None:
        for b in sorted(set(self.live_brokers) - set(live)):
            self._note(f"metadata: broker {b} is no longer live (the controller declared it dead)")
        for b in sorted(set(live) - set(self.live_brokers)):
            self._note(f"metadata: broker {b} is live")
        for n, p in sorted(partitions.items()):
            old = self.partitions.get(n)
            if old is None:
                continue
            if old.leader != p.leader:
                self.leader_changes += 1
                new = "nobody: partition offline" if p.leader < 0 else f"broker {p.leader}"
                self._note(f"{self.topic}-{n} leader {old.leader} -> {new} (epoch {p.leader_epoch})")
            if sorted(old.isr) != sorted(p.isr):
                self._note(f"{self.topic}-{n} ISR {_ids(old.isr)} -> {_ids(p.isr)}")

    def _end_offsets(self, alive: dict[int, bool], paused: set[int]) -> dict[int, int | None]:
        """Each partition's end offset (its leader's high watermark), asked of leaders whose
        process runs and answers; None where there is none to ask or no answer came."""
        from kafka import TopicPartition

        out: dict[int, int | None] = {n: None for n in self.partitions}
        by_leader: dict[int, list] = defaultdict(list)
        for n, p in sorted(self.partitions.items()):
            if p.leader >= 0 and alive.get(p.leader) and p.leader not in paused:
                by_leader[p.leader].append(TopicPartition(self.topic, n))
        for leader, tps in sorted(by_leader.items()):
            # One request per leader: a leader that does not answer costs its own partitions.
            try:
                got = self._offsets.end_offsets(tps, timeout_ms=self.request_timeout_ms)
            except Exception:
                continue  # a leader just moved, or is dying: the next look asks again
            for tp, offset in got.items():
                out[tp.partition] = offset
        return out

    def _count(self, view: viz.ClusterView, alive: dict[int, bool], paused: set[int]) -> dict[str, Any]:
        with self._counts:
            sent, acked, failed = self.sent, self.acknowledged, self.failed
            errors = dict(sorted(self.errors.items()))
        if failed > self._failed_seen:
            self._note(f"producer: {failed - self._failed_seen} record(s) failed "
                       f"({', '.join(f'{k} {v}' for k, v in errors.items())} so far)")
            self._failed_seen = failed
        return {
            "time_ms": view.now_ms,
            "sent": sent, "acknowledged": acked, "failed": failed, "pending": sent - acked - failed,
            "errors": errors,
            "alive": dict(alive), "paused": sorted(paused),
            "live_brokers": list(self.live_brokers),
            "leaders": {p.partition: p.leader for p in view.partitions},
            "isr": {p.partition: sorted(p.isr) for p in view.partitions},
            "isr_sizes": {p.partition: len(p.isr) for p in view.partitions},
            "end_offsets": dict(self.end_offsets),
            "under_replicated": view.under_replicated,
            "offline": view.offline,
            "leader_changes": self.leader_changes,
            "metadata_error": self.metadata_error,
        }

    def _show(self, view: viz.ClusterView, counters: dict) -> None:
        _redraw(self, view)
        self._show_buttons()
        with self._showing:
            self.counters_html.value = _wire_counters_html(counters, self.running)
            self.partitions_html.value = _wire_partitions_html(view, counters["end_offsets"])

    def _note(self, text: str) -> None:
        with self._showing:
            self.event_log.add(f"t={self._now_ms() / 1000:9.3f}s  {text}")

    @property
    def events(self) -> list[str]:
        """The event log's lines, oldest first (the last ``_LOG_LINES``)."""
        return self.event_log.lines

    # --- the threads ---------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def start(self) -> None:
        """Send and refresh from two background threads (see the class docstring)."""
        self._check_open()
        if self.running:
            return
        self._only_one_running()
        self._stop_event = stop = threading.Event()
        self._wake = threading.Event()
        self._thread_error = None
        self._threads = [
            threading.Thread(target=self._keep_sending, args=(stop,), daemon=True,
                             name=f"minikafka-dashboard-{self.topic}-producer"),
            threading.Thread(target=self._keep_looking, args=(stop,), daemon=True,
                             name=f"minikafka-dashboard-{self.topic}-refresh"),
        ]
        for t in self._threads:
            t.start()
        self._sync_run_toggle(True)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop both threads and wait for them (a refresh under way finishes first)."""
        self._stop_event.set()
        self._wake.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)
        self._sync_run_toggle(False)

    def _keep_sending(self, stop: threading.Event) -> None:
        self._guarded(stop, lambda: self._produce_for(self.tick_ms, stop))

    def _keep_looking(self, stop: threading.Event) -> None:
        def one() -> None:
            began = time.monotonic()
            self.refresh()
            self._wake.wait(max(0.0, self.tick_ms / 1000 - (time.monotonic() - began)))
            self._wake.clear()

        self._guarded(stop, one)

    def _guarded(self, stop: threading.Event, step: Callable[[], None]) -> None:
        while not stop.is_set():
            try:
                step()
            except Exception as e:  # show it and stop, rather than fail again every tick
                self._thread_error = e
                self._note(f"dashboard stopped: {type(e).__name__}: {e}")
                stop.set()
                self._wake.set()
        self._sync_run_toggle(False)

    def _sync_run_toggle(self, running: bool) -> None:
        with self._showing:
            self._show_running(running)

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalArgumentError("this dashboard is closed")

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the threads, close the producers (records still in flight get up to
        ``timeout_s``), the admin client, the consumer and the widgets. Not the cluster."""
        if self._closed:
            return
        self.stop()
        self._closed = True
        with self._producers_lock:
            producers, self._own_producers = list(self._own_producers.values()), {}
        for producer in producers:
            try:
                producer.close(timeout=timeout_s)
            except Exception:  # a close that times out must not keep the rest open
                pass
        self._close_clients()
        if self._quiet:
            _quiet_kafka_python(False)
            self._quiet = False
        _close_widgets(self.widget)

    def _close_clients(self) -> None:
        with self._looking:
            for client in (self._offsets, self._admin):
                try:
                    if client is not None:
                        client.close()
                except Exception:
                    pass

    def __repr__(self) -> str:
        return f"ProcessDashboard(topic={self.topic!r}, running={self.running}, looks={self.looks})"


def _wire_counters_html(c: dict, running: bool) -> str:
    live = ", ".join(map(str, c["live_brokers"])) or "none"
    rows = [
        ("wall time", f"{c['time_ms'] / 1000:.1f} s" + ("" if running else " (stopped)")),
        ("sent", c["sent"]), ("acknowledged", c["acknowledged"]), ("failed", c["failed"]),
        ("pending", c["pending"]),
        ("live brokers (metadata)", live),
        ("under-replicated partitions", c["under_replicated"]), ("offline partitions", c["offline"]),
        ("leader changes", c["leader_changes"]),
    ]
    rows += [(f"&nbsp;&nbsp;{html.escape(k)}", v) for k, v in c["errors"].items()]
    if c["metadata_error"]:
        rows.append(("metadata", f"<span style='color:#cb181d'>{html.escape(c['metadata_error'])}</span>"))
    return _table_html(rows, red={"offline partitions", "under-replicated partitions", "failed"})


def _wire_partitions_html(view: viz.ClusterView, end_offsets: dict[int, int | None]) -> str:
    head = "<tr><th>partition</th><th>leader</th><th>ISR</th><th>replicas</th><th>end offset</th></tr>"
    body = "".join(
        f"<tr><td>{p.partition}</td><td>{'<b style=color:#cb181d>none</b>' if p.leader < 0 else p.leader}</td>"
        f"<td>{','.join(map(str, sorted(p.isr)))} ({len(p.isr)}/{len(p.replicas)})</td>"
        f"<td>{','.join(map(str, p.replicas))}</td>"
        f"<td>{'?' if end_offsets.get(p.partition) is None else end_offsets[p.partition]}</td></tr>"
        for p in view.partitions)
    return f"<table style='font-size:90%;line-height:1.4'>{head}{body}</table>"
