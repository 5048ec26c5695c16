"""The sandbox's limits: what the fallback's process limit counts, and a limit that is hit is named.

RLIMIT_NPROC counts every process *and thread* of the kernel's real user. Without root the kernel
runs as the student's own user, whose desktop (a browser: hundreds of threads) counts too; a flat
limit killed the kernel before it started, with "Kernel died before replying to kernel_info" and
no hint. The tests that need a user of their own run a helper as a fresh uid (root only): root
itself is never held to RLIMIT_NPROC.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from minikafka import platform
from minikafka.course import sandbox as sandbox_module
from minikafka.course.runner import run_cells
from minikafka.course.sandbox import Limits, Sandbox, SandboxError, process_limit

ROOT_ONLY = pytest.mark.skipif(not platform.is_root(), reason="a user of its own needs root")
PROC = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads are counted in /proc")
# No account: setuid() to one needs none. One uid per test, as the suite runs tests in parallel:
# a count of a user's threads sees every thread of that user, another test's helpers included.
UID = 61_733
UID_CROWDED = 61_734


# A helper that becomes the uid given and runs THREADS idle threads until its stdin closes; with
# LIMIT it then sets RLIMIT_NPROC to LIMIT and reports whether one more thread and one fork can start.
HELPER = textwrap.dedent("""
    import os, resource, sys, threading
    threads, limit, uid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
    gate = threading.Event()
    for _ in range(threads):
        threading.Thread(target=gate.wait, daemon=True).start()
    if limit:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        try:
            threading.Thread(target=gate.wait, daemon=True).start()
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            print("started", flush=True)
        except (RuntimeError, OSError) as exc:
            print(f"{type(exc).__name__}: {exc}", flush=True)
    else:
        print("ready", flush=True)
    sys.stdin.read()
""")


class Helper:
    def __init__(self, threads: int, limit: int = 0, uid: int = UID):
        self.proc = subprocess.Popen([sys.executable, "-c", HELPER, str(threads), str(limit), str(uid)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.said = self.proc.stdout.readline().strip()  # waits for the state, never a guessed sleep

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@ROOT_ONLY
@PROC
def test_the_count_is_every_thread_of_the_user_not_its_processes():
    assert platform.threads_of(UID) == 0
    helper = Helper(40)
    try:
        assert helper.said == "ready"
        assert platform.threads_of(UID) == 41  # one process: its main thread and 40 more
    finally:
        helper.close()
    assert platform.threads_of(UID) == 0


@ROOT_ONLY
@PROC
def test_a_user_with_hundreds_of_threads_still_gets_the_allowance():
    """The user runs 300 threads in one process (a browser, say). The limit before this fix, 256
    plus 4 per process of the user (260), leaves no room: the kernel could not start a thread;
    the sandbox's limit leaves the allowance. The OS enforces both (no user namespace here)."""
    desktop = Helper(300, uid=UID_CROWDED)
    try:
        limit, running = process_limit(256, UID_CROWDED)
        assert running == 301 and limit == 301 + 75 + 256
        tight = Helper(0, limit=256 + 4 * 1, uid=UID_CROWDED)
        roomy = Helper(0, limit=limit, uid=UID_CROWDED)
        try:
            assert tight.said == "RuntimeError: can't start new thread"
            assert roomy.said == "started"
        finally:
            tight.close()
            roomy.close()
    finally:
        desktop.close()


def test_no_count_no_limit():
    assert process_limit(256, None) == (None, None)
    assert process_limit(None, os.getuid()) == (None, None)


def test_a_refused_fork_or_thread_names_the_limit():
    box = Sandbox(Limits())
    box.process_limit, box.processes_before = 900, 620
    nproc = ("the sandbox's process limit was reached: 900 processes and threads of your user "
             "(RLIMIT_NPROC; it ran 620 when this kernel started)")
    assert box.limit_hit("BlockingIOError: [Errno 11] Resource temporarily unavailable") == nproc
    assert box.limit_hit("RuntimeError: can't start new thread") == (
        f"the sandbox's process or memory limit was reached: {nproc.split(': ', 1)[1]}; 4 GiB per process (RLIMIT_AS)")
    assert box.limit_hit("MemoryError: ") == "the sandbox's memory limit was reached: 4 GiB per process (RLIMIT_AS)"
    assert box.limit_hit("ZeroDivisionError: division by zero") is None


@pytest.mark.notebooks
def test_a_kernel_that_dies_at_start_says_which_limit():
    with pytest.raises(SandboxError) as raised:
        with Sandbox(Limits(memory_bytes=16 * 1024 ** 2), startup_timeout=30):
            pass
    said = str(raised.value)
    assert said.startswith("the sandboxed kernel did not start (Kernel died before replying to kernel_info).")
    assert "the sandbox's memory limit was reached: 16 MiB per process (RLIMIT_AS)" in said


@pytest.mark.notebooks
@PROC
def test_without_a_user_of_its_own_the_kernel_gets_the_counted_limit(monkeypatch):
    """The non-root tier (its own uid's threads counted), run here as root with the launcher."""
    monkeypatch.setattr(sandbox_module, "is_root", lambda: False)
    with Sandbox(Limits()) as box:
        [run] = run_cells(box, ["import resource\nprint(resource.getrlimit(resource.RLIMIT_NPROC)[0])"],
                          cell_timeout=30, budget=60)
        assert box.user is None and box.processes_before > 0
        assert box.process_limit == box.processes_before + box.processes_before // 4 + 256
    assert run.status == "ok", run.reason
    assert "".join(o["text"] for o in run.outputs).strip() == str(box.process_limit)


# A parent that runs a child burning 0.5 s of CPU (its own CPU clock, so on any load), waits for
# it, says "done" and then idles until its stdin closes.
BURNER = textwrap.dedent("""
    import subprocess, sys
    subprocess.run([sys.executable, "-c", "import time\\nt = time.process_time()\\n"
                    "while time.process_time() - t < 0.5:\\n    pass"], check=True)
    print("done", flush=True)
    sys.stdin.read()
""")


@pytest.mark.parametrize("reader", ["proc", "psutil"])
def test_the_cpu_of_a_tree_counts_the_children_it_waited_for(reader, monkeypatch):
    if reader == "psutil":
        pytest.importorskip("psutil")
        monkeypatch.setattr(platform, "_CLOCK_TICKS", 0)  # as where there is no /proc
    elif not platform._CLOCK_TICKS or not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc here")
    proc = subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "done"
        assert platform.cpu_seconds_of_tree(proc.pid) >= 0.5
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert platform.cpu_seconds_of_tree(proc.pid) is None  # gone (reaped): nothing to read
