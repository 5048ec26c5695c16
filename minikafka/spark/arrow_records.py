"""Fetched record batches straight into Arrow columns: the Spark source's decoder.

Theory of operation
-------------------
A Fetch response carries a partition's records as Kafka stores them: v2 record batches
back to back (``minikafka.records`` explains the layout), the last one possibly cut short.
kafka-python turns every record into a Python object and the source then turned those
into Arrow columns: about 5 us per record, most of a Spark task's time. Here the bytes go
to Arrow without a Python object per record, in three passes:

1. **Batches** (a Python loop per *batch*, a few hundred per fetch): header, magic, CRC32C,
   control batches and aborted transactions skipped, payloads decompressed with the codec
   libraries ``minikafka.records`` uses, then joined into one buffer.
2. **Record boundaries**: each record starts with its length as a varint, so finding where
   record *i+1* starts needs record *i*'s length: a chain within a batch that no vectorised
   code can skip. But batches are independent (each one's first record starts right after
   its header), so when a fetch holds many batches of few records (a producer's usual
   batches) the chains are walked side by side: step *k* reads the *k*-th record's length
   of every batch at once with NumPy, while enough batches still have a *k*-th record to
   pay for a step. The records left (the long batches, or every record of a fetch of a few
   large batches) are walked by a plain loop, which reads one or two bytes per record and
   nothing else. Every mix gives the same bounds and refuses the same bytes
   (``tests/test_spark_decoder.py`` checks them against each other).
3. **Fields** (NumPy over all records at once): knowing every record's start, each field's
   varint is decoded for all records together (one array operation per varint *byte*, not
   per record), giving offsets, timestamps and the positions of keys and values.

Keys and values then become Arrow binary columns without copying them one by one in
Python: an Arrow array over the joined buffer whose boundaries alternate value-start,
value-end (so its even elements are the values and its odd ones the bytes between), from
which Arrow's ``take`` gathers the even ones in C. Headers, rare and optional, are decoded
per record in Python, only when the query asks for them.

Nothing is trusted: every length is checked against its record's end and every record
against its batch's end; a mismatch raises ``CorruptRecordError``. Never: I/O, clocks.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from minikafka.errors import CorruptRecordError
from minikafka.records import (
    ATTRIBUTES_AT, HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC, Compression, crc32c, decode_varint, decompress,
)

_PREFIX = struct.Struct(">qi")
_CONTROL_KEY = struct.Struct(">hh")  # version, type: 0 = ABORT, 1 = COMMIT
_PAD = bytes(16)  # after the joined payloads, so a varint read past a record's end stays in bounds

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


@dataclass
class FetchedRecords:
    """The rows a fetch yielded, as columns, and where the next fetch starts."""

    next_offset: int  # after the last whole batch seen (rows or not): the next fetch's offset
    offsets: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    timestamps: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # ms
    timestamp_types: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    keys: pa.Array = field(default_factory=lambda: pa.array([], pa.binary()))
    values: pa.Array = field(default_factory=lambda: pa.array([], pa.binary()))
    headers: list | None = None  # per row, [(key str, value bytes | None)], if asked for

    def __len__(self) -> int:
        return len(self.offsets)


class AbortedTransactions:
    """Kafka's read_committed filter: the aborted transactions a Fetch response lists
    ``(producer_id, first_offset)``, consumed in offset order as the batches go by."""

    def __init__(self, aborted: list[tuple[int, int]] | None) -> None:
        self.pending = sorted(aborted or (), key=lambda a: a[1])
        self.open: set[int] = set()  # producers whose current transaction was aborted

    def skips(self, producer_id: int, base_offset: int, attributes: int, payload: bytes) -> bool:
        """Whether a batch's records are dropped; control batches end an aborted transaction."""
        while self.pending and self.pending[0][1] <= base_offset:
            self.open.add(self.pending.pop(0)[0])
        if attributes & _CONTROL_BIT:
            if producer_id in self.open and len(payload) >= 2:
                self.open.discard(producer_id)  # the ABORT marker closes it
            return True
        return bool(attributes & _TRANSACTIONAL_BIT) and producer_id in self.open


def decode_fetched(buf: bytes, from_offset: int, until_offset: int, *, check_crcs: bool = True,
                   include_headers: bool = False, aborted: AbortedTransactions | None = None,
                   where: str = "fetch") -> FetchedRecords:
    """The records of ``buf`` (one partition's records from a Fetch) in ``[from_offset, until_offset)``.

    A cut-short last batch is left for the next fetch (``next_offset`` stops before it).
    ``aborted``: read_committed (skip aborted transactions' records); None: read_uncommitted.
    """
    payloads: list[bytes] = []
    meta: list[tuple[int, int, int, int, int]] = []  # base offset, base ts, max ts, attributes, count
    next_offset = from_offset
    pos, size = 0, len(buf)
    view = memoryview(buf)
    while pos + HEADER_SIZE <= size:
        _, length = _PREFIX.unpack_from(buf, pos)
        end = pos + LOG_OVERHEAD + length
        if end > size:
            break  # cut short by the fetch's size limit: the next fetch starts with it
        (base, _, _, magic, crc, attrs, last_delta, base_ts, max_ts, producer_id, _, _,
         count) = HEADER.unpack_from(buf, pos)
        if magic != MAGIC:
            raise CorruptRecordError(f"{where}: batch at offset {base}: magic {magic}: the source reads only v2 batches (magic 2)")
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"{where}: batch at offset {base}: batchLength {length} is smaller than a v2 header")
        if check_crcs and crc32c(view[pos + ATTRIBUTES_AT:end]) != crc:
            raise CorruptRecordError(f"{where}: batch at offset {base}: CRC mismatch")
        batch_next = base + last_delta + 1
        start, pos = pos, end
        if batch_next <= next_offset:
            continue  # wholly before what we want (a fetch starts at the batch holding from_offset)
        if base >= until_offset:
            break
        next_offset = batch_next
        payload = view[start + HEADER_SIZE:end]
        if aborted is not None and aborted.skips(producer_id, base, attrs, payload):
            continue
        if attrs & _CONTROL_BIT:
            continue  # transaction markers are not records a consumer sees
        codec = attrs & _COMPRESSION_MASK
        if codec:
            try:
                payload = decompress(Compression(codec), bytes(payload))
            except Exception as e:  # each library raises its own error type
                raise CorruptRecordError(f"{where}: batch at offset {base}: cannot decompress codec {codec}: {e}") from None
        payloads.append(payload)
        meta.append((base, base_ts, max_ts, attrs, count))
    if not meta:
        return FetchedRecords(next_offset)
    return _decode_records(payloads, meta, from_offset, until_offset, include_headers, where, next_offset)


# A step of the side-by-side walk costs ~15 NumPy calls (~30-50 us) whatever the number of
# batches still walking; the plain loop ~0.45 us a record. So batches are walked side by side
# while at least _WALK_TOGETHER of them still have records, and the few long ones left
# (producers' batches vary in size: 40 to 1,700 records in one fetch of the benchmark's
# topic) are finished by the loop.
_WALK_TOGETHER = 64


def record_bounds(data: bytes, meta: list, ends: list[int], where: str,
                  together: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Where every record's fields start and end (after its length varint), in record order.

    ``data``: the batches' joined payloads and 16 bytes of padding; ``ends``: where each
    batch's payload ends; ``meta``: (base offset, ..., record count) per batch. Batches are
    walked side by side while at least ``together`` (default ``_WALK_TOGETHER``) still have
    records: 1 walks them all side by side, a huge number all by the loop (tests).
    """
    together = _WALK_TOGETHER if together is None else together
    counts = np.array([m[4] for m in meta], np.int64)
    total = int(counts.sum())
    starts = np.empty(total, np.int64)
    rec_ends = np.empty(total, np.int64)
    batch_ends = np.array(ends, np.int64)
    pos = np.concatenate(([0], batch_ends[:-1]))  # each batch's first record
    first = np.cumsum(counts) - counts  # the index of each batch's first record
    step = 0
    if len(meta) >= together:
        step = _side_by_side(np.frombuffer(data, np.uint8), ends[-1], meta, counts, pos, first,
                             starts, rec_ends, together, where)
    left = np.flatnonzero(counts > step).tolist()
    if left:
        bounds: list[int] = []
        put = bounds.append
        at = []
        for i in left:
            pos[i] = _walk(data, int(pos[i]), int(counts[i]) - step, meta[i][0], where, put)
            at.append(np.arange(first[i] + step, first[i] + counts[i]))
        bounds = np.array(bounds, np.int64)
        at = np.concatenate(at)
        starts[at] = bounds[0::2]
        rec_ends[at] = bounds[1::2]
    wrong = np.flatnonzero(pos != batch_ends)
    if wrong.size:
        i = int(wrong[0])
        raise CorruptRecordError(f"{where}: the records of the batch at offset {meta[i][0]} end at "
                                 f"{int(pos[i] - batch_ends[i]):+d} bytes from its end")
    return starts, rec_ends


def _walk(data: bytes, pos: int, count: int, base: int, where: str, put) -> int:
    """``count`` records from ``pos``, one after the other: put(start), put(end) of each."""
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:  # lengths below 64: one byte
                n = b
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:  # below 8192: two bytes (100-byte values land here)
                    n = (b & 0x7F) | (c << 7)
                    pos += 2
                else:
                    n, pos = decode_varint(data, pos)
                    n = (n << 1) ^ (n >> 63)  # back to the raw zig-zag form the checks below expect
            if n & 1:
                raise CorruptRecordError(f"{where}: a record in the batch at offset {base} has a negative length")
            put(pos)
            pos += n >> 1
            put(pos)
    except (IndexError, ValueError):  # past the data's end; a varint of more than 10 bytes
        raise CorruptRecordError(f"{where}: a record runs past the end of its batch") from None
    return pos


def _side_by_side(arr, size, meta, counts, pos, first, starts, rec_ends, together, where) -> int:
    """Step k reads the length of the k-th record of every batch that has one, while at
    least ``together`` batches do; returns the number of steps taken (``pos`` moved on)."""
    by_size = np.argsort(-counts, kind="stable")  # the batches still walking are a prefix of it
    remaining = -counts[by_size]  # ascending
    k = 0
    while True:
        walking = by_size[:int(np.searchsorted(remaining, -k, side="left"))]  # counts > k
        if len(walking) < together or not len(walking):
            return k
        p = pos[walking]
        length, after = _varints(arr, p)
        if (length < 0).any():
            base = meta[int(walking[np.flatnonzero(length < 0)[0]])][0]
            raise CorruptRecordError(f"{where}: a record in the batch at offset {base} has a negative length")
        end = after + np.minimum(length, size + 1)  # no int64 overflow: anything past size is wrong
        if (end > size).any():
            raise CorruptRecordError(f"{where}: a record runs past the end of its batch")
        at = first[walking] + k
        starts[at] = after
        rec_ends[at] = end
        pos[walking] = end
        k += 1


def _varints(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints at every position of ``pos``: (values, positions after them)."""
    b = arr[pos]
    raw = (b & 0x7F).astype(np.uint64)
    after = pos + 1
    more = b >= 0x80
    shift = 7
    while more.any():
        if shift > 63:
            raise CorruptRecordError("a varint is longer than 10 bytes")
        idx = np.flatnonzero(more)
        b = arr[after[idx]]
        raw[idx] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        after[idx] += 1
        more = np.zeros_like(more)
        more[idx] = b >= 0x80
        shift += 7
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, after


def _decode_records(payloads, meta, from_offset, until_offset, include_headers, where, next_offset):
    sizes = [len(p) for p in payloads]
    ends = np.cumsum(sizes).tolist()
    data = b"".join([*payloads, _PAD])
    arr = np.frombuffer(data, np.uint8)
    starts, rec_end = record_bounds(data, meta, ends, where)
    if rec_end.size and rec_end[-1] > ends[-1]:
        raise CorruptRecordError(f"{where}: a record runs past the end of its batch")

    counts = np.array([m[4] for m in meta], np.int64)
    which = np.repeat(np.arange(len(meta)), counts)  # the batch of every record
    base_offsets = np.array([m[0] for m in meta], np.int64)[which]
    base_ts = np.array([m[1] for m in meta], np.int64)[which]
    max_ts = np.array([m[2] for m in meta], np.int64)[which]
    log_append = (np.array([m[3] for m in meta], np.int64)[which] & _TIMESTAMP_TYPE_BIT) != 0

    # Each field is read at a position no further than its record's end (a corrupt length
    # may point anywhere): reads stay within the padding, and a record whose fields ran past
    # its end is refused below.
    over = np.zeros(len(starts), np.bool_)

    def field(p, skip=None):
        if skip is not None:
            p = p + np.clip(skip, 0, 1 << 32)  # the length just read; no int64 overflow
        np.logical_or(over, p > rec_end, out=over)
        return _varints(arr, np.minimum(p, rec_end))

    ts_delta, p = field(starts + 1)  # + 1: the record's attributes byte (unused)
    off_delta, p = field(p)
    key_len, p = field(p)
    key_at = p
    value_len, p = field(p, key_len)
    value_at = p
    header_count, p = field(p, value_len)
    bad = (over | (key_len < -1) | (value_len < -1) | (header_count < 0) | (p > rec_end)
           | ((header_count == 0) & (p != rec_end)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CorruptRecordError(
            f"{where}: malformed record at offset {int(base_offsets[i] + off_delta[i])}: its fields do not fit its length")

    offsets = base_offsets + off_delta
    keep = (offsets >= from_offset) & (offsets < until_offset)
    if not keep.all():
        idx = np.flatnonzero(keep)
        offsets, ts_delta, base_ts, max_ts, log_append = (
            offsets[idx], ts_delta[idx], base_ts[idx], max_ts[idx], log_append[idx])
        key_at, key_len, value_at, value_len = key_at[idx], key_len[idx], value_at[idx], value_len[idx]
        header_count, p, rec_end = header_count[idx], p[idx], rec_end[idx]
    # LogAppendTime: every record of the batch has the time the broker appended it (maxTimestamp).
    timestamps = np.where(log_append, max_ts, base_ts + ts_delta)
    buffer = pa.py_buffer(data)
    headers = None
    if include_headers:
        headers = [[] for _ in range(len(offsets))]
        for i in np.flatnonzero(header_count > 0).tolist():
            headers[i] = _headers(data, int(p[i]), int(header_count[i]), int(rec_end[i]), where)
    return FetchedRecords(
        next_offset=next_offset, offsets=offsets, timestamps=timestamps,
        timestamp_types=log_append.astype(np.int32),
        keys=binary_column(buffer, key_at, key_len), values=binary_column(buffer, value_at, value_len),
        headers=headers)


def _headers(data: bytes, pos: int, count: int, end: int, where: str) -> list[tuple[str, bytes | None]]:
    out = []
    try:
        for _ in range(count):
            n, pos = decode_varint(data, pos)
            if n < 0:
                raise ValueError("a header key has a negative length")
            key = data[pos:pos + n].decode("utf-8")
            pos += n
            n, pos = decode_varint(data, pos)
            out.append((key, None if n < 0 else data[pos:pos + n]))
            pos += max(n, 0)
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"{where}: malformed record headers: {e}") from None
    if pos != end:
        raise CorruptRecordError(f"{where}: a record's headers do not end where the record does")
    return out


def binary_column(buffer: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """An Arrow binary column of ``buffer[start:start + length]`` (length -1: null), gathered in C.

    The trick: one Arrow array over ``buffer`` with boundaries start0, end0, start1, end1, ...
    (increasing, as records follow one another) has the wanted slices at its even indices;
    ``take`` copies those into a compact column.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    if buffer.size >= 2**31:
        raise CorruptRecordError("a fetch of 2 GiB or more cannot become one Arrow binary column")
    bounds = np.empty(2 * n, np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + np.maximum(lengths, 0)
    validity = None
    nulls = lengths < 0
    if nulls.any():
        bits = np.ones(2 * n - 1, np.bool_)
        bits[0::2] = ~nulls
        validity = pa.py_buffer(np.packbits(bits, bitorder="little"))
    interleaved = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [validity, pa.py_buffer(bounds), buffer])
    return interleaved.take(pa.array(np.arange(0, 2 * n - 1, 2, dtype=np.int64)))
