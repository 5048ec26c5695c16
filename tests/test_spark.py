"""The "minikafka" Spark source against a real multi-process minikafka cluster, read by a real Spark.

One local Spark session and one 3-broker cluster serve the whole module (a session takes
5-10 s to start). Each test uses topics of its own. Streaming tests run queries with
Trigger.AvailableNow, or a processing-time trigger stopped by the test, and check what
foreachBatch saw against what the producer was told was written.
"""

from __future__ import annotations

import threading
import uuid

import pytest

pytest.importorskip("pyspark")

from kafka import KafkaProducer  # noqa: E402
from kafka import TopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402

from minikafka.wire.process import launch  # noqa: E402
from wire_helpers import wait_until  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=3, config={"transaction.state.log.num.partitions": 3}) as c:
        yield c


@pytest.fixture(scope="module")
def spark():
    from minikafka import spark as mkspark

    session = mkspark.session("minikafka-tests")
    yield session
    for query in session.streams.active:
        query.stop()
    # Stopped, not left active: a later module in this worker (test_spark_standalone) starts a
    # session of its own and asserts that no other one is running in the process.
    session.stop()


@pytest.fixture(scope="module")
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    yield client
    client.close()


def new_topic(admin, partitions: int, prefix: str = "s") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 3)])
    wait_until(lambda: all(p["leader_id"] >= 0 for p in admin.describe_topics([name])[0]["partitions"]),
               20, f"leaders for {name}")
    return name


def produce(cluster, topic: str, n: int, start: int = 0, headers: bool = False) -> dict[tuple[int, int], tuple]:
    """Send n records; return {(partition, offset): (key, value, timestamp_ms, headers)} as acknowledged."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5)
    sent = []
    for i in range(start, start + n):
        key = None if i % 11 == 0 else b"k%d" % (i % 7)
        hdrs = [("n", str(i).encode()), ("even", b"1")] if headers and i % 2 == 0 else []
        sent.append((key, b"v%d" % i, 1_704_096_000_000 + i, hdrs,
                     producer.send(topic, key=key, value=b"v%d" % i, timestamp_ms=1_704_096_000_000 + i,
                                   headers=hdrs)))
    producer.flush()
    producer.close()
    out = {}
    for key, value, ts, hdrs, future in sent:
        meta = future.get(timeout=30)
        out[(meta.partition, meta.offset)] = (key, value, ts, hdrs)
    return out


def reader(spark, cluster, **options):
    r = spark.read.format("minikafka").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def stream(spark, cluster, **options):
    r = spark.readStream.format("minikafka").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


class BatchLog:
    """What foreachBatch saw: per batch id, the (partition, offset) rows of its last attempt."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: dict[int, list[tuple[int, int]]] = {}
        self.attempts: dict[int, list[list[tuple[int, int]]]] = {}
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        rows = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
        with self.lock:
            self.batches[batch_id] = rows
            self.attempts.setdefault(batch_id, []).append(rows)
        if batch_id == self.fail_on:
            self.fail_on = None
            raise RuntimeError(f"the sink died during batch {batch_id}")

    def rows(self) -> list[tuple[int, int]]:
        return sorted(r for rows in self.batches.values() for r in rows)


# --- batch reads -------------------------------------------------------------------------------------


def test_schema_is_sparks_kafka_schema(spark, cluster, admin):
    topic = new_topic(admin, 1)
    df = reader(spark, cluster, subscribe=topic)
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                        "timestamp:timestamp,timestampType:int>")
    with_headers = reader(spark, cluster, subscribe=topic, includeHeaders="true")
    assert with_headers.schema.simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")


def test_batch_read_returns_exactly_the_topics_records(spark, cluster, admin):
    topic = new_topic(admin, 3)
    sent = produce(cluster, topic, 500, headers=True)
    rows = reader(spark, cluster, subscribe=topic, includeHeaders="true").collect()
    got = {(r.partition, r.offset): (r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in rows}
    assert len(rows) == 500
    assert got == {tp: (key, value, hdrs) for tp, (key, value, _, hdrs) in sent.items()}
    assert {r.topic for r in rows} == {topic} and {r.timestampType for r in rows} == {0}
    # Timestamps are the producer's CreateTime, in UTC (the session's time zone).
    ts = reader(spark, cluster, subscribe=topic).selectExpr("partition", "offset", "unix_millis(timestamp) AS ms").collect()
    assert {(r.partition, r.offset): r.ms for r in ts} == {tp: v[2] for tp, v in sent.items()}


def test_batch_read_between_json_offsets_and_with_assign(spark, cluster, admin):
    topic = new_topic(admin, 2)
    sent = produce(cluster, topic, 200)
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
    rows = reader(spark, cluster, subscribe=topic,
                  startingOffsets=f'{{"{topic}": {{"0": 10, "1": -2}}}}',
                  endingOffsets=f'{{"{topic}": {{"0": -1, "1": 5}}}}').collect()
    assert sorted((r.partition, r.offset) for r in rows) == (
        [(0, o) for o in range(10, ends[0])] + [(1, o) for o in range(0, 5)])
    only_one = reader(spark, cluster, assign=f'{{"{topic}": [1]}}').collect()
    assert sorted(r.offset for r in only_one) == list(range(ends[1])) and {r.partition for r in only_one} == {1}


def test_subscribe_pattern_reads_every_matching_topic(spark, cluster, admin):
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    a, b = new_topic(admin, 1, prefix), new_topic(admin, 2, prefix)
    produce(cluster, a, 30)
    produce(cluster, b, 40)
    rows = reader(spark, cluster, subscribePattern=f"{prefix}-.*").collect()
    assert {t: sum(1 for r in rows if r.topic == t) for t in (a, b)} == {a: 30, b: 40}


def test_errors_reach_the_caller_with_the_cause_named(spark, cluster, admin):
    with pytest.raises(Exception, match="does not exist on the cluster"):
        reader(spark, cluster, subscribe="no-such-topic").collect()
    with pytest.raises(Exception, match="No Kafka broker answered at kafka.bootstrap.servers='127.0.0.1:9'"):
        spark.read.format("minikafka").option("kafka.bootstrap.servers", "127.0.0.1:9") \
            .option("subscribe", "t").option("kafka.bootstrap.timeout.ms", "1500").load().collect()
    with pytest.raises(Exception, match="Set the source option 'startingOffsets' instead"):
        reader(spark, cluster, subscribe="x", **{"kafka.auto.offset.reset": "earliest"}).collect()


# --- streaming ---------------------------------------------------------------------------------------


def test_max_offsets_per_trigger_bounds_every_micro_batch(spark, cluster, admin, tmp_path):
    topic = new_topic(admin, 4)
    sent = produce(cluster, topic, 600)
    log = BatchLog()
    query = (stream(spark, cluster, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=70)
             .writeStream.foreachBatch(log).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    sizes = [len(log.batches[b]) for b in sorted(log.batches)]
    assert all(n <= 70 for n in sizes) and sum(sizes) == 600, sizes
    assert sizes.count(70) == 600 // 70  # full batches until the backlog runs out
    assert log.rows() == sorted(sent)
    assert all(p["numInputRows"] <= 70 for p in query.recentProgress)


def test_restart_from_checkpoint_processes_every_record_exactly_once(spark, cluster, admin, tmp_path):
    """A sink that dies mid-query, a restart, more records, a second restart: every offset once."""
    topic = new_topic(admin, 3)
    checkpoint = str(tmp_path / "cp")
    sent = produce(cluster, topic, 300)
    log = BatchLog(fail_on=2)

    def run():
        return (stream(spark, cluster, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=50)
                .writeStream.foreachBatch(log).option("checkpointLocation", checkpoint)
                .trigger(availableNow=True).start())

    query = run()
    with pytest.raises(Exception, match="the sink died during batch 2"):
        query.awaitTermination(180)
    assert sorted(log.batches) == [0, 1, 2]
    sent.update(produce(cluster, topic, 200, start=300))  # written while the query is down
    query = run()
    query.awaitTermination(180)
    # Batch 2 ran again on exactly the same offsets; nothing else ran twice.
    assert len(log.attempts[2]) == 2 and log.attempts[2][0] == log.attempts[2][1]
    assert all(len(log.attempts[b]) == 1 for b in log.attempts if b != 2)
    assert log.rows() == sorted(sent)  # each offset of the topic exactly once
    sent.update(produce(cluster, topic, 40, start=500))
    query = run()
    query.awaitTermination(180)
    assert log.rows() == sorted(sent)


def test_a_running_query_picks_up_new_topics_of_its_pattern_and_survives_a_broker_kill(spark, cluster, admin, tmp_path):
    prefix = f"live{uuid.uuid4().hex[:6]}"
    first = new_topic(admin, 2, prefix)
    sent = produce(cluster, first, 50)
    log = BatchLog()
    query = (stream(spark, cluster, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
             .writeStream.foreachBatch(log).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        def rows_or_failure(n: int) -> bool:  # a query that died says why at once
            if not query.isActive:
                raise AssertionError(f"the query stopped with {query.exception()!r}")
            return len(log.rows()) == n

        wait_until(lambda: rows_or_failure(50), 120, "the first topic's records")
        second = new_topic(admin, 3, prefix)
        later = produce(cluster, second, 60)
        wait_until(lambda: rows_or_failure(110), 120, "the new topic's records")
        cluster.kill(2)
        try:
            more = produce(cluster, first, 30, start=50)
            try:
                wait_until(lambda: rows_or_failure(140), 120, "records written after a broker died")
            except AssertionError as e:  # what the query had done by then, to tell a stall from slowness
                raise AssertionError(f"{e}: {len(log.rows())} rows read in {len(log.batches)} batches; "
                                     f"the query's last progress: {query.lastProgress}") from None
        finally:
            cluster.restart(2)
        assert query.isActive
    finally:
        query.stop()
    assert len(log.rows()) == len(sent) + len(later) + len(more) == 140


def test_a_deleted_topic_is_data_loss_unless_fail_on_data_loss_is_false(spark, cluster, admin, tmp_path):
    keep = new_topic(admin, 1, "keep")
    produce(cluster, keep, 20)
    for fail in ("true", "false"):
        doomed = new_topic(admin, 1, "doomed")
        produce(cluster, doomed, 20)
        log = BatchLog()
        query = (stream(spark, cluster, subscribe=f"{keep},{doomed}", startingOffsets="earliest", failOnDataLoss=fail)
                 .writeStream.foreachBatch(log).option("checkpointLocation", str(tmp_path / fail))
                 .trigger(processingTime="500 milliseconds").start())
        try:
            wait_until(lambda: len(log.rows()) == 40, 120, "both topics read")
            admin.delete_topics([doomed])
            if fail == "true":
                with pytest.raises(Exception, match=f"Data loss: partition {doomed}-0 disappeared"):
                    query.awaitTermination(120)
            else:
                produce(cluster, keep, 5, start=100)
                wait_until(lambda: len(log.rows()) == 45, 120, "the query to go on without the deleted topic")
                assert query.isActive
        finally:
            query.stop()


# --- the exactly-once sink -------------------------------------------------------------------------------


def test_batch_sink_writes_each_batch_once_even_after_a_partial_attempt(cluster, admin):
    from minikafka.spark.sink import BATCH_HEADER, KafkaBatchSink

    topic = f"alerts-{uuid.uuid4().hex[:8]}"
    with KafkaBatchSink(cluster.bootstrap_servers, topic) as sink:
        batch0 = [(b"t2", b"fast"), (b"t1", b"faster"), (None, b"x")]
        assert sink.write(0, batch0) == 3
        assert sink.write(0, list(reversed(batch0))) == 0  # a replay: already there
        # An attempt at batch 1 that died after two of its (sorted) records were acknowledged.
        batch1 = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")]
        raw = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        for key, value in batch1[:2]:
            raw.send(topic, key=key, value=value, partition=0, headers=[(BATCH_HEADER, b"1")])
        raw.flush()
        raw.close()
        assert sink.write(1, batch1[::-1]) == 2
        assert sink.write(1, batch1) == 0
        assert sink.write(2, []) == 0
        assert sink.batches() == {0: 3, 1: 4}
        assert [(b, k, v) for b, k, v in sink.read()] == (
            [(0, None, b"x"), (0, b"t1", b"faster"), (0, b"t2", b"fast")] + [(1, k, v) for k, v in batch1])
        assert sink.write(0, batch0) == 0  # an older batch than the tail's: done long ago
        with pytest.raises(TypeError, match="a record is a"):
            sink.write(3, [("k", b"v")])
        with pytest.raises(ValueError, match="batch_id must be"):
            sink.write(-1, [])
    two = new_topic(admin, 2, "wide")
    with pytest.raises(ValueError, match="needs a topic with one partition"):
        KafkaBatchSink(cluster.bootstrap_servers, two)


def test_foreach_batch_through_the_sink_is_exactly_once_across_a_crash(spark, cluster, admin, tmp_path):
    from minikafka.spark.sink import KafkaBatchSink

    topic = new_topic(admin, 2)
    sent = produce(cluster, topic, 120)
    sink = KafkaBatchSink(cluster.bootstrap_servers, f"out-{uuid.uuid4().hex[:8]}")
    crash = {"batch": 1}

    def write(df, batch_id):
        rows = [(b"%d" % r.partition, b"%d" % r.offset) for r in df.select("partition", "offset").collect()]
        sink.write(batch_id, rows)
        if crash.get("batch") == batch_id:  # dies after writing, before Spark's commit
            del crash["batch"]
            raise RuntimeError("crash after the write")

    def run():
        return (stream(spark, cluster, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=40)
                .writeStream.foreachBatch(write).option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(availableNow=True).start())

    with pytest.raises(Exception, match="crash after the write"):
        run().awaitTermination(180)
    run().awaitTermination(180)
    assert sink.batches() == {0: 40, 1: 40, 2: 40}
    written = sorted((int(k), int(v)) for _, k, v in sink.read())
    assert written == sorted(sent)  # every input row once in the output topic
    sink.close()


# --- the transactional sink ------------------------------------------------------------------------------


def test_transactional_sink_commits_each_batch_once_and_fences_an_older_instance(cluster, admin):
    from kafka.errors import ProducerFencedError

    from minikafka.spark.transactional_sink import KafkaTransactionalSink

    topic, txn_id = f"alerts-{uuid.uuid4().hex[:8]}", f"query-{uuid.uuid4().hex[:8]}"
    zombie = KafkaTransactionalSink(cluster.bootstrap_servers, topic, txn_id, partitions=2)
    batch0 = [(b"t1", b"fast"), (b"t2", b"faster"), (None, b"x")]
    assert zombie.write(0, batch0) == 3
    assert zombie.write(0, batch0) == 0  # a replay in the same instance: already committed
    # The query restarts (a new driver, the same transactional id) while the old one lives on.
    with KafkaTransactionalSink(cluster.bootstrap_servers, topic, txn_id) as sink:
        assert sink.write(0, batch0[::-1]) == 0  # the predecessor's commit is found, not repeated
        with pytest.raises(ProducerFencedError):
            zombie.write(1, [(b"z", b"zombie")])  # fenced: its epoch is older, whichever call learns it
        assert sink.write(1, [(b"a", b"1"), (b"b", b"2")]) == 2
        assert sink.write(2, []) == 0
        assert sink.batches() == {0: 3, 1: 2}
        assert sorted(sink.read(), key=repr) == sorted(
            [(0, k, v) for k, v in batch0] + [(1, b"a", b"1"), (1, b"b", b"2")], key=repr)
        with pytest.raises(TypeError, match="a record is a"):
            sink.write(3, [("k", b"v")])
        with pytest.raises(ValueError, match="batch_id must be"):
            sink.write(-1, [])
    zombie.close()
    with pytest.raises(ValueError, match="transactional_id must be"):
        KafkaTransactionalSink(cluster.bootstrap_servers, topic, "")


def test_foreach_batch_through_the_transactional_sink_is_exactly_once_across_a_restart(spark, cluster, admin,
                                                                                        tmp_path):
    from minikafka.spark.transactional_sink import KafkaTransactionalSink

    topic = new_topic(admin, 2)
    sent = produce(cluster, topic, 120)
    out, txn_id = f"out-{uuid.uuid4().hex[:8]}", f"query-{uuid.uuid4().hex[:8]}"
    sinks = [KafkaTransactionalSink(cluster.bootstrap_servers, out, txn_id, partitions=2)]
    crash = {"batch": 1}

    def write(df, batch_id):
        rows = [(b"%d" % r.partition, b"%d" % r.offset) for r in df.select("partition", "offset").collect()]
        sinks[-1].write(batch_id, rows)
        if crash.get("batch") == batch_id:  # dies after the commit, before Spark's commit log
            del crash["batch"]
            raise RuntimeError("crash after the write")

    def run():
        return (stream(spark, cluster, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=40)
                .writeStream.foreachBatch(write).option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(availableNow=True).start())

    with pytest.raises(Exception, match="crash after the write"):
        run().awaitTermination(180)
    sinks.append(KafkaTransactionalSink(cluster.bootstrap_servers, out, txn_id))  # the restarted driver's
    run().awaitTermination(180)
    assert sinks[-1].batches() == {0: 40, 1: 40, 2: 40}
    written = sorted((int(k), int(v)) for _, k, v in sinks[-1].read())
    assert written == sorted(sent)  # every input row once in the output topic
    for sink in sinks:
        sink.close()


def test_offset_lookups_fail_with_a_clear_error_when_metadata_never_comes(cluster, admin, monkeypatch):
    # kafka-python's KafkaConsumer.topics() waits for a metadata refresh with no timeout, and a
    # refresh that finds no node to ask leaves its future pending: the query's driver hung.
    # (A setting the plain-socket client does not honour makes the reader use kafka-python.)
    from kafka.future import Future

    from minikafka.spark.offset_reader import KafkaOffsetReader, KafkaSourceError
    from minikafka.spark.options import KafkaSourceOptions

    topic = new_topic(admin, 2)
    options = KafkaSourceOptions.parse({"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic,
                                        "kafkaConsumer.pollTimeoutMs": "1500",
                                        "kafka.metadata.max.age.ms": "300000"}, batch=True)
    reader = KafkaOffsetReader(options)
    assert not reader.plain
    try:
        assert reader.partitions(require_topics=True) == [(topic, 0), (topic, 1)]
        monkeypatch.setattr(reader.consumer._cluster, "request_update", lambda: Future())  # never completes
        outcome: list = []

        def lookup() -> None:
            try:
                outcome.append(reader.partitions(require_topics=True))
            except Exception as e:  # noqa: BLE001 - the test looks at what it was
                outcome.append(e)

        thread = threading.Thread(target=lookup, daemon=True)
        thread.start()
        thread.join(60)  # not a speed check: without the bound it would wait for ever
        assert outcome and isinstance(outcome[0], KafkaSourceError), outcome
        assert "sent no metadata within kafkaConsumer.pollTimeoutMs=1500 ms" in str(outcome[0])
    finally:
        monkeypatch.undo()
        reader.close()


def test_plain_lookups_give_what_kafka_python_gives_and_survive_a_leader_kill():
    # The plain-socket client (offset_client) against kafka-python's consumer, on a cluster of
    # its own (a broker is killed): the same partitions and offsets, earliest after a
    # DeleteRecords too, and read_committed's latest is the last stable offset.
    from kafka import KafkaProducer as Producer

    from minikafka.spark.offset_reader import KafkaOffsetReader
    from minikafka.spark.options import KafkaSourceOptions

    with launch(brokers=3, config={"transaction.state.log.num.partitions": 1}) as c:
        client = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
        topic = new_topic(client, 3)
        produce(c, topic, 90)
        client.delete_records({TopicPartition(topic, 1): 5})
        txn = Producer(bootstrap_servers=c.bootstrap_servers, transactional_id="open-txn")
        txn.init_transactions()
        txn.begin_transaction()
        txn.send(topic, b"pending", partition=2)
        txn.flush()  # written, not committed: the LSO of partition 2 stays below its HW

        def lookups(**extra: str) -> tuple:
            options = KafkaSourceOptions.parse(
                {"kafka.bootstrap.servers": c.bootstrap_servers, "subscribe": topic, **extra}, batch=True)
            reader = KafkaOffsetReader(options)
            try:
                tps = reader.partitions(require_topics=True)
                return reader.plain, tps, reader.earliest(tps), reader.latest(tps)
            finally:
                reader.close()

        kafka_python = "kafka.metadata.max.age.ms"
        plain = lookups()
        assert plain[0] and plain[1:] == lookups(**{kafka_python: "300000"})[1:]
        assert plain[2][(topic, 1)] == 5 and sum(plain[3].values()) == 91
        committed = lookups(**{"kafka.isolation.level": "read_committed"})
        assert committed[0] and committed[1:] == lookups(**{"kafka.isolation.level": "read_committed",
                                                            kafka_python: "300000"})[1:]
        assert committed[3][(topic, 2)] == plain[3][(topic, 2)] - 1

        options = KafkaSourceOptions.parse({"kafka.bootstrap.servers": c.bootstrap_servers, "subscribe": topic},
                                           batch=True)
        reader = KafkaOffsetReader(options)
        try:
            tps = reader.partitions(require_topics=True)
            before = reader.latest(tps)
            leader = reader.client.view.topics[topic][0]  # partition 0's
            c.kill(leader)  # its connection is refused from now on; a new leader is elected
            assert reader.latest(tps) == before
        finally:
            reader.close()
        txn.close(timeout=1)
        client.close()


def test_plain_lookups_of_a_broker_that_never_answers_fail_within_the_poll_timeout():
    # A "broker" that accepts connections and never answers: every wait is bounded.
    import socket as socketlib

    from minikafka.spark.offset_reader import KafkaOffsetReader, KafkaSourceError
    from minikafka.spark.options import KafkaSourceOptions

    with socketlib.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        options = KafkaSourceOptions.parse(
            {"kafka.bootstrap.servers": "127.0.0.1:%d" % silent.getsockname()[1], "subscribe": "t",
             "kafkaConsumer.pollTimeoutMs": "1500"}, batch=True)
        reader = KafkaOffsetReader(options)
        assert reader.plain
        with pytest.raises(KafkaSourceError, match="sent no metadata within kafkaConsumer.pollTimeoutMs=1500 ms"):
            reader.partitions(require_topics=True)
        reader.close()


def test_a_streaming_querys_offset_lookups_import_no_kafka_client(cluster, admin):
    # Spark starts the stream reader in a Python process of its own for each query: importing
    # kafka-python there was 0.15-0.3 s of every query's start (issue 16). This runs what that
    # process runs (the source's options, the reader's lookups) in a fresh Python.
    import json
    import subprocess
    import sys

    topic = new_topic(admin, 2)
    produce(cluster, topic, 10)
    code = f"""
import json, sys
from minikafka.spark.source import MinikafkaDataSource
source = MinikafkaDataSource({{"kafka.bootstrap.servers": {cluster.bootstrap_servers!r}, "subscribe": {topic!r},
                              "startingOffsets": "earliest"}})
stream = source.streamReader(source.schema())
start = stream.initialOffset()
stream.prepareForTriggerAvailableNow()
end = stream.latestOffset(start, stream.getDefaultReadLimit())
stream.stop()
print(json.dumps([start, end, sorted(m for m in ("kafka", "minikafka.messages") if m in sys.modules)]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    start, end, imported = json.loads(out.stdout)
    assert start == {topic: {"0": 0, "1": 0}}
    assert sum(end[topic].values()) == 10 and set(end[topic]) == {"0", "1"}
    assert imported == []


def test_each_querys_stream_reader_process_is_forked_by_the_sessions_fork_server(spark, cluster, admin, tmp_path):
    # Spark starts a Python process per streaming query for its stream reader: forked from the
    # session's fork_server (which has imported pyspark, pyarrow and this package), it skips
    # 0.25-0.35 s of imports per query (issue 16). Stopping the query ends that process.
    import sys

    session = sys.modules["minikafka.spark.session"]
    server = session._fork_server
    assert server is not None and server.poll() is None
    wait_until(session._fork_socket.exists, 60, "the fork server's socket")

    def forks() -> int:
        with open(session.log_file, errors="replace") as f:
            return sum(f"[{server.pid}]: forked" in line and "python_streaming_source_runner" in line for line in f)

    def children() -> list[str]:
        with open(f"/proc/{server.pid}/task/{server.pid}/children") as f:
            return f.read().split()

    topic = new_topic(admin, 3)
    sent = produce(cluster, topic, 300)
    before, others = forks(), set(children())  # (runners of queries other tests left running)
    log = BatchLog()
    query = (stream(spark, cluster, subscribe=topic, startingOffsets="earliest").writeStream.foreachBatch(log)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="1 second").start())
    wait_until(lambda: len(log.rows()) == 300 or query.exception(), 120, "the query to read the topic")
    assert log.rows() == sorted(sent)
    wait_until(lambda: forks() == before + 1, 30, "the fork server's line for this query's runner")
    mine = set(children()) - others
    assert len(mine) == 1
    query.stop()
    wait_until(lambda: not mine & set(children()), 60, "the runner to end with its query")
