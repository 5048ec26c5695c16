"""What a submission writes in its grading sandbox's scratch folder is capped in all (Limits.disk_bytes).

The scratch folder (HOME, TMPDIR, the working folder, kernel.json, the ZeroMQ sockets) was on the
grader's disk, uncapped in total: RLIMIT_FSIZE stopped each file at 512 MiB, not their number, so
one submission writing many large files filled the disk, and the submission graded beside it and
the grader itself failed with ENOSPC. As root the kernel now writes in ``scratch/home``, a tmpfs of
``disk_bytes`` the grader mounts (sandbox.py's header); the scratch folder around it (its owner
lock, ``minikafka.scratch``) is read-only in the kernel's namespace. These tests check: past the
cap the student's code gets ENOSPC and the host holds no more than the cap; a closed sandbox
leaves no mount and no folder; a killed grader's mounted folder is swept by the next sandbox; the
limit can be set from a notebook's metadata. Without root there is no mount and no cap (by design:
the same as before), so those tests are skipped there. Every wait is on a state (a line printed, a
process reaped, a pidfd readable), none on a guessed time.
"""

from __future__ import annotations

import json
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
from minikafka import scratch
from minikafka.course import sandbox
from minikafka.course.runner import run_cells
from minikafka.course.sandbox import Limits, Sandbox

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 ** 2
CAP = 64 * MiB
NO_SANDBOX = pytest.mark.skipif(bool(platform.sandbox_missing()),
                                reason=f"the Unix sandbox cannot run here ({platform.sandbox_missing()})")
ROOT_ONLY = pytest.mark.skipif(not platform.is_root(),
                               reason="the scratch folder's cap is a tmpfs the grader mounts: root only "
                                      "(without root there is no mount and no cap, by design)")
LINUX = pytest.mark.skipif(not os.path.exists("/proc/self/mountinfo"), reason="reads /proc/self/mountinfo (Linux)")


def mounts_under(path: Path) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of this process's mounts at or under `path`."""
    top = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            fstype = fields[fields.index("-") + 1]
            if point == top or point.startswith(top + "/"):
                found.append((point, fstype))
    return found


def bytes_under(path: Path) -> int:
    """What the files under `path` occupy (st_blocks), on whatever filesystem holds them."""
    total = 0
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def text(run) -> str:
    return "".join(o.get("text", "") for o in run.outputs)


# Writes 8 MiB files in its working folder (its HOME) until a write fails or 4 times the cap is
# written; then tries to write in the folder around it. Prints what it got, as JSON.
FILL = textwrap.dedent(f"""
    import errno, json, os
    written, failed = 0, None
    try:
        for i in range({4 * CAP // (8 * MiB)}):
            with open(f"fill{{i}}", "wb") as f:
                for _ in range(8):
                    f.write(b"x" * {MiB})
                    written += {MiB}
    except OSError as exc:
        failed = [exc.errno, exc.strerror]
    beside = os.path.join(os.path.dirname(os.getcwd()), "beside")
    try:
        with open(beside, "wb") as f:
            f.write(b"x" * {MiB})
        outside = "written"
    except OSError as exc:
        outside = exc.strerror
    print(json.dumps({{"written": written, "failed": failed, "outside": outside, "cwd": os.getcwd(),
                      "home": os.environ["HOME"] == os.getcwd() == os.environ["TMPDIR"]}}))
""")


@NO_SANDBOX
@ROOT_ONLY
@LINUX
@pytest.mark.notebooks
def test_writing_past_the_cap_gets_enospc_and_the_host_holds_no_more():
    with Sandbox(Limits(disk_bytes=CAP)) as box:
        fill, full = run_cells(box, [FILL, "open('one-more', 'wb').write(b'x' * (1 << 20))"],
                               cell_timeout=120, budget=240)
        assert fill.status == "ok", fill.reason
        said = json.loads(text(fill))
        held = bytes_under(box.scratch)
        home = os.statvfs(said["cwd"])
        limits = box.limits_text()
    assert said["failed"] == [28, "No space left on device"], said  # ENOSPC, in the student's code
    assert said["home"]  # HOME, TMPDIR and the working folder: the capped folder
    assert CAP - 16 * MiB <= said["written"] <= CAP, said
    assert said["outside"] in ("Read-only file system", "Permission denied"), said  # nothing beside the cap
    assert home.f_blocks * home.f_frsize == CAP
    assert held <= CAP + 64 * 1024, held  # the files under the scratch folder, its lock file included
    assert full.status == "error" and "No space left on device" in full.reason
    assert "the sandbox's disk limit was reached: 64 MiB in all in the scratch folder" in full.reason, full.reason
    assert "64 MiB in all in the scratch folder (HOME, TMPDIR, the working folder)" in limits, limits


@NO_SANDBOX
@ROOT_ONLY
@LINUX
@pytest.mark.notebooks
def test_a_full_sandbox_leaves_the_one_beside_it_room_and_out_of_sight():
    """Two submissions graded side by side (--jobs 2): one fills its cap, the other still writes,
    and its kernel's mount table does not name the first's folder (the launcher detaches other
    sandboxes' tmpfs in its namespace, so their memory goes when they close)."""
    with Sandbox(Limits(disk_bytes=32 * MiB)) as full, Sandbox(Limits(disk_bytes=32 * MiB)) as beside:
        [filled] = run_cells(full, ["open('all', 'wb').write(b'x' * (48 << 20))"], cell_timeout=120, budget=120)
        assert filled.status == "error" and "No space left on device" in filled.reason, filled.reason
        probe = ("open('mine', 'wb').write(b'x' * (16 << 20))\n"
                 "print(sum(1 for line in open('/proc/self/mountinfo') if "
                 f"{full.scratch.name!r} in line))")
        [wrote] = run_cells(beside, [probe], cell_timeout=120, budget=120)
        assert wrote.status == "ok", wrote.reason
        assert text(wrote).strip() == "0"


@NO_SANDBOX
@ROOT_ONLY
@LINUX
@pytest.mark.notebooks
def test_a_closed_sandbox_leaves_no_mount_and_no_folder():
    with Sandbox(Limits(disk_bytes=CAP)) as box:
        [run] = run_cells(box, ["open('data', 'wb').write(b'x' * (8 << 20))"], cell_timeout=60, budget=60)
        folder = box.scratch
        home = folder / "home"
        assert run.status == "ok", run.reason
        assert mounts_under(folder) == [(str(home), "tmpfs")]
        assert (home / "kernel.json").is_file()  # the grader sees the kernel's files there
        assert (folder / scratch.owner_file("minikafka-sandbox-")).is_file()  # the lock: beside, not under
    assert mounts_under(folder) == []
    assert not folder.exists()


def test_the_cap_can_be_set_from_a_notebooks_metadata():
    assert Limits().disk_bytes == 1024 ** 3
    assert Limits.from_metadata({"disk_bytes": 3 * 1024 ** 3}).disk_bytes == 3 * 1024 ** 3
    assert Limits.from_metadata({"disk_bytes": None, "file_bytes": MiB}) == Limits(disk_bytes=None, file_bytes=MiB)
    with pytest.raises(ValueError, match="disk_bytes"):  # named among the known ones
        Limits.from_metadata({"disk_byte": 1})


@ROOT_ONLY
@LINUX
def test_removing_a_folder_detaches_the_mount_in_it(tmp_path):
    """``scratch.remove`` (and a sweep, which removes the same way) takes a mounted folder away:
    before, rmtree emptied the tmpfs and stopped at its mount point (EBUSY), and so did rm -rf."""
    folder = scratch.make("minikafka-sandbox-", tmp_path)
    (folder / "home").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder / "home")], check=True)
    (folder / "home" / "data").write_bytes(b"x" * 1000)
    scratch.remove(folder)
    left = mounts_under(folder)
    for point, _ in reversed(left):  # a failure leaves no mount behind it
        subprocess.run(["umount", "-l", point], check=False)
    assert left == []
    assert not folder.exists()


# A grader with a sandbox running (its kernel started): prints the scratch folder and the
# launcher's pid, then blocks on its stdin until the test kills it.
GRADER = """
    import sys
    from minikafka.course import sandbox
    box = sandbox.Sandbox(sandbox.Limits(disk_bytes=16 << 20)).__enter__()
    print(box.scratch, box.manager.provisioner.process.pid, flush=True)
    sys.stdin.read()
"""


class _Stop(Exception):
    pass


@NO_SANDBOX
@ROOT_ONLY
@LINUX
@pytest.mark.notebooks
@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits for the orphaned launcher with a pidfd (Linux)")
def test_a_killed_graders_mounted_folder_is_swept_by_the_next_sandbox(monkeypatch):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    err = tempfile.TemporaryFile(mode="w+")
    grader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(GRADER)], cwd=ROOT, env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    launcher = None
    try:
        line = grader.stdout.readline()
        if not line:
            grader.wait()
            err.seek(0)
            raise AssertionError(f"the grader died before its sandbox started: {err.read()[-3000:]}")
        path, pid = line.split()
        dead = Path(path)
        launcher = os.pidfd_open(int(pid))  # (its kernel ends with the grader: the lifeline)
        assert dead.parent == sandbox.RUN_DIR
        assert mounts_under(dead) == [(str(dead / "home"), "tmpfs")]
        grader.send_signal(signal.SIGKILL)
        grader.wait()  # reaped: its lock is released
        assert mounts_under(dead) and dead.is_dir()  # nobody closed it
        made = []

        def stop_here():
            made.append(sys._getframe(1).f_locals["self"].scratch)
            raise _Stop

        monkeypatch.setattr(sandbox, "shared_folders", stop_here)
        with pytest.raises(_Stop):  # fails after its scratch folder and its tmpfs: close() removes both
            Sandbox(Limits(disk_bytes=16 * MiB)).__enter__()
        assert mounts_under(dead) == [] and not dead.exists()
        assert made and made[0].parent == dead.parent and not made[0].exists() and mounts_under(made[0]) == []
    finally:
        if grader.poll() is None:
            grader.kill()
            grader.wait()
        grader.stdout.close()
        grader.stdin.close()
        err.close()
        if launcher is not None:  # the dead grader's launcher (and so its kernel's PID namespace)
            try:
                signal.pidfd_send_signal(launcher, signal.SIGKILL)
            except ProcessLookupError:
                pass  # already ended: its lifeline closed with the grader (tests/test_sandbox_lifeline.py)
            select.select([launcher], [], [], 60)  # readable once it has exited
            os.close(launcher)
