"""A small, quiet local Spark session for the course, with the "minikafka" source registered.

Theory of operation
-------------------
Every setting here was needed on a 2-core course machine (see FIELD-NOTES, "PySpark"):

- ``PYSPARK_PYTHON`` (and the driver's) is this kernel's Python, set before the JVM starts:
  otherwise Spark's Python workers start another Python, without pyarrow or minikafka, and a
  stream dies after a while with only "Python worker failed to connect back".
- ``local[2]``, two shuffle partitions, 1 GB of driver memory, no UI, no console progress bar,
  the session time zone UTC (event-time windows print the same everywhere), JVM logs at
  error level, and ``-Xss16m`` for the driver's threads (stopping a query overflowed the
  default stack).
- Spark starts its Python processes (the source's planner, a streaming query's driver-side
  runner, the task workers) with ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first
  on their ``PYTHONPATH``. Python cannot cache bytecode for modules imported from a zip, so
  each of those processes compiled pyspark's sources again: 0.8-1.1 s from start to the
  source's first call against 0.3-0.4 s for the same imports from site-packages, once per
  streaming query. When pyspark is pip-installed (``SPARK_HOME`` is the package itself,
  so the zips hold the very same files), the workers' Python is a two-line ``sh`` launcher
  (``worker_python()``) that drops those entries and execs this Python, which then imports
  the installed, compiled pyspark. ``PYSPARK_DRIVER_PYTHON`` is that launcher too: Spark
  starts its data-source lookup daemon with the driver's Python (1.0 s of CPU with the
  zips, 0.3 s without, in every session). With any other ``SPARK_HOME``, or where the launcher
  cannot run (a temporary folder mounted noexec), it is this Python itself.
- Even from compiled files, those imports (pyspark, pyarrow, numpy, this package) are
  0.25-0.35 s of each streaming query's start, in the process Spark starts for the query's
  stream reader. With the launcher, ``session()`` also starts ``fork_server``, which imports
  them once; the launcher hands it each such process to fork (see ``fork_server``), and
  starts any other Python, or this one when the server is not there, as before. Linux
  only (the launcher waits on a pidfd; macOS restricts what a forked child may do).
- Spark 4 needs Java 17 or 21. Without a ``java`` the session would fail with a long JVM
  launcher error; we say what is missing instead.

The JVM's own output (its start-up warnings, log lines) goes to a file, ``log_file``, not to
the notebook: Jupyter forwards a kernel's file descriptors to whichever cell is running, so
JVM chatter would land in random cells. Errors still reach the notebook as exceptions.

That file, the workers' launcher and the fork server's socket live in a folder of this
process's own (``_work``: mode 0700, in the temporary folder, under a name no one can guess,
removed when the process exits, and by the next session's process if this one was killed
first), never at a fixed name in ``/tmp``: on a machine that many
students share (a JupyterHub), a name made of a pid could be another user's stale file
(their process had our pid once: we could not write it) or a file or symlink planted there
on purpose (we would run their launcher, or write through their symlink).

On a cluster (a ``master`` that is not ``local...``: Spark standalone, YARN, Kubernetes) the
executors run on other hosts, where that folder does not exist: the Python processes are
then this environment's interpreter named by its path (``spark.pyspark.python``, ``python_for``),
without the launcher or the fork server, and every worker host needs that same interpreter
at that same path with this package's ``spark`` extra installed.

The session is created once per Python process (Spark's ``getOrCreate``), so calling
``session()`` again returns the same one; the source is registered each time (cheap).
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

from minikafka import scratch

LOG4J2 = Path(__file__).with_name("log4j2.properties")
# This process's own folder (see the module docstring), made when first needed (_own_folder).
SCRATCH_PREFIX = "minikafka-spark-"
_work = Path(tempfile.gettempdir()) / f"{SCRATCH_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
log_file = _work / "jvm.log"  # the JVM's stdout and stderr
_launcher = _work / "python"
# fork_server: each streaming query's stream-reader process, forked from one that has imported it.
STREAM_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
FORK_LAUNCHER = Path(__file__).with_name("fork_launcher.py")
_fork_socket = _work / "fork.sock"
_fork_server: subprocess.Popen | None = None


def _own_folder() -> Path:
    """``_work``, made if missing (mode 0700) and removed when this process exits; refused if
    something else is there."""
    try:
        _work.mkdir(mode=0o700)
    except FileExistsError:  # made by this process before (or by the one it was forked from)
        st = _work.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise PermissionError(f"{_work} is not a private folder of this user: Spark's files are "
                                  "not written there") from None
    else:
        # Marked as this process's (minikafka.scratch): a kernel killed before its exit handlers ran
        # leaves it behind, and the next session's folder removes it.
        scratch.adopt(_work, SCRATCH_PREFIX)
        atexit.register(_remove_own_folder, os.getpid())
    return _work


def _remove_own_folder(maker: int) -> None:
    if os.getpid() == maker:  # not in a process forked from the maker
        scratch.remove(_work)


class JavaNotFoundError(RuntimeError):
    """Spark needs a Java runtime (17 or 21) and none was found."""


def java_version() -> int:
    """The major version of the ``java`` Spark will use; JavaNotFoundError if there is none."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise JavaNotFoundError(
            "Spark needs Java 17 or 21, and no `java` was found "
            + (f"in JAVA_HOME={home!r}. " if home else "on the PATH (and JAVA_HOME is not set). ")
            + "Install one (Debian/Ubuntu: `sudo apt install openjdk-17-jre-headless`; conda: "
            "`conda install -c conda-forge openjdk=17`), then restart the kernel.")
    # A JDK's `release` file says its version: reading it is 0.1 s of CPU less than starting
    # a JVM (more in a grading sandbox, where JAVA_TOOL_OPTIONS maps the class archive too).
    release = Path(java).resolve().parent.parent / "release"
    try:
        said = release.read_text(errors="replace")
    except OSError:
        said = ""
    found = re.search(r'^JAVA_VERSION="(\d+)(?:\.(\d+))?', said, re.MULTILINE)
    if not found:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
        found = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
        if not found:
            raise JavaNotFoundError(f"Could not tell the version of {java}: {(out.stderr or out.stdout).strip()!r}")
    major = int(found.group(1))
    if major == 1:  # "1.8.0_..." is Java 8
        major = int(found.group(2))
    if major < 17:
        raise JavaNotFoundError(f"Spark 4 needs Java 17 or newer; {java} is Java {major}. "
                                "Install Java 17 and set JAVA_HOME to it.")
    return major


def worker_python() -> str:
    """The Python executable for Spark's Python processes (see the module docstring)."""
    import pyspark

    home = Path(pyspark.__file__).parent  # as pyspark sets SPARK_HOME, and so Spark's PYTHONPATH
    spark_home = os.environ.get("SPARK_HOME")
    if os.name != "posix" or not (home / "python" / "lib" / "pyspark.zip").exists() or (
            spark_home and Path(spark_home).resolve() != home.resolve()):
        return sys.executable
    script = f"""#!/bin/sh
# Written by minikafka.spark.session: Spark's Python workers without {home}/python/lib/*.zip
# and {home}/jars/* on PYTHONPATH, so they import the installed, compiled pyspark.
set -f
IFS=:
kept=
for entry in $PYTHONPATH; do
  case "$entry" in
    {_sh_quote(str(home))}/python/lib/*.zip|{_sh_quote(str(home))}/jars/*) ;;
    *) kept="${{kept:+$kept:}}$entry" ;;
  esac
done
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
if [ "$#" = 2 ] && [ "$1" = -m ] && [ "$2" = {_sh_quote(STREAM_RUNNER)} ] && [ -S {_sh_quote(str(_fork_socket))} ]; then
  exec {_sh_quote(sys.executable)} -I -S {_sh_quote(str(FORK_LAUNCHER))} {_sh_quote(str(_fork_socket))} {_sh_quote(sys.executable)} "$@"
fi
exec {_sh_quote(sys.executable)} "$@"
"""
    try:
        _own_folder()
        if not _launcher.exists() or _launcher.read_text() != script:
            tmp = _launcher.with_suffix(".tmp")
            tmp.write_text(script)
            tmp.chmod(0o755)
            tmp.replace(_launcher)
        # A temporary folder mounted noexec (a grading sandbox's, say) cannot run it: then
        # the workers start this Python directly, as before, only slower.
        subprocess.run([str(_launcher), "-c", ""], check=True, timeout=60, capture_output=True)
    except (OSError, subprocess.SubprocessError):
        return sys.executable
    return str(_launcher)


def _on_this_machine(master: str) -> bool:
    """Whether every executor of ``master`` runs on this machine: ``local``, ``local[N]``,
    ``local-cluster[...]``. Any other (``spark://``, ``yarn``, ``k8s://``) may run them elsewhere."""
    return master.strip().lower().startswith("local")


def python_for(master: str) -> str:
    """The Python that Spark's Python processes run for a session on ``master``.

    On this machine, ``worker_python()``'s launcher (a file in this process's temporary
    folder). On a cluster the executors run on other hosts, which have no such file: there
    it is this environment's interpreter, ``sys.executable``, by its path, which must hold on
    every host (the same virtualenv or conda environment at the same path, with pyspark,
    pyarrow, kafka-python and minikafka installed).
    """
    if not isinstance(master, str) or not master.strip():
        raise ValueError(f"master must be a Spark master URL such as 'local[2]' or 'spark://host:7077', not {master!r}")
    return worker_python() if _on_this_machine(master) else sys.executable


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def register(spark) -> None:
    """Make ``format("minikafka")`` available in this Spark session."""
    from minikafka.spark.source import MinikafkaDataSource

    spark.dataSource.register(MinikafkaDataSource)


def session(app_name: str = "minikafka", *, master: str = "local[2]",
            config: Mapping[str, Any] | None = None):
    """A SparkSession set up as the module docstring says, with the source registered
    (``master``: ``local[2]`` by default, or a cluster's URL, e.g. ``spark://host:7077``).

    ``config`` adds or overrides Spark settings (``{"spark.sql.shuffle.partitions": 4}``).
    """
    java_version()
    # Both: Spark starts the data-source lookup daemon (once per session) with the driver's.
    python = os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = python_for(master)
    if python == str(_launcher) and sys.platform.startswith("linux"):
        _start_fork_server()
    from pyspark.sql import SparkSession

    java_options = f"-Xss16m -Dlog4j2.configurationFile={LOG4J2.as_uri()}"
    settings: dict[str, Any] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.memory": "1g",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": java_options,
        "spark.executor.extraJavaOptions": java_options,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Streaming state stores: a small number of snapshots kept on disk (course checkpoints).
        "spark.sql.streaming.minBatchesToRetain": "10",
    }
    if not _on_this_machine(master):
        settings["spark.pyspark.python"] = python  # what the executors run, on their hosts
    settings.update({k: str(v) for k, v in (config or {}).items()})
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    _own_folder()
    spark = _with_output_to(log_file, builder.getOrCreate)
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _start_fork_server() -> None:
    """Start ``fork_server`` for this process's Spark, unless it runs already. It exits when
    this process does (its stdin is a pipe from us); until it has imported what it serves,
    the launcher starts each runner as before."""
    global _fork_server
    if _fork_server is not None and _fork_server.poll() is None:
        return
    if len(os.fsencode(str(_fork_socket))) > 100:  # longer than a Unix socket's path may be
        return
    _own_folder()
    _fork_socket.unlink(missing_ok=True)
    # What Spark puts in its Python workers' environment (PythonWorkerFactory; the hash seed
    # from SparkContext): a fresh interpreter reads these at start, so the server must have them.
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"), "PYTHONUNBUFFERED": "YES"}
    with open(log_file, "ab") as log:
        _fork_server = subprocess.Popen(
            [sys.executable, "-m", "minikafka.spark.fork_server", str(_fork_socket),
             "--serve", STREAM_RUNNER, "--preload", "minikafka.spark.source"],
            stdin=subprocess.PIPE, stdout=log, stderr=log, env=env, close_fds=True,
            # Out of our process group: Jupyter stops a kernel by killing its group, and
            # the server must outlive us long enough to see its stdin close and clean up.
            start_new_session=True)
    atexit.register(_stop_fork_server, _fork_server)


def _stop_fork_server(server: subprocess.Popen) -> None:
    server.stdin.close()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()


def _with_output_to(path: Path, start):
    """Run ``start()`` with fds 1 and 2 pointing at ``path``: the JVM it forks keeps them."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:  # the JVM is up: nothing is forked
        return start()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        return start()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
