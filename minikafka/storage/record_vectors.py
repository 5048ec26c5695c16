"""Checking the records of a batch all at once: LogValidator's vectorised walker (NumPy).

Theory of operation
-------------------
LogValidator's one-pass walker (``_records_ok``) reads a batch's records one field after the other
in Python bytecode: about 0.6 us a record for records of varying sizes. This walker reads the same
fields, but each field of *every* record in one NumPy operation. Only one step is sequential, as
each record starts where the one before it ends: a Python loop that reads nothing but each
record's length varint (about 0.1 us a record) proposes where the records start. Then, for all
records at once, ``a[q]`` gathers the byte at each record's position ``q`` (``a`` is the batch as a
byte array), varints of one and two bytes (three for timestampDelta) are decoded with ``where``,
each rule is checked with a comparison and ``any``, and ``q`` moves past the field: a few
nanoseconds a record for each field, plus about 40 us a batch. Headers are read the same way, one
header index at a time (the first header of every record that has one, then the second...).

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
iterate the same batch)? Its reading is not Kafka's: it reads the attributes byte as a varint, takes
any negative key or value length as null, and keeps only 64 bits of a 10-byte varint, so it accepts
batches Kafka's ``DefaultRecord`` refuses; ruling those out from the records it returns (re-encoding
them, or summing their encoded sizes) costs as much Python per record as our walker (measured:
0.6-1.1 us a record), and it would have been a second decoder to trust (see benchmarks/RESULTS.md).

Never: writes to the batch, I/O, a clock; never decides an error (it has no error to name).
"""

from __future__ import annotations

import numpy as np

_PAD = bytes(8)  # gathers one or two bytes past a field: zeros past the batch's end, never trusted
_MAX_RECORDS = 8192  # offsetDelta of one or two bytes: more records are the walker's

# The bytes of offsetDelta i (raw varint 2i): its first byte, its second (if i >= 64), its width.
_DELTA_LOW = np.array([((2 * i) & 0x7F) | (0x80 if i >= 64 else 0) for i in range(_MAX_RECORDS)], np.int64)
_DELTA_HIGH = np.array([(2 * i) >> 7 for i in range(_MAX_RECORDS)], np.int64)
_DELTA_WIDTH = np.array([1 if i < 64 else 2 for i in range(_MAX_RECORDS)], np.int64)


def _varints(a: np.ndarray, q: np.ndarray):
    """The raw varints of one or two bytes at positions ``q``, and their widths; None if one is wider."""
    b0 = a[q]
    wide = b0 >= 0x80
    b1 = a[q + 1]
    if (wide & (b1 >= 0x80)).any():
        return None
    return np.where(wide, (b0 & 0x7F) | (b1 << 7), b0), 1 + wide


def _past_nullable(a: np.ndarray, q: np.ndarray):
    """Positions after a nullable length field and the bytes it counts (key, value, header value):
    its raw varint must be even (a length) or 1 (-1, null). None if not sure or not allowed."""
    read = _varints(a, q)
    if read is None:
        return None, None
    u, width = read
    null = (u & 1).astype(bool)
    if null.any() and (u[null] != 1).any():  # a length below -1
        return None, None
    return q + width + np.where(null, 0, u >> 1), null


def records_ok(d: bytes, count: int, ts_limit: int | None, compacted: bool, first: int = 0, pos: int = 0) -> bool:
    """Whether records ``first``..``count - 1`` of the payload ``d``, from byte ``pos`` to its end,
    are all good (``first_bad_record``'s rules, ``ts_limit`` = maxTimestamp - baseTimestamp or
    None); False when not sure."""
    n = count - first
    if n <= 0 or count > _MAX_RECORDS or (ts_limit is not None and ts_limit < 0):
        return False
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
    a = np.frombuffer(d + _PAD, np.uint8).astype(np.uint16)  # room for a two-byte varint's value; int64 costs 10x
    start = np.array(starts, np.int64)
    end = np.empty(n, np.int64)
    end[:-1] = start[1:]
    end[-1] = p
    try:
        read = _varints(a, start)  # length
        if read is None:
            return False
        u, width = read  # start + width + length is the next start: the proposal read the same bytes
        if (u & 1).any() or ((u >> 1) < 6).any():  # a negative length, or one shorter than any record
            return False
        q = start + width + 1  # timestampDelta, after the attributes byte (any value)
        t0, t1, t2 = a[q], a[q + 1], a[q + 2]
        one = t0 < 0x80
        two = ~one & (t1 < 0x80)
        three = ~one & ~two & (t2 < 0x80)
        if not (one | two | three).all():
            return False
        if ts_limit is not None:  # an even raw varint is a delta >= 0: it must be <= the limit
            t0, t1, t2 = t0.astype(np.int64), t1.astype(np.int64), t2.astype(np.int64)
            u = np.where(one, t0, (t0 & 0x7F) | np.where(two, t1 << 7, ((t1 & 0x7F) << 7) | (t2 << 14)))
            if ((u & 1 == 0) & (u >> 1 > ts_limit)).any():
                return False
        q = q + 1 + two + 2 * three  # offsetDelta: exactly record i's varint, minimal
        if (a[q] != _DELTA_LOW[first:count]).any():
            return False
        if count > 64:
            k = max(first, 64)
            if (a[q[k - first :] + 1] != _DELTA_HIGH[k:count]).any():
                return False
        q, null = _past_nullable(a, q + _DELTA_WIDTH[first:count])  # key
        if q is None or (compacted and null.any()):
            return False
        q, _ = _past_nullable(a, q)  # value
        if q is None:
            return False
        headers = a[q]
        q = q + 1
        if headers.any():
            if (headers & 0x81).any():  # 64 headers or more (two bytes), or a negative count
                return False
            q = _past_headers(a, q, headers >> 1)
            if q is None:
                return False
        return bool((q == end).all())
    except IndexError:  # a guess that points past the batch: not sure
        return False


def _past_headers(a: np.ndarray, q: np.ndarray, counts: np.ndarray):
    """Positions after each record's headers (``counts`` of them, from ``q``): header j of every
    record that has more than j, at once. Keys must have a length >= 0 and be ASCII (any other
    UTF-8 is left to the walker); values are nullable. None if not sure or not allowed."""
    q = q.copy()
    for j in range(int(counts.max())):
        which = np.flatnonzero(counts > j)
        read = _varints(a, q[which])
        if read is None:
            return None
        u, width = read
        if (u & 1).any():  # a negative key length
            return None
        key_at = q[which] + width
        key_len = (u >> 1).astype(np.int64)  # int64 throughout: NumPy makes int64 with uint64 a float
        total = int(key_len.sum())
        if total:  # every key byte, gathered: byte k of the keys laid end to end is at key_at + k - (keys before)
            before = np.cumsum(key_len) - key_len
            if (a[np.arange(total) + np.repeat(key_at - before, key_len)] >= 0x80).any():
                return None
        after, _ = _past_nullable(a, key_at + key_len)
        if after is None:
            return None
        q[which] = after
    return q
