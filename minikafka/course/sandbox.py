"""A sandboxed Jupyter kernel for one submission, driven from the grader's own process.

Theory of operation: `Sandbox(limits, hide, env=...)` is a context manager. On entry it takes a sandbox
user for itself, makes an empty scratch folder (mode 0700, owned by that user) and starts an
IPython kernel through
`_launch.py`, which cages it (see that file: own process group and PID/mount/network namespaces,
rlimits, an unprivileged user, hidden paths). The kernel talks to the grader over ZeroMQ *ipc*
sockets in the scratch folder: Unix sockets cross a network namespace, TCP on 127.0.0.1 would not.
On exit the kernel is killed (which kills its whole PID namespace), then, as root, every process of
the sandbox's user (`kill(-1)` from a child running as that user), then the scratch folder is
removed and the user is given back.

Each running sandbox has an unprivileged user to itself (`minikafka-sandbox0`, `-sandbox1`, ...,
created with `useradd` when the grader runs as root): a per-user process limit and the final
kill(-1) then only ever touch that one submission. A user is taken with an exclusive `flock` on
/run/minikafka-grade/userN.lock, held until the sandbox is closed, so graders running at the same
time on one machine (two terminals, a test suite) never share a user, and so never kill each
other's kernels. Without root the kernel runs as the grader's user; `isolation()` says in words
what is then weaker, and the grader prints it.

The submission itself is never written into the sandbox: the grader sends cell sources over the
kernel protocol and reads outputs from the kernel's messages, so there is no notebook, junit file
or expected output in reach of the student's code.
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from jupyter_client.manager import KernelManager
from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager

LAUNCHER = Path(__file__).with_name("_launch.py")
USER_PREFIX = "minikafka-sandbox"
MAX_USERS = 256
RUN_DIR = Path("/run/minikafka-grade")  # root's scratch folders (outside /tmp, see _start)
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the repository: minikafka/course/sandbox.py
GiB = 1024 ** 3


@dataclass(frozen=True)
class Limits:
    """Per-submission resource limits (None: no limit)."""
    cpu_seconds: int | None = 600      # CPU time of the kernel process and its children, each
    memory_bytes: int | None = 4 * GiB  # address space per process
    processes: int | None = 256        # processes + threads of the sandbox user
    file_bytes: int | None = 512 * 1024 ** 2  # largest file it may write
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


def is_root() -> bool:
    return os.geteuid() == 0


def _ensure_user(number: int) -> tuple[int, int]:
    name = f"{USER_PREFIX}{number}"
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                               "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True)
        if done.returncode not in (0, 9):  # 9: created meanwhile by another grader
            raise RuntimeError(f"cannot create the sandbox user {name}: {done.stderr.strip()}")
        entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def take_user() -> tuple[int, int, int] | None:
    """(uid, gid, lock fd) of a sandbox user no other sandbox on this machine holds; None if not root.

    The lock (an flock on RUN_DIR/userN.lock) is released by closing the fd.
    """
    if not is_root():
        return None
    RUN_DIR.mkdir(mode=0o711, exist_ok=True)
    for number in range(MAX_USERS):
        fd = os.open(RUN_DIR / f"user{number}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
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
    if is_root():
        return ("sandbox: an unprivileged user per submission, own PID/mount/network namespaces, "
                "references and other submissions hidden, rlimits")
    return ("sandbox (not root): own process group and rlimits; namespaces only if this OS "
            "allows unprivileged user namespaces; the kernel runs as your user, so files it can "
            "read you can read (run the grader as root for full isolation)")


def _kill_user(uid: int) -> None:
    """Kill every process of `uid` (kill(-1) from a child that runs as that user)."""
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


def _processes_of(uid: int) -> int:
    try:
        return sum(_owned_by(uid, p) for p in os.listdir("/proc") if p.isdigit())
    except OSError:  # no /proc (macOS)
        return 0


def _owned_by(uid: int, pid: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


class _SandboxedKernelManager(KernelManager):
    launcher_argv: list[str] = []

    def format_kernel_cmd(self, extra_arguments=None):
        return [*self.launcher_argv, sys.executable, "-m", "ipykernel_launcher", "-f",
                self.connection_file]


class Sandbox:
    """One caged kernel; use as `with Sandbox(...) as box: box.client.execute(...)`."""

    def __init__(self, limits: Limits = Limits(), hide: tuple[Path, ...] = (),
                 startup_timeout: float = 60, env: dict[str, str] | None = None):
        self.limits, self.hide = limits, tuple(Path(p).resolve() for p in hide)
        self.extra_env = dict(env or {})  # the grader's own settings, e.g. JAVA_TOOL_OPTIONS
        self.startup_timeout = startup_timeout
        self.user: tuple[int, int] | None = None
        self._lock: int | None = None
        self.scratch: Path | None = None
        self.manager: KernelManager | None = None
        self.client = None

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
        # As root the scratch folder lives outside /tmp, which the sandbox gets a private copy of.
        base = RUN_DIR if self.user else None
        if base is not None:
            base.mkdir(mode=0o711, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="minikafka-sandbox-", dir=base))
        if self.user:
            os.chown(self.scratch, *self.user)
        env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(self.scratch),
               "TMPDIR": str(self.scratch), "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
               "MPLBACKEND": "module://matplotlib_inline.backend_inline",
               "JAVA_HOME": os.environ.get("JAVA_HOME", ""), "PYDEVD_DISABLE_FILE_VALIDATION": "1",
               **self.extra_env}
        limits = asdict(self.limits)
        if limits["processes"] is not None and not self.user:
            # Without a user of its own the limit counts the grader's processes too.
            limits["processes"] += _processes_of(os.getuid()) * 4
        config = {"uid": self.user and self.user[0], "gid": self.user and self.user[1],
                  "scratch": str(self.scratch), "env": env, "limits": limits,
                  "network": self.limits.network, "hide": [str(p) for p in self.hide],
                  "private_tmp": [p for p in PRIVATE_TMP if not self.scratch.is_relative_to(p)],
                  # Kept reachable inside a private /tmp: the project and its virtualenv (a CI
                  # clone may live in /tmp); solutions/ stays covered (hidden before this).
                  "keep": sorted({str(PROJECT_ROOT.resolve()), str(Path(sys.prefix).resolve())}),
                  # The interpreter may live where the sandbox user cannot go (pyenv under /root).
                  "expose": sorted({str(Path(sys.base_prefix).resolve()),
                                    str(Path(sys.executable).resolve().parent)})}
        manager = _SandboxedKernelManager(kernel_name=CURRENT_ENV_KERNEL_NAME,
                                          kernel_spec_manager=NbvalKernelspecManager(),
                                          transport="ipc", ip=str(self.scratch / "zmq"),
                                          connection_file=str(self.scratch / "kernel.json"))
        manager.launcher_argv = [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(config), "--"]
        self.manager = manager
        manager.write_connection_file()
        if self.user:
            os.chown(manager.connection_file, *self.user)
        manager.start_kernel(cwd=str(self.scratch), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.client = manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=self.startup_timeout)

    def alive(self) -> bool:
        return bool(self.manager and self.manager.is_alive())

    def interrupt(self) -> None:
        if self.alive():
            self.manager.interrupt_kernel()

    def close(self) -> None:
        """Kill the kernel and everything it started; remove the scratch folder. Idempotent."""
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
        if self.user:
            _kill_user(self.user[0])
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        if self._lock is not None:  # only now may another sandbox take this user
            os.close(self._lock)
            self._lock = None
