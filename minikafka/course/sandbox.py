"""A sandboxed Jupyter kernel for one submission, driven from the grader's own process.

Theory of operation: `Sandbox(limits, hide, env=...)` is a context manager. On entry it takes a sandbox
user for itself, makes an empty scratch folder (mode 0700, owned by that user) and starts an
IPython kernel through
`_launch.py`, which cages it (see that file: own process group and PID/mount/network namespaces,
rlimits, an unprivileged user, hidden paths). The kernel talks to the grader over ZeroMQ *ipc*
sockets in the scratch folder: Unix sockets cross a network namespace, TCP on 127.0.0.1 would not.
On exit the kernel is killed (which kills its whole PID namespace), then, as root, every process of
the sandbox's user (`kill(-1)` from a child running as that user), then that user's keyrings are
cleared (below), the scratch folder is removed and the user is given back.

Each running sandbox has an unprivileged user to itself (`minikafka-sandbox0`, `-sandbox1`, ...,
created with `useradd` when the grader runs as root): a per-user process limit and the final
kill(-1) then only ever touch that one submission. Linux keyrings (`add_key(2)`, `keyctl(2)`) are
per uid and outside every namespace: a key a submission leaves in its user keyring (`@u`) or
user-session keyring (`@us`) would be read by the next submission graded as the same user, so both
are cleared (KEYCTL_CLEAR, from a child running as that user) when a sandbox closes, and when one
starts (a grader killed mid-class never closed its own); where keyctl is missing or refused, the
grading goes on (logged at debug). A user is taken with an exclusive `flock` on
/run/minikafka-grade/userN.lock, held until the sandbox is closed, so graders running at the same
time on one machine (two terminals, a test suite) never share a user, and so never kill each
other's kernels. Without root the kernel runs as the grader's user; `isolation()` says in words
what is then weaker, and the grader prints it. The process limit (RLIMIT_NPROC) then counts every
process and thread of that user, the student's desktop included: it is set to what the user runs
when the sandbox starts plus the submission's own allowance, and left off where that cannot be
counted (no /proc), so a browser's hundreds of threads never kill the kernel.

Where the OS lacks the launcher's Unix mechanisms (Windows: no fork, no rlimits, no fcntl; see
`minikafka.platform.sandbox_missing`), the kernel is started directly, in the scratch folder with
the same environment, over TCP on 127.0.0.1 instead of ipc sockets; the grading is the same, the
cage is not, and `isolation()` says so in one line.

The time limits are the runner's (runner.py): CPU seconds per cell and per notebook, read with
`cpu_seconds()` from the kernel's whole process tree, the clock a backstop; RLIMIT_CPU is only
the outer fence of each process.

When a limit is hit, the student is told which: a kernel that dies before it answers, or a cell
whose fork or thread fails with EAGAIN, or a kernel that dies in a cell, is reported with the
limits in force and the last lines the kernel wrote to its stderr (kept in memory, never a file
the submission can reach).

The kernel sees the package as installed and nothing else of the repository: `seal()` names the
folders the launcher covers (every top-level folder but the system's, and the repository where it
lives in one of those) and the paths it mounts back read-only (the package's folder, the
virtualenv, the interpreter, the JVM), so the repository's .git history (which holds solutions/ and
its hidden checks), exercises/, notebooks/, tests/, other copies of the course and other students'
work are out of reach.

A grader that serves something the kernel must reach (a broker of its own, `grader_broker.py`)
asks for `listen_port=P`: the kernel's 127.0.0.1 is not the grader's when it has a network
namespace of its own, so the launcher opens 127.0.0.1:P inside that namespace and hands the
listening socket over (`listener`); where the kernel shares the grader's network (no namespace,
`network` allowed, no launcher), `listener` is None and `listens` says "shared": the grader's own
socket on P is the one the kernel reaches.

What a submission writes in its scratch folder is capped in all at `Limits.disk_bytes` where the
grader is root: the folder the kernel writes in (its HOME, TMPDIR and working folder; kernel.json
and the ZeroMQ sockets live there too) is `scratch/home`, a tmpfs of that size owned by the sandbox
user, mounted by the grader in its own mount namespace, so the grader sees the kernel's files and
sockets there. Writing past it fails with ENOSPC ("No space left on device") in the student's code,
and nothing outside fills up: before, the folder was on the grader's disk, RLIMIT_FSIZE capped each
file but not their number, and one submission writing many large files made the other submission
graded beside it, and the grader, fail with ENOSPC. The scratch folder itself (which holds
`minikafka.scratch`'s lock file, so a killed grader's folder is still swept) is read-only in the
kernel's mount namespace (the launcher bind-mounts /run/minikafka-grade read-only over itself,
the tmpfs staying writable under it), so the sandbox user, its owner, cannot write beside the cap.
On close the tmpfs is detached (umount2 with MNT_DETACH) before the folder is removed; a killed
grader's is detached by the sweep that removes its folder (`minikafka.scratch.detach_mounts`).
The cap is RAM (a tmpfs): two sandboxes side by side may hold 2 x disk_bytes of memory. Without
root (no mounts: the user-namespace and no-namespace tiers, macOS, Windows) the kernel writes in
the scratch folder itself, uncapped in total as before: only RLIMIT_FSIZE caps each file (where
there are rlimits), and `limits_text` names no disk cap.

The submission itself is never written into the sandbox: the grader sends cell sources over the
kernel protocol and reads outputs from the kernel's messages, so there is no notebook, junit file
or expected output in reach of the student's code.
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import os
import stat
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from jupyter_client.manager import KernelManager
from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager

from minikafka import platform
from minikafka import scratch as scratch_folder

LAUNCHER = Path(__file__).with_name("_launch.py")
USER_PREFIX = "minikafka-sandbox"
MAX_USERS = 256
RUN_DIR = Path("/run/minikafka-grade")  # root's scratch folders (outside /tmp, see _start)
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
# Where else a folder anyone may write can be (/run/lock, /var/crash, a spool): each gets a tmpfs of
# its own too (`shared_folders`), or one submission could leave a file there for the next.
SHARED_UNDER = ("/var", "/run", "/srv", "/opt", "/home", "/mnt", "/media")
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the repository: minikafka/course/sandbox.py
GiB = 1024 ** 3
# Windows needs these to start a Python at all (sockets, randomness); passed on where they exist.
OS_ESSENTIALS = ("SYSTEMROOT", "WINDIR", "COMSPEC", "PATHEXT", "PROCESSOR_ARCHITECTURE", "NUMBER_OF_PROCESSORS")
# Windows' per-user folders: pointed at the scratch folder, as HOME and TMPDIR are.
USER_FOLDERS = ("USERPROFILE", "TEMP", "TMP", "APPDATA", "LOCALAPPDATA")
STDERR_KEPT = 4096  # bytes of the kernel's stderr kept for the message when it dies
HOME_NAME = "home"  # the scratch folder's subfolder the kernel writes in, a tmpfs as root (see the header)
MS_NOSUID, MS_NODEV = 2, 4
# keyctl(2)'s number where we know it (asm/unistd_64.h); elsewhere the keyrings are left alone.
KEYCTL_SYSCALLS = {"x86_64": 250, "amd64": 250, "aarch64": 219, "arm64": 219}
KEYCTL_CLEAR = 7
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """Per-submission resource limits (None: no limit)."""
    cpu_seconds: int | None = 600      # CPU time of the kernel process and its children, each
    memory_bytes: int | None = 4 * GiB  # address space per process
    processes: int | None = 256        # processes + threads of the submission (on top of what its user runs)
    file_bytes: int | None = 512 * 1024 ** 2  # largest file it may write
    disk_bytes: int | None = 1 * GiB  # all it may write in its scratch folder (root only: a tmpfs)
    network: bool = False              # False: a network namespace with only loopback

    @classmethod
    def from_metadata(cls, meta: dict) -> "Limits":
        """Limits overridden by a notebook's `minikafka.limits` metadata (e.g. Spark needs more)."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(meta) - known)
        if unknown:
            raise ValueError(f"unknown sandbox limit(s) in notebook metadata: {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        return cls(**{**asdict(cls()), **meta})


class SandboxError(RuntimeError):
    """The sandboxed kernel could not start; the message says why, and which limit if one was hit."""


def is_root() -> bool:
    return platform.is_root()


def _ensure_user(number: int) -> tuple[int, int]:
    name = f"{USER_PREFIX}{number}"
    ids = platform.user_ids(name)
    if ids is None:
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                               "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True)
        if done.returncode not in (0, 9):  # 9: created meanwhile by another grader
            raise RuntimeError(f"cannot create the sandbox user {name}: {done.stderr.strip()}")
        ids = platform.user_ids(name)
        if ids is None:
            raise RuntimeError(f"the sandbox user {name} was created but cannot be found")
    return ids


def take_user() -> tuple[int, int, int] | None:
    """(uid, gid, lock fd) of a sandbox user no other sandbox on this machine holds; None if not root.

    The lock (an flock on RUN_DIR/userN.lock) is released by closing the fd.
    """
    if not is_root() or platform.sandbox_missing():
        return None
    RUN_DIR.mkdir(mode=0o711, exist_ok=True)
    for number in range(MAX_USERS):
        fd = os.open(RUN_DIR / f"user{number}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if not platform.try_lock(fd):
            os.close(fd)
            continue
        try:
            uid, gid = _ensure_user(number)
        except BaseException:
            os.close(fd)
            raise
        return uid, gid, fd
    raise RuntimeError(f"all {MAX_USERS} sandbox users are busy")


def isolation() -> str:
    """The isolation this grader can give, in words (printed with the results)."""
    missing = platform.sandbox_missing()
    if missing:
        return weaker_isolation(missing)
    if is_root():
        return ("sandbox: an unprivileged user per submission, own PID/mount/network namespaces, "
                "the repository sealed (only the package and its virtualenv visible, read-only), "
                "references and other submissions hidden, rlimits, the scratch folder capped in all")
    if platform.user_namespaces():
        return ("sandbox (not root): the kernel runs as your user, in namespaces of its own (this OS allows "
                "unprivileged user namespaces): own PID/mount/network namespaces, /tmp, /var/tmp and /dev/shm "
                "of its own, the repository sealed (only the package and its virtualenv visible, "
                "read-only), references and other submissions hidden, rlimits; but no user of its own: "
                "your processes count against its process limit, and what your user can read in the "
                "system's folders it can read (run the grader as root for a user per submission)")
    return ("sandbox (not root, and no unprivileged user namespaces on this OS): own process group and "
            "rlimits only; the repository is not sealed: its .git history (solutions and hidden checks), "
            "exercises/ and notebooks/ are readable, and the shared /tmp too; the kernel runs as your user, "
            "so files it can read you can read (run the grader as root for full isolation)")


def weaker_isolation(missing: list[str]) -> str:
    """The one line said where the Unix sandbox cannot run (e.g. on Windows)."""
    return (f"sandbox: weaker isolation on this OS (it lacks {', '.join(missing)}): each notebook runs in a "
            "fresh kernel in an empty scratch folder and is graded as on Linux, but as your user, without "
            "process, memory or CPU limits, and what it starts may outlive the run")


# Top-level folders of a Unix system that a kernel needs or that hold nothing of anyone's work
# (programs, libraries, configuration; /tmp, /var/tmp and /dev/shm are the sandbox's own). Every
# other top-level folder (/home, /root, /work, /opt, /srv, /mnt, ...) is sealed.
SYSTEM_FOLDERS = frozenset({"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "run",
                            "sbin", "sys", "tmp", "usr", "var"})


def seal(scratch: Path) -> list[dict]:
    """What the kernel's mount namespace covers and what it puts back (see `_launch._seal`).

    Covered: every top-level folder but the system's (``SYSTEM_FOLDERS``), so the repository, its
    .git history (which holds solutions/ and the hidden checks), exercises/, notebooks/, tests/,
    other copies of the course and other students' work are out of reach wherever they are; and
    the repository itself where it lives in a system folder (a clone in /tmp). Never a folder
    holding the scratch folder. Put back, read-only: the package's own folder, the virtualenv, the
    interpreter and the JVM (for Spark) where they live under a covered folder. So a submission
    reads the package as installed, the standard library and the system, nothing else.
    """
    package = Path(__file__).resolve().parents[1]
    reveal = {package, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
              Path(sys.executable).resolve().parent}
    java = os.environ.get("JAVA_HOME") or shutil.which("java")
    if java:
        home = Path(java).resolve()
        reveal.add(home if home.is_dir() else home.parents[1])  # .../bin/java -> the JVM's home
    scratch = scratch.resolve()
    roots = [Path("/") / name for name in sorted(os.listdir("/")) if name not in SYSTEM_FOLDERS]
    roots = [r for r in roots if r.is_dir() and not r.is_symlink()]
    repository = PROJECT_ROOT.resolve()
    installed = any(repository.is_relative_to(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix))
    if not installed and not any(repository.is_relative_to(r) for r in roots):
        roots.append(repository)  # a clone in /tmp or /var: sealed on its own
    return [{"root": str(root), "reveal": sorted(str(p) for p in reveal if p.is_relative_to(root))}
            for root in roots if not scratch.is_relative_to(root)]


def covered(path: Path, config: dict) -> bool:
    """Whether the launcher's seal or private /tmp already makes `path` unreachable, so that no
    mount of its own is needed to hide it: a mount of its own would show in the kernel's
    /proc/self/mountinfo, naming the reference and class folders (and telling a graded kernel from
    the student's check, which hides none)."""
    path = Path(path).resolve()
    for sealed in config.get("seal", []):
        if path.is_relative_to(sealed["root"]):
            return not any(path.is_relative_to(p) or Path(p).is_relative_to(path) for p in sealed["reveal"])
    for tmp in config.get("private_tmp", []):
        if path.is_relative_to(tmp):
            return not any(path.is_relative_to(p) or Path(p).is_relative_to(path) for p in config.get("keep", []))
    return False


@functools.cache
def shared_folders(roots: tuple[str, ...] = SHARED_UNDER, depth: int = 3) -> tuple[str, ...]:
    """PRIVATE_TMP, then every folder that anyone may write (mode o+w, not a symlink) found at most
    `depth` levels under `roots` and not inside one already found: what the launcher covers with a
    private tmpfs, so that nothing a submission writes outlives its kernel. Read once per process."""
    found = list(PRIVATE_TMP)
    for root in roots:
        for top, dirs, _ in os.walk(root, onerror=lambda _: None):
            level = top[len(root):].count(os.sep)
            keep = []
            for name in dirs:
                path = os.path.join(top, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                if any(path == f or path.startswith(f + os.sep) for f in found):
                    continue
                if stat.S_ISDIR(mode) and mode & stat.S_IWOTH:
                    found.append(path)
                elif stat.S_ISDIR(mode) and level < depth - 1:
                    keep.append(name)
            dirs[:] = keep
    return tuple(found)


def process_limit(allowance: int | None, uid: int | None) -> tuple[int | None, int | None]:
    """(RLIMIT_NPROC for a kernel running as `uid`, the processes and threads `uid` runs now).

    The kernel's RLIMIT_NPROC counts every process and thread of its real user, not only the
    submission's: with the grader's own user that includes the student's desktop (a browser alone
    runs hundreds of threads). So the limit is what the user runs now, a quarter more for what
    the desktop may start meanwhile, plus the submission's `allowance`; None (no limit) where
    the user's threads cannot be counted, rather than a limit that kills the kernel at start."""
    if allowance is None:
        return None, None
    running = platform.threads_of(uid) if uid is not None else None
    if running is None:
        return None, None
    return running + running // 4 + allowance, running


def _kill_user(uid: int) -> None:
    """Kill every process of `uid` (kill(-1) from a child that runs as that user), then clear its
    keyrings (`_clear_keyrings`): with none of its processes left, none can fill them again."""
    try:
        _kill_processes(uid)
    finally:
        _clear_keyrings(uid)


def _kill_processes(uid: int) -> None:
    for _ in range(5):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)  # everything this user may signal, but not us
            except OSError:
                pass
            os._exit(0)
        os.waitpid(pid, 0)
        if not _processes_of(uid):
            return
        time.sleep(0.05)


@functools.cache
def _keyctl():
    """(libc's syscall(), keyctl's number) on Linux where the number is known, else None. Loaded
    here, never in a forked child (dlopen after fork in a threaded process may deadlock)."""
    number = KEYCTL_SYSCALLS.get(os.uname().machine) if sys.platform.startswith("linux") else None
    if number is None:
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    return call, number


def _clear_keyrings(uid: int) -> None:
    """Empty the user keyring and the user-session keyring of `uid` (KEYCTL_CLEAR), from a child
    that runs as that user: keyrings are per uid and outlive every namespace of the kernel (see
    the header). Where keyctl is missing or refused, nothing is cleared and grading goes on."""
    found = _keyctl()
    if found is None:
        log.debug("keyrings of uid %d not cleared: no keyctl(2) known on this machine", uid)
        return
    call, number = found
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            os.setgroups([])
            os.setuid(uid)
            for keyring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING):
                if call(ctypes.c_long(number), ctypes.c_long(KEYCTL_CLEAR), ctypes.c_long(keyring)) != 0:
                    status = status or min(ctypes.get_errno(), 255) or 255
        except BaseException:  # noqa: BLE001 - the child says only that it failed
            status = 255
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    if status:
        code = os.waitstatus_to_exitcode(status)
        log.debug("keyrings of uid %d not cleared: %s", uid,
                  os.strerror(code) if 0 < code < 255 else f"status {code}")


def _mount_tmpfs(path: Path, size: int, uid: int, gid: int) -> None:
    """Mount a tmpfs of `size` bytes on `path` (mode 0700, owned by uid:gid; no set-uid files, no
    devices; at most one inode per 4 KiB of it, so empty files cannot fill memory either). Root,
    Linux."""
    inodes = max(size // 4096, 1024)
    call = ctypes.CDLL(None, use_errno=True).mount
    data = f"size={int(size)},nr_inodes={inodes},mode=0700,uid={uid},gid={gid}".encode()
    if call(b"tmpfs", os.fsencode(str(path)), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV), data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount tmpfs on {path}: {os.strerror(errno)}")


def _processes_of(uid: int) -> int:
    return platform.threads_of(uid) or 0


class _SandboxedKernelManager(KernelManager):
    launcher_argv: list[str] = []

    def format_kernel_cmd(self, extra_arguments=None):
        return [*self.launcher_argv, sys.executable, "-m", "ipykernel_launcher", "-f",
                self.connection_file]


class _StderrTail:
    """The last STDERR_KEPT bytes a process writes to the write end of a pipe (``fd``), read by a
    daemon thread so that the process never blocks on a full pipe."""

    def __init__(self) -> None:
        self._read, self.fd = os.pipe()
        self._data = b""
        self._thread = threading.Thread(target=self._drain, daemon=True, name="sandbox-stderr")
        self._thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._read, 65536):
                self._data = (self._data + chunk)[-STDERR_KEPT:]
        except OSError:
            pass
        finally:
            os.close(self._read)

    def started(self) -> None:
        """The process holds the write end now: ours goes, so the pipe ends when the process does."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def lines(self, wait: float = 0.0) -> list[str]:
        """Its last lines (after waiting up to `wait` seconds for the process's end of the pipe)."""
        if wait:
            self._thread.join(wait)
        return [line for line in self._data.decode(errors="replace").splitlines() if line.strip()]


# What a kernel writes when a fork is refused (EAGAIN: the process limit), or a thread, which
# pthread_create refuses with EAGAIN for the process limit and for a stack the memory limit
# cannot map alike.
_FORK_REFUSED = ("Resource temporarily unavailable", "EAGAIN")
_THREAD_REFUSED = ("can't start new thread",)
# ... and when an allocation or a library's mapping is refused under the memory limit.
_MEMORY_REFUSED = ("MemoryError", "failed to map segment", "Cannot allocate memory")
# ... and when a write is refused for want of room (the scratch folder's cap, root only).
_DISK_FULL = ("No space left on device", "ENOSPC")


def _size(n: int) -> str:
    return f"{n / GiB:g} GiB" if n >= GiB else f"{n / 1024 ** 2:g} MiB"


class Sandbox:
    """One caged kernel; use as `with Sandbox(...) as box: box.client.execute(...)`."""

    def __init__(self, limits: Limits = Limits(), hide: tuple[Path, ...] = (),
                 startup_timeout: float = 60, env: dict[str, str] | None = None,
                 listen_port: int | None = None):
        self.limits, self.hide = limits, tuple(Path(p).resolve() for p in hide)
        self.listen_port = listen_port  # see the header: a listener in the kernel's network
        self.listener: socket.socket | None = None
        self.listens = "not asked"  # "own" (listener set), "shared", or "none: why"
        self.extra_env = dict(env or {})  # the grader's own settings, e.g. JAVA_TOOL_OPTIONS
        self.startup_timeout = startup_timeout
        self.user: tuple[int, int] | None = None
        self._lock: int | None = None
        self._lifeline: int | None = None  # the write end of the launcher's lifeline (kept open, never written)
        self.scratch: Path | None = None
        self.home: Path | None = None  # where the kernel writes: scratch/home (a tmpfs) as root, else scratch
        self.disk_capped = False  # a tmpfs of limits.disk_bytes is mounted on self.home
        self.manager: KernelManager | None = None
        self.client = None
        self.missing = platform.sandbox_missing()  # empty: the Unix launcher cages the kernel
        self.process_limit: int | None = None     # the kernel's RLIMIT_NPROC, as set
        self.processes_before: int | None = None  # what its user ran when it started
        self._stderr: _StderrTail | None = None

    def __enter__(self) -> "Sandbox":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        taken = take_user()
        if taken:
            uid, gid, self._lock = taken
            self.user = (uid, gid)
            # What a grader killed before it closed this user's last sandbox left: processes and keys.
            _kill_user(uid)
        # As root the scratch folder lives outside /tmp (RUN_DIR); without root it is made in /tmp. Either
        # way the kernel gets a /tmp of its own (PRIVATE_TMP) with the scratch folder kept in it.
        base = RUN_DIR if self.user else None
        if base is not None:
            base.mkdir(mode=0o711, exist_ok=True)
        # Marked as this grader's (minikafka.scratch; the lock file stays root's after the chown):
        # the next sandbox removes it if this grader is killed.
        self.scratch = scratch_folder.make("minikafka-sandbox-", base)
        if self.user:
            os.chown(self.scratch, *self.user)
        self.home = self._cap_disk()
        home = self.home
        env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"]),
               "HOME": str(home),
               "TMPDIR": str(home), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
               "MPLBACKEND": "module://matplotlib_inline.backend_inline",
               "JAVA_HOME": os.environ.get("JAVA_HOME", ""), "PYDEVD_DISABLE_FILE_VALIDATION": "1",
               **{name: os.environ[name] for name in OS_ESSENTIALS if name in os.environ},
               **{name: str(home) for name in USER_FOLDERS if name in os.environ},
               **self.extra_env}
        limits = asdict(self.limits)
        if self.user:
            self.process_limit = limits["processes"]
        elif not self.missing:
            # Without a user of its own the limit counts the grader's user's processes and threads too.
            self.process_limit, self.processes_before = process_limit(limits["processes"], platform.current_uid())
            limits["processes"] = self.process_limit
        if self.missing:  # no launcher: the kernel is started directly, over TCP (see the header)
            manager = _SandboxedKernelManager(kernel_name=CURRENT_ENV_KERNEL_NAME,
                                              kernel_spec_manager=NbvalKernelspecManager(),
                                              transport="tcp", ip="127.0.0.1",
                                              connection_file=str(home / "kernel.json"))
        else:
            config = {"uid": self.user and self.user[0], "gid": self.user and self.user[1],
                      "scratch": str(home), "env": env, "limits": limits,
                      "network": self.limits.network,
                      "private_tmp": list(shared_folders()),
                      # Kept reachable inside a private /tmp: the scratch folder (where a grader
                      # that is not root makes it), the project and its virtualenv (a CI clone may
                      # live in /tmp); solutions/ stays covered (hidden before this).
                      "keep": sorted({str(self.scratch), str(PROJECT_ROOT.resolve()), str(Path(sys.prefix).resolve())}),
                      # The interpreter may live where the sandbox user cannot go (pyenv under /root).
                      "expose": sorted({str(Path(sys.base_prefix).resolve()),
                                        str(Path(sys.executable).resolve().parent)}),
                      "seal": seal(self.scratch),
                      # Only this sandbox's folder under RUN_DIR in the kernel's mount namespace
                      # (another sandbox's tmpfs is detached there), and RUN_DIR read-only when
                      # the kernel writes in a capped tmpfs (its own scratch folder included).
                      "confine": {"parent": str(RUN_DIR), "own": str(self.scratch),
                                  "read_only": self.disk_capped}}
            # A hidden path the seal or the private /tmp covers gets no mount of its own, unless
            # the launcher could not seal or cover it (then "hide_later" is mounted after all).
            config["hide"] = [str(p) for p in self.hide if not covered(p, config)]
            config["hide_later"] = [str(p) for p in self.hide if covered(p, config)]
            manager = _SandboxedKernelManager(kernel_name=CURRENT_ENV_KERNEL_NAME,
                                              kernel_spec_manager=NbvalKernelspecManager(),
                                              transport="ipc", ip=str(home / "zmq"),
                                              connection_file=str(home / "kernel.json"))
        # The launcher's lifeline: it kills the kernel when the grader's end closes, however the
        # grader ends (killed mid-class, its kernels used to run on, up to their CPU limit).
        lifeline = None
        if not self.missing:
            lifeline, self._lifeline = os.pipe()
            config["lifeline"] = lifeline
        channel = None
        if self.listen_port is not None and not self.missing:
            channel = socket.socketpair()
            config["listen"] = {"port": self.listen_port, "fd": channel[1].fileno()}
        elif self.listen_port is not None:
            self.listens = "shared"
        if not self.missing:
            manager.launcher_argv = [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(config), "--"]
        self.manager = manager
        manager.write_connection_file()
        if self.user:
            os.chown(manager.connection_file, *self.user)
        self._stderr = _StderrTail()
        fds = ((channel[1].fileno(),) if channel else ()) + ((lifeline,) if lifeline is not None else ())
        passed = {"pass_fds": fds} if fds else {}
        try:
            manager.start_kernel(cwd=str(home), env=env, stdout=subprocess.DEVNULL,
                                 stderr=self._stderr.fd, **passed)
        finally:
            if channel:
                channel[1].close()
            if lifeline is not None:
                os.close(lifeline)
        self._stderr.started()
        if channel:
            self._take_listener(channel[0])
        self.client = manager.client()
        self.client.start_channels()
        try:
            self.client.wait_for_ready(timeout=self.startup_timeout)
        except RuntimeError as exc:  # "Kernel died before replying to kernel_info", or its timeout
            raise SandboxError(f"the sandboxed kernel did not start ({exc}). "
                               f"{self.death_note(wait=2.0)}") from None

    def _cap_disk(self) -> Path:
        """The folder the kernel writes in: as root (a sandbox user of its own, so the launcher
        runs) with a `disk_bytes` limit, `scratch/home` with a tmpfs of that size mounted on it
        (see the header); else the scratch folder itself, uncapped in total as before. A tmpfs the
        OS refuses (a container without CAP_SYS_ADMIN) is said in the log and not pretended."""
        if not self.user or self.limits.disk_bytes is None or self.missing:
            return self.scratch
        home = self.scratch / HOME_NAME
        home.mkdir(mode=0o700)
        try:
            _mount_tmpfs(home, self.limits.disk_bytes, *self.user)
        except OSError as exc:
            log.warning("the scratch folder's total is not capped: %s", exc)
            home.rmdir()
            return self.scratch
        self.disk_capped = True
        return home

    def _disk_text(self) -> str:
        return (f"{_size(self.limits.disk_bytes)} in all in the scratch folder "
                "(HOME, TMPDIR, the working folder)")

    def _take_listener(self, channel: socket.socket) -> None:
        """The launcher's answer: a listening socket in the kernel's network, or why not."""
        try:
            channel.settimeout(self.startup_timeout)
            said, fds, _, _ = socket.recv_fds(channel, 256, 1)
        except OSError as exc:
            said, fds = f"none: {exc}".encode(), []
        finally:
            channel.close()
        if fds:
            self.listener, self.listens = socket.socket(fileno=fds[0]), "own"
        else:
            self.listens = said.decode(errors="replace") or "none: the launcher said nothing"

    def limits_text(self) -> str:
        """The limits in force, in words."""
        if self.missing:
            return "no limits (this OS has no rlimits)"
        parts = []
        if self.limits.cpu_seconds is not None:
            parts.append(f"CPU {self.limits.cpu_seconds} s (RLIMIT_CPU)")
        if self.limits.memory_bytes is not None:
            parts.append(f"memory {_size(self.limits.memory_bytes)} per process (RLIMIT_AS)")
        if self.process_limit is not None:
            parts.append(self._nproc_text())
        if self.limits.file_bytes is not None:
            parts.append(f"files of {_size(self.limits.file_bytes)} (RLIMIT_FSIZE)")
        if self.disk_capped:
            parts.append(self._disk_text())
        return ", ".join(parts) or "no limits"

    def _nproc_text(self) -> str:
        whose = "the sandbox user" if self.user else "your user"
        before = "" if self.processes_before is None else f"; it ran {self.processes_before} when this kernel started"
        return f"{self.process_limit} processes and threads of {whose} (RLIMIT_NPROC{before})"

    def limit_hit(self, text: str) -> str | None:
        """The limit that `text` (an error, the kernel's last words) shows was hit, or None."""
        memory = (None if self.limits.memory_bytes is None or self.missing else
                  f"{_size(self.limits.memory_bytes)} per process (RLIMIT_AS)")
        if self.process_limit is not None and any(sign in text for sign in _FORK_REFUSED):
            return f"the sandbox's process limit was reached: {self._nproc_text()}"
        if any(sign in text for sign in _THREAD_REFUSED):
            if self.process_limit is not None and memory:
                return f"the sandbox's process or memory limit was reached: {self._nproc_text()}; {memory}"
            if self.process_limit is not None or memory:
                return (f"the sandbox's process limit was reached: {self._nproc_text()}" if memory is None
                        else f"the sandbox's memory limit was reached: {memory}")
        if memory and any(sign in text for sign in _MEMORY_REFUSED):
            return f"the sandbox's memory limit was reached: {memory}"
        if self.disk_capped and any(sign in text for sign in _DISK_FULL):
            return (f"the sandbox's disk limit was reached: {self._disk_text()}; /tmp, /var/tmp and "
                    f"/dev/shm {_size(self.limits.file_bytes or GiB)} each")
        return None

    def death_note(self, wait: float = 0.0) -> str:
        """Why the kernel may have died, for the student: its last words and the limit they name,
        else every limit in force."""
        said = self._stderr.lines(wait) if self._stderr else []
        last = " / ".join(said[-3:])
        hit = self.limit_hit("\n".join(said))
        words = f"Its last words: {last}. " if last else ""
        return words + (f"Likely cause: {hit}." if hit else f"The sandbox's limits: {self.limits_text()}.")

    def alive(self) -> bool:
        return bool(self.manager and self.manager.is_alive())

    def cpu_seconds(self) -> float | None:
        """CPU seconds used so far by the kernel and everything it started (the launcher's process
        tree: the kernel is its child, and what the submission starts is the kernel's, its PID
        namespace's orphans included); None where it cannot be read (`platform.cpu_seconds_of_tree`)
        or when the kernel is gone. The runner's limits count these, not seconds on the clock."""
        process = getattr(getattr(self.manager, "provisioner", None), "process", None)
        return None if process is None else platform.cpu_seconds_of_tree(process.pid)

    def interrupt(self) -> None:
        if self.alive():
            self.manager.interrupt_kernel()

    def close(self) -> None:
        """Kill the kernel and everything it started; remove the scratch folder. Idempotent."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.client is not None:
            self.client.stop_channels()
            self.client = None
        if self.manager is not None:
            try:
                if self.manager.has_kernel:
                    self.manager.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 - a dead kernel is what we want anyway
                pass
            self.manager.cleanup_resources()
            self.manager = None
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        if self._stderr is not None:
            self._stderr.started()  # if the kernel never started, our write end is still open
        if self.user:
            _kill_user(self.user[0])
        if self.scratch is not None:
            # (remove takes the tmpfs on scratch/home off first: scratch.detach_mounts)
            scratch_folder.remove(self.scratch)
            self.scratch = self.home = None
        if self._lock is not None:  # only now may another sandbox take this user
            os.close(self._lock)
            self._lock = None
