"""A grader killed mid-class takes its sandboxes' kernels with it (``lifeline``, _launch.py).

The launcher (the kernel's parent, in its cage) outlived a grader killed with SIGKILL, and its
kernel ran on, up to its CPU limit (600 s), holding its memory and its sandbox user. Now the
launcher holds the read end of a pipe only the grader writes to: when the grader dies, the pipe
reads end-of-file and the launcher kills the kernel, and exits. The test waits for that state (a
pidfd readable: the process has exited), never for a guessed time.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from minikafka import platform

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.skipif(bool(platform.sandbox_missing()), reason="the Unix sandbox's launcher cannot run here"),
    pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits on the launcher with a pidfd (Linux)"),
]

# A grader with a sandbox whose kernel runs a busy loop: prints the launcher's pid and a keeper's,
# then blocks on its stdin until the test kills it. The keeper, forked, shares the grader's open
# lock file of its sandbox user (an flock belongs to the open file), so no other sandbox on the
# machine (the suite runs graders beside this test) takes that user while the test runs: taking it
# kills what the user still runs, the dead grader's kernel included, which would end the launcher
# whatever the lifeline does. The keeper closes its copy of the lifeline's write end.
GRADER = """
    import os, sys
    from minikafka.course import sandbox
    box = sandbox.Sandbox(sandbox.Limits()).__enter__()
    box.client.execute("while True: pass")
    keeper = os.fork()
    if keeper == 0:
        os.close(box._lifeline)
        os.read(0, 1)  # until the test kills it
        os._exit(0)
    print(box.manager.provisioner.process.pid, keeper, flush=True)
    sys.stdin.read()
"""


def test_a_killed_graders_kernel_is_killed_with_it():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryFile(mode="w+") as err:
        grader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(GRADER)], cwd=ROOT, env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        launcher = keeper = None
        try:
            line = grader.stdout.readline()
            if not line:
                grader.wait()
                err.seek(0)
                raise AssertionError(f"the grader died before its sandbox started: {err.read()[-3000:]}")
            pid, keeper = map(int, line.split())
            launcher = os.pidfd_open(pid)
            assert select.select([launcher], [], [], 0)[0] == []  # running
            grader.send_signal(signal.SIGKILL)
            grader.wait()
            # The launcher ends once it has killed the kernel (its own exit waits for the kernel's).
            ended, _, _ = select.select([launcher], [], [], 120)
            assert ended, "the dead grader's launcher (and its kernel) still ran 120 s later"
        finally:
            if grader.poll() is None:
                grader.kill()
                grader.wait()
            grader.stdout.close()
            grader.stdin.close()
            if keeper is not None:
                try:
                    os.kill(keeper, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if launcher is not None:
                try:
                    signal.pidfd_send_signal(launcher, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                select.select([launcher], [], [], 60)
                os.close(launcher)
