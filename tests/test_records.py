"""Record batch v2: round trips, byte-level interop with kafka-python, corruption."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords as KafkaMemoryRecords

from minikafka.errors import CorruptRecordError, UnsupportedCodecError
from minikafka.records import (
    HEADER_SIZE,
    Compression,
    MemoryRecords,
    Record,
    RecordBatch,
    decode_varint,
    encode_varint,
)

CODECS = list(Compression)


def sample_records(n=25):
    return [
        Record(
            key=None if i % 5 == 0 else f"truck-{i}".encode(),
            value=None if i == 7 else ("position %d " % i).encode() * (i % 4 + 1),
            timestamp=1_700_000_000_000 + 20_000 * i,
            headers=(("source", b"gps"), ("empty", None)) if i % 3 == 0 else (),
        )
        for i in range(n)
    ]


def essentials(records):
    return [(r.key, r.value, r.timestamp, tuple(tuple(h) for h in r.headers)) for r in records]


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)])
def test_varint_round_trip(value):
    out = bytearray()
    encode_varint(value, out)
    assert decode_varint(bytes(out), 0) == (value, len(out))


def test_varint_zigzag_bytes_match_the_protocol():
    # From Kafka's ByteUtilsTest: zig-zag makes -1 a single byte 0x01.
    for value, expected in [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"), (64, b"\x80\x01")]:
        out = bytearray()
        encode_varint(value, out)
        assert bytes(out) == expected


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_round_trip_every_codec(codec):
    recs = sample_records()
    batch = RecordBatch.build(recs, compression=codec, base_offset=100)
    back = RecordBatch(bytes(batch)).validate()
    assert back.compression == codec
    assert back.base_offset == 100 and back.last_offset == 124 and back.records_count == 25
    assert back.max_timestamp == recs[-1].timestamp
    assert essentials(back.records()) == essentials(recs)
    assert [r.offset for r in back.records()] == list(range(100, 125))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_kafka_python_batch_decodes_in_minikafka(codec):
    recs = sample_records()
    builder = DefaultRecordBatchBuilder(2, int(codec), False, 1234, 5, 42, 1 << 20)
    for i, r in enumerate(recs):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    raw = bytes(builder.build())
    batch = RecordBatch(raw).validate()
    assert batch.compression == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, 42)
    assert essentials(batch.records()) == essentials(recs)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_minikafka_batch_decodes_in_kafka_python(codec):
    recs = sample_records()
    raw = bytes(
        RecordBatch.build(
            recs, compression=codec, base_offset=7, producer_id=99, producer_epoch=1, base_sequence=3
        )
    )
    kbatch = DefaultRecordBatch(raw)
    assert kbatch.validate_crc()
    assert (kbatch.producer_id, kbatch.producer_epoch, kbatch.base_sequence) == (99, 1, 3)
    got = list(kbatch)
    assert [r.offset for r in got] == list(range(7, 32))
    assert [(r.key, r.value, r.timestamp) for r in got] == [(r.key, r.value, r.timestamp) for r in recs]
    assert [[tuple(h) for h in r.headers] for r in got] == [list(r.headers) for r in recs]


def test_uncompressed_bytes_identical_to_kafka_python():
    recs = sample_records(5)
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i, r in enumerate(recs):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    ours, theirs = bytes(RecordBatch.build(recs)), bytes(builder.build())
    # kafka-python leaves partitionLeaderEpoch at 0; Kafka's Java client writes -1
    # (NO_PARTITION_LEADER_EPOCH), as we do. The broker overwrites it anyway.
    assert ours[:12] + ours[16:] == theirs[:12] + theirs[16:]
    assert RecordBatch(ours).partition_leader_epoch == -1


def test_patching_offset_and_epoch_keeps_the_crc_valid():
    batch = RecordBatch.build([b"a", b"b", b"c"], compression="gzip")
    patched = RecordBatch(batch.with_offsets(1_000_000, partition_leader_epoch=7)).validate()
    assert patched.base_offset == 1_000_000 and patched.partition_leader_epoch == 7
    assert patched.crc == batch.crc
    assert bytes(patched)[16:] == bytes(batch)[16:]
    assert [r.offset for r in patched.records()] == [1_000_000, 1_000_001, 1_000_002]


def test_memory_records_walks_several_batches_and_kafka_python_agrees():
    batches = [RecordBatch.build([b"x%d" % i] * (i + 1), base_offset=10 * i) for i in range(4)]
    mr = MemoryRecords.of(batches)
    assert [b.base_offset for b in mr.batches()] == [0, 10, 20, 30]
    assert len(mr.records()) == 10
    kmr = KafkaMemoryRecords(bytes(mr))
    seen = 0
    while kmr.has_next():
        seen += len(list(kmr.next_batch()))
    assert seen == 10


def test_build_accepts_values_and_pairs_and_defaults_the_timestamp():
    batch = RecordBatch.build([b"v1", (b"k", b"v2"), Record(value=b"v3", timestamp=5)], timestamp=3)
    recs = batch.records()
    assert [(r.key, r.value, r.timestamp) for r in recs] == [(None, b"v1", 3), (b"k", b"v2", 3), (None, b"v3", 5)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=40),
            st.none() | st.binary(max_size=200),
            st.integers(min_value=0, max_value=2**41),
            st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from(CODECS),
)
def test_any_records_round_trip(items, codec):
    recs = [Record(k, v, ts, tuple(h)) for k, v, ts, h in items]
    back = RecordBatch(bytes(RecordBatch.build(recs, compression=codec))).validate().records()
    assert essentials(back) == essentials(recs)


# --- corruption: say what is wrong and where ------------------------------------------------


def test_bad_crc_names_the_mismatch_and_the_offset():
    raw = bytearray(bytes(RecordBatch.build([b"hello", b"world"], base_offset=42)))
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=r"CRC mismatch: stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8} \(baseOffset 42"):
        RecordBatch(bytes(raw)).validate()
    assert not RecordBatch(bytes(raw)).is_valid()


def test_truncated_batch_says_how_many_bytes_are_missing():
    raw = bytes(RecordBatch.build([b"hello"] * 10))
    with pytest.raises(CorruptRecordError, match=rf"truncated batch: batchLength says {len(raw)} bytes, only 100 present"):
        RecordBatch(raw[:100])
    with pytest.raises(CorruptRecordError, match="truncated batch: 30 bytes"):
        RecordBatch(raw[:30])


def test_truncated_tail_in_memory_records_names_its_position():
    one = bytes(RecordBatch.build([b"a"]))
    two = bytes(RecordBatch.build([b"b"] * 3, base_offset=1))
    buf = one + two[:-5]
    with pytest.raises(CorruptRecordError, match=rf"at byte {len(one)}: truncated batch"):
        list(MemoryRecords(buf).batches())
    assert [b.base_offset for b in MemoryRecords(buf).batches(allow_partial_tail=True)] == [0]


def test_wrong_magic_is_refused():
    raw = bytearray(bytes(RecordBatch.build([b"x"])))
    raw[16] = 1
    with pytest.raises(CorruptRecordError, match="wrong magic 1 \\(byte 16\\)"):
        RecordBatch(bytes(raw), where="segment 0.log at byte 0")


def test_garbage_inside_a_valid_length_is_reported_not_crashed():
    raw = bytearray(bytes(RecordBatch.build([b"hello world"])))
    struct.pack_into(">i", raw, HEADER_SIZE - 4, 3)  # claims 3 records, holds 1
    with pytest.raises(CorruptRecordError, match="malformed record"):
        RecordBatch(bytes(raw)).records()


def test_corrupt_compressed_payload_is_reported():
    raw = bytearray(bytes(RecordBatch.build([b"hello world"] * 50, compression="zstd")))
    raw[HEADER_SIZE + 5 : HEADER_SIZE + 15] = b"\x00" * 10
    with pytest.raises(CorruptRecordError, match="cannot decompress ZSTD"):
        RecordBatch(bytes(raw)).records()


def test_bad_arguments_get_clear_errors():
    with pytest.raises(UnsupportedCodecError, match="unknown compression type 'brotli'"):
        RecordBatch.build([b"x"], compression="brotli")
    with pytest.raises(TypeError, match="Record value must be bytes or None, not str"):
        Record(value="not bytes")
    with pytest.raises(ValueError, match="at least one record"):
        RecordBatch.build([])
