"""The CPU report's census (tests/cpu_census.py): each kind of process is named from its command line."""

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


@pytest.mark.skipif(not Census.available(), reason="no /proc here: the report prints no census")
def test_the_census_counts_a_busy_child_under_its_kind():
    census = Census()
    census.start()
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 1.5\n"
                             "while time.process_time() < end:\n    pass\n"])
    busy.wait()
    time.sleep(0.1)
    kinds = census.stop()
    # A child seen at least once while it ran: its ticks up to the last sample count, under "other".
    assert kinds.get(OTHER, 0) > 0.5, kinds
    assert all(seconds > 0 for seconds in kinds.values())
