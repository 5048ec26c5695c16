"""Records and record batches in Kafka's v2 format (magic 2): ``DefaultRecordBatch``.

Theory of operation
-------------------
Producers group records into *batches*; a batch is the unit Kafka writes, replicates,
stores and serves. Its layout (all integers big-endian)::

    offset  size  field                   covered by the CRC?
    0       8     baseOffset              no  (the leader patches it on append)
    8       4     batchLength             no  (bytes after this field)
    12      4     partitionLeaderEpoch    no  (the leader patches it on append)
    16      1     magic (= 2)             no
    17      4     crc (CRC32C)            no
    21      2     attributes              yes: compression (bits 0-2), timestamp type (3),
                                               transactional (4), control (5)
    23      4     lastOffsetDelta         yes
    27      8     baseTimestamp           yes
    35      8     maxTimestamp            yes
    43      8     producerId              yes
    51      2     producerEpoch           yes
    53      4     baseSequence            yes
    57      4     recordsCount            yes
    61      ...   records (compressed as one block when a codec is set)

Each record inside is: length, attributes, timestampDelta, offsetDelta, key, value and
headers, with lengths and deltas as zig-zag varints (``encode_varint``).

Invariants:
- A batch is *opaque bytes* once built. The broker validates it (a client's batch record
  by record, ``storage/log_validator.py``; every batch's CRC, magic and sizes in
  ``Log.append``) and patches only ``baseOffset`` and ``partitionLeaderEpoch``, which sit
  outside the CRC, so stored bytes are served back to consumers byte for byte, compressed
  or not.
- Decoding never trusts a length field: every read is bounds-checked, and anything
  malformed raises ``CorruptRecordError`` saying what was wrong and at which byte.

This module never does I/O and never reads a clock: records without a timestamp get the
one the caller passes, else Kafka's ``NO_TIMESTAMP`` (-1).
"""

from __future__ import annotations

import enum
import gzip
import struct
import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import cramjam
import crc32c as _crc32c
import lz4.frame
import zstandard

from minikafka.errors import CorruptRecordError, UnsupportedCodecError

MAGIC = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# The fixed batch header, field by field as in the table above.
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
BASE_OFFSET_AT = 0
LENGTH_AT = 8
PARTITION_LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21  # the CRC covers from here to the end of the batch
LAST_OFFSET_DELTA_AT = 23
MAX_TIMESTAMP_AT = 35

_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength: enough to walk a log
_PATCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC32C (Castagnoli), the checksum of v2 batches; C-accelerated."""
    return _crc32c.crc32c(data)


class Compression(enum.IntEnum):
    """The codec in bits 0-2 of a batch's attributes (Kafka's ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, value: "str | int | Compression | None") -> "Compression":
        """Accept what kafka-python's ``compression_type`` accepts: None or a name."""
        if value is None:
            return cls.NONE
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                names = ", ".join(c.name.lower() for c in cls)
                raise UnsupportedCodecError(
                    f"unknown compression type {value!r}; expected one of {names}"
                ) from None
        try:
            return cls(value)
        except ValueError:
            raise UnsupportedCodecError(f"unknown compression codec id {value!r}") from None


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# --- compression: well-kept libraries do the work; only Kafka's framing is ours ----------

# Kafka's Java clients write snappy in xerial's stream format (snappy-java's
# SnappyOutputStream): a magic header, then [int32 length][raw snappy block] chunks.
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def _snappy_compress(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


def _snappy_decompress(data: bytes, limit: int | None = None) -> bytes:
    data = bytes(data)
    if not data.startswith(_XERIAL_HEADER[:8]):
        return _snappy_raw(data, limit)  # plain block (older clients)
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError(f"xerial snappy chunk header truncated at byte {pos}")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise ValueError(f"xerial snappy chunk of {size} bytes overruns the data at byte {pos}")
        out += _snappy_raw(data[pos : pos + size], None if limit is None else limit - len(out))
        pos += size
    return bytes(out)


def _snappy_raw(block: bytes, limit: int | None) -> bytes:
    if limit is not None:
        # A raw snappy block starts with its uncompressed length: refuse before allocating.
        size = shift = 0
        for byte in block[:5]:  # an unsigned (not zig-zag) varint, at most 32 bits
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        else:
            raise ValueError("snappy block without a valid uncompressed length")
        if size > limit:
            raise DecompressionLimitError(limit)
    return bytes(cramjam.snappy.decompress_raw(block))


def _lz4_compress(data: bytes) -> bytes:
    # Kafka's LZ4 reader rejects linked blocks; 64 KB blocks as its own writer uses.
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _zstd_decompress(data: bytes) -> bytes:
    # Streaming, because Java's zstd writer does not record the content size.
    return zstandard.ZstdDecompressor().decompressobj().decompress(data)


_CODECS = {
    # mtime=0, as Java's GZIPOutputStream: the same records always make the same bytes.
    Compression.GZIP: (lambda d: gzip.compress(d, mtime=0), gzip.decompress),
    Compression.SNAPPY: (_snappy_compress, _snappy_decompress),
    Compression.LZ4: (_lz4_compress, lz4.frame.decompress),
    Compression.ZSTD: (lambda d: zstandard.ZstdCompressor().compress(d), _zstd_decompress),
}


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    return _CODECS[codec][0](data)


class DecompressionLimitError(ValueError):
    """A compressed payload holds more bytes than the caller allowed (a decompression bomb)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"it decompresses to more than {limit} bytes")
        self.limit = limit


def decompress(codec: Compression, data: bytes, limit: int | None = None) -> bytes:
    """The payload decompressed. With ``limit``, never more than ``limit`` bytes are made:
    past it ``DecompressionLimitError`` is raised, having used memory and time for about
    ``limit`` bytes only, whatever the payload claims or holds."""
    if codec == Compression.NONE:
        return data
    if limit is None:
        return _CODECS[codec][1](data)
    return _BOUNDED[codec](data, limit)


def _gzip_bounded(data: bytes, limit: int) -> bytes:
    # gzip.decompress's rules (members one after another, zero padding between them), with
    # zlib stopping at the limit. zlib also checks a header CRC, as Java's GZIPInputStream does.
    out = bytearray()
    data = bytes(data)
    while data:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            raise DecompressionLimitError(limit)
        if not inflater.eof:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        data = inflater.unused_data.lstrip(b"\x00")
    return bytes(out)


def _lz4_bounded(data: bytes, limit: int) -> bytes:
    frame = lz4.frame.LZ4FrameDecompressor()
    out = bytearray(frame.decompress(data, max_length=limit + 1))
    while not frame.eof and not frame.needs_input and len(out) <= limit:
        out += frame.decompress(b"", max_length=limit + 1 - len(out))
    if len(out) > limit:
        raise DecompressionLimitError(limit)
    if not frame.eof:
        raise ValueError("LZ4 frame incomplete")
    return bytes(out)


_ZSTD_STEP = 128  # input bytes a step: one zstd block of 128 KB takes a few bytes to describe


def _zstd_bounded(data: bytes, limit: int) -> bytes:
    # As _zstd_decompress (the first frame), fed a little input at a time, since a few bytes
    # can describe a large block and the frame's own content size is the sender's claim.
    stream = zstandard.ZstdDecompressor().decompressobj()
    out = bytearray()
    view = memoryview(bytes(data))
    for start in range(0, len(view), _ZSTD_STEP):
        out += stream.decompress(view[start : start + _ZSTD_STEP])
        if len(out) > limit:
            raise DecompressionLimitError(limit)
        if stream.eof:
            break
    return bytes(out)


_BOUNDED = {
    Compression.GZIP: _gzip_bounded,
    Compression.SNAPPY: _snappy_decompress,
    Compression.LZ4: _lz4_bounded,
    Compression.ZSTD: _zstd_bounded,
}


# --- varints --------------------------------------------------------------------------------


def encode_varint(value: int, out: bytearray) -> None:
    """Append ``value`` as a zig-zag varint (protobuf's encoding, which Kafka uses).

    Zig-zag maps small negative numbers to small unsigned ones (0, -1, 1, -2 -> 0, 1, 2,
    3) so that -1, the length of a null key, takes one byte.
    """
    v = (value << 1) ^ (value >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


_ZIGZAG = [(u >> 1) ^ -(u & 1) for u in range(0x80)]  # the value of each one-byte varint


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read a zig-zag varint at ``pos``; return (value, position after it)."""
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise IndexError(f"varint runs past the end of the data at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError(f"varint longer than 10 bytes ending at byte {pos}")
    return (result >> 1) ^ -(result & 1), pos


# --- records ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One record: what a producer sends and a consumer reads.

    ``offset`` is None until the record has been read back out of a stored batch.
    """

    key: bytes | None = None
    value: bytes | None = None
    timestamp: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    offset: int | None = None

    def __post_init__(self) -> None:
        for name in ("key", "value"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, (bytes, bytearray)):
                raise TypeError(
                    f"Record {name} must be bytes or None, not {type(v).__name__}: "
                    f"serialize it first (e.g. {name}.encode() or json.dumps({name}).encode())"
                )
        if not isinstance(self.headers, tuple):
            object.__setattr__(self, "headers", tuple(self.headers))
        for h in self.headers:
            if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str)):
                raise TypeError(f"a header must be a (str, bytes | None) pair, not {h!r}")


def _decoded_record(key: bytes | None, value: bytes | None, timestamp: int,
                    headers: tuple[tuple[str, bytes | None], ...], offset: int) -> Record:
    """A ``Record`` whose fields decoding made, so they are what ``__post_init__`` checks
    for: filled in without its checks (about 0.7 us less each; consumers and the checker's
    readers decode every record they see)."""
    record = object.__new__(Record)
    state = record.__dict__
    state["key"], state["value"], state["timestamp"], state["headers"], state["offset"] = (
        key, value, timestamp, headers, offset)
    return record


def _encode_record(out: bytearray, rec: Record, offset_delta: int, timestamp_delta: int) -> None:
    body = bytearray(b"\x00")  # record attributes: unused, always 0
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    for field in (rec.key, rec.value):
        if field is None:
            encode_varint(-1, body)
        else:
            encode_varint(len(field), body)
            body += field
    encode_varint(len(rec.headers), body)
    for hkey, hvalue in rec.headers:
        hk = hkey.encode("utf-8")
        encode_varint(len(hk), body)
        body += hk
        if hvalue is None:
            encode_varint(-1, body)
        else:
            encode_varint(len(hvalue), body)
            body += hvalue
    encode_varint(len(body), out)
    out += body


def _decode_records(
    data: bytes, count: int, base_offset: int, base_timestamp: int, where: str
) -> list[Record]:
    """Decode ``count`` records; ``where`` locates the batch in error messages."""
    records = []
    pos = 0
    size = len(data)
    # Every consumer and reader decodes every record here. Most of a record's varints are
    # one byte (lengths below 64, small deltas): those are read in place, the others (and
    # a varint at the very end of the data, for decode_varint's error) by decode_varint.
    try:
        for i in range(count):
            u = data[pos] if pos < size else 0x80
            if u < 0x80:
                length, pos = _ZIGZAG[u], pos + 1
            else:
                length, pos = decode_varint(data, pos)
            end = pos + length
            if length < 0 or end > size:
                raise ValueError(f"record {i} claims {length} bytes, only {size - pos} left")
            pos += 1  # attributes
            u = data[pos] if pos < size else 0x80
            if u < 0x80:
                ts_delta, pos = _ZIGZAG[u], pos + 1
            else:
                ts_delta, pos = decode_varint(data, pos)
            u = data[pos] if pos < size else 0x80
            if u < 0x80:
                off_delta, pos = _ZIGZAG[u], pos + 1
            else:
                off_delta, pos = decode_varint(data, pos)
            fields = []
            for _ in range(2):
                u = data[pos] if pos < size else 0x80
                if u < 0x80:
                    n, pos = _ZIGZAG[u], pos + 1
                else:
                    n, pos = decode_varint(data, pos)
                fields.append(None if n < 0 else data[pos : pos + n])
                pos += max(n, 0)
            nheaders, pos = decode_varint(data, pos)
            headers = []
            for _ in range(nheaders):
                n, pos = decode_varint(data, pos)
                hkey = bytes(data[pos : pos + n]).decode("utf-8")
                pos += n
                n, pos = decode_varint(data, pos)
                headers.append((hkey, None if n < 0 else bytes(data[pos : pos + n])))
                pos += max(n, 0)
            if pos != end:
                raise ValueError(f"record {i} is {length} bytes long but its fields end at {pos - end:+d}")
            records.append(_decoded_record(
                fields[0], fields[1], base_timestamp + ts_delta, tuple(headers), base_offset + off_delta))
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"{where}: malformed record: {e}") from None
    if pos != len(data):
        raise CorruptRecordError(
            f"{where}: {len(data) - pos} bytes left over after the {count} records the header declares"
        )
    return records


# --- batches ---------------------------------------------------------------------------------


class RecordBatch:
    """A read-only view of one v2 batch's bytes, with its header fields decoded.

    ``RecordBatch(buf)`` checks sizes and magic; ``validate()`` also checks the CRC;
    ``records()`` decompresses and decodes the records. ``bytes(batch)`` is the batch as
    stored. Build new ones with ``RecordBatch.build``.
    """

    __slots__ = (
        "_buf", "where", "base_offset", "batch_length", "partition_leader_epoch", "magic",
        "crc", "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
        "producer_id", "producer_epoch", "base_sequence", "records_count",
    )

    def __init__(self, buffer: bytes | bytearray | memoryview, *, where: str = "batch") -> None:
        self.where = where
        if len(buffer) < HEADER_SIZE:
            raise CorruptRecordError(
                f"{where}: truncated batch: {len(buffer)} bytes, a v2 batch header alone is {HEADER_SIZE}"
            )
        (
            self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic,
            self.crc, self.attributes, self.last_offset_delta, self.base_timestamp,
            self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
            self.records_count,
        ) = HEADER.unpack_from(buffer, 0)
        if self.magic != MAGIC:
            raise CorruptRecordError(
                f"{where}: wrong magic {self.magic} (byte 16): minikafka reads only v2 batches (magic 2)"
            )
        size = LOG_OVERHEAD + self.batch_length
        if self.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"{where}: batchLength {self.batch_length} is smaller than a v2 header"
            )
        if len(buffer) < size:
            raise CorruptRecordError(
                f"{where}: truncated batch: batchLength says {size} bytes, only {len(buffer)} present"
            )
        # A memoryview stays a view (the log checks and patches batches in place); bytes
        # are kept as they are; anything mutable is copied so the batch cannot change.
        if isinstance(buffer, memoryview):
            self._buf = buffer[:size]
        elif isinstance(buffer, bytes) and len(buffer) == size:
            self._buf = buffer
        else:
            self._buf = bytes(buffer[:size])

    # -- derived header fields
    @property
    def compression(self) -> Compression:
        try:
            return Compression(self.attributes & _COMPRESSION_MASK)
        except ValueError:
            raise CorruptRecordError(
                f"{self.where}: unknown compression codec {self.attributes & _COMPRESSION_MASK}"
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(bool(self.attributes & _TIMESTAMP_TYPE_BIT))

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control_batch(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    def __len__(self) -> int:
        return len(self._buf)

    def __bytes__(self) -> bytes:
        return bytes(self._buf)

    def computed_crc(self) -> int:
        return crc32c(memoryview(self._buf)[ATTRIBUTES_AT:])

    def is_valid(self) -> bool:
        return self.crc == self.computed_crc()

    def validate(self) -> "RecordBatch":
        """Raise ``CorruptRecordError`` unless the stored CRC matches the bytes."""
        computed = self.computed_crc()
        if computed != self.crc:
            raise CorruptRecordError(
                f"{self.where}: CRC mismatch: stored 0x{self.crc:08x}, computed 0x{computed:08x} "
                f"(baseOffset {self.base_offset}, {len(self._buf)} bytes)"
            )
        return self

    def records(self) -> list[Record]:
        """Decode (and decompress) the records, each with its absolute offset."""
        payload = memoryview(self._buf)[HEADER_SIZE:]
        codec = self.compression
        if codec != Compression.NONE:
            try:
                payload = decompress(codec, bytes(payload))
            except Exception as e:  # each library raises its own error type
                raise CorruptRecordError(f"{self.where}: cannot decompress {codec.name}: {e}") from None
        return _decode_records(
            bytes(payload), self.records_count, self.base_offset, self.base_timestamp, self.where
        )

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def with_offsets(self, base_offset: int, partition_leader_epoch: int | None = None) -> bytes:
        """The same batch with baseOffset (and leader epoch) patched: the CRC still holds."""
        buf = bytearray(self._buf)
        patch_header(buf, base_offset, partition_leader_epoch)
        return bytes(buf)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.records_count}, size={len(self._buf)}, "
            f"compression={self.compression.name.lower()}, max_timestamp={self.max_timestamp})"
        )

    @classmethod
    def build(
        cls,
        records: Iterable[Record | bytes | tuple],
        *,
        base_offset: int = 0,
        compression: "str | Compression | None" = None,
        timestamp: int | None = None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control_batch: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        use_record_offsets: bool = False,
        last_offset_delta: int | None = None,
        base_timestamp: int | None = None,
        max_timestamp: int | None = None,
        timestamp_type: "TimestampType | int" = 0,
    ) -> "RecordBatch":
        """Encode records into one v2 batch.

        ``records`` may hold ``Record`` objects, bare values (bytes) or ``(key, value)``
        pairs. Records without a timestamp get ``timestamp`` (default ``NO_TIMESTAMP``).

        For rewriting a stored batch (the log cleaner): ``use_record_offsets`` gives each
        record the offset delta ``record.offset - base_offset`` instead of its position, so
        offsets survive records being dropped; ``last_offset_delta`` then keeps the batch's
        original offset range (default: the last record's delta). ``base_timestamp``,
        ``max_timestamp`` and ``timestamp_type`` keep the original header's timestamps.
        """
        recs = [_as_record(r, timestamp) for r in records]
        if not recs:
            raise ValueError("a record batch needs at least one record")
        codec = Compression.parse(compression)
        stamps = [NO_TIMESTAMP if r.timestamp is None else r.timestamp for r in recs]
        base_ts = stamps[0] if base_timestamp is None else base_timestamp
        if use_record_offsets:
            deltas = []
            for rec in recs:
                if rec.offset is None:
                    raise ValueError("use_record_offsets needs every record to carry its offset")
                deltas.append(rec.offset - base_offset)
            if deltas[0] < 0 or any(b <= a for a, b in zip(deltas, deltas[1:])):
                raise ValueError(f"record offsets must increase from base_offset {base_offset}: {deltas}")
        else:
            deltas = list(range(len(recs)))
        last_delta = deltas[-1] if last_offset_delta is None else last_offset_delta
        if last_delta < deltas[-1] or last_delta > 2**31 - 1:
            raise ValueError(f"last_offset_delta {last_delta} is below the last record's delta {deltas[-1]}")
        body = bytearray()
        for rec, ts, delta in zip(recs, stamps, deltas):
            _encode_record(body, rec, delta, ts - base_ts)
        payload = compress(codec, bytes(body))
        attributes = int(codec) | (TRANSACTIONAL_BIT if is_transactional else 0)
        if is_control_batch:  # a transaction marker (see ``minikafka.broker.transaction_marker``)
            attributes |= CONTROL_BIT
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= _TIMESTAMP_TYPE_BIT
        header = HEADER.pack(
            base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), partition_leader_epoch,
            MAGIC, 0, attributes, last_delta, base_ts,
            max(stamps) if max_timestamp is None else max_timestamp, producer_id,
            producer_epoch, base_sequence, len(recs),
        )
        buf = bytearray(header) + payload
        struct.pack_into(">I", buf, CRC_AT, crc32c(memoryview(buf)[ATTRIBUTES_AT:]))
        return cls(bytes(buf))


def _as_record(item: "Record | bytes | tuple", timestamp: int | None) -> Record:
    if isinstance(item, Record):
        rec = item
    elif isinstance(item, (bytes, bytearray)) or item is None:
        rec = Record(value=item)
    elif isinstance(item, tuple) and len(item) == 2:
        rec = Record(key=item[0], value=item[1])
    else:
        raise TypeError(f"expected a Record, a bytes value or a (key, value) pair, not {item!r}")
    if rec.timestamp is None and timestamp is not None:
        rec = Record(rec.key, rec.value, timestamp, rec.headers)
    return rec


def patch_header(buf: bytearray | memoryview, base_offset: int, partition_leader_epoch: int | None) -> None:
    """Patch baseOffset (and partitionLeaderEpoch) in place; both sit outside the CRC."""
    struct.pack_into(">q", buf, BASE_OFFSET_AT, base_offset)
    if partition_leader_epoch is not None:
        struct.pack_into(">i", buf, PARTITION_LEADER_EPOCH_AT, partition_leader_epoch)


class MemoryRecords:
    """Zero or more batches back to back in one buffer: what a log segment holds, what a
    Produce request carries and what a Fetch returns (Kafka's ``MemoryRecords``)."""

    __slots__ = ("_buf", "where")

    def __init__(self, buffer: bytes | bytearray | memoryview = b"", *, where: str = "records") -> None:
        self._buf = bytes(buffer)
        self.where = where

    @classmethod
    def of(cls, batches: Iterable[RecordBatch | bytes]) -> "MemoryRecords":
        return cls(b"".join(bytes(b) for b in batches))

    @classmethod
    def build(cls, records: Iterable[Record | bytes | tuple], **kwargs) -> "MemoryRecords":
        """One batch holding ``records``; keyword arguments as ``RecordBatch.build``."""
        return cls(bytes(RecordBatch.build(records, **kwargs)))

    def __bytes__(self) -> bytes:
        return self._buf

    def __len__(self) -> int:
        return len(self._buf)

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    def batches(self, *, allow_partial_tail: bool = False) -> Iterator[RecordBatch]:
        """Walk the batches. A truncated last batch raises ``CorruptRecordError``, unless
        ``allow_partial_tail`` (fetch responses may end mid-batch; clients skip that tail)."""
        buf = self._buf
        pos = 0
        while pos < len(buf):
            where = f"{self.where} at byte {pos}"
            if pos + LOG_OVERHEAD > len(buf):
                if allow_partial_tail:
                    return
                raise CorruptRecordError(
                    f"{where}: truncated batch: {len(buf) - pos} bytes, less than the {LOG_OVERHEAD}-byte prefix"
                )
            _, length = _PREFIX.unpack_from(buf, pos)
            end = pos + LOG_OVERHEAD + length
            if end > len(buf) and allow_partial_tail:
                return
            batch = RecordBatch(memoryview(buf)[pos:end], where=where)
            yield batch
            pos = end

    def __iter__(self) -> Iterator[RecordBatch]:
        return self.batches()

    def records(self) -> list[Record]:
        return [r for b in self.batches() for r in b.records()]

    def validate(self) -> "MemoryRecords":
        for b in self.batches():
            b.validate()
        return self

    def __repr__(self) -> str:
        n = sum(1 for _ in self.batches(allow_partial_tail=True))
        return f"MemoryRecords({n} batches, {len(self._buf)} bytes)"


def as_memory_records(records: "MemoryRecords | RecordBatch | bytes | bytearray | Sequence") -> MemoryRecords:
    """Accept what ``Log.append`` accepts: encoded bytes, a batch, or a list of records."""
    if isinstance(records, MemoryRecords):
        return records
    if isinstance(records, RecordBatch):
        return MemoryRecords(bytes(records))
    if isinstance(records, (bytes, bytearray, memoryview)):
        return MemoryRecords(records)
    if isinstance(records, Record):
        return MemoryRecords.build([records])
    return MemoryRecords.build(list(records))
