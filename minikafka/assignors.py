"""Consumer partition assignors: which member of a group reads which partition.

Theory of operation
-------------------
The group coordinator (a broker) decides *who is in* a consumer group; it does
not decide *who reads what*.  That is the client's job, as in Kafka's Java
client and kafka-python: on every rebalance

1. each member sends JoinGroup with its :class:`Subscription` (the topics it
   wants, plus the partitions it owns now), encoded as opaque bytes;
2. the coordinator hands every member's bytes to one member, the *leader*;
3. the leader runs a :class:`PartitionAssignor` and sends each member's
   :class:`Assignment`, again as opaque bytes, back in SyncGroup.

The coordinator never reads these bytes (see ``minikafka.messages``), so the
byte layout below is a contract between clients only: Kafka's
``ConsumerProtocolSubscription`` and ``ConsumerProtocolAssignment`` schemas,
non-flexible (no tagged fields, no varints), big-endian::

    Subscription                              Assignment
    ------------                              ----------
    version           int16   (0..3)          version             int16
    topics            [string]                assigned_partitions [(topic string,
    user_data         nullable bytes                                partitions [int32])]
    owned_partitions  [(topic string,   v1+   user_data           nullable bytes
                        partitions [int32])]
    generation_id     int32             v2+
    rack_id           nullable string   v3+

    string = int16 length + UTF-8 (-1 = null);  bytes = int32 length + bytes (-1 = null);
    [x]    = int32 count, then count x's.

Kafka promises that a newer version only *appends* fields, so a reader parses
an unknown newer version with the newest format it knows and ignores what
follows.  This file does the same: it reads versions 0..3 (and later ones as
3), skips ``rack_id`` and any trailing bytes, and writes version 0 or 1.

Three assignors ship, under the names a client puts in JoinGroup:

``range``
    Per topic: members subscribed to it, sorted; partitions cut into
    contiguous ranges, the first ``n % m`` members one longer.  Members with
    the same subscriptions get the same partition numbers of every topic,
    which is what a join of two co-partitioned topics needs; the cost is that
    the first members get the extras of *every* topic.
``roundrobin``
    All subscribed topic-partitions, sorted, dealt one at a time to the
    members in turn, skipping a member not subscribed to that topic (Kafka's
    ``CircularIterator``).  Even when subscriptions are equal; lopsided when
    they differ.
``sticky``
    Balanced, and moving as few partitions as possible from their current
    owner (``Subscription.owned_partitions``): a member that stops consuming a
    partition must first finish and commit it, so every move costs.

Invariants (checked on every result by :meth:`PartitionAssignor.assign`)
    * Every partition of every topic someone subscribes to (and the metadata
      knows) goes to exactly one member, and only to a member subscribed to
      its topic.
    * Every member is in the result, with a list sorted by (topic, partition);
      a member with nothing to do gets ``[]`` (more members than partitions
      leaves some idle; Kafka never splits a partition between readers).
    * Same inputs, same output: members are sorted by member id as Kafka sorts
      them, never taken in dict order, and nothing is random.

Never
    * No I/O and no clock: an assignor is a pure function from (partition
      counts, subscriptions) to assignment, so the whole leader step can be
      shown in a notebook without a broker.
    * Never two owners for one partition, even when two members both claim it
      in ``owned_partitions`` (a member that missed a rebalance still thinks
      it owns its old partitions): the sticky assignor keeps it with one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from minikafka.errors import IllegalArgumentError, IllegalStateError, KafkaConfigurationError
from minikafka.topic import TopicPartition

if TYPE_CHECKING:
    from minikafka.rules import Rules

__all__ = [
    "Subscription",
    "Assignment",
    "PartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "ASSIGNORS",
    "assignor_for",
    "range_assign",
    "reassign",
]

# The newest schema version this file understands; newer ones are read as this one.
SUBSCRIPTION_MAX_VERSION = 3
ASSIGNMENT_MAX_VERSION = 3

_INT16_MAX = 0x7FFF
_INT32_MAX = 0x7FFFFFFF

T = TypeVar("T")


# --- the wire: a tiny writer and reader for Kafka's non-flexible encoding ----------------------------


def _int16(n: int) -> bytes:
    return struct.pack(">h", n)


def _int32(n: int) -> bytes:
    return struct.pack(">i", n)


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > _INT16_MAX:
        raise IllegalArgumentError(f"string of {len(b)} bytes does not fit an int16 length: {s[:40]!r}...")
    return _int16(len(b)) + b


def _nullable_bytes(b: bytes | None) -> bytes:
    if b is None:
        return _int32(-1)
    return _int32(len(b)) + b


def _array(items: list[T], write: Callable[[T], bytes]) -> bytes:
    return _int32(len(items)) + b"".join(write(item) for item in items)


def _topic_partitions(tps: Iterable[TopicPartition]) -> bytes:
    """[(topic, [partition])]: the wire groups partitions by topic; topics sorted, for stable bytes."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return _array(
        list(by_topic.items()),
        lambda item: _string(item[0]) + _array(item[1], _int32),
    )


class _Reader:
    """Reads Kafka's primitive types off ``data``; every error names ``what`` and the byte offset."""

    def __init__(self, data: bytes, what: str) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise IllegalArgumentError(f"{what} must be bytes, not {type(data).__name__}")
        self.data, self.pos, self.what = bytes(data), 0, what

    def _fail(self, problem: str, at: int | None = None, detail: str = "") -> IllegalArgumentError:
        where = self.pos if at is None else at
        return IllegalArgumentError(f"{self.what} {problem} at byte {where}" + (f" ({detail})" if detail else ""))

    def _take(self, n: int, field: str) -> bytes:
        if self.pos + n > len(self.data):
            raise self._fail("truncated", detail=f"{field}: needed {n} bytes, {len(self.data) - self.pos} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int16(self, field: str) -> int:
        return struct.unpack(">h", self._take(2, field))[0]

    def int32(self, field: str) -> int:
        return struct.unpack(">i", self._take(4, field))[0]

    def string(self, field: str) -> str:
        start = self.pos
        n = self.int16(field)
        if n < 0:  # Kafka's topic names are non-nullable strings
            raise self._fail(f"has a null {field}", at=start)
        raw = self._take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(f"has a {field} that is not UTF-8", at=start) from None

    def nullable_bytes(self, field: str) -> bytes | None:
        n = self.int32(field)
        return None if n < 0 else self._take(n, field)

    def array(self, field: str, read: Callable[[], T]) -> list[T]:
        start = self.pos
        n = self.int32(field)
        if n < 0:  # every array in these two schemas is non-nullable
            raise self._fail(f"has a null {field} array", at=start)
        # No preallocation from n: a garbage count fails on the first missing item instead.
        return [read() for _ in range(n)]

    def topic_partitions(self, field: str) -> list[TopicPartition]:
        def one_topic() -> list[TopicPartition]:
            topic = self.string(f"{field} topic")

            def one_partition() -> TopicPartition:
                start = self.pos
                p = self.int32(f"{field} partition")
                if p < 0:
                    raise self._fail(f"has negative partition {p} of topic {topic!r}", at=start)
                return TopicPartition(topic, p)

            return self.array(f"{field} partitions", one_partition)

        return [tp for group in self.array(field, one_topic) for tp in group]

    def version(self, highest: int) -> int:
        v = self.int16("version")
        if v < 0:
            raise self._fail(f"has unsupported version {v}", at=0)
        # A newer writer only appended fields (Kafka's promise): read it as the newest we know.
        return min(v, highest)


# --- the two messages ---------------------------------------------------------------------------------


def _normalize_partitions(tps: Iterable, what: str) -> tuple[TopicPartition, ...]:
    """Sorted and de-duplicated: a set of partitions, kept as a tuple so the dataclass stays hashable."""
    out = set()
    for tp in tps:
        try:
            topic, partition = tp
        except (TypeError, ValueError):
            raise IllegalArgumentError(f"{what} must hold (topic, partition) pairs, got {tp!r}") from None
        if not isinstance(topic, str):
            raise IllegalArgumentError(f"{what}: topic must be a str, got {topic!r}")
        if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition <= _INT32_MAX:
            raise IllegalArgumentError(f"{what}: partition must be an int in 0..2**31-1, got {partition!r}")
        out.add(TopicPartition(topic, partition))
    return tuple(sorted(out))


def _normalize_user_data(user_data: object, what: str) -> bytes | None:
    if user_data is None:
        return None
    if not isinstance(user_data, (bytes, bytearray, memoryview)):
        raise IllegalArgumentError(f"{what}.user_data must be bytes or None, not {type(user_data).__name__}")
    return bytes(user_data)


@dataclass(frozen=True)
class Subscription:
    """What a member tells the leader in JoinGroup (Kafka's ``ConsumerProtocolSubscription``).

    ``owned_partitions`` (v1+) is what the member reads now, so the sticky
    assignor can leave it there; ``generation_id`` (v2+) is the generation in
    which it got them, which settles a conflict when two members claim one
    partition.  It is kept in memory and read off the wire, but this file
    writes v0 or v1, which have no room for it.

    >>> Subscription(("trucks_gps",)).encode(version=0).hex(" ")
    '00 00 00 00 00 01 00 0a 74 72 75 63 6b 73 5f 67 70 73 ff ff ff ff'
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1

    def __post_init__(self) -> None:
        # tuple("abc") would quietly subscribe to topics 'a', 'b' and 'c'.
        if isinstance(self.topics, (str, bytes)):
            raise IllegalArgumentError(f"topics must be a sequence of topic names, not a single {self.topics!r}")
        topics = tuple(self.topics)
        for t in topics:
            if not isinstance(t, str):
                raise IllegalArgumentError(f"topic names must be str, got {t!r}")
        if not isinstance(self.generation_id, int) or isinstance(self.generation_id, bool):
            raise IllegalArgumentError(f"generation_id must be an int, got {self.generation_id!r}")
        # Frozen, so the normalized values go in through object.__setattr__.
        object.__setattr__(self, "topics", topics)
        object.__setattr__(self, "user_data", _normalize_user_data(self.user_data, "Subscription"))
        object.__setattr__(
            self, "owned_partitions", _normalize_partitions(self.owned_partitions, "owned_partitions")
        )

    def encode(self, version: int = 1) -> bytes:
        """The bytes a consumer puts in JoinGroup, as schema version 0 or 1.

        Version 0 has no ``owned_partitions``; Kafka marks that field
        ignorable, so writing v0 drops it rather than failing.
        """
        if version not in (0, 1):
            raise IllegalArgumentError(f"can only write subscription versions 0 and 1, not {version!r}")
        out = _int16(version) + _array(list(self.topics), _string) + _nullable_bytes(self.user_data)
        if version >= 1:
            out += _topic_partitions(self.owned_partitions)
        return out

    @classmethod
    def decode(cls, data: bytes) -> "Subscription":
        """Read any version Kafka or kafka-python writes (0..3, later ones as 3)."""
        r = _Reader(data, "subscription metadata")
        version = r.version(SUBSCRIPTION_MAX_VERSION)
        topics = r.array("topics", lambda: r.string("topic"))
        user_data = r.nullable_bytes("user_data")
        owned = r.topic_partitions("owned_partitions") if version >= 1 else []
        generation_id = r.int32("generation_id") if version >= 2 else -1
        # rack_id (v3) and whatever a newer version appends: not needed here, left unread.
        return cls(tuple(topics), user_data, tuple(owned), generation_id)


@dataclass(frozen=True)
class Assignment:
    """What the leader gives a member in SyncGroup (Kafka's ``ConsumerProtocolAssignment``).

    Versions 0..3 share one layout (v2 and v3 were bumped only to keep step
    with the subscription), so any of them can be written; 0 is the default
    because every client reads it.

    >>> Assignment((TopicPartition("t", 0), TopicPartition("t", 1))).encode().hex(" ")
    '00 00 00 00 00 01 00 01 74 00 00 00 02 00 00 00 00 00 00 00 01 ff ff ff ff'
    """

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", _normalize_partitions(self.partitions, "partitions"))
        object.__setattr__(self, "user_data", _normalize_user_data(self.user_data, "Assignment"))

    def encode(self, version: int = 0) -> bytes:
        if not isinstance(version, int) or not 0 <= version <= ASSIGNMENT_MAX_VERSION:
            raise IllegalArgumentError(
                f"can only write assignment versions 0..{ASSIGNMENT_MAX_VERSION}, not {version!r}"
            )
        return _int16(version) + _topic_partitions(self.partitions) + _nullable_bytes(self.user_data)

    @classmethod
    def decode(cls, data: bytes) -> "Assignment":
        r = _Reader(data, "assignment")
        r.version(ASSIGNMENT_MAX_VERSION)  # every version so far has this same layout
        partitions = r.topic_partitions("assigned_partitions")
        user_data = r.nullable_bytes("user_data")
        return cls(tuple(partitions), user_data)


# --- assignors ----------------------------------------------------------------------------------------


class PartitionAssignor:
    """Kafka's ``ConsumerPartitionAssignor`` / ``AbstractPartitionAssignor``.

    :meth:`assign` does the common work (drop topics the metadata does not
    know, sort members, fill in idle members, check the invariants) and asks
    the subclass's :meth:`_assign` only for the interesting part.
    """

    name: str = ""
    rule: str | None = None  # the rule (minikafka.rules) this assignor's algorithm is, if any
    version: int = 1  # kafka-python's AbstractPartitionAssignor.version: the Subscription version it writes

    def metadata(self, topics: Iterable[str], owned_partitions: Iterable = ()) -> Subscription:
        """What this member puts in JoinGroup for this assignor (kafka-python's ``metadata(topics)``)."""
        return Subscription(tuple(topics), owned_partitions=tuple(owned_partitions))

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        rules: "Rules | None" = None,
    ) -> dict[str, list[TopicPartition]]:
        """member id -> its partitions, for every member, each list sorted.

        ``partitions_per_topic`` is the leader's metadata (topic -> partition
        count).  A subscribed topic missing from it gets no assignment, as in
        Kafka ("Skipping assignment for topic ... since no metadata is
        available"); it will be assigned on the rebalance after it appears.

        ``rules`` (``minikafka.rules``; Kafka's by default) holds the rules the
        range and sticky assignors call at their decision point: a group
        leader on a student's rules passes its own.  With a student's rule the
        result is handed out as it is, unchecked (a wrong one must reach the
        members, so the tester can show what they do with it); with Kafka's,
        the invariants below are checked.
        """
        if rules is None:
            from minikafka.rules import REFERENCE as rules
        for topic, n in partitions_per_topic.items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise IllegalArgumentError(f"partition count of topic {topic!r} must be an int >= 0, got {n!r}")
        for member, sub in subscriptions.items():
            if not isinstance(sub, Subscription):
                raise TypeError(
                    f"subscription of member {member!r} must be a Subscription, not {type(sub).__name__}"
                )
        # Sorted by member id, as Kafka sorts members: the result never depends on dict order.
        topics_of = {
            member: frozenset(t for t in subscriptions[member].topics if partitions_per_topic.get(t, 0) > 0)
            for member in sorted(subscriptions)
        }
        wanted = set().union(*topics_of.values())
        known = {t: n for t, n in sorted(partitions_per_topic.items()) if t in wanted}
        raw = self._assign_with(known, subscriptions, topics_of, rules)
        result = {member: sorted(raw.get(member, ())) for member in topics_of}
        if self.rule is None or self.rule not in getattr(rules, "custom", ()):
            _check_assignment(result, known, topics_of, self.name)
        return result

    def _assign_with(self, partitions_per_topic, subscriptions, topics_of, rules: "Rules"):
        """``_assign`` where the algorithm is a rule (range, sticky): they override this and call
        ``rules``; the others ignore them."""
        return self._assign(partitions_per_topic, subscriptions, topics_of)

    def _assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, Subscription],
        topics_of: dict[str, frozenset[str]],
    ) -> dict[str, list[TopicPartition]]:
        """The algorithm itself.

        ``partitions_per_topic`` holds only subscribed topics with at least one
        partition, sorted by name; ``topics_of`` maps each member, sorted by id,
        to the subscribed topics that exist.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _check_assignment(
    result: dict[str, list[TopicPartition]],
    partitions_per_topic: dict[str, int],
    topics_of: dict[str, frozenset[str]],
    name: str,
) -> None:
    """Refuse to hand out an assignment that breaks the invariants: cheap, and a bug here loses data."""
    owner: dict[TopicPartition, str] = {}
    for member, tps in result.items():
        for tp in tps:
            if tp in owner:
                raise IllegalStateError(f"assignor {name!r} gave {tp} to both {owner[tp]!r} and {member!r}")
            if tp.topic not in topics_of[member]:
                raise IllegalStateError(f"assignor {name!r} gave {tp} to {member!r}, not subscribed to it")
            if not 0 <= tp.partition < partitions_per_topic[tp.topic]:
                raise IllegalStateError(f"assignor {name!r} gave {member!r} {tp}, which does not exist")
            owner[tp] = member
    missing = [TopicPartition(t, p) for t, n in partitions_per_topic.items() for p in range(n)
               if TopicPartition(t, p) not in owner]
    if missing:
        raise IllegalStateError(f"assignor {name!r} left {len(missing)} partitions unassigned: {missing[:5]}")


class RangeAssignor(PartitionAssignor):
    """Kafka's ``RangeAssignor``: contiguous ranges per topic.

    Two members C0, C1 and topics t0, t1 of 3 partitions each:

    >>> subs = {"C0": Subscription(("t0", "t1")), "C1": Subscription(("t0", "t1"))}
    >>> a = RangeAssignor().assign({"t0": 3, "t1": 3}, subs)
    >>> [str(tp) for tp in a["C0"]], [str(tp) for tp in a["C1"]]
    (['t0-0', 't0-1', 't1-0', 't1-1'], ['t0-2', 't1-2'])
    """

    name = "range"
    rule = "range_assign"

    def _assign_with(self, partitions_per_topic, subscriptions, topics_of, rules):
        # The seam: the members in the order the coordinator listed them (join order), as
        # kafka-python hands them to assign(); sorting them is the rule's job.
        joined = {m: sorted(topics_of[m]) for m in subscriptions}
        result = rules.range_assign(dict(partitions_per_topic), joined)
        return {m: [TopicPartition(t, p) for t, p in tps] for m, tps in result.items()}


def range_assign(partitions_per_topic, subscriptions):
    """Kafka's range rule: ``{member: sorted [(topic, partition)]}`` for ``{topic: partition
    count}`` and ``{member: [topics]}``. Per topic, its subscribers sorted by member id (as
    strings) get contiguous ranges, ``n // m`` each and one more for the first ``n % m``; a
    topic with no partitions, or not in ``partitions_per_topic``, is skipped; every member is in
    the result."""
    assignment = {member: [] for member in subscriptions}
    for topic in sorted(partitions_per_topic):
        n = partitions_per_topic[topic]
        consumers = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if n <= 0 or not consumers:
            continue
        per_consumer, with_extra = divmod(n, len(consumers))
        for i, member in enumerate(consumers):
            start = per_consumer * i + min(i, with_extra)
            length = per_consumer + (1 if i < with_extra else 0)
            assignment[member].extend((topic, p) for p in range(start, start + length))
    return {member: sorted(tps) for member, tps in assignment.items()}


class RoundRobinAssignor(PartitionAssignor):
    """Kafka's ``RoundRobinAssignor``: deal every partition of every topic in turn.

    >>> subs = {"C0": Subscription(("t0", "t1")), "C1": Subscription(("t0", "t1"))}
    >>> a = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, subs)
    >>> [str(tp) for tp in a["C0"]], [str(tp) for tp in a["C1"]]
    (['t0-0', 't0-2', 't1-1'], ['t0-1', 't1-0', 't1-2'])
    """

    name = "roundrobin"

    def _assign(self, partitions_per_topic, subscriptions, topics_of):
        members = list(topics_of)
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
        # One cursor for the whole deal, not one per topic: that is what spreads the load
        # across topics.  Every topic here has a subscriber, so the skipping loop ends.
        i = 0
        for topic, n in partitions_per_topic.items():
            for p in range(n):
                while topic not in topics_of[members[i % len(members)]]:
                    i += 1
                assignment[members[i % len(members)]].append(TopicPartition(topic, p))
                i += 1
        return assignment


class StickyAssignor(PartitionAssignor):
    """Kafka's ``StickyAssignor`` goals, by a simpler road.

    1. **Keep** what members own: each partition in a member's
       ``owned_partitions`` stays with it if the member still subscribes to
       its topic and the partition still exists.  A partition claimed twice
       goes to the claim with the higher ``generation_id`` (the other member
       missed a rebalance), then to the lower member id.
    2. **Place** the rest (new partitions, those of members that left): the
       partitions with the fewest possible consumers first, each to the
       possible consumer with the fewest partitions (ties: lower member id).
    3. **Balance**: while some partition could move from a member to one of
       its topic's subscribers with at least two fewer partitions, move one.
       Each move lowers the sum of squared counts, so this ends, and it ends
       exactly at Kafka's notion of balanced (``isBalanced``: no such move is
       left).  A move takes from the most loaded member and prefers a
       partition that member did not own before, so an owned partition moves
       only when balance cannot be had otherwise.

    Kafka's algorithm differs in two details this one does not copy: it drops
    *all* claims of members from an older generation and, when two members of
    the same generation claim one partition, takes it from both; and its
    search for balance can also swap partitions, so for unequal subscriptions
    the two may pick different (both balanced) answers.

    Kafka's own example, where round robin gives C2 four partitions and C1 one:

    >>> subs = {"C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1")),
    ...         "C2": Subscription(("t0", "t1", "t2"))}
    >>> a = StickyAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    >>> {m: [str(tp) for tp in tps] for m, tps in a.items()}
    {'C0': ['t0-0'], 'C1': ['t1-0', 't1-1'], 'C2': ['t2-0', 't2-1', 't2-2']}
    """

    name = "sticky"
    rule = "reassign"

    def _assign_with(self, partitions_per_topic, subscriptions, topics_of, rules):
        previous = _previous_owners(partitions_per_topic, subscriptions, topics_of)
        if len(partitions_per_topic) == 1 and all(topics_of.values()):
            # The seam: one topic that every member reads (the exercise's case; Kafka too
            # splits here, allSubscriptionsEqual -> constrainedAssign). The rule sees what the
            # members owned, each claim settled (a partition two members claim: one owner).
            (topic, n), = partitions_per_topic.items()
            owned = {m: [] for m in subscriptions}
            for tp, member in sorted(previous.items()):
                owned[member].append(tp.partition)
            result = rules.reassign(n, owned, list(subscriptions))
            return {m: [TopicPartition(topic, p) for p in ps] for m, ps in result.items()}
        return _sticky(partitions_per_topic, topics_of, previous)


def reassign(num_partitions, previous, members):
    """Kafka's sticky rule for one topic every member reads: ``{member: sorted partitions}``,
    balanced (counts differ by at most one) and moving as few partitions as possible from
    their ``previous`` owners (``{member: [partitions]}`` of the last generation; members that
    left, partitions that no longer exist and a second claim of one partition are ignored)."""
    topics_of = {m: frozenset(("t",)) for m in sorted(members)}
    owners: dict[TopicPartition, str] = {}
    for member in sorted(previous):
        if member in topics_of:
            for p in previous[member]:
                tp = TopicPartition("t", p)
                if 0 <= p < num_partitions and tp not in owners:
                    owners[tp] = member
    if num_partitions <= 0:
        return {m: [] for m in topics_of}
    result = _sticky({"t": num_partitions}, topics_of, owners)
    return {m: [tp.partition for tp in result[m]] for m in topics_of}


def _sticky(
    partitions_per_topic: dict[str, int],
    topics_of: dict[str, frozenset[str]],
    previous: dict[TopicPartition, str],
) -> dict[str, list[TopicPartition]]:
    """The sticky algorithm (keep, place, balance: see ``StickyAssignor``)."""
    members = list(topics_of)
    consumers_of = {t: [m for m in members if t in topics_of[m]] for t in partitions_per_topic}
    assignment: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for tp, member in previous.items():
        assignment[member].add(tp)

    # Scarce partitions first: a topic only one member reads must go to that member,
    # so place it before the flexible ones fill that member up.
    unowned = [TopicPartition(t, p) for t, n in partitions_per_topic.items() for p in range(n)
               if TopicPartition(t, p) not in previous]
    unowned.sort(key=lambda tp: (len(consumers_of[tp.topic]), tp))
    for tp in unowned:
        member = min(consumers_of[tp.topic], key=lambda m: (len(assignment[m]), m))
        assignment[member].add(tp)

    while (move := _improving_move(assignment, topics_of, previous)) is not None:
        tp, src, dst = move
        assignment[src].remove(tp)
        assignment[dst].add(tp)
    return {m: sorted(tps) for m, tps in assignment.items()}


def _previous_owners(
    partitions_per_topic: dict[str, int],
    subscriptions: dict[str, Subscription],
    topics_of: dict[str, frozenset[str]],
) -> dict[TopicPartition, str]:
    """Each still-valid owned partition -> the one member whose claim wins."""
    best: dict[TopicPartition, tuple[int, str]] = {}
    for member in topics_of:
        sub = subscriptions[member]
        for tp in sub.owned_partitions:
            if tp.topic not in topics_of[member] or tp.partition >= partitions_per_topic[tp.topic]:
                continue  # unsubscribed since, or the partition is gone
            claim = (-sub.generation_id, member)  # smaller wins: newer generation, then lower id
            if tp not in best or claim < best[tp]:
                best[tp] = claim
    return {tp: member for tp, (_, member) in best.items()}


def _improving_move(
    assignment: dict[str, set[TopicPartition]],
    topics_of: dict[str, frozenset[str]],
    previous: dict[TopicPartition, str],
) -> tuple[TopicPartition, str, str] | None:
    """One (partition, from, to) that narrows a gap of two or more, or None when balanced."""
    count = {m: len(tps) for m, tps in assignment.items()}
    receivers = sorted(count, key=lambda m: (count[m], m))
    givers = sorted(count, key=lambda m: (-count[m], m))
    for dst in receivers:
        for src in givers:
            if count[src] < count[dst] + 2:
                break  # givers are sorted by load: nobody further on can give to dst
            movable = [tp for tp in assignment[src] if tp.topic in topics_of[dst]]
            if movable:
                # Back to its previous owner if possible, else something src did not own before.
                tp = min(movable, key=lambda tp: (previous.get(tp) != dst, previous.get(tp) == src, tp))
                return tp, src, dst
    return None


ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
}


def assignor_for(name_or_obj: str | type[PartitionAssignor] | PartitionAssignor) -> PartitionAssignor:
    """An assignor from a protocol name (``"range"``), a class or an instance.

    kafka-python's ``partition_assignment_strategy`` takes classes, the Java
    client's ``partition.assignment.strategy`` takes class names; the name on
    the wire is the assignor's ``name``.

    >>> assignor_for("roundrobin"), assignor_for(RangeAssignor)
    (RoundRobinAssignor(), RangeAssignor())
    """
    if isinstance(name_or_obj, PartitionAssignor):
        return name_or_obj
    if isinstance(name_or_obj, type) and issubclass(name_or_obj, PartitionAssignor):
        return name_or_obj()
    if isinstance(name_or_obj, str) and name_or_obj in ASSIGNORS:
        return ASSIGNORS[name_or_obj]()
    raise KafkaConfigurationError(
        f"unknown partition assignment strategy {name_or_obj!r}; known: {', '.join(sorted(ASSIGNORS))} "
        "(or a PartitionAssignor class or instance)"
    )
