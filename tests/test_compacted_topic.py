"""An application's compacted topic, end to end in the simulation (lecture 07, section 3).

``test_cleaner.py`` drives ``LogCleaner`` on a bare ``Log``; these tests take the path the lecture
takes: a topic created with ``cleanup.policy=compact`` through the cluster, records sent by a
producer, the broker's own cleaner timer (``log.cleaner.backoff.ms``), and a new consumer reading
from the beginning. Each waits for the cleaner's pass by advancing simulated time past it.
"""
from minikafka import Cluster, KafkaConsumer, KafkaProducer, TopicPartition
from minikafka.errors import InvalidRecordError
import pytest

TP = TopicPartition("positions", 0)
BACKOFF_MS = 15_000  # the broker's default log.cleaner.backoff.ms


def past_next_pass(cluster):
    cluster.advance(BACKOFF_MS - cluster.now % BACKOFF_MS + 100)


def read_from_beginning(cluster):
    "(offset, key, value) of every record a new consumer reads from offset 0 to the end."
    reader = KafkaConsumer(bootstrap_servers=cluster, auto_offset_reset="earliest")
    reader.assign([TP])
    end = reader.end_offsets([TP])[TP]
    got = []
    while reader.position(TP) < end:
        got.extend((r.offset, r.key, r.value) for rs in reader.poll(timeout_ms=500).values() for r in rs)
    reader.close()
    return got


@pytest.fixture
def fleet():
    cluster = Cluster(brokers=1, seed=3)
    cluster.create_topic("positions", partitions=1, replication_factor=1,
                         config={"cleanup.policy": "compact", "segment.bytes": 300,
                                 "delete.retention.ms": 20_000})
    producer = KafkaProducer(bootstrap_servers=cluster)

    def send(key, value):
        future = producer.send("positions", key=key, value=value)
        producer.flush()  # one batch per record, so segments roll every few records
        return future

    yield cluster, send
    producer.close()
    cluster.close()


def test_a_new_consumer_reads_the_latest_value_per_key_at_its_original_offset(fleet):
    cluster, send = fleet
    for i in range(30):
        send(b"truck-%d" % (i % 3), b"position %d" % i)
    assert len(read_from_beginning(cluster)) == 30
    log = cluster.replica(1, "positions", 0).log
    active_base = log.active_segment.base_offset
    assert active_base > 3  # segments rolled: there is something to clean

    past_next_pass(cluster)
    after = read_from_beginning(cluster)
    cleaned = [(o, k, v) for o, k, v in after if o < active_base]
    active = [(o, k, v) for o, k, v in after if o >= active_base]
    # Below the active segment: one record per key, the latest there, at the offset it was written.
    latest_below = {}
    for i in range(active_base):
        latest_below[b"truck-%d" % (i % 3)] = (i, b"position %d" % i)
    assert sorted(cleaned) == sorted((o, k, v) for k, (o, v) in latest_below.items())
    # The active segment is untouched, superseded records included.
    assert active == [(i, b"truck-%d" % (i % 3), b"position %d" % i) for i in range(active_base, 30)]
    assert log.log_end_offset == 30  # offsets are never renumbered


def test_a_tombstone_deletes_its_key_and_goes_after_delete_retention_ms(fleet):
    cluster, send = fleet
    for i in range(12):
        send(b"truck-%d" % (i % 3), b"position %d" % i)
    send(b"truck-1", None)
    deleted_at = cluster.now
    for i in range(12, 24):
        if i % 3 != 1:
            send(b"truck-%d" % (i % 3), b"position %d" % i)
    past_next_pass(cluster)
    assert cluster.now - deleted_at < 20_000
    truck_1 = [(o, v) for o, k, v in read_from_beginning(cluster) if k == b"truck-1"]
    assert truck_1 == [(12, None)]  # older values gone, the tombstone kept

    # The other trucks keep writing, so there is something dirty at every pass.
    while cluster.now < deleted_at + 20_000 + BACKOFF_MS:
        send(b"truck-0", b"later")
        send(b"truck-2", b"later")
        cluster.advance(3_000)
    assert [k for _, k, _ in read_from_beginning(cluster) if k == b"truck-1"] == []


def test_a_record_without_a_key_is_refused_with_invalid_record(fleet):
    cluster, send = fleet
    future = send(None, b"which truck?")
    with pytest.raises(InvalidRecordError, match="compacted topic cannot accept a record without a key") as refused:
        future.get()
    assert str(refused.value).count("INVALID_RECORD") == 1  # the broker's message does not repeat the code
    send(b"truck-0", b"keyed")
    assert [(k, v) for _, k, v in read_from_beginning(cluster)] == [(b"truck-0", b"keyed")]
