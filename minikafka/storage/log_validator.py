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
    crc32c,
    decode_varint,
    decompress,
)

_CONTROL_BIT = 0x20
_COMPRESSION_MASK = 0x07
_LENGTH = struct.Struct(">i")


class AppendOrigin(enum.Enum):
    """Who is appending (Kafka's ``AppendOrigin``): it decides what is checked."""

    CLIENT = "client"  # a producer's Produce request: validated in full
    REPLICATION = "replication"  # a follower copying its leader: already validated there
    COORDINATOR = "coordinator"  # the broker's own writes (group offsets, transaction markers)


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

    def validate(self, records: bytes | bytearray | memoryview) -> int:
        """Check every batch and record; raise ``CorruptRecordError`` (CORRUPT_MESSAGE),
        ``InvalidRecordError`` (INVALID_RECORD) or ``MessageSizeTooLargeError``
        (MESSAGE_TOO_LARGE) at the first problem. Returns how many records were checked."""
        view = memoryview(records)
        total = len(view)
        if not total:
            raise InvalidRecordError(f"{self.where}: no record batch (Produce v3+ needs one per partition)")
        position = 0
        checked = 0
        while position < total:
            checked += self._validate_batch(view, position, total)
            position += LOG_OVERHEAD + _LENGTH.unpack_from(view, position + 8)[0]
        return checked

    # --- one batch -----------------------------------------------------------------------------------

    def _validate_batch(self, view: memoryview, position: int, total: int) -> int:
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
        payload = view[position + HEADER_SIZE : end]
        if codec:
            try:
                name = Compression(codec).name
            except ValueError:
                raise CorruptRecordError(f"{where}: unknown compression codec {codec} (attributes bits 0-2)") from None
            try:
                payload = decompress(Compression(codec), bytes(payload))
            except Exception as e:  # each codec library raises its own type
                raise CorruptRecordError(f"{where}: cannot decompress {name}: {e}") from None
        problem = _check_records(payload, count, base_ts, max_ts, self.compacted)
        if problem is not None:
            index, why = problem
            raise InvalidRecordError(f"{where}: record {index}: {why}", record_errors=((index, why),))
        return count


def _varint_at(data, pos: int) -> tuple[int, int]:
    """A zig-zag varint of any length (the cold path of the inline decoding below)."""
    return decode_varint(data, pos)


def _check_records(data, count: int, base_ts: int, max_ts: int, compacted: bool) -> tuple[int, str] | None:
    """Walk ``count`` records (DefaultRecord's layout); (index, why) of the first bad one.

    The hot loop of validation, so written for speed, not beauty: varints of one and two
    bytes (every length under 8 KB, every delta in a normal batch) are decoded inline, the
    rest by ``decode_varint``; nothing is built (no ``Record`` objects, no copies of keys
    or values). ``u`` is a varint's raw value, ``(u >> 1) ^ -(u & 1)`` undoes the zig-zag."""
    n = len(data)
    pos = 0
    i = 0
    ts_limit = max_ts - base_ts if base_ts >= 0 else None
    try:
        for i in range(count):
            # length
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (u & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                u, pos = decode_varint(data, pos)
                u = (u << 1) ^ (u >> 63)  # re-zig-zag: the line below undoes it
            length = (u >> 1) ^ -(u & 1)
            end = pos + length
            if length < 6 or end > n:  # 6: attributes and five one-byte varints at least
                return i, f"record length {length} does not fit (the batch has {n - pos} bytes left, a record needs 6 at least)"
            # attributes (unused in v2, not checked, as Kafka), then timestampDelta
            u = data[pos + 1]
            if u < 0x80:
                pos += 2
            elif data[pos + 2] < 0x80:
                u = (u & 0x7F) | (data[pos + 2] << 7)
                pos += 3
            else:
                u, pos = decode_varint(data, pos + 1)
                u = (u << 1) ^ (u >> 63)
            if ts_limit is not None and ((u >> 1) ^ -(u & 1)) > ts_limit:
                return i, (f"timestamp {base_ts + ((u >> 1) ^ -(u & 1))} is above the batch's "
                           f"maxTimestamp {max_ts}")
            # offsetDelta: must be i
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (u & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                u, pos = decode_varint(data, pos)
                u = (u << 1) ^ (u >> 63)
            if u != i << 1:
                return i, f"offset delta {(u >> 1) ^ -(u & 1)}, expected {i} (deltas count up from 0)"
            # key
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (u & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                u, pos = decode_varint(data, pos)
                u = (u << 1) ^ (u >> 63)
            if u & 1:  # negative
                if u != 1:
                    return i, f"key length {(u >> 1) ^ -1} (only -1, null, may be negative)"
                if compacted:
                    return i, "a compacted topic cannot accept a record without a key"
            else:
                pos += u >> 1
            # value
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                u = (u & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                u, pos = decode_varint(data, pos)
                u = (u << 1) ^ (u >> 63)
            if u & 1:
                if u != 1:
                    return i, f"value length {(u >> 1) ^ -1} (only -1, null, may be negative)"
            else:
                pos += u >> 1
            # headers
            u = data[pos]
            if u:
                headers, pos = decode_varint(data, pos)
                problem = _check_headers(data, pos, end, headers)
                if isinstance(problem, str):
                    return i, problem
                pos = problem
            else:
                pos += 1
            if pos != end:
                return i, (f"record length {length} disagrees with its fields, which end "
                           f"{pos - end:+d} bytes from there")
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
