"""A read-only class-data-sharing archive of Spark's classes, shared by every sandboxed Spark kernel.

Theory of operation: a graded capstone submission starts its own Spark driver (a JVM), and on a
2-core machine most of that JVM's start is spent loading, verifying and JIT-compiling the same
~10,000 Spark classes every time. Java's AppCDS keeps loaded classes in a memory-mapped file:
`ensure_archive()` builds one once (`-XX:ArchiveClassesAtExit`, a dynamic archive, by running a
small Spark workload like the capstone's: a session, the minikafka source read as a batch and as
a stream over a one-broker cluster, windows, a watermark, foreachBatch), and `java_options()`
gives the flags that make every later JVM map it (`-XX:SharedArchiveFile`), plus two flags for
short-lived JVMs: C1 only (`-XX:TieredStopAtLevel=1`) and the serial collector (no GC threads).
The grader passes them to a Spark notebook's sandbox in `JAVA_TOOL_OPTIONS`.

What is shared is a file, never a process: the archive is written by the grader's user, outside
any sandbox, from the course's own code only, then made read-only (0444 in a folder the sandbox
users cannot write, when the grader runs as root). A submission can read it but not change what
the next submission's JVM maps. The JVM checks the archive against its own version and class
path and ignores it (a warning in the JVM log, no error) when they differ, e.g. after an upgrade;
the archive's name carries the Java and PySpark versions, so an upgrade builds a new one.

It must never make grading fail: if the archive cannot be built (no Java, no PySpark, a failed
workload), `java_options()` gives the two JIT/GC flags alone and grading goes on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from minikafka import platform

FAST_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
BUILD_TIMEOUT = 600.0  # seconds for the one-off workload; a 2-core machine needs ~30 s
_lock = threading.Lock()  # grader threads (--jobs) of one process; flock covers other processes


def cache_dir() -> Path:
    """Beside the virtualenv that holds PySpark: readable by the sandbox users, tied to its jars."""
    return Path(sys.prefix) / "share" / "minikafka"


def archive_path() -> Path | None:
    """Where the archive for this Java and this PySpark lives; None without either."""
    try:
        import pyspark
        from minikafka.spark.session import java_version
        java = java_version()
    except Exception:  # noqa: BLE001 - no Spark here: nothing to share
        return None
    return cache_dir() / f"spark-java{java}-pyspark{pyspark.__version__}.jsa"


# The workload whose classes are archived: what a capstone submission does, in small.
_WORKLOAD = r"""
import atexit, sys
from pyspark.sql import functions as F
from minikafka import scratch, spark as mkspark
from minikafka.feed import produce_trucks
from minikafka.spark.capstone import REPORT_SCHEMA
from minikafka.wire.process import launch

spark = mkspark.session(config={"spark.driver.extraJavaOptions":
                                "-Xss16m -XX:ArchiveClassesAtExit=" + sys.argv[1] + " " + sys.argv[2]})
work = scratch.make("minikafka-cds-")  # the checkpoints: removed at exit, or by the next build if killed
atexit.register(scratch.remove, work)
with launch(brokers=1, controllers=1) as cluster:
    produce_trucks(cluster.bootstrap_servers, count=90, trucks=3, seed=1, progress=False)
    def source(reader, **options):
        reader = reader.format("minikafka").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        for key, value in {"subscribe": "trucks_gps", "startingOffsets": "earliest", **options}.items():
            reader = reader.option(key, value)
        return reader.load()
    def parsed(df):
        report = F.from_json(F.col("value").cast("string"), REPORT_SCHEMA)
        return (df.select("partition", "offset", report.alias("r")).select("r.*")
                .withColumn("event_time", F.timestamp_millis("timestamp_ms")))
    batch = parsed(source(spark.read, endingOffsets="latest"))
    batch.count(); batch.orderBy("timestamp_ms").limit(2).collect()
    speeds = (parsed(source(spark.readStream, maxOffsetsPerTrigger=40)).withWatermark("event_time", "2 minutes")
              .groupBy(F.window("event_time", "1 minute"), "truck_id").agg(F.count("*"), F.avg("speed_kmh")))
    for mode in ("complete", "append"):
        (speeds.writeStream.outputMode(mode).foreachBatch(lambda df, _: df.collect())
         .option("checkpointLocation", str(work / mode)).trigger(availableNow=True).start().awaitTermination())
proc = spark.sparkContext._gateway.proc
spark.stop()
proc.stdin.close()  # the driver exits on its own, and writes the archive as it does
sys.exit(proc.wait(timeout=300))
"""


def ensure_archive() -> Path | None:
    """The archive, built first if missing; None if it cannot be built (then say why on stderr)."""
    target = archive_path()
    if target is None:
        return None
    with _lock:
        try:
            return target if target.is_file() else _build(target)
        except OSError as exc:  # e.g. a virtualenv this user cannot write to
            print(f"minikafka: no Spark class archive ({exc}); Spark starts without it", file=sys.stderr)
            return None


def _build(target: Path) -> Path | None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        platform.lock(lock.fileno())  # another grader may be building it right now
        if target.is_file():
            return target
        print(f"minikafka: building {target} once (about a minute): later Spark kernels start faster",
              file=sys.stderr)
        fd, partial = tempfile.mkstemp(dir=target.parent, suffix=".jsa.partial")
        os.close(fd)
        os.unlink(partial)  # the JVM refuses to overwrite; it creates the file itself
        try:
            done = subprocess.run([sys.executable, "-c", _WORKLOAD, partial, FAST_START],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  timeout=BUILD_TIMEOUT)
            if done.returncode != 0 or not Path(partial).is_file():
                tail = done.stderr.strip().splitlines()[-3:]
                print("minikafka: could not build the Spark class archive (grading goes on without "
                      f"it): exit {done.returncode}: {' / '.join(tail)}", file=sys.stderr)
                return None
            os.chmod(partial, 0o444)
            os.replace(partial, target)  # atomic: a JVM never maps a half-written archive
        except subprocess.TimeoutExpired as exc:
            print(f"minikafka: could not build the Spark class archive: {exc}", file=sys.stderr)
            return None
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    return target


def java_options() -> str:
    """`JAVA_TOOL_OPTIONS` for a sandboxed Spark kernel: the shared archive and the fast-start flags."""
    archive = ensure_archive()
    return FAST_START + (f" -XX:SharedArchiveFile={archive}" if archive else "")
