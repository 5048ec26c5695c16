"""The sandbox launcher: the first process of a graded kernel (run by path, stdlib only).

Theory of operation: the grader starts `python -I -S _launch.py CONFIG_JSON -- KERNEL_ARGV...`.
This process, still with the grader's privileges, builds the cage and then execs the kernel in it:

1. a new session (its own process group), so the grader can signal the whole group;
2. new namespaces where the OS allows them: PID (the kernel is process 1 of its namespace, so when
   it dies the OS kills everything the submission started, daemons and `setsid` included), mount
   (the reference solutions and the other submissions are covered by empty read-only tmpfs mounts,
   /tmp, /var/tmp, /dev/shm and every other folder anyone may write, such as /run/lock, by fresh
   private ones, and /proc is remounted to show only the
   sandbox's processes; the folder holding the repository is sealed: an empty read-only tmpfs
   on which only the package's folder and the virtualenv are bind-mounted back, read-only, so
   no .git, exercises/, notebooks/ or folders beside it are readable) and network (only a loopback
   interface: notebooks can still talk to brokers they start themselves, nothing outside) and IPC
   (System V shared memory, semaphores and message queues die with the kernel: none is left for
   the next submission). Under the grader's run folder (`confine`: /run/minikafka-grade) only this
   sandbox's own folder keeps its mounts (another sandbox's capped tmpfs, copied into this
   namespace, is detached here: its memory is freed when that sandbox closes, not when this kernel
   ends), and where the kernel writes in a capped tmpfs (root: `scratch/home`, sandbox.py) the
   run folder is bind-mounted read-only over itself, that tmpfs staying writable under it: the
   scratch folder around it, which the sandbox user owns, takes no byte beside the cap.
   Asked for a listener (`listen`: a port and an inherited socket), it opens a TCP socket listening
   on 127.0.0.1 at that port *in the kernel's network namespace* and hands it to the grader over
   that socket (SCM_RIGHTS), then closes both: the grader serves on it from its own process (a
   broker of its own, `grader_broker.py`), which the kernel reaches on its loopback; where the
   kernel shares the grader's network (no namespace), it says "shared" and the grader serves on
   its own loopback. The kernel never holds the listener.
   The kernel's user is called `student` (a /etc/passwd and /etc/group of its own, bind-mounted
   read-only, with its home the scratch folder), whoever runs it: a submission cannot tell the
   grader's sandbox user from the student's own account by name (`_identity`).
   Without root it asks for a user namespace to get the same; if that is refused too it goes on
   with what it got and says so on stderr (the grader reports the isolation level);
3. it forks: the child becomes process 1 of the new PID namespace, sets the rlimits (CPU seconds,
   address space, processes, file size, no core files), drops to the unprivileged user
   (root only), asks to be SIGKILLed when the launcher dies, installs a seccomp filter under which
   the keyring system calls fail with EPERM (keyrings are per uid and outside every namespace:
   ``_refuse_keyrings``; the grader also clears them, sandbox.py), and execs the kernel in the
   scratch folder. The launcher stays as the parent, forwards SIGINT/SIGTERM (the kernel's interrupt) and
   exits with the kernel's status. It holds the read end of a pipe whose write end only the grader
   holds (`lifeline`): when the grader closes the sandbox or dies (SIGKILL included), the pipe
   reads end-of-file and the launcher kills the kernel; before, a killed grader's kernels ran on
   up to their CPU limit, nothing waiting for them. It is a child subreaper: where there is no PID namespace, a
   process the submission orphans (a daemon) becomes the launcher's, not the system's, so the
   grader's CPU count of the launcher's process tree (runner.py's limits) still sees it.

It is run by path with `-I -S` so nothing from the submission's reach (site-packages, the
current folder, PYTHON* variables) is imported before the cage is closed. It is Unix-only (fork,
setsid, fcntl, resource) and stdlib-only, so it cannot use `minikafka.platform`: the sandbox runs
it only where `platform.sandbox_missing()` is empty, and starts the kernel without it elsewhere.
"""

import ctypes
import fcntl
import json
import os
import re
import resource
import select
import signal
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWIPC = 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 0x4000, 1 << 18
MS_REMOUNT, MS_BIND, MS_MOVE = 32, 4096, 8192
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
_libc = ctypes.CDLL(None, use_errno=True)


def _call(name, *args):
    if not hasattr(_libc, name):  # not Linux (macOS has no unshare or prctl): no cage, said so
        raise OSError(38, f"{name}: not available on this OS")
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data):
    _call("mount", source and source.encode(), target.encode(), fstype and fstype.encode(),
          ctypes.c_ulong(flags), data and data.encode())


def _loopback_up():
    # ioctl(SIOCGIFFLAGS / SIOCSIFFLAGS) on "lo": what `ip link set lo up` does.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, ifreq))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b""))


def _isolate(config) -> list[str]:
    """Enter the namespaces; returns what could not be done (empty: full isolation)."""
    missing = []
    flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | (0 if config["network"] else CLONE_NEWNET)
    uid, gid = os.getuid(), os.getgid()
    try:
        _call("unshare", flags | (0 if uid == 0 else CLONE_NEWUSER))
        if uid != 0:  # keep our own ids inside the user namespace
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                               ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
    except OSError as exc:
        return [f"no namespaces ({exc.strerror}): other files readable, network open, "
                "only the process group is killed"]
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        for path in config["hide"]:
            if os.path.isdir(path):
                _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                       "size=4k,mode=000")
    except OSError as exc:
        missing.append(f"could not hide the reference and other submissions ({exc.strerror})")
    if config.get("confine"):
        try:
            _confine(**config["confine"])
        except OSError as exc:
            missing.append(f"the scratch folder is writable beside its cap ({exc.strerror})")
    covered = True  # the seal and the private /tmp hide what "hide_later" names
    try:  # a /tmp (and /var/tmp, /dev/shm) of its own: nothing written there outlives the sandbox
        for path in config.get("private_tmp", []):
            if os.path.isdir(path):
                _private_tmp(path, config)
    except OSError as exc:
        covered = False
        missing.append(f"no private {path} ({exc.strerror})")
    try:
        for number, path in enumerate(config.get("expose", [])):
            _expose(path, os.path.join(config["scratch"], f".expose{number}"))
    except OSError as exc:
        missing.append(f"could not expose {path} to the sandbox user ({exc.strerror})")
    for number, seal in enumerate(config.get("seal") or []):
        try:
            _seal(seal["root"], seal["reveal"], os.path.join(config["scratch"], f".seal{number}"))
        except OSError as exc:
            covered = False
            missing.append(f"could not seal {seal['root']} ({exc.strerror}): what it holds (the "
                           "repository's history, exercises, notebooks, other work) is readable")
    if not covered:  # the reference and the class's folder get mounts of their own after all
        try:
            for path in config.get("hide_later", []):
                if os.path.isdir(path):
                    _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                           "size=4k,mode=000")
        except OSError as exc:
            missing.append(f"could not hide the reference and other submissions ({exc.strerror})")
    try:
        _identity(config)
    except OSError as exc:
        missing.append(f"the kernel's user keeps its own name ({exc.strerror})")
    if not config["network"]:
        try:
            _loopback_up()
        except OSError as exc:
            missing.append(f"no loopback interface ({exc.strerror})")
    return missing


def _hand_over_listener(listen, problems, network):
    """A socket listening on 127.0.0.1:``listen["port"]`` in the namespace just made, sent to the
    grader over the inherited socket ``listen["fd"]``; "shared" where the kernel keeps the grader's
    network (asked for, or no namespace could be made), "none: why" where it cannot listen."""
    channel = socket.socket(fileno=listen["fd"])
    try:
        if network or any(p.startswith("no namespaces") for p in problems):
            channel.sendall(b"shared")
            return
        try:
            server = socket.create_server(("127.0.0.1", int(listen["port"])))
        except OSError as exc:
            channel.sendall(f"none: {exc.strerror}".encode())
            return
        try:
            socket.send_fds(channel, [b"own"], [server.fileno()])
        finally:
            server.close()
    except OSError:
        pass  # the grader then has no listener and says so
    finally:
        channel.close()


def _mount_points():
    """This namespace's mount points (/proc/self/mountinfo), octal escapes decoded."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4])
                for line in f if len(line.split()) > 4]


def _confine(parent, own, read_only):
    """Under `parent` (the grader's run folder), detach every mount but those in `own` (this
    sandbox's scratch folder), best effort: another sandbox's tmpfs, copied in by unshare. With
    `read_only`, bind-mount `parent` read-only over itself (recursively: the tmpfs in `own` stays
    writable under it), so nothing is written there but in the capped tmpfs."""
    prefix, mine = parent.rstrip("/") + "/", own.rstrip("/")
    if not os.path.isdir(parent):
        return
    try:
        points = _mount_points()
    except OSError:
        points = []
    umount2 = getattr(_libc, "umount2", None)
    for point in sorted(set(points), key=lambda p: p.count("/"), reverse=True):
        if point.startswith(prefix) and point != mine and not point.startswith(mine + "/") and umount2:
            umount2(os.fsencode(point), MNT_DETACH)  # refused (a locked mount): left, harmless
    if read_only:
        _mount(parent, parent, None, MS_BIND | MS_REC, None)
        _mount(None, parent, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _kept_flags(parent), None)


def _private_tmp(path, config):
    """A fresh tmpfs on `path`. What must stay reachable under it (the scratch folder, which a
    grader that is not root makes in /tmp; the project and its virtualenv, when the repository was
    cloned into /tmp) is held open first and bind-mounted back onto the new tmpfs from that handle
    (``/proc/self/fd/N`` names the folder even once the tmpfs hides its path), hidden folders
    included: the same folder, so what the kernel writes there the grader sees."""
    prefix = path.rstrip("/") + "/"
    held = []
    try:
        for keep in config.get("keep", []):
            if keep.startswith(prefix):
                held.append((os.open(keep, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), keep))
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={config['limits'].get('file_bytes') or 1 << 30},mode=1777")
        for fd, keep in held:
            os.makedirs(keep, mode=0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", keep, None, MS_BIND | MS_REC, None)
    finally:
        for fd, _ in held:
            os.close(fd)


def _expose(path, stash):
    """Make `path` reachable when a folder above it is closed to others (Python under /root).

    The closed folder is covered by an empty tmpfs (so the rest of it stays hidden) and only
    `path` is moved back into place, bind-mounted from a stash mountpoint.
    """
    closed = None
    parts = os.path.abspath(path).split("/")
    for depth in range(2, len(parts) + 1):
        folder = "/".join(parts[:depth])
        if not os.stat(folder).st_mode & 0o001:
            closed = folder
            break
    if closed is None:
        return
    os.mkdir(stash, 0o700)
    _mount(path, stash, None, MS_BIND | MS_REC, None)
    _mount("tmpfs", closed, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
    target = path if path != closed else closed
    os.makedirs(target, mode=0o755, exist_ok=True)
    _mount(stash, target, None, MS_MOVE, None)
    os.rmdir(stash)


def _seal(root, reveal, stage):
    """Cover `root` (a top-level folder such as /home or /work, or the repository) with an empty
    read-only tmpfs on which only the paths in `reveal` (the package's own folder, the virtualenv,
    the interpreter, the JVM) are bind-mounted back, read-only. Nothing else under `root` stays:
    not the repository's .git, exercises/, notebooks/, solutions/ or tests/, nor anything beside
    it. The tmpfs is built aside (on `stage`, in the scratch folder, which is never under `root`)
    and then moved onto `root`."""
    os.mkdir(stage, 0o700)
    _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
    prefix = root.rstrip("/") + "/"
    for path in reveal:
        if not path.startswith(prefix) or not os.path.exists(path):
            continue
        target = os.path.join(stage, path[len(prefix):])
        os.makedirs(target, mode=0o755, exist_ok=True)
        _mount(path, target, None, MS_BIND | MS_REC, None)
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _kept_flags(path), None)
    _mount(stage, root, None, MS_MOVE, None)
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    os.rmdir(stage)


STUDENT = "student"  # the kernel's user name, under grading and in the student's check alike


def _identity(config):
    """Name the kernel's user `student`, its home the scratch folder, in a copy of /etc/passwd and
    /etc/group bind-mounted read-only over the real ones (the copies are unlinked once mounted:
    nothing is left in the scratch folder). Every other account stays as it is."""
    uid = config["uid"] if os.getuid() == 0 and config.get("uid") is not None else os.getuid()
    gid = config["gid"] if os.getuid() == 0 and config.get("gid") is not None else os.getgid()
    for path, mine, line in (("/etc/passwd", str(uid), f"{STUDENT}:x:{uid}:{gid}:{STUDENT}:{config['scratch']}:/bin/sh"),
                             ("/etc/group", str(gid), f"{STUDENT}:x:{gid}:")):
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            lines = [old for old in f.read().splitlines()
                     if old.split(":")[2:3] != [mine] and old.split(":")[0] != STUDENT]
        copy = os.path.join(config["scratch"], "." + os.path.basename(path))
        with open(copy, "w") as f:
            f.write("\n".join([*lines, line]) + "\n")
        os.chmod(copy, 0o644)
        try:
            _mount(copy, path, None, MS_BIND, None)
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _kept_flags(path), None)
        finally:
            os.unlink(copy)


def _kept_flags(path):
    """The flags of the mount holding `path` that a read-only remount of its bind must keep: in a
    user namespace (the grader without root) the kernel refuses to drop them (EPERM)."""
    have = os.statvfs(path).f_flag
    flags = MS_NOSUID | MS_NODEV  # added: nothing under the seal needs set-uid files or devices
    for st, ms in ((os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
                   (os.ST_RELATIME, MS_RELATIME)):
        if have & st:
            flags |= ms
    return flags


# seccomp: the keyring system calls (add_key, request_key, keyctl) per architecture the filter
# knows, by the AUDIT_ARCH value the kernel reports with each call (linux/audit.h, asm/unistd*.h).
# Keyrings are per uid and outside every namespace: a key one submission leaves, locked against the
# grader's KEYCTL_CLEAR with KEYCTL_SETPERM, the next submission as the same user would read.
KEYRING_SYSCALLS = {
    0xC000003E: (248, 249, 250, 0x40000000 | 248, 0x40000000 | 249, 0x40000000 | 250),  # x86_64 (and x32)
    0x40000003: (286, 287, 288),   # i386, also reachable from an x86_64 process (int 0x80)
    0xC00000B7: (217, 218, 219),   # aarch64
    0x40000028: (309, 310, 311),   # arm (32-bit)
}
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_NO_NEW_PRIVS = 22, 2, 38
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, EPERM = 0x7FFF0000, 0x00050000, 1
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _keyring_filter():
    """A seccomp program: for each architecture of KEYRING_SYSCALLS, its keyring calls fail with
    EPERM; every other call is allowed. Each block: load the arch (seccomp_data.arch, offset 4); not
    this one: on to the next block; else load the call's number (offset 0), compare it with each
    keyring call's (equal: to the last instruction, EPERM), and allow."""
    program, to_deny = [], []
    for arch, numbers in KEYRING_SYSCALLS.items():
        size = 3 + len(numbers) + 1  # LD arch, JEQ arch, LD nr, a JEQ per number, RET ALLOW
        program.append([BPF_LD_W_ABS, 0, 0, 4])
        program.append([BPF_JEQ_K, 0, size - 2, arch])  # jumps count from the next instruction
        program.append([BPF_LD_W_ABS, 0, 0, 0])
        for number in numbers:
            to_deny.append(len(program))
            program.append([BPF_JEQ_K, 0, 0, number])
        program.append([BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW])
    program.append([BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW])  # an architecture not listed
    deny = len(program)
    program.append([BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM])
    for index in to_deny:
        program[index][1] = deny - index - 1
    return [tuple(insn) for insn in program]


def _refuse_keyrings():
    """Install the keyring filter on this process and all it will start (kept across fork and
    exec; no_new_privs first, which a filter needs without CAP_SYS_ADMIN). Linux only."""
    program = _keyring_filter()
    filters = (_SockFilter * len(program))(*(_SockFilter(*insn) for insn in program))
    fprog = _SockFprog(len(program), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _call("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)


def _limit(config):
    limits = config["limits"]
    for name, value in (("RLIMIT_CPU", limits.get("cpu_seconds")), ("RLIMIT_AS", limits.get("memory_bytes")),
                        ("RLIMIT_NPROC", limits.get("processes")),
                        ("RLIMIT_FSIZE", limits.get("file_bytes")), ("RLIMIT_CORE", 0)):
        if value is not None and hasattr(resource, name):
            try:
                resource.setrlimit(getattr(resource, name), (int(value), int(value)))
            except (ValueError, OSError) as exc:  # e.g. macOS refuses RLIMIT_AS
                print(f"minikafka sandbox: {name} not set ({exc})", file=sys.stderr, flush=True)


def _watch_lifeline(fd, child):
    """Until the kernel ends: kill it when the grader's end of the lifeline closes (the grader
    closed the sandbox, or died, SIGKILL included: the kernel, process 1 of its namespace, takes
    its processes with it). A select on the pipe and a pidfd of the kernel, not a thread: after
    unshare(CLONE_NEWPID) this process may not start one. Without pidfds (Linux < 5.3) nothing is
    watched, as before."""
    try:
        kernel = os.pidfd_open(child)
    except (AttributeError, OSError):
        return
    watched = [fd, kernel]
    while kernel in watched:
        ready, _, _ = select.select(watched, [], [])
        if kernel in ready:
            break
        try:
            more = os.read(fd, 64)
        except OSError:
            more = b""
        if not more:  # end of file: the grader's end is closed
            watched.remove(fd)
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass
    os.close(kernel)


def main(argv):
    config = json.loads(argv[1])
    kernel = argv[argv.index("--") + 1:]
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader (jupyter_client starts us in a new session)
    problems = _isolate(config)
    for problem in problems:
        print(f"minikafka sandbox: {problem}", file=sys.stderr, flush=True)
    if config.get("listen"):
        _hand_over_listener(config["listen"], problems, config["network"])
    try:  # orphans stay in the tree whose CPU time the grader counts (Linux 3.4+)
        _call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except OSError:
        pass
    lifeline = config.get("lifeline")
    child = os.fork()
    if child == 0:
        try:
            if lifeline is not None:
                os.close(lifeline)  # (the kernel has no business with it)
            try:  # a /proc that shows only this PID namespace
                _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
            except OSError:
                pass
            _limit(config)
            os.chdir(config["scratch"])
            if os.getuid() == 0 and config.get("uid") is not None:
                os.setgroups([])
                os.setgid(config["gid"])
                os.setuid(config["uid"])
            try:
                _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid: it resets it
            except OSError:
                pass
            try:
                _refuse_keyrings()
            except OSError as exc:  # no seccomp here: the grader still clears the keyrings after
                print(f"minikafka sandbox: keyring calls not refused ({exc})", file=sys.stderr, flush=True)
            os.execve(kernel[0], kernel, config["env"])
        except BaseException as exc:  # noqa: BLE001 - report anything, never return to the caller
            print(f"minikafka sandbox: could not start the kernel: {exc}", file=sys.stderr, flush=True)
            os._exit(127)
    # jupyter_client signals the whole process group, which reaches the kernel directly: forwarding
    # SIGINT too would interrupt it twice. A SIGTERM sent to this process alone is passed on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda s, _f: os.kill(child, signal.SIGKILL))
    if lifeline is not None:
        _watch_lifeline(lifeline, child)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    main(sys.argv)
