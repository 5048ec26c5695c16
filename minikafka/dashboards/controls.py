"""What both dashboards share: the run/pause toggle (one dashboard runs at a time), the
controls and views they both show (``build_controls``), the event log, the diagram's redraw,
the small HTML pieces of their counters, and the text a page shows where no kernel draws
the dashboard (``placeholder``).

The layout is made for a 1280x720 projector with JupyterLab's file browser closed (about
1,100 x 600 px of notebook under JupyterLab's bars): a few rows of fixed-width controls (the
clock and the load in one row, ``clock_and_load_row``), the counters across the whole width,
then the picture row (``picture_row``): the diagram on the left, scaled to the window's
height (``_fit_svg``'s ``fit_height``, never below 60% of its natural size), and a side
column (the consumers, the lag chart, the partition table) beside it, or under it when the
cell is narrower. Every button has a fixed width and sits above or beside what changes size
(the diagram, a consumer's line), never below it: a click never moves another button.

``Dashboard`` (``minikafka.dashboards.simulated``) drives a simulated cluster, and
``ProcessDashboard`` (``minikafka.dashboards.processes``) real broker processes; they differ
in their engine, not in their look: a lecturer who learned one knows the other.
"""

from __future__ import annotations

import html
import re
import weakref
from typing import Any, Callable

import ipywidgets as w

from minikafka import viz

_LOG_LINES = 200  # the event log keeps this many lines; a class does not scroll further back


# A 1280x720 window spends about this much height on other things than the diagram:
# JupyterLab's menu, tab bar, toolbar and status bar (121 px), the dashboard's three rows of
# controls and its counters above the picture (155 px, measured), a margin. The diagram's
# height is the rest. A dashboard with a row more (controller buttons) adds ROW_PX.
FIT_RESERVE_PX = 285
ROW_PX = 32
MIN_SCALE = 0.6  # the diagram never shrinks below this share of its natural size: a projector must read it
SLIDER_WIDTH = "240px"
SIDE_WIDTH = "500px"  # the picture row's side column (consumers, lag chart, partitions)


def row(*items: w.Widget) -> w.HBox:
    """Widgets side by side, wrapping onto the next line when the cell is narrow."""
    return w.HBox(list(items), layout=w.Layout(flex_flow="row wrap", align_items="center"))


def clock_and_load_row(board, *clock: w.Widget) -> w.HBox:
    """One row for the clock (run, step, and ``clock``: the simulation's speed) and the load
    (producing, records/s, acks), in the same order on both dashboards."""
    return row(board.run_toggle, board.step_button, *clock, board.produce_toggle, board.rate, board.acks)


def picture_row(board, *side: w.Widget) -> w.HBox:
    """The diagram with a side column (``side``, top to bottom) beside it, or under it when the
    cell is narrower than both. Each keeps a width set by the cell, not by its content: a
    diagram that grows or shrinks (a consumer dies, an arrow is drawn) moves nothing beside
    it, and the side column is top-aligned, so a taller diagram moves nothing in it either."""
    board.diagram.layout = w.Layout(flex="1 1 540px", min_width="0", width="auto")
    column = w.VBox(list(side), layout=w.Layout(flex=f"0 1 {SIDE_WIDTH}", min_width="0", margin="0 0 0 8px"))
    return w.HBox([board.diagram, column], layout=w.Layout(flex_flow="row wrap", align_items="flex-start"))


def build_controls(board, *, rate_per_s: int, acks: str, producing: bool, step: Callable[[], None]) -> None:
    """Make the controls and views both dashboards show, as attributes of ``board``: the load
    (``produce_toggle``, the ``rate`` slider, the ``acks`` toggle), ``run_toggle`` (wired to
    ``board.start``/``stop``) and ``step_button`` (calls ``step``), ``counters_html``,
    ``partitions_html``, the ``diagram`` and the ``event_log`` (its widget: ``log``). Each
    dashboard lays them out with its own buttons."""
    board.produce_toggle = w.ToggleButton(value=producing, description="producing", icon="paper-plane",
                                          layout=w.Layout(width="120px"))
    board.rate = w.IntSlider(value=rate_per_s, min=0, max=500, step=1, description="records/s",
                             continuous_update=False, layout=w.Layout(width=SLIDER_WIDTH))
    # Its label beside its buttons (ipywidgets puts it above them, a row twice as tall): a flex row.
    board.acks = w.ToggleButtons(options=["0", "1", "all"], value={"-1": "all"}.get(acks, acks),
                                 description="acks", style={"button_width": "50px", "description_width": "36px"},
                                 layout=w.Layout(display="flex", align_items="center", flex="none"))
    board.run_toggle = w.ToggleButton(value=False, description="run", icon="play",
                                      layout=w.Layout(width="100px"))
    board.run_toggle.observe(board._on_run_toggle, "value")
    board.step_button = w.Button(description=f"step {board.tick_ms} ms", layout=w.Layout(width="120px"))
    board.step_button.on_click(lambda _: step())
    board.counters_html = w.HTML()
    board.partitions_html = w.HTML()
    board.diagram = w.HTML(layout=w.Layout(width="auto"))  # stretched to its box (100% + margins would overflow)
    board.event_log = EventLog()
    board.log = board.event_log.widget


def placeholder(what: str) -> str:
    """The dashboard's ``text/plain``: the sentence a page shows in its place when no kernel
    draws it -- a saved lecture on GitHub, or opened in JupyterLab before it is run (an
    untrusted notebook shows no widgets). A widget lives in the kernel that made it; the
    notebook keeps only this text. It says what the dashboard is and what to do, from what
    the dashboard was made with (``what``: "3 simulated brokers (topic trucks_gps)"), never
    from its live state: nbval compares ``text/plain``, so it must not change as it runs."""
    return (f"Live dashboard of {what}. It shows only while the kernel that made it runs: "
            "run the cells above, then this one, to see it and use its buttons.")


def _redraw(board, view: "viz.ClusterView") -> None:
    """Put ``view`` on ``board.diagram``; ``dot`` runs only when the picture changed (it is slow)."""
    dot = viz.draw(view)
    board.diagram_source = dot.source
    if dot.source != board._last_dot:
        board._last_dot = dot.source
        try:
            board.diagram.value = _fit_svg(viz.render_svg(dot), fit_height=True,
                                           reserve_px=getattr(board, "fit_reserve_px", FIT_RESERVE_PX))
        except Exception as e:  # no `dot` program: keep the dashboard usable
            board.diagram.value = f"<pre>{html.escape(f'cannot draw: {e}')}</pre>"


_SVG_OPEN = re.compile(r"<svg\b")
_SVG_SIZE = re.compile(r'<svg\b[^>]*?\bwidth="([\d.]+)(pt|px)?"[^>]*?\bheight="([\d.]+)(pt|px)?"')
_PX = {"pt": 4 / 3, "px": 1.0, None: 1.0}


def _fit_svg(svg: str, max_width: str = "100%", fit_height: bool = False, reserve_px: int = FIT_RESERVE_PX) -> str:
    """An inline ``<svg>`` that shrinks to its box's width, keeping its proportions (its
    viewBox), and never grows past its own size: crisp at any zoom, never clipped.

    ``fit_height``: also no taller than the window less ``reserve_px`` (CSS's ``vh``: the
    whole picture on screen below the controls), but never below ``MIN_SCALE`` of its
    natural size. The width is what is set (``height:auto`` follows the viewBox): the
    smallest of the box's width, the natural width, and the width at which the height fits,
    the last never under ``MIN_SCALE`` of the natural width."""
    size = _SVG_SIZE.search(svg) if fit_height else None
    if size is None:
        return _SVG_OPEN.sub(f'<svg style="max-width:{max_width};height:auto;display:block"', svg, count=1)
    width = float(size.group(1)) * _PX[size.group(2)]
    height = float(size.group(3)) * _PX[size.group(4)]
    fit = f"calc((100vh - {reserve_px}px) * {width / height:.4f})"
    style = (f"width:min({max_width},{width:.0f}px,max({width * MIN_SCALE:.0f}px,{fit}));"
             "height:auto;display:block")
    return _SVG_OPEN.sub(f'<svg style="{style}"', svg, count=1)


# Every dashboard made in this process (weakly: a running one is held by its thread).
_DASHBOARDS: "weakref.WeakSet[_RunToggle]" = weakref.WeakSet()


class _RunToggle:
    """The run/pause toggle both dashboards share: clicking it starts or stops the thread,
    and the thread sets it back (without that echo starting or stopping anything).

    One dashboard runs at a time in a process: making a dashboard, or starting one, stops
    every other one's threads (they stay open; "run" starts them again). A cell run a second
    time would otherwise leave its first dashboard running unseen, on the same two cores.

    A dashboard nobody sees stops too: ``_stop_when_unseen`` asks the page to count the views
    of the dashboard's widget (ipywidgets' ``_view_count``: left at None nothing is counted;
    set to 0, every view the page draws adds one and every view it removes takes one off).
    When the last view goes (the output cleared, the notebook's tab closed) the thread stops
    and the event log says why. A page that dies without a word (a reload) removes nothing;
    the next dashboard made or started stops this one then.
    """

    def _stop_when_unseen(self) -> None:
        """Call once ``self.widget`` is built."""
        self.widget._view_count = 0
        self.widget.observe(self._on_view_count, "_view_count")

    def _on_view_count(self, change: dict) -> None:
        if change["new"] == 0 and (change["old"] or 0) > 0 and self.running:
            self.stop()
            self._note("paused: no page shows this dashboard any more (its output was cleared or its tab "
                       "closed); run its cell again to see it, then press run")

    def _only_one_running(self) -> None:
        _DASHBOARDS.add(self)
        for other in list(_DASHBOARDS):
            if other is not self and other.running:
                other.stop()
                other._note(f"paused: another dashboard was made or started ({self!r}); one runs at a time")

    def _on_run_toggle(self, change: dict) -> None:
        if self._syncing:
            return
        if change["new"]:
            self.start()
        else:
            self.stop()

    def _show_running(self, running: bool) -> None:
        self._syncing = True
        try:
            self.run_toggle.value = running
            self.run_toggle.description = "pause" if running else "run"
            self.run_toggle.icon = "pause" if running else "play"
        finally:
            self._syncing = False


class EventLog:
    """The event log: lines oldest first, in a box that shows the newest.

    An ``HTML`` widget, not an ``Output``: its whole state is its ``value``, so a callback
    or a thread can set it without leaking text into whatever cell runs at that moment.
    The box is a flex column in reverse (``column-reverse``) around one block of lines:
    browsers then keep such a box scrolled to its end, so the newest line stays in sight
    as lines arrive, with no script, and the lecturer can still scroll back.
    """

    def __init__(self, height: str = "160px") -> None:
        self._lines: list[str] = []
        self._height = height
        self.widget = w.HTML(self._html(), layout=w.Layout(width="auto"))

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    def add(self, line: str) -> None:
        self._lines.append(line)
        del self._lines[:-_LOG_LINES]
        self.widget.value = self._html()

    def _html(self) -> str:
        body = "\n".join(html.escape(line) for line in self._lines) or "(no events yet)"
        return (f"<div class='minikafka-events' style='height:{self._height};overflow-y:auto;display:flex;"
                "flex-direction:column-reverse;border:1px solid #ddd;padding:2px 6px;box-sizing:border-box'>"
                "<pre style='margin:0;flex:none;white-space:pre-wrap;font-size:85%;line-height:1.35'>"
                f"{body}</pre></div>")




def _close_widgets(root) -> None:
    """Close ``root``, every widget under it, and their layout and style models: each is a
    model of its own in the kernel (and in a notebook's saved widget state) until closed."""
    for widget in _walk(root):
        for model in (getattr(widget, "layout", None), getattr(widget, "style", None)):
            if isinstance(model, w.Widget):
                model.close()
        widget.close()


def _walk(widget) -> list:
    out = [widget]
    for child in getattr(widget, "children", ()):
        out.extend(_walk(child))
    return out


def _ids(ids) -> str:
    # Sorted: the controller keeps a new topic's ISR in assignment order, later ones sorted.
    return "{" + ",".join(map(str, sorted(ids))) + "}"


def _table_html(rows: list[tuple[str, Any]], red: set[str]) -> str:
    """The counters, name and value, in as many columns as the cell's width allows (a
    projector has more width than height); a ``red`` name's value in bold red when not zero."""
    cells = "".join(
        f"<div class='minikafka-counter' style='display:flex;justify-content:space-between;gap:8px'>"
        f"<span>{k}</span><span style='{'color:#cb181d;font-weight:bold' if k in red and v else ''}'>{v}</span></div>"
        for k, v in rows)
    return (f"<div class='minikafka-counters' style='display:grid;grid-template-columns:repeat(auto-fill,"
            f"minmax(210px,1fr));column-gap:24px;font-size:90%;line-height:1.5'>{cells}</div>")
