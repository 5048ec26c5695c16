"""Scratch folders that go away even when the process that made them is killed.

Theory of operation
-------------------
A simulated ``Cluster``'s log directories, a campaign schedule's and a Raft schedule's (in RAM,
/dev/shm), a ``launch()``'s (its ``cluster.secret`` and a student's pickled rules), a grading
sandbox's, a Spark session's (its JVM's log, the workers' launcher): each lives in a folder made with ``tempfile.mkdtemp`` and removed by ``close()``. A
process that never gets to ``close()`` (a notebook kernel restarted or killed, a ``launch()``
script stopped by SIGKILL, a grader killed mid-class) used to leave its folder behind, in RAM
until the next reboot where the folder was /dev/shm or /run.

``make(prefix, dir)`` makes the folder as ``mkdtemp`` does and *marks it as owned by a live
process*: it creates a lock file in it (``owner_file(prefix)``: ``.minikafka-owner.lock`` for the
prefix ``minikafka-``), takes an exclusive lock on it (``platform.lock``: flock on Unix, msvcrt on
Windows) and holds it for the folder's lifetime. The OS releases the lock when the process ends,
however it ends, so nothing here keeps a pid (no pid reuse to be fooled by) or reads /proc.
Before making its folder, ``make`` sweeps the folders of the same prefix in the same parent
(``sweep``): one whose lock it can take has lost its owner and is removed; one whose lock is
held is left; one without the lock file is left too (made by an older minikafka, by another
prefix's maker, or by someone else: nothing shows it is dead). The lock file's name carries the
prefix, so ``Cluster``'s ``minikafka-`` never sweeps a ``minikafka-wire-*`` folder: each kind is
swept by the next folder of its own kind.

Marking, in order: mkdtemp; create the lock file (O_EXCL, mode 0600); lock it; write the prefix
into it. A sweeper that takes the lock of a lock file still empty may have come between a maker's
create and its lock: it leaves that folder (a maker that died in those microseconds leaves its
folder behind, as before). Only a lock file with the prefix written in has had an owner, who held
the lock and is gone.

Whose folders: only those whose lock file was made by this user (its uid), and, unless this is
root, that this user owns; never a symbolic link, never a lock file that is not a plain file. The
grading sandbox as root hands its folder to a sandbox user after making it (the lock file inside
stays root's, mode 0600, in a folder with the sticky bit): root sweeps it by its lock file.

Descriptors: the lock's descriptor is not inheritable (PEP 446; ``subprocess`` closes the others
anyway), so the broker processes of ``launch()``, the sandbox's kernel and Spark's JVM never hold
it. A child forked without exec (multiprocessing's "fork", the sandbox's short ``_kill_user``
helper) shares the parent's open lock file, and flock belongs to that shared open file: the
folder then counts as alive until the child exits too, the safe side. The lock is never released
explicitly (no LOCK_UN): closing one copy, in a forked child, leaves the others' lock in force.
The Spark fork server (``spark/fork_server.py``) is started with exec and makes no scratch folder,
so its forked workers hold none.

A folder whose name its maker chooses (Spark's, fixed when its module is imported, so that a
process forked from the maker finds it) is marked with ``adopt(path, prefix)`` once made.

``remove(path)`` releases the lock and removes the folder (what the callers' ``close()`` did with
``shutil.rmtree``). A folder that a caller removes itself (``shutil.rmtree``) gives its lock back
at the next ``make``.

A folder with a filesystem mounted in it (the grading sandbox's, as root: a tmpfs that caps what a
submission writes, see ``minikafka.course.sandbox``) cannot be removed while it is mounted (EBUSY),
and ``rmtree`` would empty the mounted filesystem first: ``remove_tree`` detaches every mount at or
under the folder (``detach_mounts``: umount2 with MNT_DETACH, read from /proc/self/mountinfo)
before it removes anything, so ``remove`` and a sweep of a killed owner's folder take the mount
away too. Only root can, on Linux; elsewhere nothing of minikafka's is mounted there.

Where locks do not reach across processes (``platform.process_locks()`` is False: the Windows
stand-in of the tests), ``make`` is ``mkdtemp`` alone and nothing is ever swept: a lock that only
this process sees would make every other process's folder look dead. The sweep is housekeeping:
nothing it meets (a folder vanishing meanwhile, a permission refused) fails the caller.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from minikafka import platform

logger = logging.getLogger("minikafka.scratch")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # a planted symbolic link is not followed (none on Windows)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # nor does a planted FIFO block the sweep
_held: dict[str, int] = {}  # folder made by this process -> its lock file's descriptor
_held_guard = threading.Lock()


def owner_file(prefix: str) -> str:
    """The lock file's name in a folder made with ``prefix``: ``.minikafka-owner.lock`` for
    ``minikafka-``, ``.minikafka-wire-owner.lock`` for ``minikafka-wire-``."""
    return f".{prefix}owner.lock"


def make(prefix: str, dir: str | os.PathLike | None = None) -> Path:
    """A new folder ``dir/prefix*`` (``dir``: the system's temporary folder by default), as
    ``tempfile.mkdtemp`` makes it, marked as this process's for as long as it lives; the folders of
    the same prefix in ``dir`` whose owner is gone are removed first."""
    if os.sep in prefix or (os.altsep and os.altsep in prefix):
        raise ValueError(f"a scratch folder's prefix is a name, not a path: {prefix!r}")
    parent = os.path.abspath(tempfile.gettempdir() if dir is None else os.fspath(dir))
    _give_back_removed()
    sweep(prefix, parent)
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    _hold(path, prefix)
    return Path(path)


def adopt(path: str | os.PathLike, prefix: str) -> None:
    """Mark ``path``, a folder this process has just made under a name of its own that starts with
    ``prefix`` (Spark's, fixed when ``minikafka.spark.session`` is imported), as ``make`` marks
    the folders it makes; the folders of the same prefix beside it whose owner is gone are removed
    first (not this one: it has no lock file yet)."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.basename(path).startswith(prefix) or os.path.basename(path) == prefix:
        raise ValueError(f"{path} is not a folder named {prefix}...")
    _give_back_removed()
    sweep(prefix, os.path.dirname(path))
    _hold(path, prefix)


def _hold(path: str, prefix: str) -> None:
    if not platform.process_locks():
        return
    try:
        fd = _mark(path, prefix)
    except OSError as e:  # unmarked, it is only never swept: the caller still gets its folder
        logger.debug("scratch folder %s left unmarked: %s", path, e)
    else:
        with _held_guard:
            _held[path] = fd


def remove(path: str | os.PathLike) -> None:
    """Release ``path``'s lock (if this process holds it) and remove the folder, however deep; nothing
    if it is gone already. Never raises."""
    release(path)
    remove_tree(path)


def remove_tree(path: str | os.PathLike) -> None:
    """``shutil.rmtree(path, ignore_errors=True)``, and ``rm -rf`` where that left the folder:
    Python 3.11's rmtree recurses once per level, so a tree 3,000 folders deep (a red team's, in a
    grading sandbox's scratch folder, with 256 MiB at the bottom) raised RecursionError, which
    ``ignore_errors`` does not cover, and stayed on the grader's disk. ``rm`` (GNU's, BSD's) removes
    a tree of any depth. Never raises."""
    detach_mounts(path)  # a mount in it (a grading sandbox's, as root) comes off first
    try:
        shutil.rmtree(path, ignore_errors=True)
    except Exception as e:  # noqa: BLE001 - RecursionError, or anything else rmtree meets
        logger.debug("shutil.rmtree(%s) stopped: %r", path, e)
    if not os.path.lexists(path):
        return
    rm = shutil.which("rm")
    if rm is not None:
        try:
            subprocess.run([rm, "-rf", "--", os.fspath(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        except OSError as e:
            logger.debug("rm -rf %s failed: %r", path, e)


_MNT_DETACH = 2


def _mount_points() -> list[str]:
    """The mount points of this process's mount namespace (Linux), octal escapes decoded."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4])
                for line in f if len(line.split()) > 4]


def detach_mounts(path: str | os.PathLike) -> list[str]:
    """Detach (umount2, MNT_DETACH) every mount at or under ``path``, deepest first, until none is
    left there; the mount points detached. Root on Linux only (anyone else: nothing, an empty
    list); never through a symbolic link (``path`` itself one: nothing). Never raises."""
    detached: list[str] = []
    if not sys.platform.startswith("linux") or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return detached
    try:
        path = os.path.abspath(os.fspath(path))
        if os.path.islink(path) or not os.path.isdir(path) or os.path.dirname(path) == path:  # never "/"
            return detached
        top = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        for _ in range(64):  # mounts stacked on one point come off one at a time
            under = [p for p in _mount_points() if p == top or p.startswith(top.rstrip("/") + "/")]
            if not under:
                break
            point = max(under, key=lambda p: p.count("/"))
            if ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(point), _MNT_DETACH) != 0:
                logger.debug("umount2(%s) failed: %s", point, os.strerror(ctypes.get_errno()))
                break
            detached.append(point)
    except Exception as e:  # noqa: BLE001 - housekeeping: no /proc, no libc
        logger.debug("detaching the mounts under %s stopped: %r", path, e)
    return detached


def release(path: str | os.PathLike) -> None:
    """Release ``path``'s lock without removing it: the next ``make`` of its prefix will."""
    with _held_guard:
        fd = _held.pop(os.path.abspath(os.fspath(path)), None)
    if fd is not None:
        _close(fd)


def sweep(prefix: str, dir: str | os.PathLike | None = None) -> list[Path]:
    """Remove the folders ``dir/prefix*`` whose owner is gone (see the module's docstring); the
    ones removed. Never raises."""
    removed: list[Path] = []
    if not platform.process_locks():
        return removed
    try:
        parent = os.path.abspath(tempfile.gettempdir() if dir is None else os.fspath(dir))
        uid = platform.current_uid()
        for name in sorted(os.listdir(parent)):
            if not name.startswith(prefix) or name == prefix:
                continue
            path = os.path.join(parent, name)
            with _held_guard:
                if path in _held:  # ours, alive
                    continue
            try:
                if _owner_is_gone(path, prefix, uid):
                    remove_tree(path)
                    removed.append(Path(path))
            except OSError:  # vanished meanwhile, not ours to read, unmarked: left as it is
                continue
    except Exception as e:  # noqa: BLE001 - housekeeping must never fail the folder's maker
        logger.debug("sweeping %s* in %s stopped: %s", prefix, dir, e)
    return removed


def _mark(path: str, prefix: str) -> int:
    fd = os.open(os.path.join(path, owner_file(prefix)),
                 os.O_RDWR | os.O_CREAT | os.O_EXCL | platform.O_BINARY | _NOFOLLOW, 0o600)
    try:
        platform.lock(fd)  # waits only for a sweeper that is reading it right now
        os.write(fd, prefix.encode() + b"\n")  # the lock is held: a sweeper that takes it later sees an owner gone
    except BaseException:
        os.close(fd)
        raise
    return fd


def _owner_is_gone(path: str, prefix: str, uid: int | None) -> bool:
    """Whether ``path`` is a folder of ours, marked with ``prefix``, whose owner no longer holds
    its lock. The lock is taken only for the look and released before anything is removed
    (Windows deletes no open file); a second sweeper that takes it meanwhile removes the same
    folder, no harm."""
    folder = os.lstat(path)
    if not stat.S_ISDIR(folder.st_mode):  # a symbolic link or a file
        return False
    if uid is not None and uid != 0 and folder.st_uid != uid:
        return False
    lock_path = os.path.join(path, owner_file(prefix))
    fd = os.open(lock_path, os.O_RDWR | platform.O_BINARY | _NOFOLLOW | _NONBLOCK)  # none: unmarked
    try:
        mark = os.fstat(fd)
        if not stat.S_ISREG(mark.st_mode) or (uid is not None and mark.st_uid != uid):
            return False
        if not platform.try_lock(fd):
            return False  # its owner lives
        written = prefix.encode() + b"\n"
        if platform.pread(fd, len(written) + 1, 0) != written:
            return False  # empty: a maker between its create and its lock
        now = os.stat(lock_path, follow_symlinks=False)
        return (now.st_dev, now.st_ino) == (mark.st_dev, mark.st_ino)  # still the file we locked
    finally:
        _close(fd)


def _give_back_removed() -> None:
    """Close the locks of this process's folders that were removed without ``remove`` (a lock
    file with no name left: its folder is gone)."""
    with _held_guard:
        for path, fd in list(_held.items()):
            try:
                gone = os.fstat(fd).st_nlink == 0
            except OSError:
                gone = True
            if gone:
                del _held[path]
                _close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


__all__ = ["adopt", "detach_mounts", "make", "owner_file", "release", "remove", "remove_tree", "sweep"]
