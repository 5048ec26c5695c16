"""The dashboards as a class sees them: JupyterLab in Debian's Chromium, driven by Playwright.

Lectures 03, 04 and 06 are copied to a temporary folder, opened in a JupyterLab started from
this Python (a free port, a token), run with Run All, and their live dashboards clicked: a
broker killed and restarted (04), a consumer added, killed and restarted (06); 03's cluster
pictures are measured on a projector's screen (each fits its cell's width). Lecture 04 is
also opened as it was saved, outputs and all, without running it: what a student sees first,
where the dashboard's place holds only its saved sentence. Every
assertion is on what the page shows -- the text in the diagram's SVG, the buttons, the
counters -- and every wait is for a state to appear (Playwright's ``expect``), never a
sleep. The window is a projector's: a 1280x720 viewport at device scale factor 1.5, with
JupyterLab's left sidebar (the file browser) collapsed, as a lecturer shows a lecture; there
each dashboard must show its controls, counters and diagram on one screen
(``assert_on_one_screen``), and a click on a kill/restart button must move no button
(``assert_buttons_stay``).

The browser is Debian's ``/usr/bin/chromium`` (``.ci/ensure-chromium``, run by ``make
test``); Playwright never downloads one (the Makefile sets
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 and nothing here runs ``playwright install``).
Screenshots of each dashboard are written to ``tests/artifacts/`` (ignored by git), and a
screenshot of the page to the same place whenever a test fails.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.notebooks]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 720}
PROJECTOR = {"width": 853, "height": 480}  # 1280x720 device pixels at 150% zoom
SCALE = 1.5
# Measured flags for Debian's Chromium as root in a container (/work/shared/FIELD-NOTES.md).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SAVED_04 = "04-as-saved.ipynb"
SLOW = 60_000  # ms: Run All of a lecture, or the controller noticing a death in wall time
# JupyterLab settings for a test: no news fetched (a toast over the page), every cell in the
# DOM (windowing would detach the cells out of view, and their outputs with them).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of the lectures; yields (base url, token)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run `sh .ci/ensure-chromium` (make test does)")
    root = tmp_path_factory.mktemp("lab")
    for name in ("03-brokers-and-cluster.ipynb", "04-replication-and-isr.ipynb", "06-consumer-groups.ipynb"):
        # Without their stored outputs: what the page shows is then what this run made.
        nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, root / name)
    # Lecture 04 as committed, with the outputs of its last run: opened, never run.
    shutil.copyfile(ROOT / "notebooks" / "04-replication-and-isr.ipynb", root / SAVED_04)
    settings = root / ".settings"
    for path, value in LAB_SETTINGS.items():
        (settings / path).parent.mkdir(parents=True, exist_ok=True)
        (settings / path).write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(root / ".runtime"), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
               f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
               f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={root / '.workspaces'}",
               "--LabApp.expose_app_in_browser=True", "--ServerApp.disable_check_xsrf=False",
               # A signature store of its own: no notebook is trusted from an earlier session.
               "--NotebookNotary.db_file=:memory:"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = open(root / "jupyterlab.log", "w")
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:  # the server answers its status API: up
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start: {(root / 'jupyterlab.log').read_text()[-2000:]}")
            time.sleep(0.2)  # polling the server's state, not waiting out a guess
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=SLOW)

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _shut_down_kernels(lab) -> None:
    """Every kernel of the server, shut down (a test's lecture must not run on into the next)."""
    base, token = lab
    with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as r:
        kernels = json.load(r)
    for k in kernels:
        request = urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()


@pytest.fixture
def page(browser, lab, request):
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=SCALE)
    page = context.new_page()
    page.set_default_timeout(SLOW)
    yield page
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / f"{request.node.name}-failure.png"
        try:
            page.screenshot(path=str(shot))
            print(f"screenshot of the failure: {shot}")
        except Exception as e:  # the page may be gone
            print(f"no screenshot of the failure: {e}")
    context.close()
    _shut_down_kernels(lab)


# --- driving JupyterLab --------------------------------------------------------------------------------


def run_all(page, lab, notebook: str, last_output: str):
    """Open ``notebook``, wait for its kernel, Run All, and wait for ``last_output`` (text
    of the check cell after the live dashboard) to appear."""
    from playwright.sync_api import expect

    base, token = lab
    # ?reset: a layout of its own (no tab left open by an earlier test to take the commands)
    page.goto(f"{base}/lab/tree/{notebook}?reset&token={token}")
    expect(page.locator(".jp-NotebookPanel")).to_have_count(1)
    status = page.locator(".jp-StatusBar-Widget", has_text="Python 3 (ipykernel) |").first
    expect(status).to_contain_text("Idle")  # the kernel is up
    collapse_file_browser(page)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    expect(page.get_by_text(last_output, exact=False).first).to_be_visible(timeout=4 * SLOW)
    expect(status).to_contain_text("Idle")


def collapse_file_browser(page) -> None:
    """JupyterLab's left sidebar collapsed (View > Left Sidebar, Ctrl+B), as on a projector."""
    from playwright.sync_api import expect

    page.evaluate("window.jupyterapp.shell.collapseLeft()")
    expect(page.locator(".jp-FileBrowser")).to_be_hidden()


def counter(page, name: str):
    """The value cell of counter ``name`` in the dashboard's counters table."""
    return page.locator(".minikafka-counter", has=page.locator("span", has_text=re.compile(f"^{name}$"))) \
        .locator("span").nth(1)


def diagram(page):
    """The dashboard's diagram: the graphviz SVG inline in the widget (the notebook's own
    pictures are <img> elements)."""
    return page.locator(".widget-html-content svg:has(g.graph)").first


def button(page, text: str):
    return page.locator("button.widget-button, button.widget-toggle-button", has_text=re.compile(f"^{text}$"))


def in_kernel(page, code: str) -> str:
    """What ``code`` prints when the open notebook's kernel runs it (beside the cells, as a
    console attached to the kernel would): how a test asks the kernel what the page cannot show."""
    return page.evaluate("""async code => {
        const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
        const future = kernel.requestExecute({code, store_history: false});
        let out = '';
        future.onIOPub = msg => {
            if (msg.header.msg_type === 'stream') out += msg.content.text;
            if (msg.header.msg_type === 'error') out += msg.content.ename + ': ' + msg.content.evalue;
        };
        await future.done;
        return out;
    }""", code)


def kernel_until(page, code: str, expected: str) -> None:
    """Ask the kernel ``code`` until it prints ``expected`` (a state the kernel reaches when the
    page's message arrives), for at most SLOW ms."""
    deadline = time.monotonic() + SLOW / 1000
    while (said := in_kernel(page, code).strip()) != expected:
        assert time.monotonic() < deadline, f"{code!r} printed {said!r}, not {expected!r}"
        page.wait_for_timeout(100)


def clear_output_of(page, cell_id: str) -> None:
    """JupyterLab's "Clear Cell Output" on the cell with id ``cell_id``: its views are removed."""
    page.evaluate("""async id => {
        const notebook = window.jupyterapp.shell.currentWidget.content;
        notebook.activeCellIndex = notebook.widgets.findIndex(cell => cell.model.id === id);
        await window.jupyterapp.commands.execute('notebook:clear-cell-output');
    }""", cell_id)


def assert_fits(page, dashboard):
    """The dashboard fits its cell and the window: no horizontal overflow, in the dashboard
    or in the notebook's scroller; the dashboard inside the window's width, and every control
    (button, slider, dropdown, checkbox) inside the dashboard, so none needs a sideways
    scroll; the counters above the diagram (not squeezed beside it), the diagram no wider
    than the output area."""
    dashboard.evaluate("el => el.scrollIntoView({block: 'start'})")
    box = dashboard.evaluate("""el => {
        const area = el.closest('.jp-OutputArea-output') || el.parentElement;
        const scroller = el.closest('.jp-WindowedPanel-outer');
        const counters = el.querySelector('.minikafka-counters');
        const svg = el.querySelector('svg');
        const r = el.getBoundingClientRect();
        const controls = [...el.querySelectorAll(
            'button, .widget-slider, .widget-dropdown, .widget-checkbox, .widget-toggle-buttons')];
        const outside = controls.filter(c => {
            const b = c.getBoundingClientRect();
            return b.left < r.left - 1 || b.right > r.right + 1;
        }).map(c => c.textContent.trim() || c.className);
        return {scroll: el.scrollWidth, client: el.clientWidth, area: area.getBoundingClientRect().right,
                counters: counters.getBoundingClientRect().bottom, svgTop: svg.getBoundingClientRect().top,
                svgRight: svg.getBoundingClientRect().right, left: r.left, right: r.right,
                window: window.innerWidth, controls: controls.length, outside: outside,
                pageScroll: scroller ? scroller.scrollWidth : null,
                pageClient: scroller ? scroller.clientWidth : null};
    }""")
    assert box["scroll"] <= box["client"] + 1, box
    assert box["pageScroll"] is not None and box["pageScroll"] <= box["pageClient"] + 1, box
    assert box["left"] >= 0 and box["right"] <= box["window"] + 1, box
    assert box["controls"] >= 5 and box["outside"] == [], box
    assert box["counters"] <= box["svgTop"] + 1, box
    assert box["svgRight"] <= box["area"] + 1, box


def assert_on_one_screen(page, dashboard):
    """Item 4 of issue 36, at 1280x720 with the file browser closed: with the dashboard's top
    scrolled to the top of the notebook panel, every control (buttons, sliders, toggles,
    dropdowns, the checkbox), the counters, the whole diagram and the lag chart (if the
    dashboard has one) are inside the visible part of the panel; the diagram is drawn at 60%
    of its natural size or more (graphviz's width in pt; a projector must read it). Returns
    what it measured."""
    assert page.viewport_size == VIEWPORT
    dashboard.evaluate("el => el.scrollIntoView({block: 'start'})")
    box = dashboard.evaluate("""el => {
        const panel = el.closest('.jp-WindowedPanel-outer').getBoundingClientRect();
        const name = e => (e.textContent.trim() || e.className).slice(0, 40);
        const parts = [...el.querySelectorAll(
            'button, .widget-slider, .widget-dropdown, .widget-checkbox, .widget-toggle-buttons, ' +
            '.minikafka-counters, .widget-html-content svg')];
        const outside = parts.filter(p => {
            const b = p.getBoundingClientRect();
            return b.top < panel.top - 1 || b.bottom > panel.bottom + 1 || b.left < panel.left - 1 ||
                   b.right > panel.right + 1;
        }).map(p => [name(p), Math.round(p.getBoundingClientRect().top),
                     Math.round(p.getBoundingClientRect().bottom)]);
        const svg = el.querySelector('svg:has(g.graph)'), s = svg.getBoundingClientRect();
        const table = el.querySelector('table').getBoundingClientRect();
        return {panel: [panel.top, panel.bottom], parts: parts.length, outside,
                buttons: el.querySelectorAll('button').length,
                diagram: [s.width, s.height], naturalPt: parseFloat(svg.getAttribute('width')),
                tableBottom: table.bottom,
                charts: el.querySelectorAll('.widget-html-content svg:not(:has(g.graph))').length};
    }""")
    assert box["outside"] == [], box
    assert box["buttons"] >= 8 and box["parts"] >= box["buttons"] + 5, box
    scale = box["diagram"][0] / (box["naturalPt"] * 4 / 3)
    assert scale >= 0.6 - 0.005, (scale, box)
    box["scale"] = round(scale, 3)
    return box


def button_boxes(dashboard) -> list:
    """Every button of the dashboard and its box, relative to the dashboard's top left (a
    scroll of the page moves nothing)."""
    return dashboard.evaluate("""el => {
        const d = el.getBoundingClientRect();
        return [...el.querySelectorAll('button')].map(b => {
            const r = b.getBoundingClientRect();
            return [r.left - d.left, r.top - d.top, r.width, r.height].map(v => Math.round(v * 10) / 10);
        });
    }""")


def assert_buttons_stay(before: list, after: list, what: str) -> None:
    """Nothing moved under the pointer: the same buttons, each where it was, as wide as it was."""
    moved = [(i, a, b) for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert len(before) == len(after) and moved == [], f"{what}: buttons moved (index, before, after): {moved}"


def assert_newest_event_in_sight(page):
    events = page.locator(".minikafka-events").first
    events.scroll_into_view_if_needed()  # off screen, a browser may skip its layout (content-visibility)
    box = events.evaluate("""el => {
        const r = el.getBoundingClientRect(), text = el.firstElementChild.getBoundingClientRect();
        return {overflows: el.scrollHeight > el.clientHeight, bottom: text.bottom, boxBottom: r.bottom};
    }""")
    assert box["overflows"], box  # more lines than the box shows...
    assert abs(box["bottom"] - box["boxBottom"]) <= 8, box  # ...and it shows the newest


def screenshots(page, dashboard, lecture: str):
    """The page as the class sees it, the dashboard scrolled to the top of the window: at
    the test's 1280x720 (CSS pixels) at scale 1.5, where it must fit the screen
    (``assert_on_one_screen``), then as a 1280x720 projector at 150% zoom shows it (853x480
    CSS pixels at scale 1.5), where it must still fit its cell's width."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for size in (VIEWPORT, PROJECTOR):
        page.set_viewport_size(size)
        assert_fits(page, dashboard)
        if size == VIEWPORT:
            print(f"{lecture} at 1280x720:", assert_on_one_screen(page, dashboard))
        page.screenshot(path=str(ARTIFACTS / f"{lecture}-dashboard-{size['width']}x{size['height']}@{SCALE}.png"))
    # The whole dashboard, top to bottom: a window tall enough to hold it (JupyterLab
    # scrolls inside its panel, so nothing outside the window would be painted).
    page.set_viewport_size({"width": VIEWPORT["width"], "height": 2600})
    dashboard.evaluate("el => el.scrollIntoView({block: 'start'})")
    dashboard.screenshot(path=str(ARTIFACTS / f"{lecture}-dashboard-whole@{SCALE}.png"))
    page.set_viewport_size(VIEWPORT)


# --- the lectures --------------------------------------------------------------------------------------


def test_lecture_04_kill_and_restart_a_broker_on_the_live_dashboard(page, lab):
    from playwright.sync_api import expect

    run_all(page, lab, "04-replication-and-isr.ipynb", "Dashboard(topic='trucks_gps', running=False, ticks=0) leaders")
    dashboard = page.locator(".widget-vbox:has(.minikafka-events)").first
    expect(dashboard).to_be_visible()  # Run All left it alive: nothing after it closed it
    expect(counter(page, "under-replicated partitions")).to_have_text("0")
    expect(diagram(page)).to_contain_text("broker 1")
    expect(diagram(page)).not_to_contain_text(re.compile(r"broker \d\s+dead"))  # the legend says "dead broker"

    before = button_boxes(dashboard)
    button(page, "kill broker 1").click()
    expect(button(page, "restart broker 1")).to_be_visible()
    expect(diagram(page)).to_contain_text(re.compile(r"broker 1\s+dead"))
    assert_buttons_stay(before, button_boxes(dashboard), "kill broker 1")

    button(page, "run").click()
    # The controller notices after broker.session.timeout.ms (9 s of simulated time, as
    # many of wall time at speed 1): every partition is then under-replicated.
    expect(counter(page, "under-replicated partitions")).to_have_text("3", timeout=SLOW)
    expect(page.locator(".minikafka-events")).to_contain_text("controller: broker 1 is dead")
    expect(counter(page, "lost \\(so far\\)")).to_have_text("0")  # acks=all, a clean election
    assert "cb181d" not in counter(page, "lost \\(so far\\)").get_attribute("style")

    button(page, "restart broker 1").click()
    expect(button(page, "kill broker 1")).to_be_visible()
    expect(diagram(page)).not_to_contain_text(re.compile(r"broker 1\s+dead"))
    assert_buttons_stay(before, button_boxes(dashboard), "kill and restart broker 1")
    expect(counter(page, "under-replicated partitions")).to_have_text("0", timeout=SLOW)  # back in the ISR
    button(page, "pause").click()
    expect(button(page, "run")).to_be_visible()
    expect(counter(page, "lost \\(so far\\)")).to_have_text("0")
    assert int(counter(page, "acknowledged").inner_text()) > 0

    for _ in range(4):  # more lines than the event log's box holds
        button(page, "kill broker 3").click()
        button(page, "restart broker 3").click()
    # Each click is handled by the kernel a moment later: wait for the fourth restart's line.
    expect(page.locator(".minikafka-events")).to_contain_text(re.compile(r"(you restarted broker 3[\s\S]*){4}"))
    assert_newest_event_in_sight(page)
    screenshots(page, dashboard, "04")

    # A dashboard nobody sees stops: run it, then clear its output.
    button(page, "run").click()
    kernel_until(page, "print(live_dash.running)", "True")
    clear_output_of(page, "dashboard-live")
    expect(dashboard).to_have_count(0)
    kernel_until(page, "print(live_dash.running)", "False")
    assert "paused: no page shows this dashboard any more" in in_kernel(page, "print(live_dash.events[-1])")


def test_lecture_06_add_kill_and_restart_consumers_on_the_live_dashboard(page, lab):
    from playwright.sync_api import expect

    run_all(page, lab, "06-consumer-groups.ipynb", "consumers ['consumer-2', 'consumer-3', 'consumer-4']")
    dashboard = page.locator(".widget-vbox:has(.minikafka-events)").first
    expect(dashboard).to_be_visible()
    kills = page.locator("button.widget-button", has_text=re.compile(r"^kill consumer-"))
    expect(kills).to_have_count(3)
    expect(page.get_by_text("the lag chart appears after the first step")).to_be_visible()  # no broken image

    page.locator("button.widget-button", has_text=re.compile(r"^add consumer$")).click()
    expect(kills).to_have_count(4)
    expect(page.locator(".minikafka-events")).to_contain_text("to group billing: it joins at its first poll")

    button(page, "run").click()
    expect(diagram(page)).to_contain_text("consumer-2")
    # The group forms (3 s of initial rebalance delay): consumers read, the chart is drawn.
    expect(page.locator(".minikafka-events")).to_contain_text("group billing generation", timeout=SLOW)
    expect(page.locator(".widget-html-content svg:not(:has(g.graph))").first).to_be_visible()  # the lag chart
    before = button_boxes(dashboard)
    button(page, "kill consumer-2").click()
    expect(button(page, "restart consumer-2")).to_be_visible()
    expect(diagram(page)).to_contain_text(re.compile(r"consumer-2\s+dead"))
    assert_buttons_stay(before, button_boxes(dashboard), "kill consumer-2")
    expect(diagram(page)).to_contain_text("held")  # its partitions, read by nobody...
    # ...until the coordinator drops it, after its session timeout (10 s).
    expect(diagram(page)).not_to_contain_text("held", timeout=SLOW)
    assert_buttons_stay(before, button_boxes(dashboard), "kill consumer-2, then the rebalance")
    assert int(counter(page, "consumed").inner_text()) > 0

    button(page, "restart consumer-2").click()
    expect(button(page, "kill consumer-2")).to_be_visible()
    expect(diagram(page)).not_to_contain_text(re.compile(r"consumer-2\s+dead"))
    assert_buttons_stay(before, button_boxes(dashboard), "kill and restart consumer-2")
    button(page, "pause").click()
    expect(button(page, "run")).to_be_visible()
    screenshots(page, dashboard, "06")


def test_lecture_03_diagrams_fit_a_projector(page, lab):
    """On a 1280x720 projector at 150% zoom (853x480 CSS px), every picture lecture 03 draws
    (the cluster, healthy and with a broker dead) is no wider than its cell's output area,
    with the file browser open (the narrowest cell) and closed (what a class is shown), and
    no taller than the window: graphviz's SVG, shown as an <img>, shrinks to the cell
    (``minikafka.viz.Diagram``) instead of running off to the right."""
    from playwright.sync_api import expect

    run_all(page, lab, "03-brokers-and-cluster.ipynb", "broker 2 back:")
    page.set_viewport_size(PROJECTOR)
    pictures = page.locator(".jp-OutputArea-output img[src^='data:image/svg+xml']")
    expect(pictures).to_have_count(2)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for layout in ("file browser open", "file browser closed"):
        if layout == "file browser open":
            page.evaluate("window.jupyterapp.shell.expandLeft()")
            expect(page.locator(".jp-FileBrowser")).to_be_visible()
        else:
            collapse_file_browser(page)
        for i in range(pictures.count()):
            picture = pictures.nth(i)
            picture.evaluate("el => el.scrollIntoView({block: 'start'})")
            expect(picture).to_be_visible()
            box = picture.evaluate("""el => {
                const area = el.closest('.jp-OutputArea-output'), r = el.getBoundingClientRect();
                const a = area.getBoundingClientRect();
                return {left: r.left, right: r.right, width: r.width, height: r.height, natural: el.naturalWidth,
                        areaLeft: a.left, areaRight: a.right, areaScroll: area.scrollWidth,
                        areaClient: area.clientWidth};
            }""")
            sizes.setdefault(layout, []).append(f"{box['width']:.0f}x{box['height']:.0f}")
            assert box["width"] > 0 and box["height"] > 0, box  # drawn, not a broken image
            assert box["right"] <= box["areaRight"] + 1 and box["left"] >= box["areaLeft"] - 1, box
            assert box["areaScroll"] <= box["areaClient"] + 1, box  # no horizontal scrollbar in the cell
            assert box["height"] <= PROJECTOR["height"], box  # one screen, caption included
            if layout == "file browser closed":
                page.screenshot(path=str(ARTIFACTS / f"03-diagram-{i + 1}-{PROJECTOR['width']}x{PROJECTOR['height']}@{SCALE}.png"))
    print("03's pictures at 853x480 (CSS px):", sizes)


def test_a_saved_lecture_shows_what_to_do_where_its_dashboard_will_be(page, lab):
    """Lecture 04 opened as saved, not run: the notebook is not trusted (a widget view is not
    a safe output), so JupyterLab shows the dashboard cell's text/plain, as GitHub does. It
    must be a sentence that says what the dashboard is and how to see it, not a repr."""
    from playwright.sync_api import expect

    base, token = lab
    page.goto(f"{base}/lab/tree/{SAVED_04}?reset&token={token}")
    expect(page.locator(".jp-NotebookPanel")).to_have_count(1)
    expect(page.locator(".jp-StatusBar-Widget", has_text="Python 3 (ipykernel) |").first).to_contain_text("Idle")
    cell = page.locator(".jp-CodeCell", has=page.locator(".jp-InputArea", has_text="live_dash = Dashboard(live"))
    expect(cell).to_have_count(1)
    output = cell.locator(".jp-OutputArea-output")
    expect(output).to_have_text(
        "Live dashboard of 3 simulated brokers (topic trucks_gps). It shows only while the kernel that made "
        "it runs: run the cells above, then this one, to see it and use its buttons.")
    expect(output).not_to_contain_text("Dashboard(")
    expect(cell.locator(".widget-vbox")).to_have_count(0)  # no widget drawn from the saved state
    expect(page.locator(".jp-Cell .jp-OutputArea-output", has_text="Error displaying widget")).to_have_count(0)
    # The note below the cell quotes the sentence the reader has just seen.
    expect(page.locator(".jp-MarkdownCell", has_text="Live dashboard of … It shows only while")).to_have_count(1)
