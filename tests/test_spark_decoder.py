"""The Spark source's decoder (fetched batches -> Arrow columns) against the record codecs."""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("pyarrow")
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from minikafka.errors import CorruptRecordError  # noqa: E402
from minikafka.records import Compression, MemoryRecords, Record, RecordBatch  # noqa: E402
from minikafka.spark.arrow_records import AbortedTransactions, decode_fetched  # noqa: E402
from minikafka.spark.data_consumer import next_fetch_offset  # noqa: E402

CODECS = list(Compression)
T0 = 1_700_000_000_000


def sample(n: int, start: int = 0) -> list[Record]:
    return [
        Record(
            key=None if i % 5 == 0 else f"truck-{i}".encode(),
            value=None if i % 7 == 3 else (b"" if i % 11 == 4 else b"position %d " % i * (i % 4 + 1)),
            timestamp=T0 + 20_000 * i,
            headers=(("source", b"gps"), ("empty", None)) if i % 3 == 0 else (),
        )
        for i in range(start, start + n)
    ]


def ours(batches: list[list[Record]], codec=Compression.NONE, **kwargs) -> bytes:
    out, offset = b"", 0
    for recs in batches:
        out += bytes(RecordBatch.build(recs, compression=codec, base_offset=offset, **kwargs))
        offset += len(recs)
    return out


def kafka_pythons(batches: list[list[Record]], codec=Compression.NONE) -> bytes:
    out, offset = b"", 0
    for recs in batches:
        builder = DefaultRecordBatchBuilder(2, int(codec), False, -1, -1, -1, 1 << 20)
        for i, r in enumerate(recs):
            builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
        raw = bytearray(builder.build())
        struct.pack_into(">q", raw, 0, offset)  # the broker assigns the base offset
        out += bytes(raw)
        offset += len(recs)
    return out


def rows(fetched, headers: bool = False) -> list[tuple]:
    out = list(zip(fetched.offsets.tolist(), fetched.keys.to_pylist(), fetched.values.to_pylist(),
                   fetched.timestamps.tolist(), fetched.timestamp_types.tolist()))
    if headers:
        out = [(*row, tuple(h)) for row, h in zip(out, fetched.headers)]
    return out


def expected(buf: bytes, lo: int = 0, hi: int = 1 << 62, headers: bool = False) -> list[tuple]:
    out = []
    for batch in MemoryRecords(buf).batches(allow_partial_tail=True):
        if batch.is_control_batch:
            continue
        for r in batch.records():
            if lo <= r.offset < hi:
                ts = batch.max_timestamp if batch.timestamp_type else r.timestamp
                row = (r.offset, r.key, r.value, ts, int(batch.timestamp_type))
                out.append((*row, tuple(r.headers)) if headers else row)
    return out


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("builder", [ours, kafka_pythons], ids=["minikafka", "kafka-python"])
def test_every_codec_decodes_as_the_record_codec_does(codec, builder):
    buf = builder([sample(40), sample(1, 40), sample(25, 41)], codec)
    fetched = decode_fetched(buf, 0, 1000, include_headers=True)
    assert rows(fetched, headers=True) == expected(buf, headers=True)
    assert fetched.next_offset == 66
    assert fetched.keys.null_count == 14 and fetched.values.null_count == 9  # nulls are nulls, not b""


def test_without_headers_asked_for_they_are_skipped_not_returned():
    buf = ours([sample(30)])
    fetched = decode_fetched(buf, 0, 1000)
    assert fetched.headers is None
    assert rows(fetched) == expected(buf)


def test_only_the_offset_range_is_returned_and_the_next_fetch_starts_after_the_last_batch():
    buf = ours([sample(10), sample(10, 10), sample(10, 20)])
    fetched = decode_fetched(buf, 13, 25)
    assert fetched.offsets.tolist() == list(range(13, 25))
    assert rows(fetched) == expected(buf, 13, 25)
    assert fetched.next_offset == 30  # the batch holding offset 24 ends at 29
    assert decode_fetched(buf, 0, 10).next_offset == 10  # batches after the range are not walked


def test_a_batch_cut_short_by_the_fetch_size_is_left_for_the_next_fetch():
    buf = ours([sample(10), sample(10, 10)])
    cut = buf[: len(buf) - 7]
    fetched = decode_fetched(cut, 0, 100)
    assert fetched.offsets.tolist() == list(range(10)) and fetched.next_offset == 10
    assert next_fetch_offset(cut, 0) == 10 and next_fetch_offset(buf, 0) == 20
    assert decode_fetched(buf[:30], 5, 100).next_offset == 5 and len(decode_fetched(b"", 5, 9)) == 0


def test_compaction_gaps_are_simply_not_rows():
    kept = [Record(key=b"k%d" % i, value=b"v%d" % i, timestamp=T0 + i, offset=i) for i in (0, 3, 4, 9)]
    buf = bytes(RecordBatch.build(kept, use_record_offsets=True, last_offset_delta=9))
    fetched = decode_fetched(buf, 0, 100)
    assert fetched.offsets.tolist() == [0, 3, 4, 9] and fetched.next_offset == 10
    assert fetched.values.to_pylist() == [b"v0", b"v3", b"v4", b"v9"]


def test_log_append_time_gives_every_record_the_batchs_max_timestamp():
    buf = bytes(RecordBatch.build(sample(5), timestamp_type=1, max_timestamp=T0 + 999_999))
    fetched = decode_fetched(buf, 0, 100)
    assert fetched.timestamps.tolist() == [T0 + 999_999] * 5 and fetched.timestamp_types.tolist() == [1] * 5


def test_large_values_need_longer_length_varints():
    recs = [Record(key=None, value=bytes([i]) * size, timestamp=T0) for i, size in enumerate((0, 63, 64, 8191, 8192, 300_000))]
    fetched = decode_fetched(ours([recs]), 0, 100)
    assert fetched.values.to_pylist() == [r.value for r in recs]


def control_batch(offset: int, producer_id: int, commit: bool) -> bytes:
    marker = Record(key=struct.pack(">hh", 0, int(commit)), value=struct.pack(">hi", 0, 0), timestamp=T0)
    raw = bytearray(bytes(RecordBatch.build([marker], base_offset=offset, producer_id=producer_id,
                                            producer_epoch=0, is_transactional=True)))
    attributes = struct.unpack_from(">h", raw, 21)[0] | 0x20  # the control bit
    struct.pack_into(">h", raw, 21, attributes)
    return _recrc(raw)


def _recrc(raw: bytearray) -> bytes:
    from minikafka.records import crc32c

    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def transactional(offset: int, producer_id: int, recs: list[Record]) -> bytes:
    return bytes(RecordBatch.build(recs, base_offset=offset, producer_id=producer_id, producer_epoch=0,
                                   base_sequence=0, is_transactional=True))


def test_control_batches_are_skipped_and_read_committed_drops_aborted_transactions():
    buf = (transactional(0, 7, sample(3)) + control_batch(3, 7, commit=False)
           + transactional(4, 8, sample(2, 3)) + control_batch(6, 8, commit=True))
    uncommitted = decode_fetched(buf, 0, 100)
    assert uncommitted.offsets.tolist() == [0, 1, 2, 4, 5] and uncommitted.next_offset == 7
    committed = decode_fetched(buf, 0, 100, aborted=AbortedTransactions([(7, 0)]))
    assert committed.offsets.tolist() == [4, 5] and committed.next_offset == 7


def test_a_wrong_crc_or_a_record_longer_than_its_batch_is_corruption():
    buf = bytearray(ours([sample(5)]))
    buf[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_fetched(bytes(buf), 0, 100)
    decode_fetched(bytes(buf), 0, 100, check_crcs=False)  # bytes of a value: still well-formed
    bad = bytearray(ours([[Record(key=None, value=b"abc", timestamp=T0)]]))
    bad[61] = 0x7E  # the record's length varint: 63 bytes, more than the batch holds
    with pytest.raises(CorruptRecordError):
        decode_fetched(_recrc(bad), 0, 100)


# The record walks: batches walked side by side (NumPy, a step per record) while enough of them
# still have records, the rest one record after the other. Every mix must give the same rows
# and refuse the same bytes.
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from minikafka.spark import arrow_records  # noqa: E402

_records = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.one_of(st.none(), st.binary(max_size=300)),
              st.integers(0, 10**6)),
    min_size=1, max_size=12)


def _both_walks(monkeypatch, buf: bytes, **kwargs):
    out = []
    for together in (1, 2, 10**9):  # all side by side; side by side while 2 batches walk; loop only
        monkeypatch.setattr(arrow_records, "_WALK_TOGETHER", together)
        try:
            got = decode_fetched(buf, 0, 1 << 62, **kwargs)
            out.append(rows(got, headers=kwargs.get("include_headers", False)))
        except CorruptRecordError:
            out.append(CorruptRecordError)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_records, min_size=2, max_size=8), codec=st.sampled_from(CODECS),
       builder=st.sampled_from([ours, kafka_pythons]))
def test_both_record_walks_decode_as_the_record_codec_does(monkeypatch, batches, codec, builder):
    recs = [[Record(key=k, value=v, timestamp=T0 + t, headers=(("h", v),) if t % 2 else ()) for k, v, t in b]
            for b in batches]
    buf = builder(recs, codec)
    side_by_side, mixed, loop = _both_walks(monkeypatch, buf, include_headers=True)
    assert side_by_side == mixed == loop == expected(buf, headers=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_records, min_size=2, max_size=5), data=st.data())
@pytest.mark.campaign
def test_both_record_walks_refuse_the_same_corrupt_bytes(monkeypatch, batches, data):
    buf = bytearray(ours([[Record(key=k, value=v, timestamp=T0 + t) for k, v, t in b] for b in batches]))
    batch_starts, pos = [], 0
    while pos < len(buf):
        batch_starts.append(pos)
        pos += 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    for _ in range(data.draw(st.integers(1, 3))):  # bytes of the records, not of the batch headers
        at = data.draw(st.integers(0, len(buf) - 1))
        if any(s <= at < s + 61 for s in batch_starts):
            continue
        buf[at] = data.draw(st.integers(0, 255))
    side_by_side, mixed, loop = _both_walks(monkeypatch, bytes(buf), check_crcs=False)
    assert side_by_side == mixed == loop


def test_many_batches_are_walked_side_by_side_and_the_long_ones_left_finished_by_the_loop(monkeypatch):
    steps = []
    monkeypatch.setattr(arrow_records, "_side_by_side",
                        lambda *a, f=arrow_records._side_by_side: steps.append(f(*a)) or steps[-1])
    many = ours([sample(20 if i % 10 else 300, start=20 * i) for i in range(100)])
    assert rows(decode_fetched(many, 0, 1 << 62)) == expected(many)
    assert steps == [20]  # 90 batches of 20 walked together; the 10 of 300 finished one by one
    few = ours([sample(500), sample(500, start=500)])
    assert rows(decode_fetched(few, 0, 1 << 62)) == expected(few)
    assert steps == [20]  # 2 batches: the loop alone
