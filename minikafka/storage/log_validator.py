"""Checking what a client appends, record by record: Kafka's ``LogValidator``.

Theory of operation
-------------------
A batch's CRC proves only that its bytes arrived as the producer wrote them, not that the
producer wrote a valid batch: a buggy client can send a batch whose CRC holds and whose
records are garbage, and a broker that stored it would hand every consumer a batch it
cannot read (kafka-python raises ``CorruptRecordError`` at that offset forever). So, as
Kafka's ``LogValidator`` (with ``DefaultRecord``'s decoder) does, the leader decodes every
record of every batch a *client* sends, decompressing compressed ones, before appending
anything, and refuses the partition's whole append at the first rule broken:

    rule                                                          error
    ------------------------------------------------------------  --------------------------
    whole batches, v2 header in bounds, CRC32C matches            CORRUPT_MESSAGE (2)
    magic 2 (a v0/v1 message set in a Produce v3+)                INVALID_RECORD (87)
    batch no larger than ``max.message.bytes``                    MESSAGE_TOO_LARGE (10)
    a codec Kafka knows, and the payload decompresses             CORRUPT_MESSAGE (2)
    the request's compressed batches decompress to 100 MiB at most MESSAGE_TOO_LARGE (10)
    recordsCount > 0 and = lastOffsetDelta + 1                    INVALID_RECORD (87)
    not a control batch (only coordinators write those)           INVALID_RECORD (87)
    an idempotent batch (producerId >= 0) has baseSequence >= 0   INVALID_RECORD (87)
    each record: its length covers exactly its fields; varints
    end inside it; offset deltas 0, 1, 2, ...; key, value and
    header value lengths >= -1, header count and key lengths
    >= 0, header keys UTF-8; nothing after the last record        INVALID_RECORD (87)
    maxTimestamp >= every record's timestamp (the time index      INVALID_RECORD (87)
    and ListOffsets trust it)
    a compacted topic's records carry a key                       INVALID_RECORD (87)

An INVALID_RECORD names the record (its index in the batch, Kafka's ``RecordError``), which
Produce v8+ carries back to the client as ``record_errors``. Transactional batches (the
``isTransactional`` attribute) pass: they are ordinary records to this check.

Origins, as Kafka's ``AppendOrigin``: ``CLIENT`` appends are validated in full; a
``REPLICATION`` append (a follower copying its leader, who validated) and a ``COORDINATOR``
append (the group coordinator's offsets, transaction markers) are not: ``Log.append``
still checks their sizes, magic and CRC.

Speed. The table above is what ``first_bad_record`` checks: a plain decoder, field by field, which
defines "valid" and writes every error. It is the slow path (about 2.4 us a record). Three faster
walkers run first, and they may only *accept*: ``_column_runs`` vouches for the leading runs of
records that share one layout (fixed-size values, no headers: what benchmarks and many producers
send) by checking each byte *column* of a run with one C-level slice, ``lstrip`` or comparison
(about 0.06 us a record, the CRC included); for the records after them (all of a batch of
variable-size records), ``record_vectors.records_ok`` reads each field of every record in one
NumPy operation (about 0.2 us a record, most of it the Python loop that finds where records
start; from ``_MIN_VECTOR`` records, below which its cost per batch does not pay; skipped where
NumPy is missing); ``_records_ok``, one pass with inline one- and two-byte varints, takes what
that one is not sure of, and smaller batches (about 0.6 us a record, 1.2 with a header). Where
they are not sure, the reference decides, so a fast path can make a good batch cheaper but can
never let a bad one in, nor change an error; the property tests in tests/test_log_validator.py
check each on random valid and mutated batches. Nothing is cached but constant tables (varint
bytes of offset deltas, allowed timestamp bytes, record_vectors' tables of 16-bit words).

Invariants: validation only reads. The bytes appended are the bytes that came, byte for
byte (the log patches only baseOffset and partitionLeaderEpoch, outside the CRC), so a
consumer gets the producer's compressed batch back as it was sent. Not checked, as Kafka
does not check them either: record attributes (unused in v2), the batch's timestamp type
against the topic's (this broker has no ``message.timestamp.type``), and timestamps against
the broker's clock (no ``message.timestamp.*.max.ms``). Unlike Kafka, header keys must be
valid UTF-8: kafka-python's consumer (and this package's) cannot read one that is not.

It never does I/O and never reads a clock.
"""

from __future__ import annotations

import enum
import struct
import sys

from minikafka.errors import CorruptRecordError, InvalidRecordError, MessageSizeTooLargeError
from minikafka.records import (
    ATTRIBUTES_AT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_AT,
    NO_PRODUCER_ID,
    Compression,
    DecompressionLimitError,
    crc32c,
    decode_varint,
    decompress,
)

# What one Produce request's compressed batches may decompress to, all together: what the
# request could have carried uncompressed (Kafka's socket.request.max.bytes default). Kafka
# streams a compressed batch record by record; this validator holds a batch's records in
# memory, so without a bound a 4 MB request of gzip bombs cost 2 GB and a 13 s stall.
MAX_DECOMPRESSED_BYTES = 100 * 1024 * 1024

_CONTROL_BIT = 0x20
_COMPRESSION_MASK = 0x07
_LENGTH = struct.Struct(">i")


class AppendOrigin(enum.Enum):
    """Who is appending (Kafka's ``AppendOrigin``): it decides what is checked."""

    CLIENT = "client"  # a producer's Produce request: validated in full
    REPLICATION = "replication"  # a follower copying its leader: already validated there
    COORDINATOR = "coordinator"  # the broker's own writes (group offsets, transaction markers)


class DecompressionBudget:
    """The bytes one request's compressed batches may still decompress to, shared by the
    validators of its partitions (``MAX_DECOMPRESSED_BYTES`` unless told otherwise)."""

    __slots__ = ("total", "remaining")

    def __init__(self, total: int = MAX_DECOMPRESSED_BYTES) -> None:
        self.total = self.remaining = total


class LogValidator:
    """Validates the batches a client sends to one partition (see the module docstring).

    ``LogValidator(max_message_bytes=..., compacted=...)``, or ``LogValidator.for_log(log)``
    to take both from a log's config; then ``validate(records)`` raises, or returns the
    number of records checked."""

    __slots__ = ("max_message_bytes", "compacted", "where")

    def __init__(self, *, max_message_bytes: int = 1024 * 1024 + 12, compacted: bool = False,
                 where: str = "appended records") -> None:
        self.max_message_bytes = max_message_bytes
        self.compacted = compacted
        self.where = where

    @classmethod
    def for_log(cls, log) -> "LogValidator":
        config = log.config
        return cls(max_message_bytes=config.max_message_bytes,
                   compacted="compact" in config.cleanup_policy.split(","), where=f"records for {log.name}")

    def validate(self, records: bytes | bytearray | memoryview, budget: DecompressionBudget | None = None) -> int:
        """Check every batch and record; raise ``CorruptRecordError`` (CORRUPT_MESSAGE),
        ``InvalidRecordError`` (INVALID_RECORD) or ``MessageSizeTooLargeError``
        (MESSAGE_TOO_LARGE) at the first problem. Returns how many records were checked.
        Compressed batches decompress within ``budget`` (the request's; a fresh one if None):
        one that would go past it is MESSAGE_TOO_LARGE, found after about that many bytes."""
        if budget is None:
            budget = DecompressionBudget()
        view = memoryview(records)
        total = len(view)
        if not total:
            raise InvalidRecordError(f"{self.where}: no record batch (Produce v3+ needs one per partition)")
        position = 0
        checked = 0
        while position < total:
            checked += self._validate_batch(view, position, total, budget)
            position += LOG_OVERHEAD + _LENGTH.unpack_from(view, position + 8)[0]
        return checked

    # --- one batch -----------------------------------------------------------------------------------

    def _validate_batch(self, view: memoryview, position: int, total: int, budget: DecompressionBudget) -> int:
        where = f"{self.where}, batch at byte {position}"
        if total - position > MAGIC_AT and view[position + MAGIC_AT] in (0, 1):
            raise InvalidRecordError(
                f"{where}: a magic {view[position + MAGIC_AT]} message set: Produce v3+ carries only "
                f"v2 record batches (magic {MAGIC})")
        if total - position < HEADER_SIZE:
            raise CorruptRecordError(
                f"{where}: truncated batch: {total - position} bytes, a v2 batch header alone is {HEADER_SIZE}")
        (_, length, _, magic, crc, attributes, last_delta, base_ts, max_ts, producer_id, _,
         base_sequence, count) = HEADER.unpack_from(view, position)
        end = position + LOG_OVERHEAD + length
        if magic != MAGIC:
            raise CorruptRecordError(f"{where}: unknown magic {magic} (byte 16): only v2 batches (magic {MAGIC}) exist")
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"{where}: batchLength {length} is smaller than a v2 header")
        if end > total:
            raise CorruptRecordError(
                f"{where}: truncated batch: batchLength says {end - position} bytes, only {total - position} present")
        if end - position > self.max_message_bytes:
            raise MessageSizeTooLargeError(
                f"{where}: batch of {end - position} bytes is larger than max.message.bytes ({self.max_message_bytes})")
        computed = crc32c(view[position + ATTRIBUTES_AT : end])
        if computed != crc:
            raise CorruptRecordError(f"{where}: CRC mismatch: stored 0x{crc:08x}, computed 0x{computed:08x}")
        if count <= 0:
            raise InvalidRecordError(f"{where}: recordsCount {count}: a batch holds at least one record")
        if count != last_delta + 1:
            raise InvalidRecordError(
                f"{where}: recordsCount {count} disagrees with lastOffsetDelta {last_delta} "
                f"(offsets {last_delta + 1} records)")
        if attributes & _CONTROL_BIT:
            raise InvalidRecordError(f"{where}: clients may not write control batches (attributes 0x{attributes:04x})")
        if producer_id != NO_PRODUCER_ID and base_sequence < 0:
            raise InvalidRecordError(
                f"{where}: idempotent batch (producerId {producer_id}) with invalid baseSequence {base_sequence}")
        codec = attributes & _COMPRESSION_MASK
        payload = bytes(view[position + HEADER_SIZE : end])  # bytes: faster to index and slice
        if codec:
            try:
                name = Compression(codec).name
            except ValueError:
                raise CorruptRecordError(f"{where}: unknown compression codec {codec} (attributes bits 0-2)") from None
            try:
                payload = decompress(Compression(codec), payload, limit=budget.remaining)
            except DecompressionLimitError:
                left, budget.remaining = budget.remaining, 0  # spent: the request's other bombs cost nothing
                raise MessageSizeTooLargeError(
                    f"{where}: {name} payload decompresses to more than the {left} bytes left of "
                    f"the {budget.total} one request's compressed batches may decompress to (what it could "
                    "carry uncompressed)") from None
            except Exception as e:  # each codec library raises its own type
                raise CorruptRecordError(f"{where}: cannot decompress {name}: {e}") from None
            budget.remaining -= len(payload)
        ts_limit = max_ts - base_ts if base_ts >= 0 else None
        # a batch of a few records is walked faster than its columns are set up
        first, pos = _column_runs(payload, count, ts_limit, self.compacted) if count >= _MIN_RUN else (0, 0)
        if count - first >= _MIN_VECTOR and _vector_walker()(payload, count, ts_limit, self.compacted, first, pos):
            return count
        if _records_ok(payload, count, ts_limit, self.compacted, first, pos):
            return count
        problem = first_bad_record(payload, count, base_ts, max_ts, self.compacted)
        if problem is not None:
            index, why = problem
            raise InvalidRecordError(f"{where}: record {index}: {why}", record_errors=((index, why),))
        return count


# --- the records of one batch ----------------------------------------------------------------------------
#
# Three walkers over the same bytes. ``first_bad_record`` is the definition: it decodes field by
# field, plainly, and names the first rule broken. The two above it are only there for speed and
# may only *accept*: each returns True when every record obeys every rule, False when it is not
# sure, and then the reference decides (and writes the error). So a fast path can make a good
# batch cheap but can never let a bad one in, nor change an error; tests/test_log_validator.py
# checks that on random valid and mutated batches. Varints are read raw (``u``), zig-zag undone
# only where a value is needed: an even ``u`` is ``u >> 1``, an odd one is negative.

_CONTINUES = bytes(range(0x80, 0x100))  # a varint byte with more to come
_ENDS = bytes(range(0x80))  # the last byte of a varint


def _one_byte_deltas_allowed(limit: int) -> bytes:
    """The one-byte timestampDelta varints whose value is <= ``limit`` (>= 0): every odd
    (negative) one and the even ones up to 2 * limit."""
    return bytes(u for u in range(0x80) if u & 1 or u >> 1 <= limit)


_TS_ONE_BYTE = [_one_byte_deltas_allowed(limit) for limit in range(64)]  # index min(limit, 63)


_LOW_SEVEN = bytes(b & 0x7F for b in range(256))
_LITTLE = sys.byteorder == "little"


def _wide_deltas_ok(columns: list[bytes], limit: int | None) -> bool:
    """Whether the timestampDelta varints of two or three bytes whose byte columns these are
    all have that form and a value <= ``limit``. Column-wise: each raw varint u, as a machine
    word whose byte j is u's 7-bit group j (so words are ordered as u is), must not exceed the
    word of 2 * limit; ``max`` over a memoryview finds the largest in C. Negative (odd)
    deltas are compared as if positive: never wrongly accepted, at worst sent to the walker."""
    *continuing, last = columns
    if any(c.translate(None, _CONTINUES) for c in continuing) or last.translate(None, _ENDS):
        return False
    width = len(columns)
    if limit is None or limit >= (1 << 7 * width - 1) - 1:  # every varint this wide is within it
        return True
    step = 2 if width == 2 else 4
    words = bytearray(step * len(last))
    for j, column in enumerate(columns):
        words[(j if _LITTLE else step - 1 - j)::step] = column.translate(_LOW_SEVEN)
    bound = 2 * limit
    key = sum(((bound >> 7 * j) & 0x7F) << 8 * j for j in range(width - 1)) | (bound >> 7 * (width - 1)) << 8 * (width - 1)
    return max(memoryview(words).cast("H" if step == 2 else "I")) <= key


def _offset_delta_bytes(width: int, first: int, stop: int) -> list[bytes]:
    """Byte j of the ``width``-byte varint of each offsetDelta i in [first, stop): the bytes a
    run of records must show, read one column at a time (see ``_column_runs``). Built by
    repetition (byte 0 cycles every 64 deltas, byte j >= 1 holds for 2 ** (7j - 1) of them), as
    the three-byte table has a million entries; ``first`` and ``stop`` are multiples of 64."""
    more = [0x80] * (width - 1) + [0]  # the continuation bit, on every byte but the last
    columns = [bytes(((2 * i) & 0x7F) | more[0] for i in range(first, first + 64)) * ((stop - first) // 64)]
    for j in range(1, width):
        run = 1 << (7 * j - 1)
        columns.append(b"".join(_BYTE[((i >> (7 * j - 1)) & 0x7F) | more[j]] * run for i in range(first, stop, run)))
    return columns


# offsetDelta i takes 1 byte below 64, 2 below 8192, 3 below 2**20 (a batch of more records, only
# possible with tiny records and a raised max.message.bytes, takes the general walker).
_DELTA_WIDTHS = ((1, 0, 64), (2, 64, 8192), (3, 8192, 1 << 20))
_DELTA_COLUMNS: dict[int, list[bytes]] = {}


def _delta_columns(width: int) -> list[bytes]:
    columns = _DELTA_COLUMNS.get(width)
    if columns is None:  # a constant table, built once per width on first use
        _, first, stop = _DELTA_WIDTHS[width - 1]
        columns = _DELTA_COLUMNS[width] = _offset_delta_bytes(width, first, stop)
    return columns


def _zigzag_bytes(value: int) -> bytes:
    u = (value << 1) ^ (value >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


_BYTE = [bytes((b,)) for b in range(256)]
_MIN_RUN = 16  # records: a shorter run of one layout is left to the walker
_MIN_VECTOR = 64  # records: below this, the vectorised walker's cost per batch (about 20 us) outweighs its speed


def _no_vectors(*_) -> bool:
    return False


_vector_records_ok = None  # record_vectors.records_ok once imported; _no_vectors without NumPy


def _vector_walker():
    """``record_vectors.records_ok``, imported on first use (importing NumPy takes a tenth of a
    second, which a notebook that never validates a large batch need not pay), or, where NumPy
    is missing, a walker that is never sure (so the one-pass walker takes every batch)."""
    global _vector_records_ok
    if _vector_records_ok is None:
        try:
            from minikafka.storage.record_vectors import records_ok
        except ImportError:
            records_ok = _no_vectors
        _vector_records_ok = records_ok
    return _vector_records_ok


def _leading(column: bytes, allowed: bytes) -> int:
    """How many of ``column``'s first bytes are in ``allowed`` (in C: ``lstrip``)."""
    return len(column) - len(column.lstrip(allowed))


def _layout_at(d: bytes, p: int, width: int, ts_limit: int | None, compacted: bool):
    """The layout of the record at ``p`` whose offsetDelta is ``width`` bytes wide, as a
    template for the records after it: (size, length field, timestampDelta width and allowed
    first bytes, key length field, bytes from it to the value length field, value length
    field); None if it is not of the common shape (length varints of one or two bytes, a
    timestampDelta of up to three, a key that is allowed, no headers)."""
    n = len(d)
    if p + 7 > n:  # a record is 7 bytes at least
        return None
    at = p + (1 if d[p] < 0x80 else 2)  # the length: recomputed below from the fields
    if at == p + 2 and d[p + 1] >= 0x80:
        return None
    at += 1  # attributes: any byte
    if at + 1 >= n:
        return None
    if d[at] < 0x80:
        ts_width, ts_allowed = 1, (_ENDS if ts_limit is None else _TS_ONE_BYTE[min(ts_limit, 63)])
    elif d[at + 1] < 0x80:
        ts_width, ts_allowed = 2, _CONTINUES
    elif at + 2 < n and d[at + 2] < 0x80:  # deltas of 8.192 s and more
        ts_width, ts_allowed = 3, _CONTINUES
    else:
        return None
    at += ts_width + width
    fields = []  # (key or value length varint, bytes it counts)
    for _ in range(2):
        if at + 1 >= n:
            return None
        u = d[at]
        field_width = 1
        if u >= 0x80:
            if d[at + 1] >= 0x80:
                return None
            u, field_width = (u & 0x7F) | (d[at + 1] << 7), 2
        if u & 1 and u != 1:  # negative, and not -1 (null)
            return None
        fields.append((d[at : at + field_width], 0 if u & 1 else u >> 1))
        at += field_width + fields[-1][1]
    (key_field, key_len), (value_field, value_len) = fields
    if compacted and key_field == b"\x01":
        return None
    length = 1 + ts_width + width + len(key_field) + key_len + len(value_field) + value_len + 1
    length_field = _zigzag_bytes(length)
    return (len(length_field) + length, length_field, ts_width, ts_allowed, key_field,
            len(key_field) + key_len, value_field)


def _column_runs(d: bytes, count: int, ts_limit: int | None, compacted: bool) -> tuple[int, int]:
    """The fast path for runs of records of one layout, as producers of fixed-size values
    write them (every benchmark's batch): the same key and value lengths, no headers, and
    timestampDelta and offsetDelta of one width (so one record size). The record at the start
    of a run is parsed as its template (``_layout_at``); then the run is checked a *column* at
    a time: ``d[p + j : end : size]`` is byte j of every record of the run, compared or
    stripped in C, so the cost is a few slices per run, not Python work per record. Per record:
    the length varint is the template's, the timestampDelta bytes form a varint of the
    template's width and a value <= ``ts_limit``, the offsetDelta bytes are exactly i's varint,
    the key and value length varints are the template's, the header count is 0 (key and value
    bytes are free). Such a record decodes as the template does, field for field, so
    ``first_bad_record`` accepts it. A run ends where a column first differs (``lstrip``
    finds it) or the offsetDelta widens (records 64 and 8192); the next run starts there.
    Returns (i, p): records 0..i-1, ending at byte p, are good; the walker does the rest (all
    of a batch of variable-size records, whose runs are too short to pay)."""
    n = len(d)
    i = p = 0
    if count > _DELTA_WIDTHS[-1][2] or (ts_limit is not None and ts_limit < 0):
        return 0, 0
    for width, first, stop in _DELTA_WIDTHS:
        while first <= i < min(stop, count):
            layout = _layout_at(d, p, width, ts_limit, compacted)
            if layout is None:
                return i, p
            size, length_field, ts_width, ts_allowed, key_field, value_at, value_field = layout
            k = min(min(stop, count) - i, (n - p) // size)  # records this run can hold
            end = p + k * size
            for j, b in enumerate(length_field):
                k = min(k, _leading(d[p + j : end : size], _BYTE[b]))
                end = p + k * size
            q = p + len(length_field) + 1  # timestampDelta
            k = min(k, _leading(d[q:end:size], ts_allowed))
            for j in range(1, ts_width):
                k = min(k, _leading(d[q + j : end : size], _CONTINUES if j < ts_width - 1 else _ENDS))
            end = p + k * size
            o = q + ts_width  # offsetDelta
            q = o + width  # key length
            for at, field in ((q, key_field), (q + value_at, value_field)):
                for j, b in enumerate(field):
                    k = min(k, _leading(d[at + j : end : size], _BYTE[b]))
                    end = p + k * size
            k = min(k, _leading(d[p + size - 1 : end : size], b"\x00"))  # header count
            end = p + k * size
            if k < min(_MIN_RUN, count - i):
                return i, p
            if ts_width > 1 and not _wide_deltas_ok([d[o - ts_width + j : end : size] for j in range(ts_width)], ts_limit):
                return i, p
            for j, column in enumerate(_delta_columns(width)):
                if d[o + j : end : size] != column[i - first : i - first + k]:
                    return i, p
            i, p = i + k, end
    return i, p


def _raw_varint(d: bytes, pos: int) -> tuple[int, int]:
    """A varint of any length, undecoded (the general walker's cold path)."""
    u = shift = 0
    while True:
        b = d[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            return u, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _records_ok(d: bytes, count: int, ts_limit: int | None, compacted: bool, first: int = 0, pos: int = 0) -> bool:
    """The fast path for any other batch: one pass, varints of one and two bytes decoded inline
    (every length under 8 KB, every delta of a normal batch), nothing built. It reads exactly
    what ``first_bad_record`` reads, in the same order, and accepts only where it would.
    True: all good; False: not sure (the reference then decides)."""
    if ts_limit is None:
        ts_max = 1 << 80  # any raw varint
    elif ts_limit < 0:
        return False
    else:
        ts_max = 2 * ts_limit  # an even (non-negative) delta must be <= limit; odd ones are negative
    n = len(d)
    try:
        for z in range(2 * first, 2 * count, 2):  # z: the raw varint of offsetDelta i, 2 * i
            u = d[pos]  # length
            if u < 0x80:
                pos += 1
            elif d[pos + 1] < 0x80:
                u = (u & 0x7F) | (d[pos + 1] << 7)
                pos += 2
            else:
                u, pos = _raw_varint(d, pos)
            if u & 1:
                return False
            end = pos + (u >> 1)
            u = d[pos + 1]  # timestampDelta, after the attributes byte
            if u < 0x80:
                pos += 2
            elif d[pos + 2] < 0x80:
                u = (u & 0x7F) | (d[pos + 2] << 7)
                pos += 3
            else:
                u, pos = _raw_varint(d, pos + 1)
            if u > ts_max and not u & 1:
                return False
            u = d[pos]  # offsetDelta
            if u < 0x80:
                pos += 1
            elif d[pos + 1] < 0x80:
                u = (u & 0x7F) | (d[pos + 1] << 7)
                pos += 2
            else:
                u, pos = _raw_varint(d, pos)
            if u != z:
                return False
            u = d[pos]  # key length
            if u < 0x80:
                pos += 1
            elif d[pos + 1] < 0x80:
                u = (u & 0x7F) | (d[pos + 1] << 7)
                pos += 2
            else:
                u, pos = _raw_varint(d, pos)
            if u & 1:
                if u != 1 or compacted:
                    return False
            else:
                pos += u >> 1
            u = d[pos]  # value length
            if u < 0x80:
                pos += 1
            elif d[pos + 1] < 0x80:
                u = (u & 0x7F) | (d[pos + 1] << 7)
                pos += 2
            else:
                u, pos = _raw_varint(d, pos)
            if u & 1:
                if u != 1:
                    return False
            else:
                pos += u >> 1
            if d[pos]:  # headers
                pos = _headers_end(d, pos, end)
                if pos < 0:
                    return False
            else:
                pos += 1
            if pos != end:
                return False
    except (IndexError, ValueError):
        return False
    return pos == n


def _headers_end(d: bytes, pos: int, end: int) -> int:
    """The walker's headers, from their count at ``pos``: where they end, or -1 if they are
    bad. One-byte varints inline and ASCII keys checked in C (``isascii``); anything else is
    read by the reference's ``_check_headers`` (which reads the same fields, in the same order)."""
    start = pos
    u = d[pos]
    if u >= 0x80 or u & 1:  # 64 headers or more, or a negative count
        return _headers_plain(d, start, end)
    count = u >> 1
    pos += 1
    if count > end - pos:
        return -1
    for _ in range(count):
        u = d[pos]
        if u >= 0x80 or u & 1:
            return _headers_plain(d, start, end)
        key_end = pos + 1 + (u >> 1)
        if key_end > end:
            return -1
        key = d[pos + 1 : key_end]
        if not key.isascii():
            try:
                key.decode("utf-8")
            except UnicodeDecodeError:
                return -1
        u = d[key_end]
        if u >= 0x80:
            return _headers_plain(d, start, end)
        if u & 1:
            if u != 1:
                return -1
            pos = key_end + 1
        else:
            pos = key_end + 1 + (u >> 1)
    return pos


def _headers_plain(d: bytes, pos: int, end: int) -> int:
    headers, pos = decode_varint(d, pos)
    pos = _check_headers(d, pos, end, headers)
    return pos if isinstance(pos, int) else -1


def first_bad_record(data, count: int, base_ts: int, max_ts: int, compacted: bool) -> tuple[int, str] | None:
    """The reference: walk ``count`` records (DefaultRecord's layout) field by field; (index,
    why) of the first bad record, or None. Plain on purpose: this is what "valid" means here."""
    n = len(data)
    pos = 0
    i = 0
    try:
        for i in range(count):
            length, pos = decode_varint(data, pos)
            end = pos + length
            if length < 6 or end > n:  # 6: attributes and five one-byte varints at least
                return i, f"record length {length} does not fit (the batch has {n - pos} bytes left, a record needs 6 at least)"
            pos += 1  # attributes: unused in v2, not checked (as Kafka)
            ts_delta, pos = decode_varint(data, pos)
            if base_ts >= 0 and ts_delta > max_ts - base_ts:
                return i, f"timestamp {base_ts + ts_delta} is above the batch's maxTimestamp {max_ts}"
            offset_delta, pos = decode_varint(data, pos)
            if offset_delta != i:
                return i, f"offset delta {offset_delta}, expected {i} (deltas count up from 0)"
            key_len, pos = decode_varint(data, pos)
            if key_len < -1:
                return i, f"key length {key_len} (only -1, null, may be negative)"
            if key_len == -1 and compacted:
                return i, "a compacted topic cannot accept a record without a key"
            pos += max(key_len, 0)
            value_len, pos = decode_varint(data, pos)
            if value_len < -1:
                return i, f"value length {value_len} (only -1, null, may be negative)"
            pos += max(value_len, 0)
            headers, pos = decode_varint(data, pos)
            if headers:
                pos = _check_headers(data, pos, end, headers)
                if isinstance(pos, str):
                    return i, pos
            if pos != end:
                return i, f"record length {length} disagrees with its fields, which end {pos - end:+d} bytes from there"
    except IndexError:
        return i, "the record runs past the end of the batch"
    except ValueError as e:  # a varint longer than 10 bytes
        return i, str(e)
    if pos != n:
        return count, f"{n - pos} bytes left over after the {count} records the header declares"
    return None


def _check_headers(data, pos: int, end: int, count: int) -> int | str:
    """Walk ``count`` headers from ``pos``; the position after them, or why they are bad."""
    if count < 0:
        return f"header count {count} is negative"
    if count > end - pos:
        return f"header count {count} cannot fit in the record's {end - pos} remaining bytes"
    for h in range(count):
        key_len, pos = decode_varint(data, pos)
        if key_len < 0:
            return f"header {h} has a negative key length {key_len}"
        if pos + key_len > end:
            return f"header {h}'s key of {key_len} bytes runs past the record"
        try:
            bytes(data[pos : pos + key_len]).decode("utf-8")
        except UnicodeDecodeError:
            return f"header {h}'s key is not valid UTF-8"
        pos += key_len
        value_len, pos = decode_varint(data, pos)
        if value_len < -1:
            return f"header {h} has value length {value_len} (only -1, null, may be negative)"
        pos += max(value_len, 0)
    return pos
