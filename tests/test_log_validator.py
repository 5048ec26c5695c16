"""LogValidator: a client's batch is decoded record by record before it is appended.

Each malformed batch below has a valid CRC (computed over the garbage), so the old broker,
which checked only the CRC and the record count, stored it; consumers then could not read
past it. Here it is refused with Kafka's error code, nothing is appended, and the good
batches around it are stored byte for byte.
"""

from __future__ import annotations

import struct

import pytest

from minikafka.cluster import Cluster
from minikafka.errors import CorruptRecordError, InvalidRecordError, MessageSizeTooLargeError
from minikafka.messages import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    MESSAGE_TOO_LARGE,
    NO_ERROR,
    FetchPartition,
    FetchRequest,
    ListOffsetsRequest,
    ProducePartition,
    ProduceRequest,
)
from minikafka.records import (
    ATTRIBUTES_AT,
    CRC_AT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MemoryRecords,
    Record,
    RecordBatch,
    compress,
    Compression,
    DecompressionLimitError,
    crc32c,
    decompress,
    encode_varint,
)
from minikafka.storage import AppendOrigin, Log, LogValidator
from minikafka.storage.log_validator import DecompressionBudget


def varint(v: int) -> bytes:
    out = bytearray()
    encode_varint(v, out)
    return bytes(out)


def record(*, offset_delta=0, ts_delta=0, key=None, value=b"v", headers=(), attributes=0,
           length_adjust=0, key_len=None, value_len=None, header_count=None) -> bytes:
    """One DefaultRecord, with any field forced to a wrong value."""
    body = bytes([attributes]) + varint(ts_delta) + varint(offset_delta)
    body += varint(len(key) if key_len is None and key is not None else (-1 if key_len is None else key_len)) + (key or b"")
    body += varint(len(value) if value_len is None and value is not None else (-1 if value_len is None else value_len)) + (value or b"")
    body += varint(len(headers) if header_count is None else header_count)
    for hk, hv in headers:
        body += varint(len(hk)) + hk + varint(-1 if hv is None else len(hv)) + (hv or b"")
    return varint(len(body) + length_adjust) + body


def raw_batch(payload: bytes, count: int, *, last_offset_delta=None, attributes=0, base_ts=1000, max_ts=1000,
              producer_id=-1, base_sequence=-1, magic=2) -> bytes:
    """A batch around ``payload`` (already compressed if ``attributes`` says so), with a
    CRC that matches: whatever is wrong is wrong inside, as a buggy client would send it."""
    last = count - 1 if last_offset_delta is None else last_offset_delta
    header = HEADER.pack(0, HEADER_SIZE - LOG_OVERHEAD + len(payload), -1, magic, 0, attributes, last,
                         base_ts, max_ts, producer_id, 0, base_sequence, count)
    buf = bytearray(header + payload)
    struct.pack_into(">I", buf, CRC_AT, crc32c(memoryview(buf)[ATTRIBUTES_AT:]))
    return bytes(buf)


GOOD = bytes(RecordBatch.build([Record(b"k", b"v", 1000)]))

# (name, batch bytes, error class, words the message must hold, index of the bad record or None)
BAD = [
    ("record length longer than its fields", raw_batch(record(length_adjust=+3) + b"\0\0\0", 1),
     InvalidRecordError, "disagrees with its fields", 0),
    ("record length shorter than its fields", raw_batch(record(length_adjust=-1) + b"", 1),
     InvalidRecordError, "record 0", 0),
    ("offset deltas not 0, 1, 2", raw_batch(record(offset_delta=0) + record(offset_delta=5), 2),
     InvalidRecordError, "offset delta 5, expected 1", 1),
    ("key length below -1", raw_batch(record(key=b"", key_len=-7), 1), InvalidRecordError, "key length -7", 0),
    ("value longer than the record", raw_batch(record(value=b"ab", value_len=60), 1), InvalidRecordError, "record 0", 0),
    ("negative header count", raw_batch(record(header_count=-2), 1), InvalidRecordError, "header count -2", 0),
    ("header count past the record", raw_batch(record(header_count=40), 1), InvalidRecordError, "header count 40", 0),
    ("header key not UTF-8", raw_batch(record(headers=((b"\xff\xfe", b"x"),)), 1), InvalidRecordError, "UTF-8", 0),
    ("bytes after the last record", raw_batch(record() + b"\x00\x01", 1), InvalidRecordError, "left over", 1),
    ("fewer records than the count", raw_batch(record(), 2), InvalidRecordError, "record 1", 1),
    ("count disagrees with lastOffsetDelta", raw_batch(record(), 1, last_offset_delta=4),
     InvalidRecordError, "lastOffsetDelta 4", None),
    ("zero records", raw_batch(b"", 0, last_offset_delta=-1), InvalidRecordError, "recordsCount 0", None),
    ("a control batch from a client", raw_batch(record(), 1, attributes=0x20), InvalidRecordError, "control", None),
    ("an idempotent batch without a sequence", raw_batch(record(), 1, producer_id=7, base_sequence=-1),
     InvalidRecordError, "baseSequence -1", None),
    ("a record newer than maxTimestamp", raw_batch(record(ts_delta=50), 1, max_ts=1010),
     InvalidRecordError, "above the batch's maxTimestamp", 0),
    ("a v1 message set", raw_batch(record(), 1, magic=1), InvalidRecordError, "magic 1", None),
    ("an unknown magic", raw_batch(record(), 1, magic=7), CorruptRecordError, "magic 7", None),
    ("an unknown codec", raw_batch(record(), 1, attributes=6), CorruptRecordError, "codec 6", None),
    ("gzip that is not gzip", raw_batch(b"not gzip at all", 1, attributes=1), CorruptRecordError, "decompress GZIP", None),
    ("garbage inside a valid zstd frame", raw_batch(compress(Compression.ZSTD, b"\x7f" * 20), 1, attributes=4),
     InvalidRecordError, "record 0", 0),
    ("a truncated batch", GOOD[:-4], CorruptRecordError, "truncated", None),
    ("a CRC that does not match", GOOD[:-1] + bytes([GOOD[-1] ^ 1]), CorruptRecordError, "CRC mismatch", None),
]


@pytest.mark.parametrize("name,data,error,words,index", BAD, ids=[b[0] for b in BAD])
def test_a_malformed_batch_with_a_valid_crc_is_refused_naming_the_problem(name, data, error, words, index):
    with pytest.raises(error) as caught:
        LogValidator().validate(GOOD + data)  # the good batch first: every batch is checked
    assert words in str(caught.value)
    if isinstance(caught.value, InvalidRecordError) and index is not None:
        assert [i for i, _ in caught.value.record_errors] == [index]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_good_batches_of_every_codec_pass_and_are_stored_byte_for_byte(tmp_path, codec):
    records = [Record(f"k{i}".encode(), b"x" * i, 1000 + i, headers=(("h", b"1"), ("n", None))) for i in range(50)]
    records.append(Record(None, None, 999))  # a null key and value, and an older timestamp
    data = bytes(RecordBatch.build(records, compression=codec, producer_id=3, producer_epoch=0, base_sequence=0,
                                   is_transactional=True))
    assert LogValidator().validate(data + data) == 102
    log = Log(tmp_path / "t-0")
    log.append(data)
    stored = log.read(0)
    assert bytes(stored)[12:] == data[12:]  # only baseOffset (and the epoch) patched
    assert [r.value for r in stored.records()] == [r.value for r in records]


def test_a_batch_over_max_message_bytes_is_message_too_large_before_it_is_decoded():
    data = bytes(RecordBatch.build([b"x" * 2000]))
    with pytest.raises(MessageSizeTooLargeError, match="max.message.bytes"):
        LogValidator(max_message_bytes=1000).validate(data)


# --- decompression bombs ------------------------------------------------------------------------------

CODEC_BITS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def bomb(codec: str, size: int) -> bytes:
    """A batch whose payload, a few KB compressed, decompresses to ``size`` zero bytes."""
    return raw_batch(compress(Compression[codec.upper()], bytes(size)), 1, attributes=CODEC_BITS[codec])


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_decompression_stops_at_the_limit_and_gives_what_the_codec_gives_below_it(codec):
    c = Compression[codec.upper()]
    data = bytes(range(256)) * 40 + bytes(300_000)
    packed = compress(c, data)
    assert decompress(c, packed, limit=len(data)) == decompress(c, packed) == data
    with pytest.raises(DecompressionLimitError):
        decompress(c, packed, limit=len(data) - 1)
    for broken in (packed[: len(packed) // 2], packed + b"junk", packed[:3]):  # the same verdicts as unbounded
        try:
            expected = ("ok", decompress(c, broken))
        except Exception:  # noqa: BLE001 - each codec raises its own type
            expected = ("error", None)
        try:
            got = ("ok", decompress(c, broken, limit=10 ** 7))
        except DecompressionLimitError:
            raise
        except Exception:  # noqa: BLE001
            got = ("error", None)
        assert got == expected, broken[:20]


def test_a_payload_claiming_a_huge_size_is_refused_before_anything_is_allocated():
    import zstandard

    claimed = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(50_000_000))  # says 50 MB
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.ZSTD, claimed, limit=1_000_000)
    raw_snappy = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\0" * 10  # "4 GB follow"
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.SNAPPY, raw_snappy, limit=1_000_000)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_decompression_bomb_is_message_too_large_within_the_budget(codec):
    data = bomb(codec, 3_000_000)
    assert len(data) < 200_000  # well under max.message.bytes: only decompressing finds it
    with pytest.raises(MessageSizeTooLargeError, match="decompresses to more than"):
        LogValidator().validate(data, DecompressionBudget(2_000_000))


def test_one_budget_covers_every_batch_and_partition_of_a_request():
    records = [Record(f"k{i}".encode(), bytes(10_000), 1000) for i in range(100)]  # ~1 MB a batch
    batch = bytes(RecordBatch.build(records, compression="zstd"))
    budget = DecompressionBudget(2_500_000)
    assert LogValidator().validate(batch + batch, budget) == 200  # two partitions' worth...
    assert budget.remaining < 600_000
    with pytest.raises(MessageSizeTooLargeError, match="left of the 2500000"):
        LogValidator().validate(batch, budget)  # ...and a third is over what the request may decompress
    assert budget.remaining == 0  # spent: the request's next compressed batch is refused at once
    with pytest.raises(MessageSizeTooLargeError, match="more than the 0 bytes left"):
        LogValidator().validate(batch, budget)
    assert LogValidator().validate(batch, DecompressionBudget(2_500_000)) == 100  # the next request has its own
    assert lv.MAX_DECOMPRESSED_BYTES == 100 * 1024 * 1024  # the default: a request's largest uncompressed size


def test_the_broker_refuses_a_request_of_bombs_and_appends_nothing(cluster):
    leader = cluster.partition_state("t", 0).leader
    log = cluster.replica(leader, "t", 0).log
    end = log.log_end_offset
    # Two valid batches of 52 MiB of zero-filled values each, a few KB compressed: each alone
    # fits the request's budget (100 MiB), the two do not.
    batch = bytes(RecordBatch.build([Record(None, bytes(1 << 20), 1000)] * 52, compression="zstd"))
    assert len(batch) < 100_000 and LogValidator().validate(batch) == 52
    part = produce(cluster, batch + batch)
    assert part.error == MESSAGE_TOO_LARGE and "decompresses to more than" in part.error_message
    assert log.log_end_offset == end
    ok = produce(cluster, GOOD)
    assert (ok.error, ok.base_offset) == (NO_ERROR, end)


def test_a_compacted_topic_refuses_a_record_without_a_key(tmp_path):
    log = Log(tmp_path / "c-0", {"cleanup.policy": "compact"})
    LogValidator.for_log(log).validate(bytes(RecordBatch.build([(b"k", b"v")])))
    with pytest.raises(InvalidRecordError, match="without a key") as caught:
        LogValidator.for_log(log).validate(bytes(RecordBatch.build([(b"k", b"v"), (None, b"v")])))
    assert caught.value.record_errors[0][0] == 1


def test_validation_only_reads(tmp_path):
    data = bytearray(bytes(RecordBatch.build([b"a", b"b"], compression="gzip")))
    before = bytes(data)
    LogValidator().validate(data)
    assert bytes(data) == before


def test_append_origins_are_kafkas():
    assert [o.name for o in AppendOrigin] == ["CLIENT", "REPLICATION", "COORDINATOR"]


# --- through a broker (the simulated cluster) ------------------------------------------------------------


def request(c, dst, make, timeout_ms=6_000):
    corr = c.world.call_node(c.admin_id, lambda node: node.request(dst, make))
    admin = c.world.nodes[c.admin_id]
    assert c.world.run_until(lambda: corr in admin.responses, timeout_ms)
    return admin.responses.pop(corr)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(3, seed=13, dir=tmp_path_factory.mktemp("validator"))
    c.create_topic("t", 1, 3)
    yield c
    c.close()


def produce(c, data, acks=-1):
    leader = c.partition_state("t", 0).leader
    return request(c, leader, lambda corr: ProduceRequest(corr, acks, 5_000, (ProducePartition("t", 0, data),))).partitions[0]


@pytest.mark.parametrize("name,data,error,words,index", BAD, ids=[b[0] for b in BAD])
def test_the_broker_answers_kafkas_code_and_appends_nothing(cluster, name, data, error, words, index):
    leader = cluster.partition_state("t", 0).leader
    log = cluster.replica(leader, "t", 0).log
    end, size = log.log_end_offset, log.size_in_bytes
    part = produce(cluster, data)
    expected = {InvalidRecordError: INVALID_RECORD, CorruptRecordError: CORRUPT_MESSAGE}[error]
    assert (part.error, part.base_offset) == (expected, -1)
    assert words in part.error_message
    if expected == INVALID_RECORD and index is not None:
        assert [i for i, _ in part.record_errors] == [index]
    assert (log.log_end_offset, log.size_in_bytes) == (end, size)
    ok = produce(cluster, GOOD)  # the partition goes on
    assert (ok.error, ok.base_offset) == (NO_ERROR, end)


def test_the_broker_refuses_a_batch_over_the_topics_max_message_bytes(cluster):
    part = produce(cluster, bytes(RecordBatch.build([b"x" * 2_000_000])))
    assert part.error == MESSAGE_TOO_LARGE and "max.message.bytes" in part.error_message


def test_a_stored_bad_batch_is_served_as_stored_and_a_timestamp_lookup_on_it_answers_an_error(tmp_path):
    """A batch stored before validation existed (appended here with the log's own, CRC-only
    check, as the old broker did): a Fetch serves its bytes as Kafka would, and a ListOffsets
    by timestamp that must decode it answers CORRUPT_MESSAGE for that partition instead of
    failing the whole request (which closed the connection in the real world)."""
    c = Cluster(1, seed=5, dir=tmp_path / "c")
    try:
        c.create_topic("t", 1, 1)
        assert produce(c, bytes(RecordBatch.build([Record(None, b"ok", 1000)]))).error == NO_ERROR
        bad = raw_batch(record(value=b"ab", value_len=60), 1, base_ts=2000, max_ts=2000)
        c.replica(1, "t", 0).log.append(bad, leader_epoch=0)  # behind the validator's back
        c.replica(1, "t", 0).high_watermark = 2
        fetched = request(c, 1, lambda corr: FetchRequest(corr, -1, 0, 1, (FetchPartition("t", 0, 1),))).partitions[0]
        assert fetched.error == NO_ERROR and bytes(fetched.records)[16:] == bad[16:]  # baseOffset, epoch patched
        answer = request(c, 1, lambda corr: ListOffsetsRequest(corr, (("t", 0, 1500),)))
        (topic, partition, error, *_), = answer.partitions
        assert error == CORRUPT_MESSAGE
        first = request(c, 1, lambda corr: ListOffsetsRequest(corr, (("t", 0, 500),)))
        assert first.partitions[0][2:] == (NO_ERROR, 1000, 0)  # a lookup that stops before it works
    finally:
        c.close()


# --- the fast paths accept only what the reference accepts ------------------------------------------------
#
# LogValidator walks a batch's records with three fast paths that may only *accept*:
# ``_column_runs`` vouches for the leading runs of records of one layout (checked a byte column at a
# time), then ``record_vectors.records_ok`` (every record's fields at once, with NumPy) or
# ``_records_ok`` (a one-pass walker with inline varints) for the rest; when they are not sure, the
# plain reference decoder (``first_bad_record``) decides and names the error. So: on every batch,
# valid or mutated, whatever a fast path says yes to, the reference must accept, and each fast path
# must say yes to the valid batches of its shape (or it would be dead weight).

from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka.storage import log_validator as lv
from minikafka.storage import record_vectors as rv


def payload_of(batch: bytes) -> bytes:
    return batch[HEADER_SIZE:]


def header_of(batch: bytes) -> tuple[int, int, int]:
    fields = HEADER.unpack_from(batch)
    return fields[7], fields[8], fields[-1]  # baseTimestamp, maxTimestamp, recordsCount


def judge(payload: bytes, count: int, base_ts: int, max_ts: int, compacted: bool):
    """What each walker says about one payload: whether the column path alone covered every
    record, the walker alone, both together (as ``validate`` runs them), and the reference.
    Checked on the way: the records the column path vouches for, alone, are good ones, and
    the vectorised walker, alone or after the column path, accepts nothing the reference
    refuses and, where it is sure, agrees with the one-pass walker."""
    limit = max_ts - base_ts if base_ts >= 0 else None
    first, pos = lv._column_runs(payload, count, limit, compacted)
    assert lv.first_bad_record(payload[:pos], first, base_ts, max_ts, compacted) is None, (first, pos)
    reference = lv.first_bad_record(payload, count, base_ts, max_ts, compacted)
    columns = first == count and pos == len(payload)
    walker = lv._records_ok(payload, count, limit, compacted)
    both = lv._records_ok(payload, count, limit, compacted, first, pos)
    vectors = vectors_ok(payload, count, limit, compacted)
    if vectors or rv.records_ok(payload, count, limit, compacted, first, pos):
        assert reference is None, ("vectors", reference)
    if columns or walker or both:
        assert reference is None, (columns, walker, both, reference)
    return columns, walker, both, reference


def vectors_ok(payload, count, limit, compacted):
    """The vectorised walker's answer on a whole payload (the tests call it on batches of any
    size; ``validate`` only from ``_MIN_VECTOR`` records)."""
    return rv.records_ok(payload, count, limit, compacted)


lengths = st.one_of(st.integers(0, 70), st.integers(120, 300))  # one- and two-byte length varints
blobs = lengths.flatmap(lambda n: st.binary(min_size=n, max_size=n))
header_keys = st.one_of(st.text(max_size=5), st.just("é"))
any_records = st.lists(
    st.builds(Record, st.one_of(st.none(), blobs), st.one_of(st.none(), blobs),
              st.integers(1_000, 1_000 + 20_000),
              headers=st.lists(st.tuples(header_keys, st.one_of(st.none(), st.binary(max_size=4))), max_size=2)),
    min_size=1, max_size=80)


@st.composite
def uniform_batches(draw):
    """Records of one layout, as a fixed-size producer writes them: 1 to 150 records (offsetDelta
    one and two bytes wide), timestamps all equal, random with deltas all one, two or three
    bytes wide, or 1 or 2 ms apart (their deltas widen at record 64 or 32, as in the append
    benchmark's batches)."""
    count = draw(st.integers(1, 150))
    key_len = draw(st.one_of(st.none(), st.integers(0, 70), st.integers(120, 200)))
    value_len = draw(st.one_of(st.none(), st.integers(0, 70), st.integers(120, 200)))
    mode = draw(st.sampled_from(["same", "one byte", "two bytes", "three bytes", 1, 2]))
    if mode == "same":
        spread = [0] * count
    elif isinstance(mode, int):
        spread = [mode * i for i in range(count)]
    else:
        low, high = {"one byte": (0, 63), "two bytes": (64, 8191), "three bytes": (8192, 300_000)}[mode]
        spread = [low] + [draw(st.integers(low, high)) for _ in range(count - 1)]
    base = 10_000
    records = [Record(None if key_len is None else bytes([i % 256]) * key_len,
                      None if value_len is None else bytes([(i * 7) % 256]) * value_len, base + spread[i])
               for i in range(count)]
    return bytes(RecordBatch.build(records, base_timestamp=base, max_timestamp=base + max(spread)))


@st.composite
def mutations(draw, batches):
    """A valid batch's payload with up to three bytes changed, cut or added, and sometimes a
    header (count, maxTimestamp) that no longer fits it."""
    batch = draw(batches)
    payload = bytearray(payload_of(batch))
    base_ts, max_ts, count = header_of(batch)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["set", "set", "set", "bump", "cut", "add"]))
        at = draw(st.integers(0, max(0, len(payload) - 1)))
        if kind == "set" and payload:
            payload[at] = draw(st.integers(0, 255))
        elif kind == "bump" and payload:
            payload[at] = (payload[at] + draw(st.sampled_from([-2, -1, 1, 2]))) % 256
        elif kind == "cut":
            del payload[at : at + draw(st.integers(1, 3))]
        else:
            payload[at:at] = draw(st.binary(min_size=1, max_size=3))
    count += draw(st.sampled_from([0, 0, 0, -1, 1]))
    max_ts += draw(st.sampled_from([0, 0, 0, -1, -70, -9000]))
    return bytes(payload), max(count, 0), base_ts, max_ts, draw(st.booleans())


@st.composite
def hand_built_batches(draw):
    """Records built by ``record`` above, whose header keys are any bytes (UTF-8 or not) and whose
    header values may claim lengths below -1: what RecordBatch.build cannot write."""
    count = draw(st.integers(1, 4))
    parts = []
    for i in range(count):
        headers = draw(st.lists(st.tuples(st.binary(max_size=3), st.one_of(st.none(), st.binary(max_size=3))),
                                max_size=3))
        key_len = draw(st.sampled_from([None, None, -2, -64]))  # a null key written -1, or below
        body = record(offset_delta=i, key_len=key_len, value=draw(st.binary(max_size=4)), headers=headers)
        if headers and draw(st.booleans()):  # the last header's value length, -2 or -3 instead
            hk, hv = headers[-1]
            tail = varint(len(hk)) + hk + varint(-1 if hv is None else len(hv)) + (hv or b"")
            fake = varint(len(hk)) + hk + varint(draw(st.sampled_from([-2, -3])))
            inner = body[1:] if body[0] < 0x80 else body[2:]  # without its length
            inner = inner[: len(inner) - len(tail)] + fake
            body = varint(len(inner)) + inner
        parts.append(body)
    return raw_batch(b"".join(parts), count)


batches_of_any_records = any_records.map(lambda rs: bytes(RecordBatch.build(rs)))
mutated = st.one_of(mutations(uniform_batches()), mutations(batches_of_any_records), mutations(hand_built_batches()))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(any_records, st.booleans())
@pytest.mark.campaign
def test_the_walker_accepts_every_valid_batch_as_the_reference_does(records, compacted):
    batch = bytes(RecordBatch.build(records))
    base_ts, max_ts, count = header_of(batch)
    columns, walker, both, reference = judge(payload_of(batch), count, base_ts, max_ts, compacted)
    vectors = vectors_ok(payload_of(batch), count, max_ts - base_ts, compacted)
    if compacted and any(r.key is None for r in records):
        assert reference is not None and not (columns or walker or both or vectors)
    else:
        assert reference is None and walker and both
        assert vectors == all(k.isascii() for r in records for k, _ in r.headers)  # its shape: ASCII header keys


@settings(max_examples=300, deadline=None, derandomize=True)
@given(uniform_batches())
def test_the_column_path_alone_accepts_every_batch_of_one_layout(batch):
    base_ts, max_ts, count = header_of(batch)
    assert judge(payload_of(batch), count, base_ts, max_ts, False) == (True, True, True, None)


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(mutated)
@pytest.mark.campaign
def test_on_mutated_batches_a_fast_path_never_accepts_what_the_reference_refuses(case):
    judge(*case)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(mutated)
@pytest.mark.campaign
def test_validate_answers_exactly_what_the_reference_decoder_answers(case):
    payload, count, base_ts, max_ts, compacted = case
    batch = raw_batch(payload, count, base_ts=base_ts, max_ts=max_ts)
    expected = lv.first_bad_record(payload, count, base_ts, max_ts, compacted) if count > 0 else (None, "recordsCount")
    try:
        LogValidator(compacted=compacted).validate(batch)
    except InvalidRecordError as e:
        assert expected is not None
        if expected[0] is not None:
            assert e.record_errors == (expected,) and str(e).endswith(f"record {expected[0]}: {expected[1]}")
    else:
        assert expected is None


def test_the_column_path_covers_deltas_three_bytes_wide_and_a_wrong_one_reaches_the_reference():
    count = 9_000  # offsetDelta 8192 and up takes three bytes; so does timestampDelta, 1 ms apart
    batch = bytes(RecordBatch.build([Record(None, b"x", 5 + i) for i in range(count)]))
    payload = payload_of(batch)
    assert judge(payload, count, 5, 5 + 8999, False) == (True, True, True, None)
    assert judge(payload, count, 5, 5 + 8998, False)[1:] == (False, False, (8999, "timestamp 9004 is above the batch's maxTimestamp 9003"))
    last = len(payload) - 4  # record 8,999 ends [offsetDelta: 3 bytes][key length -1][value length 1][x][0 headers]
    assert payload[last - 3 : last] == bytes([(2 * 8999 & 0x7F) | 0x80, (2 * 8999 >> 7 & 0x7F) | 0x80, 2 * 8999 >> 14])
    wrong = payload[: last - 3] + bytes([(2 * 8998 & 0x7F) | 0x80]) + payload[last - 2 :]
    assert judge(wrong, count, 5, 5 + 8999, False) == (False, False, False,
                                                (8999, "offset delta 8998, expected 8999 (deltas count up from 0)"))


# --- the vectorised walker inside validate ------------------------------------------------------------------


def variable_batch(count: int, headers: int = 0, **build) -> bytes:
    """``count`` records of varying sizes, keys ``key-<i>``, timestamps up and down (as the wire
    benchmark's variable batch), ``headers`` headers each."""
    return bytes(RecordBatch.build(
        [Record(f"key-{i}".encode(), bytes([i % 251]) * (50 + i * 37 % 101), 1_000 + i * 13 % 60,
                headers=tuple((f"h{j}", b"v" * j) for j in range(headers))) for i in range(count)], **build))


@pytest.mark.parametrize("headers,codec", [(0, "none"), (2, "none"), (0, "lz4")])
def test_validate_takes_a_large_batch_of_variable_records_through_the_vectorised_walker(monkeypatch, headers, codec):
    batch = variable_batch(600, headers, compression=codec)

    def walker_never_called(*_):
        raise AssertionError("the vectorised walker should have accepted this batch")

    monkeypatch.setattr(lv, "_records_ok", walker_never_called)
    assert LogValidator().validate(batch) == 600


@pytest.mark.parametrize("name,data,error,words,index", BAD, ids=[b[0] for b in BAD])
def test_without_numpy_validate_answers_the_same(monkeypatch, name, data, error, words, index):
    """Where NumPy cannot be imported the vectorised walker is never sure, and every answer
    stays the same (the one-pass walker and the reference take every batch)."""
    monkeypatch.setattr(lv, "_vector_records_ok", lv._no_vectors)
    with pytest.raises(error, match=words.replace("(", r"\(")):
        LogValidator().validate(GOOD + data)
    assert LogValidator().validate(variable_batch(600, 1)) == 600


def test_a_record_above_max_timestamp_deep_in_a_large_batch_is_refused_by_its_index():
    batch = variable_batch(600)
    payload = payload_of(batch)
    base_ts, max_ts, count = header_of(batch)
    late = max(range(count), key=lambda i: (1_000 + i * 13 % 60, -i))  # the first record at maxTimestamp
    assert late > 0 and not vectors_ok(payload, count, max_ts - 1 - base_ts, False)
    with pytest.raises(InvalidRecordError, match=f"record {late}: timestamp {max_ts} is above") as caught:
        LogValidator().validate(raw_batch(payload, count, base_ts=base_ts, max_ts=max_ts - 1))
    assert [i for i, _ in caught.value.record_errors] == [late]


@st.composite
def one_field_wrong(draw):
    """Up to 200 records (offset deltas and lengths one and two bytes wide, headers or not) of
    which one has one field wrong, the kind of mistake each check exists for: random byte
    mutations seldom land on the one byte that matters."""
    count = draw(st.integers(1, 200))
    bad = draw(st.integers(0, count - 1))
    kind = draw(st.sampled_from(["offset", "length", "negative length", "key length", "value length", "null below -1",
                                 "header count", "header key", "negative header key length", "header value",
                                 "timestamp", "null key"]))
    parts = []
    for i in range(count):
        value = bytes([i % 256]) * draw(st.sampled_from([0, 5, 70, 200]))
        headers = ((b"h", b"v"),) if draw(st.booleans()) else ()
        fields = dict(offset_delta=i, ts_delta=i % 7, key=b"k%d" % i, value=value, headers=headers)
        if i == bad:
            shift = draw(st.sampled_from([-1, 1, 2]))
            if kind == "offset":  # +-64 changes only the second byte of a two-byte delta
                fields["offset_delta"] = i + draw(st.sampled_from([-64, -2, -1, 1, 2, 64])) if i >= 64 else i + shift
            elif kind == "length":
                fields["length_adjust"] = shift
            elif kind == "key length":
                fields["key_len"] = len(fields["key"]) + shift
            elif kind == "value length":
                fields["value_len"] = max(0, len(value) + shift) if len(value) + shift != len(value) else len(value) + 1
            elif kind == "null below -1":
                fields[draw(st.sampled_from(["key_len", "value_len"]))] = draw(st.sampled_from([-2, -64, -65]))
                fields["key"] = fields["value"] = None
            elif kind == "header count":
                fields["header_count"] = len(headers) + shift
            elif kind == "header key":
                fields["headers"] = ((draw(st.sampled_from([b"\xff", b"\xc3", "é".encode()])), b"v"),)
            elif kind == "negative header key length":
                fields["headers"] = ((b"h", b"v"),)
            elif kind == "header value":
                fields["headers"] = ((b"h", None),)
            elif kind == "timestamp":
                fields["ts_delta"] = 7 + draw(st.integers(0, 10_000))
            elif kind == "null key":
                fields["key"] = None
        body = record(**fields)
        if i == bad and kind == "negative length":  # its length L written as -(L + 1): raw varint 2L + 1
            inner = body[1:] if body[0] < 0x80 else body[2:]
            body = varint(-len(inner) - 1) + inner
        if i == bad and kind == "negative header key length":  # its header's key length 1 written -2 (raw 3)
            assert body.endswith(b"\x02h\x02v")
            body = body[:-4] + varint(-2) + b"h\x02v"
        parts.append(body)
    return b"".join(parts), count, 1000, 1006, kind == "null key"


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(one_field_wrong())
@pytest.mark.campaign
def test_one_field_wrong_in_a_large_batch_is_never_accepted_by_a_fast_path(case):
    payload, count, base_ts, max_ts, compacted = case
    *fast, reference = judge(payload, count, base_ts, max_ts, compacted)
    if reference is not None:
        assert not any(fast) and not vectors_ok(payload, count, max_ts - base_ts, compacted)
