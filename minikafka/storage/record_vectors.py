"""Checking the records of a batch all at once: LogValidator's vectorised walker (NumPy).

Theory of operation
-------------------
LogValidator's one-pass walker (``_records_ok``) reads a batch's records one field after the other
in Python bytecode: about 0.6 us a record for records of varying sizes. This walker reads the same
fields, but each field of *every* record in one NumPy operation. Only one step is sequential, as
each record starts where the one before it ends: a Python loop that reads nothing but each
record's length varint (about 0.1 us a record) proposes where the records start. Then, for all
records at once, ``word[q]`` gathers the two bytes at each record's position ``q`` (``word`` is the
batch seen as overlapping little-endian 16-bit words), and constant tables indexed by that word
give what the field means: its width, its value, how far to skip (past a key or value of that
length), or a step "far" past the batch where the field breaks a rule; each rule is then one
comparison and ``any``. So a field costs a few NumPy calls whatever its width, a few nanoseconds
a record, and a batch about 20 us on top. Headers are read the same way, one header index at a
time (the first header of every record that has one, then the second...).

It may only *accept*, like LogValidator's other fast paths: ``records_ok`` is True only when every
record obeys every rule of ``first_bad_record`` (the reference), and False when it is not sure (a
varint wider than it reads, 64 headers or more, a header key that is not ASCII, a batch of more
than 8,192 records...): the one-pass walker, then the reference, decide those. It reads the fields
the reference reads, in the same order, and decodes each varint as the reference does (so a
non-minimal varint means the same to both), and it accepts a record only if its fields end exactly
where its length says: as fields are read forward, no byte it relied on lies outside the batch.
The proposal loop's guesses are checked like everything else (length even, record length >= 6,
each record's end is the next one's start, the last ends at the batch's end).

Why not a C record decoder, such as aiokafka's Cython ``DefaultRecordBatch`` (0.11 us a record to
iterate the wire benchmark's variable batch, measured)? Its reading is not Kafka's: it reads the
attributes byte as a varint, takes any negative key or value length as null, and keeps only 64
bits of a 10-byte varint, so it accepts batches Kafka's ``DefaultRecord`` refuses; ruling those
out from the records it returns needs Python work per record (re-encoding them with its own C
builder and comparing the bytes, the cheapest exact check found, took 0.6 us a record in all,
as much as our one-pass walker), and it would be a second decoder to trust, with a client
library's dependencies (asyncio client, 76 ms to import). See benchmarks/RESULTS.md.

Never: writes to the batch, I/O, a clock; never decides an error (it has no error to name).
"""

from __future__ import annotations

import numpy as np

_PAD = bytes(8)  # gathers a word at a field's last byte: zeros past the batch's end, never trusted
_MAX_RECORDS = 8192  # offsetDelta of one or two bytes: more records are the walker's
_FAR = 1 << 40  # a step that lands past any batch: the field is not allowed (or not sure)

# Every varint field is read through tables indexed by the 16-bit word at the field, ``w`` = its
# byte and the next (little-endian): one gather and one lookup per field, whatever the field's
# width, instead of a dozen NumPy operations to decode it. A varint of three bytes or more (the
# second byte continues) is invalid in the tables: not sure.
_W = np.arange(1 << 16)
_B0, _B1 = _W & 0xFF, _W >> 8
_ONE, _TWO = _B0 < 0x80, (_B0 >= 0x80) & (_B1 < 0x80)
_RAW = np.where(_ONE, _B0, (_B0 & 0x7F) | (_B1 << 7))
_WIDTH = np.where(_ONE, 1, np.where(_TWO, 2, 0))  # 0: three bytes or more
_VALUE = np.where(_RAW & 1, -(_RAW >> 1) - 1, _RAW >> 1)  # zig-zag undone
_VALID = _WIDTH > 0
# A record's length varint: the step to the next record (a length >= 6: attributes and five
# one-byte varints at least), else 0, which never reaches the next record's start.
_RECORD_STEP = np.where(_VALID & (_VALUE >= 6), _WIDTH + _VALUE, 0)
# A nullable length (key, value, header value): past it and its bytes; a length below -1: far.
_NULLABLE_STEP = np.where(_VALID & (_VALUE >= -1), _WIDTH + np.maximum(_VALUE, 0), _FAR)
_IS_NULL = _VALID & (_VALUE == -1)
# A header key's length (never null): past the varint only (the key's bytes are checked apart).
_KEY_LENGTH = np.where(_VALID & (_VALUE >= 0), _VALUE, -1)
# offsetDelta i, exactly: its one byte (i < 64), or its two bytes as a word (i >= 64).
_I = np.arange(_MAX_RECORDS)
_DELTA_BYTE = 2 * _I
_DELTA_WORD = ((2 * _I) & 0x7F | 0x80) | ((2 * _I) >> 7) << 8
_DELTA_WIDTH = np.where(_I < 64, 1, 2)
del _W, _B0, _B1, _ONE, _TWO, _RAW, _I


def records_ok(d: bytes, count: int, ts_limit: int | None, compacted: bool, first: int = 0, pos: int = 0) -> bool:
    """Whether records ``first``..``count - 1`` of the payload ``d``, from byte ``pos`` to its end,
    are all good (``first_bad_record``'s rules, ``ts_limit`` = maxTimestamp - baseTimestamp or
    None); False when not sure."""
    n = count - first
    if n <= 0 or count > _MAX_RECORDS or (ts_limit is not None and ts_limit < 0):
        return False
    if ts_limit is not None and ts_limit >= 1 << 20:  # above any delta of three bytes or fewer: no limit
        ts_limit = None  # (and NumPy is never asked to compare with a Python int out of its range)
    starts = [0] * n
    p = pos
    try:  # propose where each record starts (a length varint of one or two bytes, read raw)
        for i in range(n):
            starts[i] = p
            u = d[p]
            p += 1 + (u >> 1) if u < 0x80 else 2 + (((u & 0x7F) | (d[p + 1] << 7)) >> 1)
    except IndexError:
        return False
    if p != len(d):
        return False
    padded = d + _PAD
    byte = np.frombuffer(padded, np.uint8)
    word = np.ndarray((len(padded) - 1,), "<u2", padded, strides=(1,))  # word[q]: bytes q and q + 1
    start = np.array(starts, np.int64)
    end = np.empty(n, np.int64)
    end[:-1] = start[1:]
    end[-1] = p
    try:
        if (start + _RECORD_STEP[word[start]] != end).any():  # length: even, >= 6, as proposed
            return False
        q = start + _WIDTH[word[start]] + 1  # timestampDelta, after the attributes byte (any value)
        w = word[q]
        width = _WIDTH[w]
        if width.all():
            if ts_limit is not None and int(_VALUE[w].max()) > ts_limit:
                return False
            q = q + width
        else:  # deltas of 8.192 s and more: three bytes
            q = _past_timestamps(byte, q, ts_limit)
            if q is None:
                return False
        k = min(count, 64) - first  # offsetDelta: exactly record i's varint, minimal
        if k > 0 and (byte[q[:k]] != _DELTA_BYTE[first : first + k]).any():
            return False
        if k < n and (word[q[max(k, 0):]] != _DELTA_WORD[max(first, 64) : count]).any():
            return False
        q = q + _DELTA_WIDTH[first:count]
        w = word[q]  # key
        if compacted and _IS_NULL[w].any():
            return False
        q = q + _NULLABLE_STEP[w]
        q = q + _NULLABLE_STEP[word[q]]  # value
        headers = byte[q]
        q = q + 1
        if headers.any():
            if (headers & 0x81).any():  # 64 headers or more (two bytes), or a negative count
                return False
            q = _past_headers(byte, word, q, headers >> 1)
            if q is None:
                return False
        return bool((q == end).all())
    except IndexError:  # a guess that points past the batch: not sure
        return False


def _past_timestamps(byte: np.ndarray, q: np.ndarray, ts_limit: int | None):
    """Positions after timestampDelta varints of one to three bytes at ``q``, each delta at
    most ``ts_limit``; None if one is wider or above it."""
    t0, t1, t2 = (byte[q + j].astype(np.int64) for j in range(3))
    one = t0 < 0x80
    two = ~one & (t1 < 0x80)
    three = ~one & ~two & (t2 < 0x80)
    if not (one | two | three).all():
        return None
    if ts_limit is not None:  # an even raw varint is a delta >= 0: it must be <= the limit
        u = np.where(one, t0, (t0 & 0x7F) | np.where(two, t1 << 7, ((t1 & 0x7F) << 7) | (t2 << 14)))
        if ((u & 1 == 0) & (u >> 1 > ts_limit)).any():
            return None
    return q + 1 + two + 2 * three


def _past_headers(byte: np.ndarray, word: np.ndarray, q: np.ndarray, counts: np.ndarray):
    """Positions after each record's headers (``counts`` of them, from ``q``): header j of every
    record that has more than j, at once. Keys must have a length >= 0 and be ASCII (any other
    UTF-8 is left to the walker); values are nullable. None if not sure or not allowed."""
    q = q.copy()
    for j in range(int(counts.max())):
        which = np.flatnonzero(counts > j)
        w = word[q[which]]
        key_len = _KEY_LENGTH[w]
        if (key_len < 0).any():  # negative, or a varint of three bytes or more
            return None
        key_at = q[which] + _WIDTH[w]
        total = int(key_len.sum())
        if total:  # every key byte, gathered: byte k of the keys laid end to end is at key_at + k - (keys before)
            before = np.cumsum(key_len) - key_len
            if (byte[np.arange(total) + np.repeat(key_at - before, key_len)] >= 0x80).any():
                return None
        after = key_at + key_len
        q[which] = after + _NULLABLE_STEP[word[after]]
    return q
