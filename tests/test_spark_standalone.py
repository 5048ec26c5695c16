"""The source on a Spark standalone cluster: a master and two 1-core workers from pyspark's own
``spark-class``, started by the test and stopped at its end.

What it shows: a batch read of 10 partitions is 10 scan tasks, which Spark ran on both
executors (asked of Spark's status store, which records each task's executor), with the same
rows as ``local[2]``; and the session named the executors' Python by its path, not a file in
the driver's temporary folder (which another host would not have). On main the scan of
10 x 90 records was one task, so one executor read everything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from kafka import KafkaProducer  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402

from minikafka.wire.process import free_ports, launch  # noqa: E402
from wire_helpers import wait_until  # noqa: E402

pytestmark = pytest.mark.spark

PARTITIONS = 10
PER_PARTITION = 90


@pytest.fixture(scope="module")
def topic():
    with launch(brokers=1) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        name = f"standalone-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])
        wait_until(lambda: all(p["leader_id"] >= 0 for p in admin.describe_topics([name])[0]["partitions"]),
                   20, f"leaders for {name}")
        admin.close()
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        for p in range(PARTITIONS):
            for i in range(PER_PARTITION):
                producer.send(name, key=b"%d" % p, value=b"%d-%d" % (p, i), partition=p)
        producer.flush()
        producer.close()
        yield cluster.bootstrap_servers, name


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            return sum(1 for w in json.load(r)["workers"] if w["state"] == "ALIVE")
    except (OSError, ValueError, KeyError):  # not up yet, or a page that is not the master's JSON yet
        return 0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    work = tmp_path_factory.mktemp("standalone")
    port, ui, *worker_uis = free_ports(4)
    env = {**os.environ, "SPARK_HOME": str(spark_class.parent.parent), "SPARK_LOG_DIR": str(work),
           "SPARK_WORKER_DIR": str(work / "work"), "PYSPARK_PYTHON": sys.executable}
    procs = []
    try:
        log = open(work / "master.log", "wb")
        procs.append(subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                       "--port", str(port), "--webui-port", str(ui)],
                                      env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        master = f"spark://127.0.0.1:{port}"
        for i in range(2):
            wlog = open(work / f"worker-{i}.log", "wb")
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                 "--memory", "700m", "--webui-port", str(worker_uis[i]), "--work-dir", str(work / f"w{i}"), master],
                env=env, stdout=wlog, stderr=subprocess.STDOUT, start_new_session=True))
        wait_until(lambda: _alive_workers(ui) == 2, 120, "two ALIVE workers registered with the master")
        yield master
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def _read(spark, servers: str, name: str) -> list[tuple]:
    df = (spark.read.format("minikafka").option("kafka.bootstrap.servers", servers)
          .option("subscribe", name).load())
    return sorted((r.partition, r.offset, bytes(r.value)) for r in df.select("partition", "offset", "value").collect())


def _scan_executors(spark, group: str) -> list[str]:
    """The executor of every task of the jobs in ``group``, from Spark's status store."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    store = sc._jsc.sc().statusStore()
    executors = []
    for job in tracker.getJobIdsForGroup(group):
        for stage in tracker.getJobInfo(job).stageIds:
            tasks = store.taskList(stage, 0, 10_000)
            executors += [tasks.apply(i).executorId() for i in range(tasks.size())]
    return executors


def test_a_scan_is_a_task_per_partition_spread_over_the_executors_with_local_results(standalone, topic):
    from pyspark.sql import SparkSession

    from minikafka import spark as mkspark

    servers, name = topic
    assert SparkSession.getActiveSession() is None, "another Spark session is running in this process"
    spark = mkspark.session("minikafka-standalone", master=standalone,
                            config={"spark.executor.memory": "512m", "spark.executor.cores": "1",
                                    "spark.cores.max": "2"})
    try:
        assert spark.conf.get("spark.pyspark.python") == sys.executable  # not a launcher in our /tmp
        wait_until(lambda: spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() >= 3, 120,
                   "two executors (and the driver) known to the driver")
        spark.sparkContext.setJobGroup("scan", "the minikafka scan")
        on_cluster = _read(spark, servers, name)
        executors = _scan_executors(spark, "scan")
    finally:
        spark.stop()
    assert len(on_cluster) == PARTITIONS * PER_PARTITION
    assert len(executors) == PARTITIONS, executors  # one task per topic-partition (main: 1)
    assert len(set(executors)) == 2, executors  # both executors read

    local = mkspark.session("minikafka-local")
    try:
        assert _read(local, servers, name) == on_cluster
    finally:
        local.stop()
