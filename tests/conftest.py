"""Shared pytest setup.

`pytest` runs nbval over notebooks/ and solutions/ (see [tool.pytest.ini_options]). Every nbval item
(one notebook cell) gets the `notebooks` marker here, so `pytest -m "not notebooks"` starts no
kernel at all.

`make test` runs the suite on both cores (pytest-xdist, `-n 2`) with the scheduler below. Its
unit of work is what must stay in one process, in order: a notebook (one kernel, its cells in
turn), the tests of a module that share a fixture living longer than one test (one cluster, one
Spark session, one graded class: made once; a module with two such fixtures used by different
tests makes two units), else a single test. Units start heaviest first, by the seconds each took
in a recorded run (tests/durations.json, rewritten by `make durations`), so that the long ones do
not come last; a unit the file does not know by its name counts as its tests' recorded seconds,
else its module's, else as short.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import time
from pathlib import Path

try:
    import resource  # Unix: the CPU of the children a test started and waited for counts too
except ImportError:  # Windows: this process's own CPU only
    resource = None

import pytest
from cpu_census import Census

DURATIONS = Path(__file__).with_name("durations.json")

# The grader draws a new campaign seed for the hidden checks at every grading (so a rule cannot be
# fitted to known schedules). The suite grades with one fixed seed instead, so a test that expects
# a wrong rule to be caught sees the same schedules every run (test_grading_seed.py unsets it).
os.environ.setdefault("MINIKAFKA_GRADING_SEED", "20261129")


# The modules whose tests start real processes (broker and controller processes, the `minikafka`
# command, kernels, sandboxes, a peer broker): seconds each, so not the inner loop (`make test-fast`);
# every one still runs in `make test` and on CI's other Pythons (`make test-core`).
PROCESS_MODULES = {
    "test_benchmarks", "test_bsd_ports", "test_client_tansu", "test_client_tcp", "test_cluster_up", "test_feed",
    "test_fork_server", "test_grading_sealed", "test_launch_rules", "test_portability", "test_sandbox_disk",
    "test_sandbox_lifeline", "test_sandbox_limits", "test_scratch", "test_shared_machine", "test_tools",
    "test_widget_state", "test_widgets_wire", "test_wire", "test_wire_admin", "test_wire_consumer_protocol",
    "test_wire_controller_pause", "test_wire_kraft", "test_wire_log_dir_failure", "test_wire_security",
    "test_wire_static_membership", "test_wire_storage", "test_wire_transactions",
}


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection sees the items
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebooks)
        elif item.path.stem in PROCESS_MODULES:
            item.add_marker(pytest.mark.processes)


ROOT = Path(__file__).resolve().parents[1]
SHARED_SCOPES = {"module", "package", "session"}


@functools.cache
def _sharing_groups(path: str) -> dict[str, str] | None:
    """{test function: its group} for the tests of a module that use, directly or through other
    fixtures, one of the module's own fixtures living longer than one test; tests reaching a common
    such fixture are one group, named after its fixtures. None if every test of the module may (an
    autouse one, a test class) or the file cannot be read."""
    try:
        tree = ast.parse((ROOT / path).read_text())
    except (OSError, SyntaxError):
        return None
    if any(isinstance(node, ast.ClassDef) and node.name.startswith("Test") for node in tree.body):
        return None
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}

    def fixture_options(function) -> dict | None:
        for decorator in function.decorator_list:
            if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.fixture":
                return {k.arg: getattr(k.value, "value", None) for k in decorator.keywords}
            if ast.unparse(decorator) == "pytest.fixture":  # bare: function scope
                return {}
        return None

    fixtures = {name: options for name, f in functions.items() if (options := fixture_options(f)) is not None}
    if any(o.get("autouse") and o.get("scope") in SHARED_SCOPES for o in fixtures.values()):
        return None

    @functools.cache
    def shared(name: str) -> frozenset[str]:
        """The long-lived fixtures `name` reaches (itself included)."""
        own = {name} if fixtures.get(name, {}).get("scope") in SHARED_SCOPES else set()
        return frozenset(own.union(*(shared(arg.arg) for arg in functions[name].args.args if arg.arg in fixtures)))

    tests = {name: shared(name) for name in functions
             if name.startswith("test") and name not in fixtures and shared(name)}
    groups: list[set[str]] = []  # fixtures that go together: reached by one test, or linked through tests
    for reached in tests.values():
        linked = [g for g in groups if g & reached]
        groups = [g for g in groups if not g & reached] + [set(reached).union(*linked)]
    name_of = {fixture: "+".join(sorted(g)) for g in groups for fixture in g}
    return {test: name_of[next(iter(reached))] for test, reached in tests.items()}


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to (see the module's docstring), from its nodeid: the
    scheduler sees nodeids only. (xdist's own `--dist loadgroup` marks groups by renaming
    nodeids, which pytest 9.2's nodeids no longer show.) The tests of one long-lived fixture are
    one unit, named by the module's path, or by path and fixture where a module has several."""
    path, _, rest = nodeid.partition("::")
    if path.endswith(".ipynb"):
        return path
    groups = _sharing_groups(path)
    if groups is None:
        return path
    group = groups.get(rest.split("[", 1)[0])
    if group is None:
        return nodeid
    return path if len(set(groups.values())) == 1 else f"{path}::{group}"


# Work that takes most of the machine while it starts, one at a time: a JVM (the Spark tests, the
# capstone notebook, its check and grading) and a browser with JupyterLab. Two of a kind at once
# on two cores would starve each other; one beside anything else is fine.
HEAVY_KINDS = {"jvm": re.compile(r"spark|capstone"), "browser": re.compile(r"test_browser")}


def heavy_kind(unit: str) -> str | None:
    return next((kind for kind, pattern in HEAVY_KINDS.items() if pattern.search(unit)), None)


def pytest_addoption(parser):
    parser.addoption("--cpu-top", type=int, default=30, metavar="N",
                     help="how many units of work the CPU report at the end lists (0: every one)")
    parser.addoption("--store-durations", action="store_true",
                     help=f"write each unit of work's seconds to {DURATIONS.name} (the scheduler's order)")


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and by the children it has waited for (broker
    processes, kernels, JVMs, sandboxes: counted once they end)."""
    if resource is None:
        return time.process_time()
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_phase_cpu = pytest.StashKey[dict]()


def _count_cpu(item, when):
    start = cpu_seconds()
    yield
    item.stash.setdefault(_phase_cpu, {})[when] = cpu_seconds() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _count_cpu(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _count_cpu(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _count_cpu(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on the item (``item.rep_call``...), so that a fixture's teardown
    knows whether its test failed (tests/test_browser.py keeps a screenshot then); and the CPU
    seconds the phase used (``report.cpu_s``, which xdist carries to the controller)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
    report.cpu_s = item.stash.get(_phase_cpu, {}).pop(report.when, 0.0)


_seconds: dict[str, float] = {}  # wall seconds by unit of work
_cpu: dict[str, float] = {}  # CPU seconds by unit of work


def pytest_runtest_logreport(report):
    unit = unit_of(report.nodeid)
    _seconds[unit] = _seconds.get(unit, 0.0) + report.duration
    _cpu[unit] = _cpu.get(unit, 0.0) + getattr(report, "cpu_s", 0.0)


def machine_busy_seconds() -> float | None:
    """CPU seconds every process on the machine has used since boot, from /proc/stat (Linux; None
    elsewhere): what the workers' own count misses (kernels, daemons, JVMs still running)."""
    try:
        with open("/proc/stat") as f:
            user, nice, system, idle, iowait, *rest = (int(t) for t in f.readline().split()[1:])
    except (OSError, ValueError):
        return None
    return (user + nice + system + sum(rest[:2])) / os.sysconf("SC_CLK_TCK")  # + irq and softirq


_started, _machine_at_start = time.monotonic(), machine_busy_seconds()
_census = None  # the controller's CPU census (tests/cpu_census.py), where /proc exists


def pytest_sessionstart(session):
    global _census
    if not hasattr(session.config, "workerinput") and Census.available():
        _census = Census()
        _census.start()


def pytest_terminal_summary(terminalreporter, config):
    """Where the machine's time went: the units of work that used the most CPU (``--cpu-top``), and the CPU
    counted over the run (a suite that keeps the cores busy gains nothing from more workers)."""
    if hasattr(config, "workerinput") or not _cpu:
        return
    wall, total = time.monotonic() - _started, sum(_cpu.values())
    cores = os.cpu_count() or 1
    write = terminalreporter.write_line
    terminalreporter.section("CPU by unit of work")
    write(f"{total:.0f} CPU s counted over {wall:.0f} s on {cores} cores ({sum(_seconds.values()):.0f} s of test time over "
          f"the workers); counted: the workers' own and their waited-for children's, so not what escapes them (a "
          f"sandbox's kernel, a daemon): a lower bound of how busy the cores were")
    machine = machine_busy_seconds()
    if machine is not None and _machine_at_start is not None:
        busy = machine - _machine_at_start
        write(f"the whole machine (/proc/stat, every process, this run's or not): {busy:.0f} CPU s busy of the "
              f"{wall * cores:.0f} its {cores} cores had ({100 * busy / (wall * cores):.0f}%)")
    if _census is not None:
        kinds = _census.stop()
        write(f"... by kind of process (tests/cpu_census.py, sampled twice a second): {sum(kinds.values()):.0f} CPU s seen")
        for kind, seconds in kinds.items():
            write(f"{seconds:7.1f}  {kind}")
    write(f"{'CPU s':>7} {'wall s':>7}  unit")
    top = config.getoption("cpu_top") or len(_cpu)
    for unit, seconds in sorted(_cpu.items(), key=lambda kv: -kv[1])[:top]:
        write(f"{seconds:7.1f} {_seconds.get(unit, 0.0):7.1f}  {unit}")


def pytest_sessionfinish(session):
    if session.config.getoption("store_durations") and not hasattr(session.config, "workerinput"):
        table = {unit: round(s, 1) for unit, s in sorted(_seconds.items()) if s >= 0.5}
        DURATIONS.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist is in the dev extra; without it the suite runs in one process
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class UnitScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with our units (``unit_of``): the heaviest started first,
        never two of one heavy kind at once, and a worker given its next unit only when it is
        down to its last test (xdist's default queues ahead, which can leave a long unit
        waiting behind another on a busy worker)."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            self.seconds = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
            self.order: list[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def estimate(self, unit: str) -> float:
            """The unit's recorded seconds; for a unit the file does not know by that name (its
            tests grouped otherwise since), its tests' recorded seconds, else its module's."""
            if unit in self.seconds:
                return self.seconds[unit]
            tests = self.workqueue.get(unit, {})
            recorded = sum(self.seconds.get(nodeid, 0.0) for nodeid in tests)
            if recorded or unit in tests:  # a single test is not its module's shared work
                return recorded
            return self.seconds.get(unit.partition("::")[0], 0.0)

        def _assign_work_unit(self, node) -> None:
            """The heaviest unit left whose kind (``heavy_kind``) no other worker is running;
            the heaviest of all if every unit left is of a running kind."""
            if self.order is None:
                self.order = sorted(self.workqueue, key=lambda unit: -self.estimate(unit))
            self.order = [unit for unit in self.order if unit in self.workqueue]
            running = {heavy_kind(unit) for other, work in self.assigned_work.items() if other is not node
                       for unit, done in work.items() if not all(done.values())} - {None}
            pick = next((unit for unit in self.order if heavy_kind(unit) not in running), self.order[0])
            self.workqueue.move_to_end(pick, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    def pytest_xdist_make_scheduler(config, log):
        return UnitScheduling(config, log)
