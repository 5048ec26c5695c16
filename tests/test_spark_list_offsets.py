"""The Spark source and KafkaBatchSink against a broker that answers ListOffsets wrongly.

A proxy (``list_offsets_proxy``) in front of a real one-broker cluster answers "latest" as
Tansu did: the last record batch's base offset + 1, here 1 for a log of one batch of
records at offsets 0 onwards. On main the source read 1 of 6 records without a word, and the
sink's replay of a batch wrote two of its three records again. No Spark session: the source's
``partitions()`` and ``read()`` are what Spark calls, on the driver and in a task.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("pyspark")

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from list_offsets_proxy import ListOffsetsProxy  # noqa: E402

from minikafka.spark.data_consumer import BrokerAnsweredWrongly  # noqa: E402
from minikafka.spark.options import KafkaSourceOptions  # noqa: E402
from minikafka.spark.reader import (KafkaBatchReader, KafkaMicroBatchStream, close_pooled_consumers,  # noqa: E402
                                    from_spark_offsets)
from minikafka.spark.sink import KafkaBatchSink  # noqa: E402
from minikafka.wire.process import launch  # noqa: E402
from wire_helpers import wait_until  # noqa: E402

pytestmark = pytest.mark.spark


def tansu(topic: str, partition: int, offset: int) -> int:
    """"latest" for a log of one batch from offset 0, as Tansu answered: its base offset + 1."""
    return min(offset, 1)


@pytest.fixture(scope="module")
def cluster():
    with launch(brokers=1) as c:
        yield c
        close_pooled_consumers()  # the reads' pooled consumers, before their cluster goes (see the function)


@pytest.fixture(scope="module")
def proxy(cluster):
    host, port = cluster.bootstrap_servers.split(",")[0].split(":")
    with ListOffsetsProxy((host, int(port)), tansu) as p:
        yield p


@pytest.fixture(scope="module")
def one_batch(cluster):
    """A topic whose one partition holds one record batch of 6 records (offsets 0-5)."""
    name = f"lies-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    admin.create_topics([NewTopic(name, 1, 1)])
    wait_until(lambda: admin.describe_topics([name])[0]["partitions"][0]["leader_id"] >= 0, 20, f"a leader for {name}")
    admin.close()
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=60_000)
    futures = [producer.send(name, value=b"r%d" % i, partition=0) for i in range(6)]
    producer.flush()
    producer.close()
    assert [f.get(timeout=30).offset for f in futures] == list(range(6))
    return name


def rows(reader, tasks) -> list[int]:
    return [o for t in tasks for b in reader.read(t) for o in b.column("offset").to_pylist()]


def test_the_source_reads_everything_from_an_honest_broker_even_with_ranges_cut_mid_batch(cluster, one_batch):
    opts = KafkaSourceOptions.parse({"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": one_batch,
                                     "minPartitions": "3"}, batch=True)
    reader = KafkaBatchReader(opts)
    tasks = reader.partitions()
    assert [[(r.from_offset, r.until_offset) for r in t.ranges] for t in tasks] == [[(0, 2)], [(2, 4)], [(4, 6)]]
    assert rows(reader, tasks) == list(range(6))  # the cuts inside the batch are not taken for lies


def test_a_batch_query_fails_naming_the_broker_when_listoffsets_ends_the_log_inside_a_batch(proxy, one_batch):
    opts = KafkaSourceOptions.parse({"kafka.bootstrap.servers": proxy.address, "subscribe": one_batch}, batch=True)
    reader = KafkaBatchReader(opts)
    tasks = reader.partitions()
    assert [[(r.from_offset, r.until_offset) for r in t.ranges] for t in tasks] == [[(0, 1)]]  # the lie, planned
    with pytest.raises(BrokerAnsweredWrongly) as info:
        rows(reader, tasks)
    message = str(info.value)
    assert f"The broker {proxy.address} (broker 1) (leader of {one_batch}-0) said the log ends at offset 1" in message
    assert "holding offsets 0 to 5, across that end" in message
    assert proxy.lies_told > 0


def test_a_streaming_query_fails_instead_of_reading_short(proxy, one_batch):
    opts = KafkaSourceOptions.parse({"kafka.bootstrap.servers": proxy.address, "subscribe": one_batch,
                                     "startingOffsets": "earliest"}, batch=False)
    stream = KafkaMicroBatchStream(opts)
    try:
        start = stream.initialOffset()
        end = stream.latestOffset(start, None)
        assert from_spark_offsets(end) == {(one_batch, 0): 1}
        with pytest.raises(BrokerAnsweredWrongly, match=f"leader of {one_batch}-0"):
            rows(stream, stream.partitions(start, end))
    finally:
        stream.stop()


def test_the_batch_sinks_replay_stops_instead_of_writing_records_twice(cluster, proxy):
    topic = f"sink-lies-{uuid.uuid4().hex[:8]}"
    records = [(None, b"a"), (None, b"b"), (None, b"c")]
    sink = KafkaBatchSink(proxy.address, topic, replication_factor=1, producer_config={"linger_ms": 60_000})
    try:
        assert sink.write(0, records) == 3  # one batch of 3 at offsets 0-2; "latest" is now 1
        with pytest.raises(BrokerAnsweredWrongly) as info:
            sink.write(0, records)  # Spark's replay of batch 0
    finally:
        sink.close()
    assert f"(leader of {topic}-0) said the log ends at offset 1" in str(info.value)
    assert "would write records twice" in str(info.value)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.end_offsets([tp])[tp] == 3  # asked of the broker itself: nothing doubled
    finally:
        consumer.close()
