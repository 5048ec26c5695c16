"""A stand-in for Windows on this Linux machine: CPython with the Unix-only calls taken away.

Imported at interpreter start by the stand-in interpreter that tests/test_portability.py builds
(a virtual environment whose only site-packages holds a .pth file that adds the project's
virtualenv and then imports this module), so every Python it starts has them taken away too: the
`minikafka check` kernel included. What it takes away is what Windows' CPython lacks and minikafka
used, or might use, on its simulated and check paths:

- from minikafka's code (any module named minikafka or minikafka.*): the os functions pread,
  pwrite, preadv, pwritev, readv, writev, fork, forkpty, setsid, getuid, geteuid, getgid,
  getegid, setuid, setgid, setgroups, chown, fchown, lchown, sched_getaffinity, sendfile, killpg,
  getpgid are missing (AttributeError, ImportError for `from os import ...`) and the modules
  fcntl, pwd, grp, resource, termios cannot be imported;
- for everyone: signal.SIGSTOP and signal.SIGCONT are gone (SIGKILL stays: the stdlib's own
  POSIX code, Popen.kill, uses it here, where on Windows it calls TerminateProcess), `pass_fds`
  fails as Windows' Popen fails ("pass_fds not supported on Windows."), a directory cannot be
  opened with os.open (PermissionError, as on Windows) and shutil uses its path-based functions,
  as on Windows.

Why scoped to minikafka: the libraries under it (jupyter_client, platformdirs, pyzmq, ...) choose
their Windows branches by sys.platform, which stays "linux" here, so their Linux branches must keep
the calls they make; whether *they* run on Windows is their projects' concern (they do).

Not imitated (cannot be, on Linux): text-mode files (Windows' os.open without O_BINARY), a file
that cannot be deleted or replaced while it is open, the `nt` module's own calls.
"""

import builtins
import os
import shutil
import signal
import subprocess
import sys
import types

OS_CALLS = frozenset({"pread", "pwrite", "preadv", "pwritev", "readv", "writev", "fork", "forkpty", "setsid",
                      "getuid", "geteuid", "getgid", "getegid", "setuid", "setgid", "setgroups", "chown",
                      "fchown", "lchown", "sched_getaffinity", "sendfile", "killpg", "getpgid"})
MODULES = frozenset({"fcntl", "pwd", "grp", "resource", "termios"})
SIGNALS = ("SIGSTOP", "SIGCONT")


def _from_minikafka(depth: int) -> bool:
    """Whether the Python code `depth` frames up belongs to the minikafka package."""
    try:
        name = sys._getframe(depth + 1).f_globals.get("__name__") or ""
    except ValueError:
        return False
    return name == "minikafka" or name.startswith("minikafka.")


class _OsWithoutUnix(types.ModuleType):
    """The os module's class while the stand-in is in force: minikafka cannot see OS_CALLS."""

    def __getattribute__(self, name):
        if name in OS_CALLS and _from_minikafka(1):
            raise AttributeError(f"module 'os' has no attribute {name!r} (the Windows stand-in)")
        return super().__getattribute__(name)


def _install() -> None:
    os.__class__ = _OsWithoutUnix
    real_import = builtins.__import__

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name.partition(".")[0] in MODULES:
            importer = (globals or {}).get("__name__") if globals else None
            if importer is None:
                importer = sys._getframe(1).f_globals.get("__name__") or ""
            if importer == "minikafka" or importer.startswith("minikafka."):
                raise ModuleNotFoundError(f"No module named {name!r} (the Windows stand-in)", name=name)
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = import_
    for name in SIGNALS:
        if hasattr(signal, name):
            delattr(signal, name)

    real_open = os.open

    def open_(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is None and os.path.isdir(path):
            raise PermissionError(13, "Permission denied (the Windows stand-in opens no directory)", path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    os.open = open_
    shutil._use_fd_functions = False

    real_execute = subprocess.Popen._execute_child

    def execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, *rest, **kw):
        assert not pass_fds, "pass_fds not supported on Windows."
        return real_execute(self, args, executable, preexec_fn, close_fds, pass_fds, *rest, **kw)

    subprocess.Popen._execute_child = execute_child
    os.environ["MINIKAFKA_WINDOWS_STANDIN"] = "1"  # for the tests to see that it is in force


_install()
