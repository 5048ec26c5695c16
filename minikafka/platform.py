"""The one place where minikafka calls what only some operating systems have.

Theory of operation
-------------------
The simulated world (``Cluster``, notebooks 00-08, the dashboards, ``minikafka check``) runs
wherever CPython runs: Linux, macOS, Windows. A handful of the calls it makes exist on Unix
only; each of them lives here, beside a portable fallback, and the rest of the package calls
this module instead. Which one is used is decided once, at import, by *what the OS offers*
(``hasattr(os, "pread")``, ``import fcntl``), never by the OS's name, so a test can take a
call away and watch the fallback run (``tests/test_portability.py`` removes them all, a
stand-in for Windows that runs here).

- ``pread``: ``os.pread`` itself where it exists (the hot read path: no wrapper on Linux or
  macOS); elsewhere ``lseek`` + ``read`` under a lock (segments are opened ``O_APPEND``, so
  moving the file position never moves a write).
- ``writev``: ``os.writev``; elsewhere one ``os.write`` of the joined pieces.
- ``O_BINARY``: 0 on Unix; ``os.O_BINARY`` on Windows, whose ``os.open`` translates newlines
  without it (a segment would be corrupted by its first 0x0a byte).
- ``fsync_dir``: open the directory and fsync it; nothing where a directory cannot be opened
  (Windows refuses; NTFS journals its renames itself).
- ``try_lock``/``lock``: ``fcntl.flock``; ``msvcrt.locking`` of the file's first byte on
  Windows; where neither exists, a lock that holds within this process only
  (``process_locks()`` says which: ``minikafka.scratch`` sweeps nothing without real ones).
- ``raise_open_files_limit``/``open_files``: ``resource`` (RLIMIT_NOFILE) and
  ``/proc/self/fd``; None elsewhere (no limit known, nothing counted, nothing refused).
- ``ram_dir``: /dev/shm where it is writable; None elsewhere.
- ``is_root``, ``current_uid``, ``user_ids`` (``pwd``), ``threads_of`` (``/proc``): False or
  None where there are no Unix users or no /proc.
- ``pause``/``resume``: SIGSTOP/SIGCONT; ``PlatformNotSupported`` where there is no SIGSTOP.
- ``cpu_seconds_of_tree``: the CPU time of a process and everything it started, from Linux's
  ``/proc`` (each process's ``stat``, descendants found through ``task/*/children``); psutil's
  portable count elsewhere (macOS, Windows); None where neither can read it (the grader then
  falls back to the clock).

Two questions are answered here for the layers that need a whole Unix mechanism, not one call:

- ``sandbox_missing()``: what the check's sandbox (``course/sandbox.py`` and its launcher
  ``course/_launch.py``: fork, a new session, rlimits, namespaces through ctypes) cannot have
  here. The sandbox runs its Unix launcher only when nothing is missing; otherwise it runs the
  kernel directly, in its scratch folder, and says in one line what is weaker.
- ``real_processes_missing()``: why ``launch()`` and ``minikafka server``/``controller``
  cannot run here (they pass a pipe to their children, SIGSTOP/SIGCONT them and SIGKILL
  them), or None. ``require_real_processes()`` raises ``PlatformNotSupported`` with the one
  line a student needs (WSL2 runs them on Windows) before anything is started.

Nothing here reads a clock or keeps state beyond the fallbacks' locks.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Sequence

WSL_HINT = ("on Windows, run them inside WSL2: in PowerShell `wsl --install -d Ubuntu`, then clone "
            "the course inside Ubuntu and run `make lab` there")


class PlatformNotSupported(RuntimeError):
    """This operating system cannot do what was asked; the message says what to do instead.

    In a notebook it shows as its one line, not a traceback (IPython calls
    ``_render_traceback_``)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


# --- reading and writing files ---------------------------------------------------------------

O_BINARY: int = getattr(os, "O_BINARY", 0)  # 0 on Unix: no change to any flag there

if hasattr(os, "pread"):
    pread = os.pread  # the hot path: the builtin itself, not a wrapper
else:
    _seek_lock = threading.Lock()

    def pread(fd: int, size: int, offset: int) -> bytes:
        """``os.pread`` for an OS without it: seek, read (to ``size`` or the end), all under
        one lock so that two threads never move the position under each other."""
        with _seek_lock:
            os.lseek(fd, offset, os.SEEK_SET)
            chunks, left = [], size
            while left > 0:
                chunk = os.read(fd, left)
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        return b"".join(chunks)

if hasattr(os, "writev"):
    writev = os.writev
else:
    def writev(fd: int, pieces: Sequence[bytes | memoryview]) -> int:
        """``os.writev`` for an OS without it: one write of the joined pieces (a single write
        keeps an append whole, as writev does)."""
        return os.write(fd, b"".join(pieces))


def fsync_dir(path: str | os.PathLike) -> None:
    """Make renames and deletions in the directory ``path`` durable. Where a directory cannot
    be opened (Windows refuses with a PermissionError), there is nothing to sync: the file
    system journals its own metadata."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (PermissionError, IsADirectoryError):
        if os.path.isdir(path):
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- locks between processes -------------------------------------------------------------------

try:
    import fcntl as _fcntl
except ImportError:
    _fcntl = None
try:
    import msvcrt as _msvcrt
except ImportError:
    _msvcrt = None
_process_locks: dict[tuple[int, int], threading.Lock] = {}
_process_locks_guard = threading.Lock()


def try_lock(fd: int) -> bool:
    """Take an exclusive lock on the open file ``fd`` without waiting; False if another holder
    has it. Closing ``fd`` releases it."""
    return _lock(fd, blocking=False)


def lock(fd: int) -> None:
    """Take an exclusive lock on the open file ``fd``, waiting for it; closing ``fd`` releases it."""
    _lock(fd, blocking=True)


def process_locks() -> bool:
    """Whether ``try_lock``/``lock`` hold between processes (flock, msvcrt), not only within this one."""
    return _fcntl is not None or _msvcrt is not None


def _lock(fd: int, *, blocking: bool) -> bool:
    if _fcntl is not None:
        try:
            _fcntl.flock(fd, _fcntl.LOCK_EX | (0 if blocking else _fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True
    if _msvcrt is not None:
        os.lseek(fd, 0, os.SEEK_SET)  # msvcrt locks bytes from the current position
        while True:  # LK_LOCK tries for 10 s and then raises: keep waiting when asked to
            try:
                _msvcrt.locking(fd, _msvcrt.LK_LOCK if blocking else _msvcrt.LK_NBLCK, 1)
                return True
            except OSError:
                if not blocking:
                    return False
    # Neither (no CPython we know of; the Windows stand-in of the tests): within this process only.
    st = os.fstat(fd)
    with _process_locks_guard:
        held = _process_locks.setdefault((st.st_dev, st.st_ino), threading.Lock())
    return held.acquire(blocking)


def raise_open_files_limit() -> int | None:
    """This process's limit of open files (``ulimit -n``), None where there is none. The soft
    limit is raised to the hard one first, as Kafka's JVM does at start (``-XX:+MaxFDLimit``,
    on by default): a desktop's soft 1,024 would otherwise be the limit."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            try:
                wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
                resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
                soft = wanted
            except (OSError, ValueError):  # e.g. macOS caps it below the hard limit: keep the soft one
                pass
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else soft


def open_files() -> int | None:
    """How many files this process holds open (Linux's /proc/self/fd); None where unknown."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc (macOS): no count, no refusal
        return None


def ram_dir() -> str | None:
    """A folder in RAM that this process may write (Linux's /dev/shm), for logs that fsync on
    every append; None elsewhere (the system's temporary folder is used instead)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


# --- users and processes -----------------------------------------------------------------------

def is_root() -> bool:
    """Whether this process runs as root (never, where there are no Unix user ids)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def user_ids(name: str) -> tuple[int, int] | None:
    """(uid, gid) of the Unix user ``name``; None if there is no such user, or no Unix users."""
    try:
        import pwd
    except ImportError:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


def threads_of(uid: int) -> int | None:
    """How many processes and threads the user ``uid`` runs now: what ``RLIMIT_NPROC`` counts on
    Linux (every task, so a browser's hundreds of threads count). None where it cannot be
    counted (no /proc, e.g. macOS or Windows)."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    total = 0
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                total += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return total


def current_uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


# --- CPU time of a process tree -----------------------------------------------------------------

# Clock ticks per second, the unit of /proc's CPU times; 0 where there is no such unit (Windows).
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if "SC_CLK_TCK" in getattr(os, "sysconf_names", {}) else 0


def cpu_seconds_of_tree(pid: int) -> float | None:
    """CPU seconds (user + system) used so far by process ``pid``, every live process below it,
    and every process one of them has waited for (a finished ``subprocess.run``). A zombie still
    counts (its times are in its ``stat`` until it is reaped, then in its parent's). Processes
    that left the tree (a daemon reparented out of it) or were reaped by no one (SIGCHLD ignored)
    are not counted: the caller keeps a clock as a backstop. None where it cannot be read here,
    or when ``pid`` is gone."""
    if _CLOCK_TICKS and os.path.isdir(f"/proc/{pid}/task"):
        ticks, todo, seen = 0, [pid], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            try:
                with open(f"/proc/{current}/stat", "rb") as f:
                    stat = f.read()
                # Fields after the command (which may hold spaces and parentheses): state is the 3rd;
                # utime, stime, cutime, cstime are the 14th to 17th.
                fields = stat[stat.rindex(b")") + 2:].split()
                ticks += sum(int(x) for x in fields[11:15])
                for task in os.listdir(f"/proc/{current}/task"):
                    with open(f"/proc/{current}/task/{task}/children", "rb") as f:
                        todo += [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                if current == pid:
                    return None
                continue  # gone meanwhile: its times are now in its parent's, or lost
        return ticks / _CLOCK_TICKS
    try:
        import psutil
    except ImportError:
        return None
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except (psutil.Error, OSError):
        return None
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except (psutil.Error, OSError):
            if process is root:
                return None
            continue
        total += times.user + times.system + getattr(times, "children_user", 0.0) + \
            getattr(times, "children_system", 0.0)
    return total


# --- signals -----------------------------------------------------------------------------------

_SIGSTOP = getattr(signal, "SIGSTOP", None)
_SIGCONT = getattr(signal, "SIGCONT", None)


def pause(proc: Any) -> None:
    """Stop a child process (``subprocess.Popen``) where it stands: alive, silent (SIGSTOP)."""
    if _SIGSTOP is None:
        raise PlatformNotSupported(f"pausing a process needs SIGSTOP, which this OS lacks; {WSL_HINT}")
    proc.send_signal(_SIGSTOP)


def resume(proc: Any) -> None:
    """Let a paused child process go on (SIGCONT); nothing where processes cannot be paused."""
    if _SIGCONT is not None:
        proc.send_signal(_SIGCONT)


# --- whole mechanisms --------------------------------------------------------------------------

def sandbox_missing() -> list[str]:
    """What the check's Unix sandbox needs and this OS lacks (empty: it can run here)."""
    missing = [f"os.{name}" for name in ("fork", "setsid", "getuid") if not hasattr(os, name)]
    for module in ("fcntl", "resource"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    return missing


def user_namespaces() -> bool:
    """Can a process of this (unprivileged) user enter namespaces of its own here (Linux's
    unprivileged user namespaces, which some distributions and containers switch off)? Tried in
    a throwaway child, as the sandbox's launcher does for each kernel; False off Linux."""
    import subprocess

    if not sys.platform.startswith("linux"):
        return False
    probe = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
             "sys.exit(libc.unshare(0x10000000 | 0x00020000) != 0)")  # CLONE_NEWUSER | CLONE_NEWNS
    try:
        return subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def real_processes_missing() -> str | None:
    """Why real broker processes cannot run here, or None."""
    if os.name != "posix":
        return f"this is {sys.platform}, not Linux or macOS"
    lacking = [name for name in ("SIGKILL", "SIGSTOP", "SIGCONT") if not hasattr(signal, name)]
    if lacking:
        return f"this OS has no {', '.join(lacking)}"
    return None


def require_real_processes(what: str = "real broker processes") -> None:
    """Raise ``PlatformNotSupported`` (one line) if ``what`` cannot run on this OS."""
    why = real_processes_missing()
    if why is not None:
        raise PlatformNotSupported(f"{what} cannot run here ({why}): real broker processes need Linux or "
                                   f"macOS; {WSL_HINT}. The simulated Cluster() (notebooks 00-08, but for 08's "
                                   "section on real processes) and `minikafka check` run here as they are.")


__all__ = ["O_BINARY", "PlatformNotSupported", "WSL_HINT", "cpu_seconds_of_tree", "current_uid", "fsync_dir", "is_root", "lock",
           "open_files", "process_locks", "raise_open_files_limit", "ram_dir",
           "pause", "pread", "real_processes_missing", "require_real_processes", "resume",
           "sandbox_missing", "threads_of", "try_lock", "user_ids", "user_namespaces", "writev"]
