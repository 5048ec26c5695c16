"""The CPU report's census (tests/cpu_census.py): each kind of process is named from its command line."""

import os
import subprocess
import sys
import time

import pytest

from cpu_census import OTHER, Census, kind_of


@pytest.mark.parametrize("command, kind", [
    ("/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp jars/* org.apache.spark.deploy.SparkSubmit", "Spark's JVMs"),
    ("bash .venv/lib/python3.11/site-packages/pyspark/bin/spark-class org.apache.spark.deploy.master.Master",
     "Spark's JVMs"),  # the shell execs java: its command line is read once, first
    (".venv/bin/python -m pyspark.daemon pyspark.worker", "Spark's Python workers"),
    (".venv/bin/python -Xfrozen_modules=off -m ipykernel_launcher -f kernel-1.json",
     "notebook kernels (nbval, grading sandboxes)"),
    (".venv/bin/python -m minikafka.cli server --node-id 1", "brokers and controllers"),
    (".venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))",
     "pytest workers (in-process tests, simulations)"),
    ("/bin/sh -c sleep 1", OTHER),
])
def test_a_process_is_named_by_its_command_line(command, kind):
    assert kind_of(command) == kind


BUSY = ("import sys, time\nend = time.process_time() + 1.5\nwhile time.process_time() < end:\n    pass\n"
        "sys.stdin.read()\n")  # then wait: the test says when to end, once the census has counted it


def _counted(census: Census, pid: int) -> float:
    """CPU seconds the census has counted for process `pid` so far."""
    hz = os.sysconf("SC_CLK_TCK")
    return sum(seen[2] for (p, _), seen in list(census._seen.items()) if p == str(pid)) / hz


def _until(condition) -> None:
    """Wait for a state of the census (it samples twice a second), never for a guessed time."""
    while not condition():
        time.sleep(0.05)


@pytest.mark.skipif(not Census.available(), reason="no /proc here: the report prints no census")
def test_the_census_counts_a_busy_child_under_its_kind():
    census = Census()
    census.start()
    busy = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE)
    _until(lambda: _counted(census, busy.pid) >= 1.0)
    busy.stdin.close()
    busy.wait()
    kinds = census.stop()
    assert kinds.get(OTHER, 0) >= 1.0, kinds
    assert all(seconds > 0 for seconds in kinds.values())


@pytest.mark.skipif(not Census.available(), reason="no /proc here: the report prints no census")
def test_a_child_seen_before_its_exec_is_counted_under_the_kind_it_execs():
    """A CI run: a child sampled between fork and exec showed its parent's command line (a pytest
    worker's), was named by it for good, and its 1.5 CPU s went to "pytest workers", not "other"."""
    census = Census()
    census.start()
    # Starts as a "benchmark process" by its command line, execs a busy loop when told.
    first = ("import os, sys\nsys.stdin.readline()\n"
             f"os.execv(sys.executable, [sys.executable, '-c', {BUSY!r}])\n")
    child = subprocess.Popen([sys.executable, "-c", first, "-m", "benchmarks"], stdin=subprocess.PIPE)
    _until(lambda: any(p == str(child.pid) and seen[0] == "benchmark processes"
                       for (p, _), seen in list(census._seen.items())))
    child.stdin.write(b"exec\n")
    child.stdin.flush()
    _until(lambda: _counted(census, child.pid) >= 1.0)
    child.stdin.close()
    child.wait()
    kinds = census.stop()
    assert kinds.get(OTHER, 0) >= 1.0 and "benchmark processes" not in kinds, kinds
