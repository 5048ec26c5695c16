"""The "minikafka" Spark source's option parsing and admission control, without a JVM."""

from __future__ import annotations

import random

import pytest

from minikafka.spark.options import EARLIEST, LATEST, KafkaSourceOptions, SourceOptionError

pytest.importorskip("pyspark")
from minikafka.spark.reader import admit, from_spark_offsets, to_spark_offsets  # noqa: E402

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "trucks_gps"}


def parse(batch: bool = False, **options) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse({**BASE, **options}, batch=batch)


def test_defaults_are_sparks():
    stream = parse()
    assert stream.starting == LATEST and stream.fail_on_data_loss and not stream.include_headers
    assert stream.max_offsets_per_trigger is None and stream.poll_timeout_ms == 120_000
    batch = parse(batch=True)
    assert batch.starting == EARLIEST and batch.ending == LATEST


def test_option_names_are_case_insensitive_and_topics_trimmed():
    opts = KafkaSourceOptions.parse({"KAFKA.BOOTSTRAP.SERVERS": " a:1, b:2 ", "Subscribe": "x, y ,",
                                     "MaxOffsetsPerTrigger": "70"}, batch=False)
    assert opts.bootstrap_servers == "a:1,b:2" and opts.topics == ("x", "y")
    assert opts.max_offsets_per_trigger == 70
    assert opts.consumer_kwargs()["bootstrap_servers"] == ["a:1", "b:2"]


def test_json_offsets_and_assign():
    opts = parse(startingOffsets='{"t": {"0": 5, "1": -2}}')
    assert opts.starting == {("t", 0): 5, ("t", 1): EARLIEST}
    assigned = KafkaSourceOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"t": [1, 0], "u": [2]}'},
                                        batch=True)
    assert assigned.strategy == "assign" and assigned.assigned == (("t", 0), ("t", 1), ("u", 2))
    assert assigned.wants("u") and not assigned.wants("v")


def test_pattern_is_matched_whole_and_skips_internal_topics():
    opts = KafkaSourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribePattern": "trucks.*"}, batch=False)
    assert opts.wants("trucks_gps") and not opts.wants("old_trucks") and not opts.wants("__trucks")


def test_kafka_options_become_typed_kafka_python_arguments():
    opts = parse(**{"kafka.fetch.max.bytes": "1000", "kafka.check.crcs": "false", "kafka.client.id": "me"})
    assert opts.consumer_config == {"fetch_max_bytes": 1000, "check_crcs": False, "client_id": "me"}


@pytest.mark.parametrize("options, batch, message", [
    ({"kafka.bootstrap.servers": ""}, False, "'kafka.bootstrap.servers' must be specified"),
    ({"subscribePattern": "x"}, False, "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign'"),
    ({"subscribe": " , "}, False, "names no topic"),
    ({"startingOffsets": "yesterday"}, False, "'startingOffsets' must be 'earliest', 'latest' or JSON"),
    ({"startingOffsets": '{"t": {"0": -3}}'}, False, "must be an offset >= 0, -2 (earliest) or -1 (latest)"),
    ({"startingOffsets": "latest"}, True, "not allowed for a batch query"),
    ({"endingOffsets": "latest"}, False, "is for batch queries"),
    ({"endingOffsets": "earliest"}, True, "may not be 'earliest'"),
    ({"maxOffsetsPerTrigger": "0"}, False, "'maxOffsetsPerTrigger' must be a positive whole number"),
    ({"maxOffsetsPerTrigger": "10"}, True, "is for streaming queries"),
    ({"failOnDataLoss": "maybe"}, False, "'failOnDataLoss' must be 'true' or 'false'"),
    ({"kafka.auto.offset.reset": "earliest"}, False, "Set the source option 'startingOffsets' instead"),
    ({"kafka.value.deserializer": "x"}, False, "Values are always read as byte arrays"),
    ({"kafka.no.such.setting": "1"}, False, "has no 'no_such_setting'"),
    ({"kafka.fetch.max.bytes": "lots"}, False, "must be a number"),
    ({"minPartitions": "0"}, False, "'minPartitions' must be a positive whole number, not '0'"),
    ({"minPartitions": "four"}, True, "'minPartitions' must be a positive whole number, not 'four'"),
    ({"maxRecordsPerPartition": "-5"}, False, "'maxRecordsPerPartition' must be a positive whole number"),
    ({"groupIdPrefix": "x"}, False, "'groupidprefix' of Spark's Kafka source is not supported"),
    ({"subscribePattern": "("}, False, "not a valid regex"),
])
def test_bad_options_are_refused_with_the_option_named(options, batch, message):
    merged = {**BASE, **options}
    if "subscribePattern" in options and "subscribe" not in options and "Exactly one" not in message:
        del merged["subscribe"]
    with pytest.raises(SourceOptionError) as info:
        KafkaSourceOptions.parse(merged, batch=batch)
    assert message in str(info.value)


def test_assign_with_starting_offsets_must_name_the_same_partitions():
    with pytest.raises(SourceOptionError, match="must name exactly the assigned partitions"):
        KafkaSourceOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"t": [0, 1]}',
                                  "startingOffsets": '{"t": {"0": 3}}'}, batch=False)


def test_spark_offsets_round_trip():
    offsets = {("b", 10): 4, ("a", 2): 7, ("a", 0): 0}
    as_spark = to_spark_offsets(offsets)
    assert as_spark == {"a": {"0": 0, "2": 7}, "b": {"10": 4}}
    assert from_spark_offsets(as_spark) == offsets


def test_admit_takes_everything_without_a_limit_or_under_it():
    begin = {("t", 0): 10, ("t", 1): 0}
    latest = {("t", 0): 15, ("t", 1): 3}
    assert admit(begin, latest, None) == latest
    assert admit(begin, latest, 8) == latest
    assert admit(begin, {("t", 0): 10, ("t", 1): 0}, 5) == begin  # nothing new: start again


def test_admit_shares_a_limit_in_proportion_to_backlog_never_exceeding_it():
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 12)
        begin = {("t", p): rng.randint(0, 1000) for p in range(n)}
        latest = {tp: off + rng.choice([0, 0, 1, rng.randint(0, 5000)]) for tp, off in begin.items()}
        limit = rng.randint(1, 3000)
        end = admit(begin, latest, limit)
        taken = {tp: end[tp] - begin[tp] for tp in begin}
        backlog = sum(latest[tp] - begin[tp] for tp in begin)
        assert all(0 <= taken[tp] <= latest[tp] - begin[tp] for tp in begin)
        assert sum(taken.values()) == min(limit, backlog)
        if backlog > limit:  # each partition within one record of its fair share
            for tp in begin:
                assert abs(taken[tp] - limit * (latest[tp] - begin[tp]) / backlog) < 1
        assert admit(begin, latest, limit) == end  # deterministic


def _ranges(sizes, topic="t"):
    from minikafka.spark.offset_range_calculator import OffsetRange

    return [OffsetRange(topic, p, 100, 100 + n, True) for p, n in enumerate(sizes)]


def _spans(ranges):
    return [(r.partition, r.from_offset, r.until_offset) for r in ranges]


def test_a_batch_has_one_task_per_topic_partition_by_default_however_small():
    # Spark's Kafka source: a 1-1 mapping of Kafka partitions to Spark tasks. (main packed
    # ten ranges of 30 records into one task, so one executor read them all.)
    from minikafka.spark.options import KafkaSourceOptions
    from minikafka.spark.reader import plan_tasks

    opts = KafkaSourceOptions.parse(BASE, batch=False)
    tasks = plan_tasks(_ranges([30] * 9 + [0]), opts)
    assert [_spans(t.ranges) for t in tasks] == [[(p, 100, 130)] for p in range(9)]  # the empty one dropped
    assert all(t.ranges[0].end_is_log_end for t in tasks)
    # Largest first, so that Spark starts the long reads first; ties in partition order.
    tasks = plan_tasks(_ranges([10, 50, 20, 50]), opts)
    assert [_spans(t.ranges) for t in tasks] == [[(1, 100, 150)], [(3, 100, 150)], [(2, 100, 120)], [(0, 100, 110)]]


def test_min_partitions_splits_the_large_ranges_as_sparks_calculator_does():
    # Cases from Spark's KafkaOffsetRangeCalculatorSuite, worked by hand from its rules.
    from minikafka.spark.offset_range_calculator import KafkaOffsetRangeCalculator as Calc

    # Enough ranges already: nothing is cut.
    assert _spans(Calc(min_partitions=2).get_ranges(_ranges([10, 10, 10]))) == [(0, 100, 110), (1, 100, 110), (2, 100, 110)]
    # One range of 10 into 3: 3, 3, 4 (the last takes the rounding).
    assert _spans(Calc(min_partitions=3).get_ranges(_ranges([10]))) == [(0, 100, 103), (0, 103, 106), (0, 106, 110)]
    # Skew: 1 and 1 stay whole (their share rounds to 1 of 4), 10 takes the other 2 tasks.
    got = Calc(min_partitions=4).get_ranges(_ranges([1, 1, 10]))
    assert _spans(got) == [(0, 100, 101), (1, 100, 101), (2, 100, 105), (2, 105, 110)]
    # Only the piece ending at the log's end keeps end_is_log_end.
    assert [r.end_is_log_end for r in got] == [True, True, False, True]
    # Half rounds up, as Scala's math.round: 5 of 10 offsets at minPartitions 3 is 1.5 -> 2 parts.
    assert _spans(Calc(min_partitions=3).get_ranges(_ranges([5, 5]))) == [
        (0, 100, 102), (0, 102, 105), (1, 100, 102), (1, 102, 105)]


def test_max_records_per_partition_caps_every_task_then_min_partitions_applies():
    from minikafka.spark.offset_range_calculator import KafkaOffsetRangeCalculator as Calc

    assert _spans(Calc(max_records_per_partition=4).get_ranges(_ranges([10, 3]))) == [
        (0, 100, 103), (0, 103, 106), (0, 106, 110), (1, 100, 103)]
    got = Calc(min_partitions=8, max_records_per_partition=50).get_ranges(_ranges([100]))
    assert len(got) == 8 and max(r.size for r in got) <= 50
    rng = random.Random(3)
    for _ in range(300):
        sizes = [rng.choice([0, 1, rng.randint(0, 5000)]) for _ in range(rng.randint(1, 12))]
        mn = rng.choice([None, rng.randint(1, 40)])
        mx = rng.choice([None, rng.randint(1, 3000)])
        got = Calc(mn, mx).get_ranges(_ranges(sizes))
        # Every offset once, in order, each piece non-empty and within the cap.
        for p, n in enumerate(sizes):
            pieces = [r for r in got if r.partition == p]
            assert [(r.from_offset, r.until_offset) for r in pieces][:1] == ([(100, pieces[0].until_offset)] if n else [])
            assert all(a.until_offset == b.from_offset for a, b in zip(pieces, pieces[1:]))
            assert (pieces[-1].until_offset if pieces else 100) == 100 + n
            assert sum(r.end_is_log_end for r in pieces) == (1 if n else 0)
        assert all(r.size > 0 and (mx is None or r.size <= mx) for r in got)
        assert _spans(Calc(mn, mx).get_ranges(_ranges(sizes))) == _spans(got)  # deterministic


def test_the_calculator_refuses_counts_that_are_not_positive():
    from minikafka.spark.offset_range_calculator import KafkaOffsetRangeCalculator as Calc

    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="minPartitions must be a positive whole number"):
            Calc(min_partitions=bad)
        with pytest.raises(ValueError, match="maxRecordsPerPartition must be a positive whole number"):
            Calc(max_records_per_partition=bad)


def test_a_cluster_sessions_workers_run_this_environments_python_by_its_path_not_a_launcher_in_tmp():
    # main named a launcher in the driver's temporary folder for every master: a worker on
    # another host has no such file ("Cannot run program /tmp/minikafka-spark-.../python").
    import importlib
    import sys

    session = importlib.import_module("minikafka.spark.session")  # the module: the package exports session()
    for master in ("spark://10.0.0.5:7077", "yarn", "k8s://https://k8s:6443", "SPARK://host:7077"):
        # (The environment itself may live under the temporary folder, as a CI clone in /tmp does:
        # what must not be named is the launcher in this process's own folder there.)
        assert session.python_for(master) == sys.executable
        assert session.python_for(master) != str(session._launcher)
        assert not session.python_for(master).startswith(str(session._work))
    python_for = session.python_for
    for master in ("", "  ", None):
        with pytest.raises(ValueError, match="master must be a Spark master URL"):
            python_for(master)


def test_the_session_helper_says_clearly_when_java_is_missing_or_too_old(monkeypatch, tmp_path):
    from minikafka.spark.session import JavaNotFoundError, java_version

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(JavaNotFoundError, match="Spark needs Java 17 or 21, and no `java` was found in JAVA_HOME="):
        java_version()
    old = tmp_path / "jdk8"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "java").write_text('#!/bin/sh\necho \'openjdk version "1.8.0_292"\' >&2\n')
    (old / "bin" / "java").chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(old))
    with pytest.raises(JavaNotFoundError, match="Spark 4 needs Java 17 or newer; .* is Java 8"):
        java_version()
    # A JDK's release file is read instead of running its java (this one would say 8 if run).
    (old / "release").write_text('IMPLEMENTOR="Test"\nJAVA_VERSION="17.0.15"\n')
    assert java_version() == 17
    (old / "release").write_text('JAVA_VERSION="1.8.0_292"\n')
    with pytest.raises(JavaNotFoundError, match="Spark 4 needs Java 17 or newer; .* is Java 8"):
        java_version()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(JavaNotFoundError, match="on the PATH \\(and JAVA_HOME is not set\\)"):
        java_version()


class FakeOffsets:
    """A KafkaOffsetReader stand-in: the brokers' answers, set by the test."""

    def __init__(self, earliest, latest):
        self.e, self.l = dict(earliest), dict(latest)

    def partitions(self, *, require_topics):
        return sorted(self.l)

    def earliest(self, tps):
        return {tp: self.e[tp] for tp in tps}

    def latest(self, tps):
        return {tp: self.l[tp] for tp in tps}

    def compacted(self, topics):
        return set()  # no topic here is compacted: every planned range is checked for holes

    def close(self):
        pass


def stream_reader(earliest, latest, **options):
    from minikafka.spark.reader import KafkaMicroBatchStream

    reader = KafkaMicroBatchStream(parse(**options))
    reader.offsets = FakeOffsets(earliest, latest)
    return reader


def test_latest_offset_reports_data_loss_or_skips_it_with_fail_on_data_loss_false(caplog):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from minikafka.spark.offset_reader import KafkaSourceError

    t0, t1 = ("trucks_gps", 0), ("trucks_gps", 1)
    start = to_spark_offsets({t0: 10, t1: 50})
    # Retention deleted offsets 10..19 of partition 0 before the query read them.
    strict = stream_reader({t0: 20, t1: 0}, {t0: 30, t1: 60})
    with pytest.raises(KafkaSourceError, match=r"Data loss: records were deleted \(retention\).*trucks_gps-0 offsets 10\.\.19"):
        strict.latestOffset(start, ReadAllAvailable())
    lenient = stream_reader({t0: 20, t1: 0}, {t0: 30, t1: 60}, failOnDataLoss="false")
    with caplog.at_level("WARNING", logger="minikafka.spark.source"):
        assert from_spark_offsets(lenient.latestOffset(start, ReadAllAvailable())) == {t0: 30, t1: 60}
    # As Spark's Kafka source: the skip is not silent, a warning names the lost range.
    assert [r.getMessage() for r in caplog.records] == [
        "Data loss: records were deleted (retention) before the query read them: trucks_gps-0 offsets 10..19. "
        "Skipped, because failOnDataLoss=false."]
    # The log of partition 1 now ends before the checkpoint's offset (an unclean election).
    truncated = stream_reader({t0: 0, t1: 0}, {t0: 30, t1: 40})
    with pytest.raises(KafkaSourceError, match="trucks_gps-1's log now ends at 40, before offset 50"):
        truncated.latestOffset(start, ReadAllAvailable())
    lenient = stream_reader({t0: 0, t1: 0}, {t0: 30, t1: 40}, failOnDataLoss="false")
    assert from_spark_offsets(lenient.latestOffset(start, ReadAllAvailable())) == {t0: 30, t1: 50}


def test_latest_offset_adds_new_partitions_and_stops_at_the_available_now_target():
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    t0, t1 = ("trucks_gps", 0), ("trucks_gps", 1)
    reader = stream_reader({t0: 0}, {t0: 100})
    reader.prepareForTriggerAvailableNow()
    reader.offsets = FakeOffsets({t0: 0, t1: 5}, {t0: 150, t1: 20})  # more records, and a new partition
    start = to_spark_offsets({t0: 40})
    assert from_spark_offsets(reader.latestOffset(start, ReadAllAvailable())) == {t0: 100}  # the target
    assert from_spark_offsets(reader.latestOffset(start, ReadMaxRows(25))) == {t0: 65}
    live = stream_reader({t0: 0, t1: 5}, {t0: 150, t1: 20})  # no AvailableNow: the new partition joins
    assert from_spark_offsets(live.latestOffset(start, ReadAllAvailable())) == {t0: 150, t1: 20}
    assert [r.value for r in live.partitions(start, to_spark_offsets({t0: 150, t1: 20}))] == [
        (("trucks_gps", 0, 40, 150),), (("trucks_gps", 1, 5, 20),)]  # a task per partition


def test_a_topic_deleted_while_its_offsets_are_looked_up_counts_as_gone():
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from minikafka.spark.offset_reader import KafkaSourceError, TopicsVanished

    class StaleMetadata(FakeOffsets):  # a broker still lists the topic; ListOffsets finds nothing
        def latest(self, tps):
            if any(t == "doomed" for t, _ in tps):
                raise TopicsVanished({"doomed"})
            return super().latest(tps)

    keep, doomed = ("keep", 0), ("doomed", 0)
    start = to_spark_offsets({keep: 5, doomed: 5})
    for fail in ("true", "false"):
        reader = stream_reader({}, {}, subscribe="keep,doomed", failOnDataLoss=fail)
        reader.offsets = StaleMetadata({keep: 0, doomed: 0}, {keep: 9, doomed: 9})
        if fail == "true":
            with pytest.raises(KafkaSourceError, match="Data loss: partition doomed-0 disappeared"):
                reader.latestOffset(start, ReadAllAvailable())
        else:
            assert from_spark_offsets(reader.latestOffset(start, ReadAllAvailable())) == {keep: 9}


def test_spark_workers_import_the_installed_pyspark_not_the_zips_spark_puts_first(monkeypatch, tmp_path):
    import importlib
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pyspark

    session = importlib.import_module("minikafka.spark.session")
    monkeypatch.delenv("SPARK_HOME", raising=False)
    launcher = session.worker_python()
    home = Path(pyspark.__file__).parent
    if not (home / "python" / "lib" / "pyspark.zip").exists():
        assert launcher == sys.executable  # pyspark not pip-installed: nothing to drop
        return
    assert launcher != sys.executable
    own = tmp_path / "user's dir"
    # As Spark starts its Python processes: its zips and a jar first, then the user's PYTHONPATH.
    zips = [str(p) for p in sorted((home / "python" / "lib").glob("*.zip"))]
    jar = next(str(p) for p in (home / "jars").glob("spark-core*.jar"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*zips, jar, str(own)])}
    out = subprocess.run([launcher, "-c", "import os, pyspark; print(os.environ.get('PYTHONPATH')); "
                          "print(pyspark.__file__)", "an argument"],
                         env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [str(own), str(home / "__init__.py")]
    env["PYTHONPATH"] = os.pathsep.join(zips)
    out = subprocess.run([launcher, "-c", "import os; print(os.environ.get('PYTHONPATH'))"],
                         env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["None"]
    # Elsewhere (a SPARK_HOME of its own, or a launcher that cannot run) it is this Python.
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert session.worker_python() == sys.executable
    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setattr(session, "_launcher", tmp_path / "no such folder" / "python")
    assert session.worker_python() == sys.executable


def test_the_sessions_files_live_in_a_folder_of_this_process_removed_when_it_exits():
    """Not at fixed names in /tmp, where another user of a shared machine could have left a
    file or a symlink first (issue 33; tests/test_shared_machine.py plays the two users)."""
    import json
    import os
    import stat
    import subprocess
    import sys
    from pathlib import Path

    said = subprocess.run([sys.executable, "-c", (
        "import importlib, json, os\n"
        "session = importlib.import_module('minikafka.spark.session')\n"
        "folder = session._own_folder()\n"
        "st = folder.lstat()\n"
        "print(json.dumps({'folder': str(folder), 'mode': st.st_mode, 'uid': st.st_uid,\n"
        "                  'parents': sorted({str(p.parent) for p in (session.log_file, session._launcher,\n"
        "                                                             session._fork_socket)}),\n"
        "                  'python': session.worker_python(), 'pid': os.getpid()}))")],
        capture_output=True, text=True, timeout=120)
    assert said.returncode == 0, said.stderr
    got = json.loads(said.stdout)
    folder = Path(got["folder"])
    assert got["mode"] == stat.S_IFDIR | 0o700 and got["uid"] == os.getuid()
    assert got["parents"] == [str(folder)]
    assert folder.name.startswith(f"minikafka-spark-{got['pid']}-") and len(folder.name) > 30  # not guessable
    assert got["python"] in (str(folder / "python"), sys.executable)
    assert not folder.exists()  # removed at exit
