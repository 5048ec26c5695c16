"""Stand-ins for a consumer, a producer and a sink: what an application's loop *does*, recorded.

Theory of operation
-------------------
Lecture 07's rules act rather than return (``minikafka.recipes``): one iteration of a consumer's
loop polls, processes, commits; a sink's callbacks seek and write. Their hidden properties
(``properties.py``) judge what they did, so the calls go to stand-ins that record every call as
plain data in ``World.log`` and keep the state that matters (Kafka's committed offsets, the sink's
rows, the transactions a producer committed): a ``Consumer`` that polls records from fixed
partitions, a ``Producer`` with kafka-python's transactional API, a ``Database`` with atomic
``transaction``, and ``Crash`` raised where the drawn case says the process dies.

``act(name, case, functions)`` runs one case: the student's functions in the kernel, Kafka's
recipes in the grader's process, on the very same stand-ins. It returns what the grader judges,
as plain data: the log of one iteration (``no_record_lost``, ``no_record_twice``,
``transactional_step``), or the sink's counts after a whole run with crashes and rebalances
(``count_reports``, with ``on_assigned``).

This file is sent to the kernel as source and run there in a fresh namespace (``properties.
call_cell``), so it imports nothing of the package: a submission cannot reach it by patching a
module, and it holds no answer. Never: I/O, clocks, randomness (the case carries every choice).
"""

from collections import namedtuple

TopicPartition = namedtuple("TopicPartition", "topic partition")
ConsumerRecord = namedtuple("ConsumerRecord", "topic partition offset timestamp key value headers")
GroupMetadata = namedtuple("GroupMetadata", "group_id")

SINK_INCARNATIONS = 12  # consumer processes one sink run may start (crashes and rebalances end them)
SINK_POLLS = 200        # polls in one sink run, over all its processes: a loop that never ends stops here


class Crash(BaseException):
    """The application's process dies here (a BaseException, as the judge's ``Crash``)."""


def _offset(value):
    """An offset as ``commit`` and ``send_offsets_to_transaction`` take it: an int or an
    ``OffsetAndMetadata`` (anything with ``.offset``)."""
    offset = getattr(value, "offset", value)
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise TypeError(f"an offset must be an int or an OffsetAndMetadata, not {value!r}")
    return offset


def _partition(tp):
    if not isinstance(tp, tuple) or len(tp) != 2:
        raise TypeError(f"a partition must be a TopicPartition, not {tp!r}")
    return tp[1]


class World:
    """What outlives one process: the log of calls, Kafka's committed offsets, the crash plan."""

    def __init__(self, topic, data, crash_at=None):
        self.topic = topic
        self.data = data          # {partition: [(key, value), ...]}, the record at index i has offset i
        self.log = []
        self.committed = {}       # {partition: offset}: Kafka's, for the consumer's group
        self.crash_at = crash_at  # the number of the call of process/transform/transaction that crashes
        self.calls = 0

    def maybe_crash(self):
        self.calls += 1
        if self.crash_at is not None and self.calls == self.crash_at:
            self.log.append(("crash",))
            raise Crash()

    def record(self, partition, offset):
        key, value = self.data[partition][offset]
        return ConsumerRecord(self.topic, partition, offset, 1_000 + offset, key, value, [])


class Consumer:
    """A consumer of ``world.topic`` that owns ``partitions``, at ``positions``: each ``poll``
    returns up to ``max_records`` records from the positions, partition by partition."""

    def __init__(self, world, partitions, positions, max_records, group="billing"):
        self.world, self.max_records, self.group = world, max_records, group
        self.positions = dict(positions)
        self.partitions = sorted(partitions)

    def poll(self, timeout_ms=0, max_records=None, update_offsets=True):
        self.world.log.append(("poll",))
        out, room = {}, min(self.max_records, max_records or self.max_records)
        for p in self.partitions:
            start = self.positions[p]
            taken = list(range(start, min(start + room, len(self.world.data[p]))))
            if taken:
                out[TopicPartition(self.world.topic, p)] = [self.world.record(p, o) for o in taken]
                room -= len(taken)
                if update_offsets:
                    self.positions[p] = taken[-1] + 1
        return out

    def commit(self, offsets=None, timeout_ms=None):
        if offsets is None:
            offsets = {TopicPartition(self.world.topic, p): o for p, o in self.positions.items()}
        if not isinstance(offsets, dict):
            raise TypeError(f"commit takes {{TopicPartition: offset}}, not {offsets!r}")
        for tp, value in offsets.items():
            self.world.committed[_partition(tp)] = _offset(value)
        self.world.log.append(("commit", tuple(sorted(self.world.committed.items()))))

    def commit_async(self, offsets=None, callback=None):
        self.commit(offsets)

    def position(self, tp):
        return self.positions[_partition(tp)]

    def committed(self, tp, metadata=False):
        return self.world.committed.get(_partition(tp))

    def assignment(self):
        return {TopicPartition(self.world.topic, p) for p in self.partitions}

    def seek(self, tp, offset):
        p = _partition(tp)
        if p not in self.positions:
            raise ValueError(f"seek: {tp!r} is not assigned to this consumer")
        self.positions[p] = _offset(offset)
        self.world.log.append(("seek", p, self.positions[p]))

    def group_metadata(self):
        return GroupMetadata(self.group)


class _Sent:
    def get(self, timeout=None):
        return None


class Producer:
    """A transactional producer (kafka-python's API): every call logged, a send and the offsets
    marked with whether a transaction was open."""

    def __init__(self, world):
        self.world, self.open = world, False

    def begin_transaction(self):
        self.world.log.append(("begin",))
        self.open = True

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        self.world.log.append(("send", topic, value, partition, self.open))
        return _Sent()

    def send_offsets_to_transaction(self, offsets, group):
        group_id = getattr(group, "group_id", group)
        self.world.log.append(("offsets", tuple(sorted((_partition(tp), _offset(v)) for tp, v in offsets.items())),
                               group_id, self.open))

    def commit_transaction(self):
        self.world.log.append(("commit transaction", self.open))
        self.open = False

    def abort_transaction(self):
        self.world.log.append(("abort transaction", self.open))
        self.open = False

    def flush(self, timeout=None):
        pass


class Database:
    """The sink: ``get`` a row, write rows atomically with ``transaction``; the crash plan counts
    transactions, the process dying right before one (``after`` False) or right after it."""

    def __init__(self, world, after):
        self.world, self.after, self.rows = world, after, {}

    def get(self, key, default=None):
        return self.rows.get(key, default)

    def transaction(self, rows):
        if not isinstance(rows, dict):
            raise TypeError(f"transaction takes {{key: value}}, not {rows!r}")
        if not self.after:
            self.world.maybe_crash()
        self.rows.update(rows)
        if self.after:
            self.world.maybe_crash()


def _iteration(world, consumer, function, extra):
    try:
        function(consumer, *extra)
    except Crash:
        pass
    return tuple(world.log)


def _loop(name, case, functions):
    """One iteration of an at-least-once or at-most-once loop: its log."""
    partitions, max_records, crash_at = case
    data = {p: [(None, f"order {p}-{k}".encode()) for k in range(end)] for p, (_, end) in partitions.items()}
    world = World("orders", data, crash_at)
    consumer = Consumer(world, partitions, {p: start for p, (start, _) in partitions.items()}, max_records)
    world.committed.update(consumer.positions)

    def process(record):
        world.log.append(("process", record.partition, record.offset))
        world.maybe_crash()
    return _iteration(world, consumer, functions[name], (process,))


def _transactional(name, case, functions):
    """One iteration of read-process-write: its log."""
    partitions, max_records, crash_at = case
    data = {p: [(None, f"order {p}-{k}".encode()) for k in range(end)] for p, (_, end) in partitions.items()}
    world = World("in", data, crash_at)
    consumer = Consumer(world, partitions, {p: start for p, (start, _) in partitions.items()}, max_records, "upper")
    world.committed.update(consumer.positions)

    def transform(record):
        world.log.append(("transform", record.partition, record.offset))
        world.maybe_crash()
        return record.value.upper()
    return _iteration(world, consumer, functions[name], (Producer(world), transform))


def _sink(name, case, functions):
    """A whole run of the counting sink: consumer processes that each start on every partition
    (``on_assigned`` first), poll and call ``count_reports`` until the topic is consumed, until
    their ``polls`` run out (a rebalance takes the partitions away) or until they crash; then the
    next. Returns the sink's counts, {truck: count}."""
    trucks, max_records, crash_at, after, polls = case
    data = {p: [(key, b"report") for key in keys] for p, keys in enumerate(trucks)}
    world = World("trucks_gps", data, crash_at)
    db = Database(world, after)
    on_assigned, count_reports = functions["on_assigned"], functions[name]
    budget = SINK_POLLS
    for incarnation in range(SINK_INCARNATIONS):
        start = {p: world.committed.get(p, 0) for p in data}  # auto_offset_reset="earliest"
        consumer = Consumer(world, data, start, max_records, "counter")
        tps = [TopicPartition(world.topic, p) for p in sorted(data)]
        try:
            on_assigned(consumer, tps, db)
            for _ in range(polls[incarnation] if incarnation < len(polls) else SINK_POLLS):
                records = [r for batch in consumer.poll(timeout_ms=1_000).values() for r in batch]
                budget -= 1
                if not records or budget <= 0:
                    break
                count_reports(consumer, records, db)
            else:
                continue  # a rebalance: this process loses its partitions, the next one starts
            break
        except Crash:
            continue
    return {key[1]: value for key, value in db.rows.items()
            if isinstance(key, tuple) and len(key) == 2 and key[0] == "count"}


ACTS = {"no_record_lost": _loop, "no_record_twice": _loop, "transactional_step": _transactional,
        "count_reports": _sink}


def act(name, case, functions):
    """Run rule ``name``'s case with ``functions`` ({name: function}): what the grader judges."""
    return ACTS[name](name, case, functions)
