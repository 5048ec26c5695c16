"""Scratch folders of killed processes are swept by the next folder of their kind (minikafka.scratch).

Each test starts a child Python that makes a scratch folder through a real call site (a
``Cluster``, a campaign schedule, a Raft schedule, ``launch()``, a grading sandbox), prints the
folder's path and blocks on its stdin; the test kills it (SIGKILL, as a restarted kernel or a
killed grader dies), waits for it to be gone, and makes the next folder of the same kind in the
same parent, which must have removed the dead one. What must be left is checked beside it: a
live owner's folder, a folder without a lock file (made by an older minikafka), another kind's
folder. Every wait is on a state (a line printed, a process reaped, a pidfd readable), none on
a guessed time.

The children's temporary folder is the test's own (``TMPDIR``, and ``tempfile.tempdir`` here),
and the RAM folder is redirected there too, so no test sweeps the machine's /tmp or /dev/shm; the
sandbox's root variant uses the real /run/minikafka-grade, where sandbox users are taken.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from minikafka import platform

ROOT = Path(__file__).resolve().parents[1]  # the children import this tree's minikafka, as the test does
pytestmark = pytest.mark.skipif(os.name != "posix",
                                reason="kills its children with SIGKILL (flock marks their folders)")


class Owner:
    """A child Python that runs ``script`` (which prints a folder's path, then reads its stdin to
    the end), with ``tmp`` as its temporary folder."""

    def __init__(self, script: str, tmp: Path, *args: str) -> None:
        env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        self.err = tempfile.TemporaryFile(mode="w+")  # not a pipe: a chatty child never blocks on it
        self.proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.err.seek(0)
            raise AssertionError(f"the owner died before making its folder: {self.err.read()[-3000:]}")
        self.path = Path(line.strip())
        assert self.path.is_dir()

    def line(self) -> str:
        return self.proc.stdout.readline().strip()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill it and wait until it is reaped (its lock is released before that)."""
        self.proc.send_signal(sig)
        self.proc.wait()

    def end(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.err.close()


@pytest.fixture
def owners():
    made: list[Owner] = []

    def start(script: str, tmp: Path, *args: str) -> Owner:
        made.append(Owner(script, tmp, *args))
        return made[-1]

    yield start
    for owner in made:
        owner.end()


@pytest.fixture
def tmp(tmp_path, monkeypatch) -> Path:
    """The temporary folder of the children and of this process, and the RAM folder of both."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setattr(platform, "ram_dir", lambda: str(folder))
    return folder


CLUSTER = """
    import sys
    from minikafka.cluster import Cluster
    cluster = Cluster(brokers=1)
    print(cluster.dir, flush=True)
    sys.stdin.read()
"""

# A campaign's schedule, as the judge runs it (its logs in the RAM folder, redirected to TMPDIR).
SCHEDULE = """
    import sys, tempfile
    from minikafka import platform
    from minikafka.checker.campaign import run_cluster
    platform.ram_dir = lambda: tempfile.gettempdir()
    with run_cluster(1, seed=0, config={}, record_history=False) as cluster:
        print(cluster.dir, flush=True)
        sys.stdin.read()
"""

RAFT = """
    import sys, tempfile
    from minikafka import platform
    from minikafka.checker import raft
    platform.ram_dir = lambda: tempfile.gettempdir()
    print(raft._scratch_dir(), flush=True)
    sys.stdin.read()
"""


def cluster_in_this_process():
    from minikafka.cluster import Cluster

    return Cluster(brokers=1)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_kernels_cluster_folder_is_swept_by_the_next_cluster(owners, tmp, sig):
    dead = owners(CLUSTER, tmp)
    assert (dead.path / "broker-1").is_dir() and dead.path.parent == tmp
    dead.kill(sig)
    assert dead.path.is_dir()  # what a killed kernel leaves
    cluster = cluster_in_this_process()
    try:
        assert not dead.path.exists()
        assert cluster.dir.parent == tmp and cluster.dir.name.startswith("minikafka-")
    finally:
        cluster.close()
    assert not cluster.dir.exists()
    assert list(tmp.iterdir()) == []


def test_a_live_owners_folder_is_never_swept(owners, tmp):
    live = owners(CLUSTER, tmp)
    dead = owners(CLUSTER, tmp)
    dead.kill()
    with cluster_in_this_process() as cluster:
        assert not dead.path.exists()  # swept: the sweep ran
        assert (live.path / "broker-1").is_dir()
        again = cluster_in_this_process()  # a second sweep, with two live owners now, one of them us
        assert cluster.dir.is_dir() and live.path.is_dir()
        again.close()
    live.end()  # it ends without closing its cluster (a kernel shut down): its folder stays...
    assert live.path.is_dir()
    with cluster_in_this_process():
        assert not live.path.exists()  # ...until the next Cluster


def test_an_unmarked_folder_and_another_kinds_folder_are_left(owners, tmp):
    older = Path(tempfile.mkdtemp(prefix="minikafka-", dir=tmp))  # made by an older minikafka: no lock file
    (older / "broker-1").mkdir()
    look_alike = tmp / "minikafka-notes"  # someone's folder of the same prefix
    look_alike.mkdir()
    schedule = owners(SCHEDULE, tmp)
    dead = owners(CLUSTER, tmp)
    assert schedule.path.name.startswith("minikafka-schedule-") and schedule.path.parent == tmp
    schedule.kill()
    dead.kill()
    with cluster_in_this_process():
        assert not dead.path.exists()
        assert (older / "broker-1").is_dir() and look_alike.is_dir()
        assert schedule.path.is_dir()  # a Cluster's sweep (prefix minikafka-) leaves a schedule's folder
    from minikafka.checker.campaign import _scratch_dir

    mine = _scratch_dir()  # the next schedule's sweeps it
    try:
        assert not schedule.path.exists()
        assert older.is_dir() and look_alike.is_dir()
    finally:
        shutil.rmtree(mine)


def test_a_judge_interrupted_mid_schedule_leaves_nothing_in_ram(owners, tmp):
    """The campaign's schedule folder (minikafka-schedule-*) and the Raft schedule's
    (minikafka-raft-*), both in the RAM folder: a kernel restarted mid-judge leaked them until reboot."""
    schedule = owners(SCHEDULE, tmp)
    raft_dir = owners(RAFT, tmp)
    assert raft_dir.path.name.startswith("minikafka-raft-")
    schedule.kill()
    raft_dir.kill()
    from minikafka.checker import campaign, raft

    with campaign.run_cluster(1, seed=0, config={}, record_history=False) as cluster:
        assert not schedule.path.exists() and raft_dir.path.exists()
        assert Path(cluster.dir).parent == tmp
    assert not Path(cluster.dir).exists()
    report = raft.run_raft_schedule(1, voters=3, duration_ms=200)  # makes and removes its own folder
    assert report.schedules == 1
    assert not raft_dir.path.exists()
    assert list(tmp.iterdir()) == []


def test_a_folder_its_maker_removed_itself_gives_its_lock_back(owners, tmp):
    """tester_raft removes raft._scratch_dir()'s folder with shutil.rmtree: the lock's descriptor is
    closed at the next folder made, not kept for the life of the process."""
    from minikafka.checker import raft

    dead = owners(RAFT, tmp)
    dead.kill()
    first = raft._scratch_dir()
    assert not dead.path.exists()
    from minikafka import scratch

    shutil.rmtree(first)  # as tester_raft.py does
    second = raft._scratch_dir()
    try:
        assert first not in scratch._held and second in scratch._held
    finally:
        scratch.remove(second)
    assert second not in scratch._held and not os.path.exists(second)


FORKS = """
    import os, subprocess, sys
    from minikafka.cluster import Cluster
    cluster = Cluster(brokers=1)
    print(cluster.dir, flush=True)
    if sys.argv[1] == "fork":
        pid = os.fork()
        if pid == 0:  # a child forked without exec (multiprocessing's "fork"): it shares the lock
            print(os.getpid(), flush=True)
            sys.stdin.read()
            os._exit(0)
    else:  # an exec'd child, even with close_fds=False: the lock's descriptor is not inheritable
        waits = "import os, sys; print(os.getpid(), flush=True); sys.stdin.read()"
        child = subprocess.Popen([sys.executable, "-c", waits], close_fds=False)
    sys.stdin.read()
"""


def test_a_child_forked_without_exec_keeps_the_folder_alive_until_it_exits(owners, tmp):
    owner = owners(FORKS, tmp, "fork")
    forked = int(owner.line())
    pidfd = os.pidfd_open(forked) if hasattr(os, "pidfd_open") else None
    if pidfd is None:
        pytest.skip("waits for the forked child with a pidfd (Linux)")
    try:
        owner.kill()  # the owner is gone; its forked child holds its stdin and the lock
        with cluster_in_this_process():
            assert owner.path.is_dir()
        os.kill(forked, signal.SIGKILL)
        select.select([pidfd], [], [])  # readable once it has exited (its files closed, the lock released)
    finally:
        os.close(pidfd)
    with cluster_in_this_process():
        assert not owner.path.exists()


def test_an_execd_child_does_not_hold_the_lock(owners, tmp):
    owner = owners(FORKS, tmp, "exec")
    child = int(owner.line())
    owner.kill()
    os.kill(child, 0)  # alive: it blocks on the stdin this test holds
    with cluster_in_this_process():
        assert not owner.path.exists()
        os.kill(child, 0)  # still alive while its parent's folder went


LAUNCH = """
    import sys
    from minikafka.wire.process import launch
    cluster = launch(brokers=1, controllers=1)
    print(cluster.dir, flush=True)
    sys.stdin.read()
"""


@pytest.mark.skipif(platform.real_processes_missing() is not None, reason="launch() needs real processes")
def test_a_killed_launch_leaves_no_secret_and_no_pickled_rules(owners, tmp):
    from minikafka.wire.process import launch

    dead = owners(LAUNCH, tmp)
    assert (dead.path / "cluster.secret").is_file() and dead.path.name.startswith("minikafka-wire-")
    dead.kill()  # its brokers and controllers follow it (their lifeline)
    assert (dead.path / "cluster.secret").is_file()
    with launch(brokers=1, controllers=1) as cluster:
        assert not dead.path.exists()
        assert cluster.dir.parent == tmp
    assert list(tmp.iterdir()) == []


# A Spark session's folder (the JVM's log, the workers' launcher), made as session() makes it.
SPARK = """
    import importlib, sys
    session = importlib.import_module("minikafka.spark.session")  # (minikafka.spark.session is also a function)
    print(session._own_folder(), flush=True)
    sys.stdin.read()
"""


def test_a_killed_kernels_spark_folder_is_swept_by_the_next_session(owners, tmp):
    """Its name is fixed when ``minikafka.spark.session`` is imported (a process forked from the
    maker finds it there), so it is marked once made (``scratch.adopt``); before, only an exit
    handler removed it, and a kernel killed with SIGKILL left it in the temporary folder."""
    dead = owners(SPARK, tmp)
    assert dead.path.name.startswith("minikafka-spark-") and dead.path.parent == tmp
    (dead.path / "jvm.log").write_text("a JVM's chatter\n")
    dead.kill()
    assert dead.path.is_dir()
    alive = owners(SPARK, tmp)
    assert not dead.path.exists() and alive.path.is_dir()
    alive.proc.stdin.close()  # it exits, and its exit handler removes its own
    assert alive.proc.wait(timeout=120) == 0
    assert list(tmp.iterdir()) == []


# A grader's sandbox, stopped right after its scratch folder is made (before any kernel starts):
# shared_folders() is what _start calls next, in the dict it builds for the launcher.
SANDBOX = """
    import sys
    from minikafka.course import sandbox
    if sys.argv[1] == "no-root":
        sandbox.take_user = lambda: None
    def stop_here():
        print(sys._getframe(1).f_locals["self"].scratch, flush=True)
        sys.stdin.read()
    sandbox.shared_folders = stop_here
    sandbox.Sandbox(sandbox.Limits()).__enter__()
"""


class _Stop(Exception):
    pass


@pytest.mark.skipif(bool(platform.sandbox_missing()), reason="the Unix sandbox cannot run here")
@pytest.mark.parametrize("who", ["root", "no-root"])
def test_a_killed_graders_sandbox_folder_is_swept_by_the_next_sandbox(owners, tmp, monkeypatch, who):
    from minikafka.course import sandbox

    if who == "root" and not platform.is_root():
        pytest.skip("a sandbox user of its own needs root")
    if who == "no-root":
        monkeypatch.setattr(sandbox, "take_user", lambda: None)
    dead = owners(SANDBOX, tmp, who)
    assert dead.path.name.startswith("minikafka-sandbox-")
    assert dead.path.parent == (sandbox.RUN_DIR if who == "root" else tmp)
    if who == "root":
        assert dead.path.stat().st_uid != 0  # handed to a sandbox user: swept by its root-owned lock file
    dead.kill()
    made = []

    def stop_here():
        made.append(sys._getframe(1).f_locals["self"].scratch)
        raise _Stop

    monkeypatch.setattr(sandbox, "shared_folders", stop_here)
    with pytest.raises(_Stop):
        sandbox.Sandbox(sandbox.Limits()).__enter__()  # fails after its scratch folder: close() removes it
    assert not dead.path.exists()
    assert made and made[0].parent == dead.path.parent and not made[0].exists()


def test_a_tree_deeper_than_pythons_recursion_is_removed_whole(tmp):
    """A red team filled its grading sandbox's scratch folder with 3,000 nested folders and data at
    the bottom: Python 3.11's ``shutil.rmtree`` recursed into RecursionError (which
    ``ignore_errors`` does not cover), ``Sandbox.close`` stopped there and the folder stayed on the
    grader's disk for good (its lock file already gone, so no sweep would take it)."""
    from minikafka import scratch

    folder = scratch.make("minikafka-", tmp)
    fd = os.open(folder, os.O_RDONLY)
    for _ in range(3_000):  # relative to the last folder: the path itself outgrows PATH_MAX
        os.mkdir("d", dir_fd=fd)
        deeper = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    with open(os.open("data", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "wb") as bottom:
        bottom.write(b"x" * 1_000_000)
    os.close(fd)
    scratch.remove(folder)  # never raises
    assert not folder.exists()
