"""Keyrings do not carry anything from one submission to the next graded as the same user.

Keyrings are per uid and outside every namespace the launcher makes, and the sandbox users are
reused (``minikafka-sandbox0``, ...): a red team passed the hidden inputs of one student's
grading to the next through its user keyring (``@u``) or user-session keyring (``@us``). Now the
kernel's keyring system calls fail (a seccomp filter of the launcher: a key locked with
KEYCTL_SETPERM would survive any clearing), and the sandbox also clears both keyrings when it
closes and when it starts (where no filter can be installed; a grader killed mid-class never
closed). The keys that stand for a submission's are added by a process of the test running as
the sandbox's user. These tests force the same user on both sandboxes by taking its lock
themselves (waiting on it, never a guessed sleep).
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import sys

import pytest

from minikafka import platform
from minikafka.course import sandbox as sandbox_module
from minikafka.course.runner import run_cells
from minikafka.course.sandbox import RUN_DIR, USER_PREFIX, Limits, Sandbox

# (add_key, keyctl) syscall numbers (asm/unistd_64.h).
SYSCALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine)
pytestmark = [
    pytest.mark.skipif(not platform.is_root() or platform.sandbox_missing() != [],
                       reason="a sandbox user of its own needs root and the Unix launcher"),
    pytest.mark.skipif(not sys.platform.startswith("linux") or SYSCALLS is None,
                       reason="Linux keyrings, on a machine whose keyctl number is known"),
]
ENOKEY = 126
KEYRINGS = {"@u": -4, "@us": -5}

# Adds one key to each keyring (as whoever runs it), and prints the keys' ids.
ADD = f"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ids = {{}}
for name, ring in {KEYRINGS!r}.items():
    ctypes.set_errno(0)
    got = libc.syscall({SYSCALLS[0] if SYSCALLS else 0}, b"user", ("mk-test-" + name).encode(), b"hidden input", 12,
                       ctypes.c_int(ring))
    ids[name] = got if got > 0 else -ctypes.get_errno()
print(json.dumps(ids))
"""
EPERM = 1
# Searches each keyring for that key (KEYCTL_SEARCH = 10) and prints [result, errno] per keyring.
FIND = f"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
found = {{}}
for name, ring in {KEYRINGS!r}.items():
    ctypes.set_errno(0)
    got = libc.syscall({SYSCALLS[1] if SYSCALLS else 0}, 10, ctypes.c_int(ring), b"user", ("mk-test-" + name).encode(), 0)
    found[name] = [got, ctypes.get_errno()]
print(json.dumps(found))
"""


def _in_kernel(box: Sandbox, *sources: str) -> list[dict]:
    """What each cell printed (JSON), all run in one `run_cells`, as the grader runs a notebook."""
    runs = run_cells(box, list(sources), cell_timeout=30, budget=60)
    assert all(run.status == "ok" for run in runs), [run.reason for run in runs]
    return [json.loads(run.stream_text.strip().splitlines()[-1]) for run in runs]


def _as_user(uid: int, source: str) -> dict:
    """Run `source` in a child of this process that runs as `uid`; its printed JSON."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.setgroups([])
            os.setuid(uid)
            sys.stdout = os.fdopen(write, "w")  # pytest captures fd 1 its own way
            exec(source, {})  # noqa: S102 - this file's own code
            sys.stdout.flush()
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as out:
        said = out.read()
    os.waitpid(pid, 0)
    return json.loads(said.strip().splitlines()[-1])


def _hold(uid: int) -> int:
    """The lock of sandbox user `uid`, waited for (another test may hold it now)."""
    number = int(pwd.getpwuid(uid).pw_name[len(USER_PREFIX):])
    fd = os.open(RUN_DIR / f"user{number}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    platform.lock(fd)
    return fd


def _same_user(monkeypatch, uid: int, gid: int) -> None:
    """The next sandbox takes user `uid` (waiting for its lock), not the first free one."""
    monkeypatch.setattr(sandbox_module, "take_user", lambda: (uid, gid, _hold(uid)))


def _gone(found: dict) -> bool:
    return all(got == -1 and errno == ENOKEY for got, errno in found.values())


@pytest.mark.notebooks
def test_a_submission_cannot_use_a_keyring_at_all():
    with Sandbox(Limits()) as box:
        [added, found] = _in_kernel(box, ADD, FIND)
        uid, _ = box.user
        outside = _as_user(uid, ADD)  # the same user outside the sandbox: the OS allows it
    assert added == {"@u": -EPERM, "@us": -EPERM}, added
    assert all(got == -1 and errno == EPERM for got, errno in found.values()), found
    assert all(key > 0 for key in outside.values()), outside


@pytest.mark.notebooks
def test_keys_left_in_a_sandbox_user_s_keyrings_are_gone_for_the_next_sandbox(monkeypatch):
    with Sandbox(Limits()) as first:
        uid, gid = first.user
        added = _as_user(uid, ADD)  # as a submission would where no filter can be installed
        assert all(key > 0 for key in added.values()), added
    _same_user(monkeypatch, uid, gid)
    with Sandbox(Limits()) as second:
        assert second.user == (uid, gid)
    assert _gone(_as_user(uid, FIND))


@pytest.mark.notebooks
def test_closing_a_sandbox_clears_its_user_s_keyrings():
    with Sandbox(Limits()) as box:
        uid, _ = box.user
        lock = os.dup(box._lock)  # still ours after close: no other sandbox takes the user meanwhile
        added = _as_user(uid, ADD)
        assert all(key > 0 for key in added.values()), added
    try:
        found = _as_user(uid, FIND)
    finally:
        os.close(lock)
    assert _gone(found), found


@pytest.mark.notebooks
def test_a_sandbox_clears_what_a_killed_grader_left_in_its_user_s_keyrings(monkeypatch):
    """A grader killed mid-class never closed its sandbox: the next one, as the same user, starts clean."""
    uid, gid = platform.user_ids(f"{USER_PREFIX}0") or sandbox_module._ensure_user(0)
    lock = _hold(uid)
    added = _as_user(uid, ADD)  # what the killed grader's submission left
    assert all(key > 0 for key in added.values()), added
    monkeypatch.setattr(sandbox_module, "take_user", lambda: (uid, gid, lock))
    with Sandbox(Limits()) as box:
        assert box.user == (uid, gid)
        found = _as_user(uid, FIND)  # once the sandbox has started, before its kernel runs anything
    assert _gone(found), found


def test_where_keyctl_is_unknown_or_refused_grading_goes_on(monkeypatch):
    sandbox_module._keyctl.cache_clear()
    monkeypatch.setattr(sandbox_module, "KEYCTL_SYSCALLS", {})
    try:
        sandbox_module._clear_keyrings(61_735)  # nothing to call: returns
    finally:
        sandbox_module._keyctl.cache_clear()
    # A uid whose keyrings the call refuses (here a syscall number that is not keyctl's) is logged, not raised.
    monkeypatch.setattr(sandbox_module, "_keyctl", lambda: (ctypes.CDLL(None, use_errno=True).syscall, -1))
    sandbox_module._clear_keyrings(61_735)
