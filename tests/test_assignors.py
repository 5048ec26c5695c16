"""Consumer partition assignors: the consumer protocol's bytes, range and round robin as Kafka
(and kafka-python) compute them, and the sticky assignor's promises as properties."""

from __future__ import annotations

import dataclasses
import doctest
import random
import re
from collections import namedtuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minikafka import assignors
from minikafka.assignors import (
    ASSIGNORS,
    Assignment,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    assignor_for,
)
from minikafka.errors import IllegalArgumentError, IllegalStateError, KafkaConfigurationError
from minikafka.topic import TopicPartition as TP

# Deterministic: the same examples on every run, no example database needed to replay a failure.
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True)


def tps(*names: str) -> list[TP]:
    """tps("t0-0", "t1-2") -> [TP("t0", 0), TP("t1", 2)]."""
    return [TP(name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])) for name in names]


def test_doctests():
    assert doctest.testmod(assignors).failed == 0


# --- kafka-python's classes (3.0.12 moved the v0 structs to kafka.protocol.old) ----------------------


def kp_v0_structs():
    pytest.importorskip("kafka")
    try:
        from kafka.protocol.old.consumer_protocol import (
            ConsumerProtocolMemberAssignment_v0 as MemberAssignment,
            ConsumerProtocolMemberMetadata_v0 as MemberMetadata,
        )
    except ImportError:  # kafka-python 2.x
        from kafka.coordinator.protocol import (
            ConsumerProtocolMemberAssignment as MemberAssignment,
            ConsumerProtocolMemberMetadata as MemberMetadata,
        )
    return MemberMetadata, MemberAssignment


def kp_schema_classes():
    """kafka-python's JSON-schema classes: every version of Kafka's two schemas."""
    pytest.importorskip("kafka")
    metadata = pytest.importorskip("kafka.protocol.consumer.metadata")
    return metadata.ConsumerProtocolSubscription, metadata.ConsumerProtocolAssignment


# --- Subscription and Assignment bytes ---------------------------------------------------------------

SUBSCRIPTION_CASES = [
    ((), None),
    (("trucks_gps",), None),
    (("a", "b", "c"), b""),
    (("b", "a"), b"\x00\x01user data\xff"),
    (("camión",), b"x" * 300),  # non-ASCII bytes in the name: the length counts bytes, not characters
]


@pytest.mark.parametrize(("topics", "user_data"), SUBSCRIPTION_CASES)
def test_subscription_v0_is_byte_compatible_with_kafka_python(topics, user_data):
    MemberMetadata, _ = kp_v0_structs()
    ours = Subscription(topics, user_data)
    theirs = MemberMetadata(0, list(topics), user_data)
    assert ours.encode(version=0) == theirs.encode()
    assert Subscription.decode(theirs.encode()) == ours
    back = MemberMetadata.decode(ours.encode(version=0))
    assert (back.version, list(back.topics), back.user_data) == (0, list(topics), user_data)


def test_subscription_v1_is_byte_compatible_with_kafka_python():
    KpSubscription, _ = kp_schema_classes()
    owned = tps("a-0", "a-2", "b-1")
    ours = Subscription(("a", "b"), b"ud", owned)
    theirs = KpSubscription(
        version=1, topics=["a", "b"], user_data=b"ud",
        owned_partitions=[KpSubscription.TopicPartition(topic="a", partitions=[0, 2]),
                          KpSubscription.TopicPartition(topic="b", partitions=[1])],
    )
    assert ours.encode(version=1) == theirs.encode()
    back = KpSubscription.decode(ours.encode())
    assert back.version == 1
    assert [(o.topic, list(o.partitions)) for o in back.owned_partitions] == [("a", [0, 2]), ("b", [1])]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_reads_every_subscription_version_kafka_python_writes(version):
    KpSubscription, _ = kp_schema_classes()
    theirs = KpSubscription(
        version=version, topics=["t0", "t1"], user_data=None,
        owned_partitions=[KpSubscription.TopicPartition(topic="t1", partitions=[3, 0])],
        generation_id=7, rack_id="rack-a",
    )
    got = Subscription.decode(theirs.encode())
    assert got.topics == ("t0", "t1")
    assert got.user_data is None
    assert got.owned_partitions == (tuple(tps("t1-0", "t1-3")) if version >= 1 else ())
    assert got.generation_id == (7 if version >= 2 else -1)


def test_newer_subscription_versions_are_read_as_the_newest_known_and_trailing_bytes_ignored():
    v3 = Subscription(("t",), b"u", tps("t-1")).encode(version=1)[2:]  # the body, v1 fields
    body = v3 + b"\x00\x00\x00\x09" + b"\x00\x02r1"  # + generation 9 + rack "r1"
    future = b"\x00\x07" + body + b"fields from version 7 that we do not know"
    got = Subscription.decode(future)
    assert (got.topics, got.user_data, got.owned_partitions, got.generation_id) == (("t",), b"u", (TP("t", 1),), 9)
    # Trailing bytes after a complete v0 or v1 message are tolerated too, as Kafka does.
    for version in (0, 1):
        s = Subscription(("t",), None, tps("t-0") if version else ())
        assert Subscription.decode(s.encode(version) + b"\x00\x00junk") == s


def test_encoding_v0_drops_owned_partitions_as_kafka_drops_an_ignorable_field():
    s = Subscription(("t",), None, tps("t-0", "t-1"), generation_id=3)
    assert Subscription.decode(s.encode(version=0)) == Subscription(("t",))
    # generation_id is v2+; we write v1 at most, so it never reaches the wire.
    assert Subscription.decode(s.encode()) == dataclasses.replace(s, generation_id=-1)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_is_byte_compatible_with_kafka_python(version):
    MemberMetadata, MemberAssignment = kp_v0_structs()
    _, KpAssignment = kp_schema_classes()
    partitions = tps("a-0", "a-1", "b-5")
    for user_data in (None, b"", b"\x01\x02"):
        ours = Assignment(partitions, user_data)
        theirs = KpAssignment(
            version=version, user_data=user_data,
            assigned_partitions=[KpAssignment.TopicPartition(topic="a", partitions=[0, 1]),
                                 KpAssignment.TopicPartition(topic="b", partitions=[5])],
        )
        assert ours.encode(version) == theirs.encode()
        assert Assignment.decode(theirs.encode()) == ours
        assert sorted(KpAssignment.decode(ours.encode(version)).partitions()) == partitions
        if version == 0:
            old = MemberAssignment(0, [("a", [0, 1]), ("b", [5])], user_data)
            assert old.encode() == ours.encode()
            assert sorted(MemberAssignment.decode(ours.encode()).partitions()) == partitions


def test_values_are_normalized_so_equal_means_same_content():
    s = Subscription(["t"], bytearray(b"u"), [("t", 2), ("t", 0), ("t", 2)])
    assert s == Subscription(("t",), b"u", tps("t-0", "t-2"))
    assert s.owned_partitions == (TP("t", 0), TP("t", 2))
    assert isinstance(s.owned_partitions[0], TP)
    assert Assignment([("b", 0), ("a", 1)]).partitions == (TP("a", 1), TP("b", 0))
    hash(s)  # frozen and made of tuples: usable as a dict key


@pytest.mark.parametrize(
    "kwargs",
    [
        {"topics": "trucks_gps"},  # a str, not a sequence of names: would subscribe to 't', 'r', ...
        {"topics": (b"t",)},
        {"topics": ("t",), "user_data": "text"},
        {"topics": ("t",), "owned_partitions": [("t", -1)]},
        {"topics": ("t",), "owned_partitions": [("t",)]},
        {"topics": ("t",), "owned_partitions": [("t", 2**31)]},
        {"topics": ("t",), "generation_id": "3"},
    ],
)
def test_bad_subscription_values_are_refused(kwargs):
    with pytest.raises(IllegalArgumentError):
        Subscription(**kwargs)


def test_only_versions_we_can_write_are_written():
    with pytest.raises(IllegalArgumentError, match="versions 0 and 1"):
        Subscription(("t",)).encode(version=2)
    with pytest.raises(IllegalArgumentError, match="versions 0..3"):
        Assignment(()).encode(version=4)
    with pytest.raises(IllegalArgumentError, match="int16 length"):
        Subscription(("x" * 40000,)).encode()


def test_malformed_subscription_errors_say_what_and_where():
    cases = [
        (b"", "truncated at byte 0"),
        (b"\x00", "truncated at byte 0"),
        (b"\xff\xff", "unsupported version -1 at byte 0"),
        (b"\x00\x00\xff\xff\xff\xff", "null topics array at byte 2"),
        (b"\x00\x00\x00\x00\x00\x01\x00", "truncated at byte 6 (topic: needed 2 bytes, 1 left)"),
        (b"\x00\x00\x00\x00\x00\x01\xff\xff", "null topic at byte 6"),
        (b"\x00\x00\x00\x00\x00\x01\x00\x05ab", "truncated at byte 8"),
        (b"\x00\x00\x00\x00\x00\x01\x00\x01\xff\xff\xff\xff\xff", "not UTF-8 at byte 6"),
        (b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x09abc", "truncated at byte 10 (user_data"),
        (b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff", "truncated at byte 10 (owned_partitions"),
    ]
    for data, message in cases:
        with pytest.raises(IllegalArgumentError, match="^subscription metadata .*" + re.escape(message)):
            Subscription.decode(data)
    with pytest.raises(IllegalArgumentError, match="must be bytes"):
        Subscription.decode("not bytes")


def test_malformed_assignment_errors_say_what_and_where():
    negative = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01a" + b"\x00\x00\x00\x01" + b"\xff\xff\xff\xff"
    message = r"^assignment has negative partition -1 of topic 'a' at byte 13$"
    with pytest.raises(IllegalArgumentError, match=message):
        Assignment.decode(negative)
    with pytest.raises(IllegalArgumentError, match=r"^assignment truncated at byte 2"):
        Assignment.decode(b"\x00\x00\x00")
    with pytest.raises(IllegalArgumentError, match=r"null assigned_partitions partitions array at byte 9"):
        Assignment.decode(b"\x00\x00\x00\x00\x00\x01\x00\x01a\xff\xff\xff\xff")


topic_names = st.text(alphabet="abcz._-é🚚", min_size=0, max_size=6)
partitions = st.lists(st.tuples(topic_names, st.integers(0, 2**31 - 1)), max_size=8)
user_datas = st.none() | st.binary(max_size=20)


@PROPERTY
@given(st.lists(topic_names, max_size=5), user_datas, partitions, st.integers(-1, 2**31 - 1))
def test_subscription_round_trips(topics, user_data, owned, generation_id):
    s = Subscription(tuple(topics), user_data, owned, generation_id)
    assert Subscription.decode(s.encode(version=1)) == dataclasses.replace(s, generation_id=-1)
    assert Subscription.decode(s.encode(version=0)) == Subscription(tuple(topics), user_data)


@PROPERTY
@given(partitions, user_datas)
def test_assignment_round_trips(assigned, user_data):
    a = Assignment(assigned, user_data)
    assert Assignment.decode(a.encode()) == a


@PROPERTY
@given(st.lists(topic_names, max_size=3), user_datas, partitions, st.sampled_from(["sub0", "sub1", "assignment"]))
def test_every_strict_prefix_is_reported_as_truncated(topics, user_data, owned, which):
    if which == "assignment":
        data, decode = Assignment(owned, user_data).encode(), Assignment.decode
    else:
        data, decode = Subscription(tuple(topics), user_data, owned).encode(int(which[-1])), Subscription.decode
    for cut in range(len(data)):
        with pytest.raises(IllegalArgumentError, match="truncated at byte"):
            decode(data[:cut])


@PROPERTY
@given(st.binary(max_size=40))
def test_garbage_raises_illegal_argument_or_decodes(data):
    # Never an IndexError, struct.error or UnicodeDecodeError out of the decoder.
    for decode in (Subscription.decode, Assignment.decode):
        try:
            decode(data)
        except IllegalArgumentError:
            pass


# --- range and round robin: the same answers as kafka-python ----------------------------------------


class FakeCluster:
    """The one ClusterMetadata method kafka-python's range and round robin assignors call."""

    def __init__(self, partitions_per_topic: dict[str, int]) -> None:
        self._counts = partitions_per_topic

    def partitions_for_topic(self, topic: str):
        n = self._counts.get(topic)
        return None if n is None else set(range(n))


KpMember = namedtuple("KpMember", "member_id group_instance_id metadata")


def kafka_python_assign(kp_assignor, partitions_per_topic, subscriptions):
    """Run kafka-python's assignor the way its coordinator does, over the bytes on the wire."""
    KpSubscription, _ = kp_schema_classes()
    members = [KpMember(m, None, KpSubscription.decode(sub.encode())) for m, sub in subscriptions.items()]
    result = kp_assignor.assign(FakeCluster(partitions_per_topic), members)
    # Back through the wire too: their assignment's bytes, our decoder.
    return {m: list(Assignment.decode(a.encode(version=0)).partitions) for m, a in result.items()}


def random_case(seed: int) -> tuple[dict[str, int], dict[str, Subscription]]:
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 5))]
    partitions_per_topic = {t: rng.randint(0, 10) for t in topics}
    if rng.random() < 0.3:  # a topic nobody subscribes to
        partitions_per_topic["unsubscribed"] = 4
    subscribable = topics + (["no-metadata-yet"] if rng.random() < 0.3 else [])
    n_members = rng.randint(1, 9)
    ids = rng.sample([f"consumer-{i}-{rng.randrange(1000)}" for i in range(20)], n_members)
    same = rng.random() < 0.5
    shared = rng.sample(subscribable, rng.randint(1, len(subscribable)))
    subscriptions = {
        m: Subscription(tuple(shared if same else rng.sample(subscribable, rng.randint(0, len(subscribable)))))
        for m in ids  # dict in random order: the assignors must not care
    }
    return partitions_per_topic, subscriptions


@pytest.mark.parametrize("seed", range(40))
def test_range_matches_kafka_python(seed):
    pytest.importorskip("kafka")
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    partitions_per_topic, subscriptions = random_case(seed)
    ours = RangeAssignor().assign(partitions_per_topic, subscriptions)
    assert ours == kafka_python_assign(RangePartitionAssignor, partitions_per_topic, subscriptions)


def java_round_robin(partitions_per_topic, subscriptions):
    """Kafka's ``RoundRobinAssignor.assign``, line for line (a ``CircularIterator`` with peek)."""
    members = sorted(subscriptions)
    assignment = {m: [] for m in members}
    topics = sorted({t for s in subscriptions.values() for t in s.topics if t in partitions_per_topic})
    cursor = 0
    for tp in (TP(t, p) for t in topics for p in range(partitions_per_topic[t])):
        while tp.topic not in subscriptions[members[cursor]].topics:  # assigner.peek()
            cursor = (cursor + 1) % len(members)  # assigner.next()
        assignment[members[cursor]].append(tp)
        cursor = (cursor + 1) % len(members)
    return assignment


@pytest.mark.parametrize("seed", range(40))
def test_roundrobin_matches_kafka_python(seed):
    pytest.importorskip("kafka")
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    partitions_per_topic, subscriptions = random_case(seed)
    ours = RoundRobinAssignor().assign(partitions_per_topic, subscriptions)
    assert ours == java_round_robin(partitions_per_topic, subscriptions)
    try:
        theirs = kafka_python_assign(RoundRobinPartitionAssignor, partitions_per_topic, subscriptions)
    except KeyError as e:
        # kafka-python 3.0.12 bug: when it skips a member that does not subscribe to a topic it
        # rebinds member_id to a (group_instance_id, member_id) tuple and fails on the lookup.
        # Only unequal subscriptions get there; the line-for-line Java version above covers them.
        assert isinstance(e.args[0], tuple)
        assert len({frozenset(s.topics) for s in subscriptions.values()}) > 1
        return
    assert ours == theirs


def test_range_kafka_javadoc_example():
    subs = {"C0": Subscription(("t0", "t1")), "C1": Subscription(("t0", "t1"))}
    assert RangeAssignor().assign({"t0": 3, "t1": 3}, subs) == {
        "C0": tps("t0-0", "t0-1", "t1-0", "t1-1"),
        "C1": tps("t0-2", "t1-2"),
    }


def test_roundrobin_kafka_javadoc_example_with_unequal_subscriptions():
    subs = {"C2": Subscription(("t0", "t1", "t2")), "C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1"))}
    assert RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs) == {
        "C0": tps("t0-0"),
        "C1": tps("t1-0"),
        "C2": tps("t1-1", "t2-0", "t2-1", "t2-2"),
    }


def test_members_are_sorted_by_id_not_taken_in_arrival_order():
    subs = {m: Subscription(("t",)) for m in ("c", "a", "b")}
    assert RangeAssignor().assign({"t": 3}, subs) == {"a": tps("t-0"), "b": tps("t-1"), "c": tps("t-2")}
    assert list(RangeAssignor().assign({"t": 3}, subs)) == ["a", "b", "c"]


# --- what every assignor promises ---------------------------------------------------------------------

ALL = [RangeAssignor, RoundRobinAssignor, StickyAssignor]


@pytest.mark.parametrize("cls", ALL)
def test_more_members_than_partitions_leaves_the_extra_members_idle(cls):
    subs = {f"member-{i}": Subscription(("trucks_gps",)) for i in range(8)}
    result = cls().assign({"trucks_gps": 6}, subs)
    assert set(result) == set(subs)
    assert sorted(len(v) for v in result.values()) == [0, 0, 1, 1, 1, 1, 1, 1]
    assert sorted(tp for v in result.values() for tp in v) == [TP("trucks_gps", p) for p in range(6)]


@pytest.mark.parametrize("cls", ALL)
def test_unknown_topics_and_empty_topics_are_skipped_but_every_member_is_listed(cls):
    subs = {"a": Subscription(("later",)), "b": Subscription(("t", "empty")), "c": Subscription(())}
    assert cls().assign({"t": 2, "empty": 0, "other": 3}, subs) == {"a": [], "b": tps("t-0", "t-1"), "c": []}
    assert cls().assign({"t": 2}, {}) == {}


@pytest.mark.parametrize("cls", ALL)
def test_bad_inputs_are_refused(cls):
    with pytest.raises(IllegalArgumentError, match="partition count of topic 't'"):
        cls().assign({"t": -1}, {"a": Subscription(("t",))})
    with pytest.raises(TypeError, match="member 'a'"):
        cls().assign({"t": 1}, {"a": ("t",)})


def test_a_broken_assignor_is_caught_before_its_answer_leaves():
    class Greedy(PartitionAssignor):
        name = "greedy"

        def _assign(self, partitions_per_topic, subscriptions, topics_of):
            everything = [TP(t, p) for t, n in partitions_per_topic.items() for p in range(n)]
            return {m: everything for m in topics_of}

    with pytest.raises(IllegalStateError, match="gave t-0 to both 'a' and 'b'"):
        Greedy().assign({"t": 1}, {"a": Subscription(("t",)), "b": Subscription(("t",))})


def test_assignor_for():
    assert ASSIGNORS == {"range": RangeAssignor, "roundrobin": RoundRobinAssignor, "sticky": StickyAssignor}
    for name, cls in ASSIGNORS.items():
        assert cls.name == name
        assert type(assignor_for(name)) is cls
        assert type(assignor_for(cls)) is cls
        instance = cls()
        assert assignor_for(instance) is instance
    for bad in ("cooperative-sticky", "Range", 42, None, str):
        with pytest.raises(KafkaConfigurationError, match="known: range, roundrobin, sticky"):
            assignor_for(bad)


# --- sticky: properties -------------------------------------------------------------------------------


@st.composite
def groups(draw, *, same_subscriptions: bool | None = None, with_owned: bool = True):
    """(partitions_per_topic, subscriptions), possibly with owned partitions, stale and conflicting."""
    topics = [f"t{i}" for i in range(draw(st.integers(1, 4)))]
    partitions_per_topic = {t: draw(st.integers(0, 7)) for t in topics}
    members = [f"m{i}" for i in range(draw(st.integers(1, 7)))]
    same = draw(st.booleans()) if same_subscriptions is None else same_subscriptions
    shared = draw(st.lists(st.sampled_from(topics), min_size=1, unique=True))
    subscriptions = {}
    for m in members:
        mine = shared if same else draw(st.lists(st.sampled_from(topics), unique=True))
        owned = []
        if with_owned:
            # Anything goes: partitions of other topics, partitions that no longer exist, and
            # claims on the same partition from several members.
            owned = draw(st.lists(st.tuples(st.sampled_from(topics), st.integers(0, 8)), max_size=6))
        subscriptions[m] = Subscription(tuple(mine), None, owned, draw(st.integers(-1, 3)))
    return partitions_per_topic, subscriptions


def counts(result):
    return {m: len(v) for m, v in result.items()}


def assert_valid(partitions_per_topic, subscriptions, result):
    """Each partition of a subscribed topic goes to exactly one member, and to a subscriber."""
    everything = sorted(
        TP(t, p) for t, n in partitions_per_topic.items() if any(t in s.topics for s in subscriptions.values())
        for p in range(n)
    )
    assert set(result) == set(subscriptions)
    assert sorted(tp for v in result.values() for tp in v) == everything
    for m, v in result.items():
        assert v == sorted(v)
        assert all(tp.topic in subscriptions[m].topics for tp in v)


def assert_balanced(subscriptions, result):
    """Kafka's ``isBalanced``: no partition could move to a subscriber with 2+ fewer partitions."""
    n = counts(result)
    for src, v in result.items():
        for tp in v:
            for dst, sub in subscriptions.items():
                if tp.topic in sub.topics:
                    assert n[dst] >= n[src] - 1, f"{tp} could move from {src} ({n[src]}) to {dst} ({n[dst]})"
    # Hence, the brief's plain form: members with the same subscriptions differ by at most one.
    for a in subscriptions:
        for b in subscriptions:
            if set(subscriptions[a].topics) == set(subscriptions[b].topics):
                assert abs(n[a] - n[b]) <= 1


def owning(subscriptions, result, generation_id=1):
    """The next generation's subscriptions: same topics, owning what ``result`` gave them."""
    return {m: Subscription(subscriptions[m].topics, None, tuple(result[m]), generation_id) for m in result}


def min_moves(partitions_per_topic, kept: dict[str, int]) -> int:
    """The fewest owned partitions that must change owner to balance members with equal subscriptions.

    Balanced then means r members get q + 1 and the rest q (q, r = divmod(n, m)); keeping the
    most means handing the q + 1 slots to the members that own the most.
    """
    n = sum(partitions_per_topic.values())
    q, r = divmod(n, len(kept))
    owned = sorted(kept.values(), reverse=True)
    return sum(max(0, c - (q + 1 if i < r else q)) for i, c in enumerate(owned))


@PROPERTY
@given(groups())
def test_sticky_is_valid_balanced_and_deterministic(case):
    partitions_per_topic, subscriptions = case
    result = StickyAssignor().assign(partitions_per_topic, subscriptions)
    assert_valid(partitions_per_topic, subscriptions, result)
    assert_balanced(subscriptions, result)
    shuffled = list(subscriptions.items())
    random.Random(0).shuffle(shuffled)
    assert StickyAssignor().assign(dict(reversed(partitions_per_topic.items())), dict(shuffled)) == result


@PROPERTY
@given(groups())
def test_sticky_leaves_a_balanced_assignment_alone(case):
    partitions_per_topic, subscriptions = case
    first = StickyAssignor().assign(partitions_per_topic, subscriptions)
    assert StickyAssignor().assign(partitions_per_topic, owning(subscriptions, first)) == first


@PROPERTY
@given(groups(same_subscriptions=True, with_owned=False), st.data())
def test_sticky_when_a_member_leaves_the_survivors_keep_everything(case, data):
    partitions_per_topic, subscriptions = case
    before = StickyAssignor().assign(partitions_per_topic, subscriptions)
    if len(before) < 2:
        return
    gone = data.draw(st.sampled_from(sorted(before)))
    survivors = {m: s for m, s in owning(subscriptions, before).items() if m != gone}
    after = StickyAssignor().assign(partitions_per_topic, survivors)
    assert_balanced(survivors, after)
    for m in survivors:
        assert set(before[m]) <= set(after[m])


@PROPERTY
@given(groups(same_subscriptions=True, with_owned=False), st.integers(1, 3))
def test_sticky_when_members_join_only_what_balance_needs_moves(case, joining):
    partitions_per_topic, subscriptions = case
    before = StickyAssignor().assign(partitions_per_topic, subscriptions)
    topics = next(iter(subscriptions.values())).topics
    grown = owning(subscriptions, before) | {f"new{i}": Subscription(topics) for i in range(joining)}
    after = StickyAssignor().assign(partitions_per_topic, grown)
    assert_balanced(grown, after)
    subscribed = {t: n for t, n in partitions_per_topic.items() if t in topics}
    moved = sum(len(set(before[m]) - set(after[m])) for m in before)
    owned_counts = {m: len(before.get(m, ())) for m in grown}
    assert moved == min_moves(subscribed, owned_counts)


@PROPERTY
@given(groups(same_subscriptions=True, with_owned=False), st.data())
def test_sticky_from_any_lopsided_ownership_moves_the_minimum(case, data):
    partitions_per_topic, subscriptions = case
    members = sorted(subscriptions)
    topics = subscriptions[members[0]].topics
    # Some partitions owned, by anybody, unevenly; the rest new.
    owned: dict[str, list[TP]] = {m: [] for m in members}
    for t in topics:
        for p in range(partitions_per_topic[t]):
            who = data.draw(st.sampled_from(members + [None]))
            if who is not None:
                owned[who].append(TP(t, p))
    subs = {m: Subscription(topics, None, tuple(owned[m])) for m in members}
    after = StickyAssignor().assign(partitions_per_topic, subs)
    assert_valid(partitions_per_topic, subs, after)
    assert_balanced(subs, after)
    moved = sum(len(set(owned[m]) - set(after[m])) for m in members)
    subscribed = {t: n for t, n in partitions_per_topic.items() if t in topics}
    assert moved == min_moves(subscribed, {m: len(v) for m, v in owned.items()})


def test_sticky_kafka_javadoc_example_member_leaves():
    # Kafka's StickyAssignor javadoc: C0, C1, C2 all read t0..t3 (2 partitions each) and own
    # what the first assignment gave them. C1 leaves: round robin would reshuffle almost
    # everything; sticky splits only C1's four partitions between the two survivors.
    counts4 = {f"t{i}": 2 for i in range(4)}
    topics = tuple(counts4)
    before = {
        "C0": tps("t0-0", "t1-1", "t3-0"),
        "C1": tps("t0-1", "t2-0", "t3-1"),
        "C2": tps("t1-0", "t2-1"),
    }
    survivors = {m: Subscription(topics, None, before[m], 1) for m in ("C0", "C2")}
    after = StickyAssignor().assign(counts4, survivors)
    assert set(before["C0"]) <= set(after["C0"]) and set(before["C2"]) <= set(after["C2"])
    assert counts(after) == {"C0": 4, "C2": 4}


def test_sticky_kafka_javadoc_example_unequal_subscriptions():
    subs = {"C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1")), "C2": Subscription(("t0", "t1", "t2"))}
    counts3 = {"t0": 1, "t1": 2, "t2": 3}
    first = StickyAssignor().assign(counts3, subs)
    assert first == {"C0": tps("t0-0"), "C1": tps("t1-0", "t1-1"), "C2": tps("t2-0", "t2-1", "t2-2")}
    # C0 leaves: its one partition goes to C1, nothing else moves (Kafka's javadoc answer too).
    rest = {m: s for m, s in owning(subs, first).items() if m != "C0"}
    assert StickyAssignor().assign(counts3, rest) == {"C1": tps("t0-0", "t1-0", "t1-1"), "C2": first["C2"]}


def test_sticky_two_claims_on_one_partition_newer_generation_wins():
    # m-a missed a rebalance (generation 3) and still thinks it owns t-0; m-b got it in generation 4.
    # The newer claim wins although m-a sorts first; m-a keeps its uncontested t-2.
    subs = {
        "m-a": Subscription(("t",), None, tps("t-0", "t-2"), generation_id=3),
        "m-b": Subscription(("t",), None, tps("t-0"), generation_id=4),
    }
    assert StickyAssignor().assign({"t": 4}, subs) == {"m-a": tps("t-1", "t-2"), "m-b": tps("t-0", "t-3")}


def test_sticky_two_claims_in_one_generation_lowest_member_id_wins():
    subs = {"m-b": Subscription(("t",), None, tps("t-0"), 4), "m-a": Subscription(("t",), None, tps("t-0"), 4)}
    assert StickyAssignor().assign({"t": 2}, subs) == {"m-a": tps("t-0"), "m-b": tps("t-1")}
    # Without generations (v0/v1 subscriptions, generation -1) too.
    subs = {m: Subscription(("t",), None, tps("t-1")) for m in ("m-b", "m-a")}
    assert StickyAssignor().assign({"t": 2}, subs) == {"m-a": tps("t-1"), "m-b": tps("t-0")}


def test_sticky_ignores_claims_it_cannot_honour():
    subs = {
        # t-5 no longer exists; "old" is a topic m-a no longer subscribes to.
        "m-a": Subscription(("t",), None, tps("t-1", "t-5", "old-0")),
        "m-b": Subscription(("t",), None, ()),
    }
    assert StickyAssignor().assign({"t": 2, "old": 1}, subs) == {"m-a": tps("t-1"), "m-b": tps("t-0")}


def test_sticky_moves_only_what_it_must_from_an_overloaded_member():
    # m-a owns all six; a new member needs three, and m-a keeps the other three.
    subs = {"m-a": Subscription(("t",), None, tps(*(f"t-{p}" for p in range(6)))), "m-b": Subscription(("t",))}
    result = StickyAssignor().assign({"t": 6}, subs)
    assert counts(result) == {"m-a": 3, "m-b": 3}
    assert set(result["m-a"]) < {TP("t", p) for p in range(6)}
