"""``kafka-consumer-groups``, twice over one set of tables and one reset: ``ConsumerGroupCommand``
(the tool as a Python object on the course's ``KafkaAdminClient``: ``cluster.consumer_groups`` in
the notebooks) and ``minikafka consumer-groups`` (the command line, over the Kafka protocol with
kafka-python's ``KafkaAdminClient``).

``ConsumerGroupCommand``: ``list_groups``, ``describe_group`` (the offsets view, with LAG),
``describe_members`` (``--members``), ``describe_state`` (``--state``), ``reset_offsets``
(``--reset-offsets``, a dry run unless ``execute=True``) and ``delete_groups``. Each returns rows
plus ``table()``, the text the Kafka tool prints (column widths included), deterministic for a
seed. Both forms plan a reset with ``plan_reset`` (Kafka's ``ResetOffsetsCommand``): only how
they ask for committed offsets and log offsets differs.

Theory of operation (the command line)
--------------------------------------
One action per run, each a few admin requests through kafka-python's ``KafkaAdminClient``
(ListGroups to every broker; FindCoordinator, then DescribeGroups, OffsetFetch, OffsetCommit
and DeleteGroups to the group's coordinator; ListOffsets to partition leaders):

- ``--list [--state [STATES]]``: the consumer groups, one per line; with ``--state`` a
  ``GROUP STATE`` table, optionally only the groups in STATES (``Stable,Empty``).
- ``--describe --group G`` (or ``--all-groups``): per partition, the group's committed
  offset (CURRENT-OFFSET), the partition's high watermark (LOG-END-OFFSET), their difference
  (LAG) and the member that owns it (CONSUMER-ID HOST CLIENT-ID, '-' when no member does).
  ``--members [--verbose]`` lists the members instead, ``--state`` the group's coordinator,
  assignment strategy, state and size. With ``--verbose``, a group of KIP-848's protocol
  (type "consumer") is asked with ConsumerGroupDescribe, as Kafka 4's tool does, and shows
  its GROUP-EPOCH and TARGET-ASSIGNMENT-EPOCH (``--state``) or each member's CURRENT-EPOCH,
  CURRENT-ASSIGNMENT, TARGET-EPOCH and TARGET-ASSIGNMENT (``--members``). As in Kafka, "Consumer group 'G' has no active
  members." (or "... is rebalancing.") goes to stderr and the table to stdout, after a blank
  line; a group that does not exist is an error.
- ``--reset-offsets --group G (--topic T[:P,P] ... | --all-topics) STRATEGY [--dry-run |
  --execute]``: the new offset of each partition, from one strategy: ``--to-earliest``,
  ``--to-latest``, ``--to-current``, ``--to-offset N``, ``--shift-by N``, ``--to-datetime
  YYYY-MM-DDTHH:mm:SS.sss`` (the machine's time zone unless the text names one, as Kafka) or
  ``--by-duration PnDTnHnMnS``. Offsets outside [log start, log end] are clamped into it, as
  Kafka does; a time after the last record falls back to the log end (with Kafka's "Warn:"
  line). Without ``--execute`` nothing is written (a dry run; without ``--dry-run`` either,
  Kafka's "WARN: No action will be performed ..." goes to stderr). With it, the plan is
  committed with a *simple* commit (generation -1, no member id), which a coordinator accepts
  only while the group has no members; the tool checks first, and refuses while the group is
  active with Kafka's "Error: Assignments can only be reset if the group 'G' is inactive, but
  the current state is Stable." (exit 1).
- ``--delete --group G [--group H]``: DeleteGroups; Kafka's success line, or its report of
  each group that could not be deleted (a group with members, an unknown group) and exit 1.

The command line prints ``ConsumerGroupCommand``'s tables (the same columns, widths and row order
as Kafka's tool), filled from kafka-python's answers. Retriable answers (the coordinator not
known yet, ``__consumer_offsets`` being created) are retried for ``--timeout`` ms; other failures
print ``Error: <why>`` on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

from minikafka.clients.admin import MISSING, GroupInformation, KafkaAdminClient, MemberInformation, _as_tp, _assigned
from minikafka.clients.admin import ConsumerGroupDescription
from minikafka.clients.admin import _state_name
from minikafka.errors import (
    GroupIdNotFoundError,
    IllegalArgumentError,
    InvalidGroupIdError,
    LeaderNotAvailableError,
    NonEmptyGroupError,
    UnknownTopicOrPartitionError,
)
from minikafka.group_state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE
from minikafka.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from minikafka.topic import OffsetAndMetadata, TopicPartition, validate_topic_name

from .common import ToolError, UsageError, add_bootstrap, admin_client, retrying, run_tool

# --- the tables (Kafka's row classes and the tool's text) -------------------------------------------------------------------------------


class PartitionAssignmentState(NamedTuple):
    """A row of ``kafka-consumer-groups --describe`` (Kafka's ``PartitionAssignmentState``);
    None is what the tool prints as '-'."""

    group: str
    topic: str | None
    partition: int | None
    current_offset: int | None  # the committed offset
    log_end_offset: int | None  # the high watermark
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None
    leader_epoch: int | None = None  # of the committed offset (shown with verbose)


class MemberAssignmentState(NamedTuple):
    """A row of ``--describe --members`` (Kafka's ``MemberAssignmentState``)."""

    group: str
    consumer_id: str
    host: str
    client_id: str
    num_partitions: int
    assignment: tuple[TopicPartition, ...]
    # A member of a KIP-848 group (from ConsumerGroupDescribe); None for a classic group's.
    current_epoch: int | None = None  # the member epoch
    target_epoch: int | None = None  # the group's target assignment epoch
    target_assignment: tuple[TopicPartition, ...] | None = None


class GroupStateInformation(NamedTuple):
    """The row of ``--describe --state`` (Kafka's command calls it ``GroupInformation``)."""

    group: str
    coordinator: str  # "broker-2  (2)": Kafka prints "host:port  (id)"
    coordinator_id: int
    assignment_strategy: str
    state: str
    num_members: int
    group_epoch: int | None = None  # a KIP-848 group's (ConsumerGroupDescribe); None: a classic group
    assignment_epoch: int | None = None  # the target assignment's epoch


class OffsetReset(NamedTuple):
    """A row of a ``--reset-offsets`` plan."""

    group: str
    topic: str
    partition: int
    new_offset: int


def _cell(v: Any) -> str:
    return MISSING if v is None else str(v)


def _format(fmt_widths: list[int | None], values: Iterable[Any]) -> str:
    """Java's ``%-Ns`` columns joined by one space (a None width: no padding); trailing
    blanks trimmed, so the text is stable under copy and paste."""
    cells = [_cell(v) if w is None else _cell(v).ljust(w) for w, v in zip(fmt_widths, values)]
    return " ".join(cells).rstrip()


class _Report:
    """Rows plus the text ``kafka-consumer-groups`` prints for them."""

    rows: list

    def table(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.table()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython/Jupyter show the table
        p.text(self.table())

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _state_notice(group: str, state: str) -> str | None:
    if state == EMPTY:
        return f"Consumer group '{group}' has no active members."
    if state in (PREPARING_REBALANCE, COMPLETING_REBALANCE):
        return f"Warning: Consumer group '{group}' is rebalancing."
    return None


@dataclass
class GroupListing(_Report):
    """``kafka-consumer-groups --list --state``: ``rows`` are ``(group, state)``."""

    rows: list[tuple[str, str]]

    @property
    def groups(self) -> list[str]:
        """The names alone (what ``--list`` prints)."""
        return [g for g, _ in self.rows]

    def table(self) -> str:
        width = max([15] + [len(g) for g, _ in self.rows]) + 10
        return "\n".join(_format([width, 20], r) for r in [("GROUP", "STATE"), *self.rows])


@dataclass
class GroupOffsets(_Report):
    """``kafka-consumer-groups --describe --group g``: one row per partition."""

    group: str
    state: str
    rows: list[PartitionAssignmentState]
    verbose: bool = False

    @property
    def notice(self) -> str | None:
        """What the tool prints on stderr before the table ("... has no active members.")."""
        return _state_notice(self.group, self.state)

    @property
    def total_lag(self) -> int:
        return sum(r.lag for r in self.rows if r.lag is not None)

    def table(self) -> str:
        lines = [self.notice, ""] if self.notice else []
        if self.rows:
            g = max([15] + [len(r.group) for r in self.rows])
            t = max([15] + [len(_cell(r.topic)) for r in self.rows])
            c = max([15] + [len(_cell(r.consumer_id)) for r in self.rows])
            h = max([15] + [len(_cell(r.host)) for r in self.rows])
            if self.verbose:
                widths = [g, t, 10, 15, 15, 15, 15, c, h, None]
                lines.append(_format(widths, ("GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET",
                                              "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")))
                lines += [_format(widths, (r.group, r.topic, r.partition, r.leader_epoch, r.current_offset,
                                           r.log_end_offset, r.lag, r.consumer_id, r.host, r.client_id))
                          for r in self.rows]
            else:
                widths = [g, t, 10, 15, 15, 15, c, h, None]
                lines.append(_format(widths, ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                              "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID")))
                lines += [_format(widths, r[:9]) for r in self.rows]
        return "\n".join(lines).rstrip("\n")


def _assignment_string(assignment: Iterable[TopicPartition]) -> str:
    """Kafka 3.x's ``--members --verbose`` ASSIGNMENT cell: ``t1(0,2), t2(1)``."""
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return MISSING
    return ", ".join(sorted(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in by_topic.items()))


@dataclass
class GroupMembers(_Report):
    """``kafka-consumer-groups --describe --members [--verbose]``: one row per member."""

    group: str
    state: str
    rows: list[MemberAssignmentState]
    verbose: bool = False

    @property
    def notice(self) -> str | None:
        return _state_notice(self.group, self.state)

    def table(self) -> str:
        lines = [self.notice, ""] if self.notice else []
        widths = [max([15] + [len(r.group) for r in self.rows]), max([15] + [len(r.consumer_id) for r in self.rows]),
                  max([15] + [len(r.host) for r in self.rows]), max([15] + [len(r.client_id) for r in self.rows]), 15]
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        kip848 = any(r.current_epoch is not None for r in self.rows)
        if self.verbose and kip848:
            # Kafka 4's columns for a group of the new protocol: each member's epoch and what it
            # owns, beside the target assignment's epoch and what the assignor gave it.
            current = max([20] + [len(_assignment_string(r.assignment)) for r in self.rows])
            widths += [15, current, 15, None]
            header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        elif self.verbose:
            widths.append(None)
            header.append("ASSIGNMENT")
        lines.append(_format(widths, header))
        for r in self.rows:
            cells = [r.group, r.consumer_id, r.host, r.client_id, r.num_partitions]
            if self.verbose and kip848:
                cells += [r.current_epoch, _assignment_string(r.assignment), r.target_epoch,
                          _assignment_string(r.target_assignment or ())]
            elif self.verbose:
                cells.append(_assignment_string(r.assignment))
            lines.append(_format(widths, cells))
        return "\n".join(lines)


@dataclass
class GroupStateReport(_Report):
    """``kafka-consumer-groups --describe --state``: the group's one row."""

    rows: list[GroupStateInformation]
    verbose: bool = False  # Kafka 4: GROUP-EPOCH and TARGET-ASSIGNMENT-EPOCH too ('-' for a classic group)

    @property
    def state(self) -> str:
        return self.rows[0].state

    def table(self) -> str:
        r = self.rows[0]
        notice = _state_notice(r.group, r.state)
        widths = [max(15, len(r.group)), max(25, len(r.coordinator)), 20, 20, None]
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        cells = [r.group, r.coordinator, r.assignment_strategy or MISSING, r.state, r.num_members]
        if self.verbose:
            widths[4:4] = [15, 25]
            header[4:4] = ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
            cells[4:4] = [r.group_epoch, r.assignment_epoch]
        lines = [notice, ""] if notice else []
        lines.append(_format(widths, header))
        lines.append(_format(widths, cells))
        return "\n".join(lines)


@dataclass
class ResetPlan(_Report):
    """``kafka-consumer-groups --reset-offsets``: the new offset of each partition; applied
    (``executed``) only with ``execute=True``, else a dry run."""

    group: str
    rows: list[OffsetReset]
    executed: bool
    warnings: list[str] = field(default_factory=list)

    @property
    def offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {TopicPartition(r.topic, r.partition): OffsetAndMetadata(r.new_offset, "", -1) for r in self.rows}

    def table(self) -> str:
        lines = list(self.warnings)
        if self.rows:
            widths = [max([15, len(self.group)]), max([15] + [len(r.topic) for r in self.rows]), 10, None]
            lines.append(_format(widths, ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")))
            lines += [_format(widths, r) for r in self.rows]
        return "\n".join(lines)


# --- the one --reset-offsets --------------------------------------------------------------------------------

EARLIEST, LATEST = "earliest", "latest"  # what log_offsets is asked for, besides a timestamp in ms
RESET_STRATEGIES = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration")


def plan_reset(tps: list, strategy: str, value: int | None, *, committed: Callable[[], dict],
               log_offsets: Callable[[list, Any], dict]) -> tuple[dict, list]:
    """Where the group will resume in each partition of ``tps``: Kafka's
    ``ResetOffsetsCommand``, for both the simulated command and the command line.

    ``strategy`` is one of ``RESET_STRATEGIES``; ``value`` its number (N for ``to_offset`` and
    ``shift_by``, a timestamp in ms for ``to_datetime`` and ``by_duration``). ``committed()``
    gives the group's committed offsets ({partition: offset >= 0}; asked only by ``to_current``
    and ``shift_by``), ``log_offsets(partitions, which)`` each partition's offset by ListOffsets
    ({partition: offset, or None where there is no answer}; ``which``: ``EARLIEST``, ``LATEST``
    or a timestamp). Returns (the new offsets, the partitions with no record at or after the
    time, which fall back to the log end). ``to_offset`` and ``shift_by`` are clamped into [log
    start, log end] (Kafka's ``checkOffsetsRange``); ``shift_by`` needs a committed offset."""
    if strategy == "to_earliest":
        return log_offsets(tps, EARLIEST), []
    if strategy == "to_latest":
        return log_offsets(tps, LATEST), []
    if strategy in ("to_datetime", "by_duration"):
        found = log_offsets(tps, value)
        empty = [tp for tp in tps if found.get(tp) is None or found[tp] < 0]
        return {**found, **log_offsets(empty, LATEST)}, empty
    if strategy == "to_current":
        current = committed()
        ends = log_offsets([tp for tp in tps if tp not in current], LATEST)
        return {tp: current[tp] if tp in current else ends.get(tp) for tp in tps}, []
    if strategy == "shift_by":
        current = committed()
        missing = [tp for tp in tps if tp not in current]
        if missing:
            raise IllegalArgumentError(f"Cannot shift offset for partition {missing[0].topic}-{missing[0].partition} "
                                       "since there is no current committed offset")
        wanted = {tp: current[tp] + value for tp in tps}
    elif strategy == "to_offset":
        wanted = {tp: value for tp in tps}
    else:
        raise IllegalArgumentError(f"a reset strategy is one of {', '.join(RESET_STRATEGIES)}, not {strategy!r}")
    starts = log_offsets(tps, EARLIEST)
    ends = log_offsets(tps, LATEST)
    return {tp: _clamp(o, starts.get(tp), ends.get(tp)) for tp, o in wanted.items()}, []


def _clamp(offset: int, start: int | None, end: int | None) -> int | None:
    """Kafka's checkOffsetsRange: past the end, the end; before the start, the start."""
    if start is None or end is None:
        return None
    return end if offset > end else max(offset, start)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _timestamp_ms(when: Any) -> int:
    """A ``--to-datetime`` value as ms since the epoch. The simulated clock starts at 0, i.e.
    1970-01-01T00:00:00Z; a datetime without a time zone is taken as UTC (Kafka would take
    the machine's zone, which would make notebooks differ between machines)."""
    if isinstance(when, bool):
        raise IllegalArgumentError(
            f"to_datetime must be a datetime, an ISO 8601 str or ms since the epoch, not {when!r}")
    if isinstance(when, int):
        ms = when
    else:
        if isinstance(when, str):
            try:
                when = datetime.fromisoformat(when)
            except ValueError:
                raise IllegalArgumentError(
                    f"to_datetime {when!r} is not an ISO 8601 date-time such as '1970-01-01T00:00:01.500'") from None
        if not isinstance(when, datetime):
            raise IllegalArgumentError(
                f"to_datetime must be a datetime, an ISO 8601 str or ms since the epoch, not {when!r}")
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        ms = (when - _EPOCH) // timedelta(milliseconds=1)
    if ms < 0:
        raise IllegalArgumentError(f"to_datetime is before 1970-01-01T00:00:00Z ({ms} ms); record timestamps are >= 0")
    return ms


class ConsumerGroupCommand:
    """``kafka-consumer-groups`` for a minikafka cluster.

    >>> groups = ConsumerGroupCommand(cluster)              # or cluster.consumer_groups  # doctest: +SKIP
    >>> print(groups.describe_group("dispatch"))                                       # doctest: +SKIP
    GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG   ...
    """

    def __init__(self, bootstrap_servers: Any, **admin_configs: Any) -> None:
        if isinstance(bootstrap_servers, KafkaAdminClient):
            if admin_configs:
                raise IllegalArgumentError("give admin configs or an admin client, not both")
            self.admin = bootstrap_servers
        else:
            self.admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **admin_configs)

    # --- --list ------------------------------------------------------------------------------------------

    def list_groups(self, states: Iterable[str] | str | None = None) -> GroupListing:
        """``--list --state [STATES]``: every group with its state, sorted by id; ``states``
        keeps only those (``"Stable,Empty"`` or a list, any case)."""
        if isinstance(states, str):
            states = [s.strip() for s in states.split(",") if s.strip()]
        wanted = None if states is None else {_state_name(s) for s in states}
        rows = [(g, s) for g, _, s in self.admin._list_groups_raw(None) if wanted is None or s in wanted]
        return GroupListing(rows)

    # --- --describe --------------------------------------------------------------------------------------

    def _describe(self, group: str) -> tuple[int, GroupInformation]:
        self.admin._check_group_id(group)
        coordinator, described = self.admin._describe_one(group, None)
        info = KafkaAdminClient._group_information(described)
        if info.state == DEAD:
            raise GroupIdNotFoundError(f"Consumer group '{group}' does not exist.")
        return coordinator, info

    def describe_group(self, group: str, *, verbose: bool = False) -> GroupOffsets:
        """``--describe --group g``: per partition, the committed offset (CURRENT-OFFSET),
        the high watermark (LOG-END-OFFSET), their difference (LAG) and the member reading it.
        Members' partitions first (the member with most partitions first), then partitions
        that only have a committed offset (CONSUMER-ID '-'). Raises GroupIdNotFoundError for
        a group that does not exist."""
        _, info = self._describe(group)
        committed = self.admin.list_consumer_group_offsets(group)
        owned: list[tuple[MemberInformation, list[TopicPartition]]] = [
            (m, _assigned(m)) for m in info.members if _assigned(m)]
        owned.sort(key=lambda mp: -len(mp[1]))  # stable: ties keep the coordinator's order
        assigned = {tp for _, tps in owned for tp in tps}
        unowned = sorted(tp for tp in committed if tp not in assigned)
        ends = self.admin._list_offsets(assigned | set(unowned), LATEST_TIMESTAMP, skip_leaderless=True)

        def row(tp: TopicPartition, member: MemberInformation | None) -> PartitionAssignmentState:
            c = committed.get(tp)
            offset = c.offset if c is not None and c.offset >= 0 else None
            end = ends.get(tp)
            lag = end - offset if offset is not None and end is not None else None
            epoch = c.leader_epoch if c is not None and c.leader_epoch is not None and c.leader_epoch >= 0 else None
            if member is None:  # only a committed offset: nobody reads it now
                return PartitionAssignmentState(group, tp.topic, tp.partition, offset, end, lag,
                                                None, None, None, epoch)
            return PartitionAssignmentState(group, tp.topic, tp.partition, offset, end, lag,
                                            member.member_id, member.client_host, member.client_id, epoch)

        rows = [row(tp, m) for m, tps in owned for tp in tps] + [row(tp, None) for tp in unowned]
        return GroupOffsets(group, info.state, rows, verbose)

    def _consumer_group(self, group: str) -> ConsumerGroupDescription | None:
        """A KIP-848 group's ConsumerGroupDescribe answer; None for a classic group (known from
        DescribeGroups' group type, so a classic group costs no extra request)."""
        self.admin._check_group_id(group)
        _, described = self.admin._describe_one(group, None)
        if described.group_type != "consumer":
            return None
        return self.admin.consumer_group_describe([group])[0]

    def describe_members(self, group: str, *, verbose: bool = False) -> GroupMembers:
        """``--describe --members [--verbose]``: CONSUMER-ID, HOST, CLIENT-ID, #PARTITIONS
        (and with ``verbose`` the ASSIGNMENT) of each member, in the coordinator's order. With
        ``verbose``, a KIP-848 group shows Kafka 4's CURRENT-EPOCH, CURRENT-ASSIGNMENT,
        TARGET-EPOCH and TARGET-ASSIGNMENT instead (ConsumerGroupDescribe)."""
        kip848 = self._consumer_group(group) if verbose else None
        if kip848 is not None:
            rows = [MemberAssignmentState(group, m.member_id, m.client_host, m.client_id, len(m.assignment),
                                          m.assignment, m.member_epoch, kip848.assignment_epoch, m.target_assignment)
                    for m in kip848.members]
            return GroupMembers(group, kip848.state, rows, verbose)
        _, info = self._describe(group)
        rows = [MemberAssignmentState(group, m.member_id, m.client_host, m.client_id, len(_assigned(m)),
                                      tuple(_assigned(m))) for m in info.members]
        return GroupMembers(group, info.state, rows, verbose)

    def describe_state(self, group: str, *, verbose: bool = False) -> GroupStateReport:
        """``--describe --state [--verbose]``: COORDINATOR (ID), ASSIGNMENT-STRATEGY, STATE,
        #MEMBERS; with ``verbose`` (Kafka 4) also a KIP-848 group's GROUP-EPOCH and
        TARGET-ASSIGNMENT-EPOCH ('-' for a classic group, which has neither)."""
        kip848 = self._consumer_group(group) if verbose else None
        if kip848 is not None:
            c = kip848.coordinator
            return GroupStateReport([GroupStateInformation(
                group, f"broker-{c}  ({c})", c, kip848.assignor, kip848.state, len(kip848.members),
                kip848.group_epoch, kip848.assignment_epoch)], verbose)
        coordinator, info = self._describe(group)
        return GroupStateReport([GroupStateInformation(group, f"broker-{coordinator}  ({coordinator})", coordinator,
                                                       info.protocol, info.state, len(info.members))], verbose)

    # --- --reset-offsets ----------------------------------------------------------------------------------

    def _scope(self, group: str, scope: Any, all_topics: bool) -> list[TopicPartition]:
        if all_topics:
            if scope is not None:
                raise IllegalArgumentError("give topics/partitions or all_topics=True, not both")
            return sorted(self.admin.list_consumer_group_offsets(group))
        if scope is None:
            raise IllegalArgumentError("One of the reset scopes should be defined: a topic, partitions, "
                                       "or all_topics=True.")
        items = [scope] if isinstance(scope, (str, TopicPartition)) else list(scope)
        explicit: set[TopicPartition] = set()
        whole: list[str] = []
        for item in items:
            if isinstance(item, str):
                topic, sep, parts = item.partition(":")
                validate_topic_name(topic)
                if not sep:
                    whole.append(topic)
                    continue
                for p in parts.split(","):
                    if not p.strip().isdigit():
                        raise IllegalArgumentError(f"Invalid partition '{p}' specified in topic arg '{item}'")
                    explicit.add(TopicPartition(topic, int(p)))
            else:
                explicit.add(_as_tp(item))
        known = self.admin._partitions({tp.topic for tp in explicit} | set(whole))
        missing = sorted(tp for tp in explicit if tp.partition not in known[tp.topic])
        if missing:
            raise UnknownTopicOrPartitionError(
                f'The partitions "{",".join(map(str, missing))}" do not exist')
        for topic in whole:
            explicit |= {TopicPartition(topic, p) for p in known[topic]}
        tps = sorted(explicit)
        leaderless = [tp for tp in tps if known[tp.topic][tp.partition] < 0]
        if leaderless:
            raise LeaderNotAvailableError(f'The partitions "{",".join(map(str, leaderless))}" have no leader')
        return tps

    def reset_offsets(self, group: str, scope: Any = None, *, all_topics: bool = False,
                      to_earliest: bool = False, to_latest: bool = False, to_current: bool = False,
                      to_offset: int | None = None, shift_by: int | None = None, to_datetime: Any = None,
                      by_duration: timedelta | int | None = None, execute: bool = False) -> ResetPlan:
        """``--reset-offsets``: where the group will resume in each partition of ``scope``.

        ``scope``: a topic (``"t"``: all its partitions; ``"t:0,2"``: those), a
        ``TopicPartition``, or a list of them; or ``all_topics=True`` (every partition the
        group has an offset for). Exactly one strategy: ``to_earliest``, ``to_latest``,
        ``to_current``, ``to_offset=N``, ``shift_by=±N`` (from the committed offset),
        ``to_datetime`` (a datetime, ISO str or ms since the epoch of simulated time: the
        first record at or after it, or the log end if there is none) or ``by_duration`` (a
        timedelta or ms before now). ``to_offset`` and ``shift_by`` are clamped into
        [log start, log end], as Kafka does.

        A dry run unless ``execute=True``, which commits the plan (a simple commit). Like
        Kafka, refuses (NonEmptyGroupError) unless the group is Empty or does not exist yet.
        """
        self.admin._check_group_id(group)
        chosen = [name for name, on in (("to_earliest", to_earliest), ("to_latest", to_latest),
                                        ("to_current", to_current), ("to_offset", to_offset is not None),
                                        ("shift_by", shift_by is not None), ("to_datetime", to_datetime is not None),
                                        ("by_duration", by_duration is not None)) if on]
        if len(chosen) != 1:
            raise IllegalArgumentError(
                "reset_offsets needs exactly one strategy of to_earliest, to_latest, to_current, to_offset, "
                f"shift_by, to_datetime, by_duration; got {chosen or 'none'}")
        for name, value in (("to_offset", to_offset), ("shift_by", shift_by)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise IllegalArgumentError(f"{name} must be an int, not {value!r}")
        timestamp = None
        if to_datetime is not None:
            timestamp = _timestamp_ms(to_datetime)
        elif by_duration is not None:
            ms = by_duration // timedelta(milliseconds=1) if isinstance(by_duration, timedelta) else by_duration
            if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
                raise IllegalArgumentError(f"by_duration must be a timedelta or ms >= 0, not {by_duration!r}")
            timestamp = max(0, self.admin._world.now - ms)

        # Only an inactive group's offsets may move (checked first, even for a dry run).
        _, described = self.admin._describe_one(group, None)
        if described.state not in (EMPTY, DEAD):
            raise NonEmptyGroupError(f"Assignments can only be reset if the group '{group}' is inactive, "
                                     f"but the current state is {described.state}.")
        tps = self._scope(group, scope, all_topics)
        (strategy,) = chosen
        value = {"to_offset": to_offset, "shift_by": shift_by}.get(strategy, timestamp)
        specials = {EARLIEST: EARLIEST_TIMESTAMP, LATEST: LATEST_TIMESTAMP}
        new, empty = plan_reset(
            tps, strategy, value,
            committed=lambda: {tp: om.offset for tp, om in self.admin.list_consumer_group_offsets(group).items()
                               if om.offset >= 0},
            log_offsets=lambda partitions, which: self.admin._list_offsets(partitions, specials.get(which, which)))
        warnings = [f"Warn: Partition {tp.partition} from topic {tp.topic} is empty. "
                    "Falling back to latest known offset." for tp in empty]
        rows = [OffsetReset(group, tp.topic, tp.partition, new[tp]) for tp in tps]
        plan = ResetPlan(group, rows, executed=False, warnings=warnings)
        if execute and rows:
            self.admin.alter_consumer_group_offsets(group, plan.offsets)
            plan.executed = True
        return plan

    # --- --delete ----------------------------------------------------------------------------------------

    def delete_groups(self, groups: Iterable[str] | str) -> str:
        """``--delete --group g [--group h]``: returns Kafka's success line; raises the first
        failure's error (NonEmptyGroupError, GroupIdNotFoundError) with Kafka's report of
        every group in its message."""
        groups = [groups] if isinstance(groups, str) else list(groups)
        results = self.admin.delete_consumer_groups(groups)
        ok = [g for g, e in results if e is None]
        failed = [(g, e) for g, e in results if e is not None]
        if not failed:
            return f"Deletion of requested consumer groups ({', '.join(repr(g) for g in ok)}) was successful."
        lines = ["Deletion of some consumer groups failed:"]
        lines += [f"* Group '{g}' could not be deleted due to: {e.__name__}: {_ERROR_TEXT.get(e.errno, e.message)}"
                  for g, e in failed]
        if ok:
            lines.append(f"These consumer groups were deleted successfully: {', '.join(repr(g) for g in ok)}")
        raise failed[0][1]("\n".join(lines))

    def close(self) -> None:
        self.admin.close()


# Kafka's messages for the errors a delete can meet (org.apache.kafka.common.protocol.Errors).
_ERROR_TEXT = {
    NonEmptyGroupError.errno: "The group is not empty.",
    GroupIdNotFoundError.errno: "The group id does not exist.",
    InvalidGroupIdError.errno: "The configured groupId is invalid.",
}




# --- the command line ------------------------------------------------------------------------------------

ERROR_PREFIX = "Error: "
DEFAULT_TIMEOUT_MS = 5000  # Kafka's --timeout default
ACTIVE_STATES_OK = (EMPTY, DEAD)  # the states in which offsets may be reset
# A real Kafka's groups of the new consumer protocol (KIP-848) rebalance in two more states,
# which minikafka's (classic) coordinator never reports: the tool names them too.
KIP_848_REBALANCING = ("Assigning", "Reconciling")
NO_EXECUTE_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. In a future major release, the "
    "default behavior of this command will be to prompt the user before executing the reset rather than doing "
    "a dry run. You should add the --dry-run option explicitly if you are scripting this command and want to "
    "keep the current default behavior without prompting.")


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "consumer-groups", help="kafka-consumer-groups: list, describe, reset offsets of, delete consumer groups",
        description="kafka-consumer-groups.sh over the Kafka protocol: list and describe consumer groups "
        "(offsets and lag, members, state), reset their offsets, delete them.")
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list all consumer groups")
    action.add_argument("--describe", action="store_true", help="describe the given groups")
    action.add_argument("--reset-offsets", action="store_true",
                        help="reset a group's offsets (a dry run unless --execute)")
    action.add_argument("--delete", action="store_true", help="delete the given groups (they must have no members)")
    p.add_argument("--group", action="append", metavar="GROUP", help="a consumer group; repeatable")
    p.add_argument("--all-groups", action="store_true", help="with --describe or --delete: every group")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="with --describe: offsets and lag (the default)")
    view.add_argument("--members", action="store_true", help="with --describe: the group's members")
    view.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                      help="with --describe: the group's state and coordinator; with --list: each group's "
                      "state, only those in STATES (comma separated) if given")
    p.add_argument("--verbose", action="store_true",
                   help="with --describe --members: each member's partitions (and, in a KIP-848 group, its epoch "
                   "and target assignment); with --state: a KIP-848 group's epochs; with --offsets: LEADER-EPOCH")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,P]",
                   help="with --reset-offsets: a topic, or some of its partitions (t:0,2); repeatable")
    p.add_argument("--all-topics", action="store_true",
                   help="with --reset-offsets: every partition the group has an offset for")
    strategy = p.add_mutually_exclusive_group()
    strategy.add_argument("--to-earliest", action="store_true", help="to the log start")
    strategy.add_argument("--to-latest", action="store_true", help="to the log end")
    strategy.add_argument("--to-current", action="store_true", help="to the committed offset (log end if none)")
    strategy.add_argument("--to-offset", type=int, metavar="N", help="to offset N")
    strategy.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be < 0)")
    strategy.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                          help="to the first record at or after this time (local time unless a zone is given)")
    strategy.add_argument("--by-duration", metavar="PnDTnHnMnS",
                          help="to the first record at or after this long ago (ISO-8601 duration, e.g. PT10M)")
    run_mode = p.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help=f"how long to retry a coordinator that is not ready (default: {DEFAULT_TIMEOUT_MS})")
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    return run_tool(_run, args, ERROR_PREFIX)


_STRATEGIES = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration")


def _strategy(args: argparse.Namespace) -> str | None:
    chosen = [s for s in _STRATEGIES if getattr(args, s) not in (None, False)]
    return chosen[0] if chosen else None


def _check_flags(args: argparse.Namespace) -> None:
    """Kafka's option checks (ConsumerGroupCommandOptions.checkArgs), with its wording."""
    groups = args.group or []
    if (args.describe or args.delete) and not groups and not args.all_groups:
        raise UsageError(f"Option [{'describe' if args.describe else 'delete'}] takes one of these options: "
                         "[all-groups], [group]")
    if args.all_groups and groups:
        raise UsageError("Option [all-groups] cannot be used with [group]")
    if args.reset_offsets:
        if len(groups) != 1 or args.all_groups:
            raise UsageError("Option [reset-offsets] takes exactly one [group]")
        if not args.topic and not args.all_topics:
            raise UsageError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
        if args.topic and args.all_topics:
            raise UsageError("Option [reset-offsets] takes one of [all-topics], [topic], not both")
        if _strategy(args) is None:
            raise UsageError("Option [reset-offsets] takes exactly one of [to-datetime], [by-duration], "
                             "[to-earliest], [to-latest], [shift-by], [to-current], [to-offset]")
    else:
        misplaced = [f"--{s.replace('_', '-')}" for s in _STRATEGIES if getattr(args, s) not in (None, False)]
        misplaced += [flag for flag, on in (("--topic", bool(args.topic)), ("--all-topics", args.all_topics),
                                           ("--dry-run", args.dry_run), ("--execute", args.execute)) if on]
        if misplaced:
            raise UsageError(f"{misplaced[0]} can only be used with --reset-offsets")
    if not args.describe and (args.members or args.offsets or args.verbose):
        raise UsageError("--members, --offsets and --verbose can only be used with --describe")
    if args.state is not None and not (args.describe or args.list):
        raise UsageError("--state can only be used with --describe or --list")
    if args.describe and args.state:
        raise UsageError("--describe --state takes no value (state names filter --list)")
    if args.list and (groups or args.all_groups):
        raise UsageError("--list lists every group: leave out --group and --all-groups")
    if args.timeout < 0:
        raise UsageError(f"--timeout must be >= 0, not {args.timeout}")


def _run(args: argparse.Namespace) -> int:
    _check_flags(args)
    admin = admin_client(args.bootstrap_server)
    tool = GroupTool(admin, args.timeout / 1000)
    try:
        if args.list:
            return tool.list(args.state)
        groups = tool.group_ids() if args.all_groups else list(dict.fromkeys(args.group))
        if args.describe:
            return tool.describe(groups, members=args.members, state=args.state is not None, verbose=args.verbose)
        if args.reset_offsets:
            return tool.reset(groups[0], args)
        return tool.delete(groups)
    finally:
        admin.close()


def _assigned_partitions(member: dict) -> list:
    """A member's partitions, from DescribeGroups' member_assignment (kafka-python decodes it
    for the 'consumer' protocol; empty while the group rebalances)."""
    from kafka import TopicPartition

    assignment = member.get("member_assignment")
    if not isinstance(assignment, dict):
        return []
    return [TopicPartition(a["topic"], p) for a in assignment.get("assigned_partitions") or []
            for p in a["partitions"]]


class GroupTool:
    """The tool's actions on one admin client; ``timeout_s`` bounds retries of a coordinator
    that is not ready yet."""

    def __init__(self, admin: Any, timeout_s: float) -> None:
        self.admin = admin
        self.timeout_s = timeout_s

    def _retry(self, call, what: str) -> Any:
        return retrying(call, what, self.timeout_s)

    # --- shared look-ups ---------------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        listed = self._retry(self.admin.list_groups, "ListGroups")
        # Only consumer groups (and Kafka 0.8's '' groups), as Kafka's tool lists.
        return sorted({g["group_id"] for g in listed if g.get("protocol_type") in ("consumer", "", None)})

    def describe_group(self, group: str) -> dict:
        described = self._retry(lambda: self.admin.describe_groups([group]), "DescribeGroups")[group]
        if described.get("error"):
            raise ToolError(f"could not describe group '{group}': {described['error']}")
        return described

    def committed(self, group: str) -> dict:
        """{TopicPartition: OffsetAndMetadata} of the group's committed offsets (-1: none)."""
        offsets = self._retry(lambda: self.admin.list_group_offsets({group: None}), "OffsetFetch")
        return {tp: om for tp, om in offsets.get(group, {}).items() if om.offset is not None and om.offset >= 0}

    def log_offsets(self, tps: Iterable, spec: Any) -> dict:
        """{TopicPartition: offset} by ListOffsets (spec: OffsetSpec or OffsetTimestamp), None
        for a partition that cannot answer (no leader): Kafka's tool shows '-' for it."""
        tps = sorted(set(tps))
        if not tps:
            return {}
        try:
            found = self.admin.list_partition_offsets({tp: spec for tp in tps})
            return {tp: found[tp].offset if tp in found else None for tp in tps}
        except Exception:  # one bad partition fails the whole request: ask one by one
            out = {}
            for tp in tps:
                try:
                    out[tp] = self.admin.list_partition_offsets({tp: spec})[tp].offset
                except Exception:
                    out[tp] = None
            return out

    def consumer_group(self, group: str) -> Any | None:
        """ConsumerGroupDescribe (KIP-848) of ``group``: kafka-python's answer object, or None for
        a classic group (GROUP_ID_NOT_FOUND) or a broker that does not speak it, which is how
        Kafka 4's admin client tells the two kinds of group apart. kafka-python 3.0 has no call
        for it: this sends minikafka's schema of the request through its admin client's network."""
        from kafka.errors import UnsupportedVersionError
        from minikafka.wire.codec import _KConsumerGroupDescribeRequest

        admin = self.admin

        async def ask() -> Any:
            node = await admin._find_coordinator_id(group)
            request = _KConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
            return await admin._manager.send(request, node_id=node)

        try:
            response = self._retry(lambda: admin._manager.run(ask), "ConsumerGroupDescribe")
        except (UnsupportedVersionError, AttributeError):  # an old broker, or a kafka-python without these internals
            return None
        [described] = response.groups
        if described.error_code == 69:  # GROUP_ID_NOT_FOUND: not a consumer group (or none)
            return None
        if described.error_code:
            raise ToolError(f"could not describe group '{group}': error {described.error_code} "
                            f"{described.error_message or ''}".rstrip())
        return described

    def coordinator(self, group: str) -> tuple[int, str]:
        """The coordinator's id and Kafka's "host:port  (id)" text. kafka-python 3.0 has no public
        call for it: this uses its admin client's FindCoordinator step."""
        try:
            node = self._retry(lambda: self.admin._manager.run(self.admin._find_coordinator_id, group),
                               "FindCoordinator")
            broker = self.admin._manager.cluster.broker_metadata(node)
            return node, (f"{broker.host}:{broker.port}  ({node})" if broker is not None else f"-  ({node})")
        except AttributeError:  # a kafka-python without these internals
            return -1, "-"

    # --- --list ------------------------------------------------------------------------------------

    def list(self, states: str | None) -> int:
        ids = self.group_ids()
        if states is None:
            for g in ids:
                print(g)
            return 0
        try:
            wanted = {_state_name(s.strip()) for s in states.split(",") if s.strip()} or None
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        rows = [(g, self.describe_group(g)["group_state"]) for g in ids]
        print(GroupListing([(g, s) for g, s in rows if wanted is None or s in wanted]).table())
        return 0

    # --- --describe ----------------------------------------------------------------------------------

    def _notice(self, group: str, state: str) -> None:
        if state == EMPTY:
            print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
        elif state in (PREPARING_REBALANCE, COMPLETING_REBALANCE, *KIP_848_REBALANCING):
            print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)

    def describe(self, groups: list[str], *, members: bool, state: bool, verbose: bool) -> int:
        missing = []
        for group in groups:
            info = self.describe_group(group)
            group_state = info["group_state"]
            if group_state == DEAD:
                missing.append(group)
                print(f"{ERROR_PREFIX}Consumer group '{group}' does not exist.", file=sys.stderr)
                continue
            self._notice(group, group_state)
            kip848 = self.consumer_group(group) if verbose and (state or members) else None
            if kip848 is not None:
                report: Any = self._kip848_report(group, kip848, state)
            elif state:
                node, where = self.coordinator(group)
                report = GroupStateReport([GroupStateInformation(
                    group, where, node, info.get("protocol_data") or "", group_state, len(info["members"]))], verbose)
            elif members:
                rows = [MemberAssignmentState(group, m["member_id"], m.get("client_host") or "-",
                                              m.get("client_id") or "", len(_assigned_partitions(m)), tuple(_assigned_partitions(m)))
                        for m in info["members"]]
                report = GroupMembers(group, group_state, rows, verbose)
            else:
                report = GroupOffsets(group, group_state, self._offset_rows(group, info), verbose)
            if len(report):
                print("\n" + _without_notice(report.table(), group, group_state))
        return 1 if missing else 0

    def _kip848_report(self, group: str, described: Any, state: bool) -> Any:
        """Kafka 4's --state --verbose or --members --verbose of a KIP-848 group."""
        if state:
            node, where = self.coordinator(group)
            return GroupStateReport([GroupStateInformation(
                group, where, node, described.assignor_name, described.group_state, len(described.members),
                described.group_epoch, described.assignment_epoch)], True)

        def tps(assignment: Any) -> tuple[TopicPartition, ...]:
            return tuple(sorted(TopicPartition(t.topic_name, p) for t in assignment.topic_partitions
                                for p in t.partitions))

        rows = [MemberAssignmentState(group, m.member_id, m.client_host or MISSING, m.client_id or "",
                                      len(tps(m.assignment)), tps(m.assignment), m.member_epoch,
                                      described.assignment_epoch, tps(m.target_assignment))
                for m in described.members]
        return GroupMembers(group, described.group_state, rows, True)

    def _offset_rows(self, group: str, info: dict) -> list:
        from kafka.admin import OffsetSpec

        committed = self.committed(group)
        owned = [(m, _assigned_partitions(m)) for m in info["members"] if _assigned_partitions(m)]
        owned.sort(key=lambda mp: -len(mp[1]))  # Kafka: the member with most partitions first
        assigned = {tp for _, tps in owned for tp in tps}
        unowned = sorted(tp for tp in committed if tp not in assigned)
        ends = self.log_offsets(assigned | set(unowned), OffsetSpec.LATEST)

        def row(tp: Any, member: dict | None) -> PartitionAssignmentState:
            c = committed.get(tp)
            offset = c.offset if c is not None else None
            end = ends.get(tp)
            lag = end - offset if offset is not None and end is not None else None
            epoch = c.leader_epoch if c is not None and c.leader_epoch is not None and c.leader_epoch >= 0 else None
            if member is None:
                return PartitionAssignmentState(group, tp.topic, tp.partition, offset, end, lag, None, None, None,
                                                epoch)
            return PartitionAssignmentState(group, tp.topic, tp.partition, offset, end, lag, member["member_id"],
                                            member.get("client_host"), member.get("client_id"), epoch)

        return [row(tp, m) for m, tps in owned for tp in tps] + [row(tp, None) for tp in unowned]

    # --- --reset-offsets -------------------------------------------------------------------------------

    def _scope(self, group: str, args: argparse.Namespace) -> list:
        from kafka import TopicPartition

        if args.all_topics:
            return sorted(self.committed(group))
        explicit: set = set()
        whole: list[str] = []
        for item in args.topic:
            topic, sep, parts = item.partition(":")
            if not topic:
                raise ToolError(f"--topic {item!r} names no topic")
            if not sep:
                whole.append(topic)
                continue
            for p in parts.split(","):
                if not p.strip().isdigit():
                    raise ToolError(f"Invalid partition '{p}' specified in topic arg '{item}'")
                explicit.add(TopicPartition(topic, int(p)))
        names = sorted({tp.topic for tp in explicit} | set(whole))
        described = {t["name"]: t for t in self.admin.describe_topics(names)}
        for name in names:
            if name not in described or described[name]["error_code"] != 0:
                raise ToolError(f"Topic '{name}' does not exist")
        known = {name: {p["partition_index"] for p in described[name]["partitions"]} for name in names}
        absent = sorted(tp for tp in explicit if tp.partition not in known[tp.topic])
        if absent:
            raise ToolError(f'The partitions "{",".join(f"{tp.topic}-{tp.partition}" for tp in absent)}" '
                            "do not exist")
        for name in whole:
            explicit |= {TopicPartition(name, p) for p in known[name]}
        return sorted(explicit)

    def _timestamp_ms(self, args: argparse.Namespace) -> int:
        if args.to_datetime is not None:
            return parse_datetime_ms(args.to_datetime)
        return int(time.time() * 1000) - parse_duration_ms(args.by_duration)

    def reset(self, group: str, args: argparse.Namespace) -> int:
        from kafka.admin import OffsetSpec, OffsetTimestamp
        from kafka.structs import OffsetAndMetadata

        strategy = _strategy(args)
        timestamp = self._timestamp_ms(args) if strategy in ("to_datetime", "by_duration") else None
        # Only an inactive group's offsets may move: checked first, even for a dry run (Kafka too).
        state = self.describe_group(group)["group_state"]
        if state not in ACTIVE_STATES_OK:
            raise ToolError(f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                            f"state is {state}.")
        tps = self._scope(group, args)
        value = {"to_offset": args.to_offset, "shift_by": args.shift_by}.get(strategy, timestamp)
        specs = {EARLIEST: OffsetSpec.EARLIEST, LATEST: OffsetSpec.LATEST}
        try:
            new, empty = plan_reset(
                tps, strategy, value,
                committed=lambda: {tp: om.offset for tp, om in self.committed(group).items()},
                log_offsets=lambda partitions, which: self.log_offsets(
                    partitions, specs[which] if which in specs else OffsetTimestamp(which)))
        except IllegalArgumentError as e:
            raise ToolError(str(e)) from None
        warnings = [f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. "
                    "Falling back to latest known offset." for tp in empty]
        leaderless = [tp for tp in tps if new.get(tp) is None]
        if leaderless:
            names = ",".join(f"{tp.topic}-{tp.partition}" for tp in leaderless)
            raise ToolError(f'No offset could be found for "{names}" (no leader?)')
        for line in warnings:
            print(line)
        plan = ResetPlan(group, [OffsetReset(group, tp.topic, tp.partition, new[tp]) for tp in tps], executed=False)
        if args.execute and plan.rows:
            results = self.admin.alter_group_offsets(
                group, {tp: OffsetAndMetadata(new[tp], "", None) for tp in tps})
            failed = {tp: err for tp, err in results.items() if err.__name__ != "NoError"}
            if failed:
                tp, err = sorted(failed.items())[0]
                raise ToolError(f"the new offset of {tp.topic}-{tp.partition} was not committed: {err.__name__}: "
                                f"{getattr(err, 'description', '')} (did a consumer join the group meanwhile?)")
            plan.executed = True
        elif not args.execute and not args.dry_run:
            print(NO_EXECUTE_WARNING, file=sys.stderr)
        if plan.rows:
            print("\n" + plan.table())
        return 0

    # --- --delete ---------------------------------------------------------------------------------

    def delete(self, groups: list[str]) -> int:
        import kafka.errors as Errors


        if not groups:
            return 0
        results = self._retry(lambda: self.admin.delete_groups(groups), "DeleteGroups")
        ok = [g for g in groups if results.get(g) == "OK"]
        failed = [(g, results.get(g, "UnknownError")) for g in groups if results.get(g) != "OK"]
        if not failed:
            print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in ok)}) was successful.")
            return 0
        print(f"{ERROR_PREFIX}Deletion of some consumer groups failed:", file=sys.stderr)
        for g, name in failed:
            error = getattr(Errors, name, None)
            text = _ERROR_TEXT.get(getattr(error, "errno", None), getattr(error, "description", ""))
            print(f"* Group '{g}' could not be deleted due to: {name}: {text}", file=sys.stderr)
        if ok:
            print(f"These consumer groups were deleted successfully: {', '.join(repr(g) for g in ok)}")
        return 1


def _without_notice(table: str, group: str, state: str) -> str:
    """The simulated tool's table starts with its state notice; here that went to stderr."""
    notice = _state_notice(group, state)
    return table[len(notice):].lstrip("\n") if notice and table.startswith(notice) else table




def parse_datetime_ms(text: str) -> int:
    """Kafka's ``--to-datetime``: 'YYYY-MM-DDTHH:mm:SS.sss', optionally with a zone ('Z',
    '+01:00'); without one, the machine's zone, as Kafka's tool takes it. Returns ms since the epoch."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ToolError(f"--to-datetime {text!r} is not a date-time such as '2024-05-01T12:00:00.000' "
                        "(optionally with a zone: 'Z', '+02:00')") from None
    if when.tzinfo is None:
        when = when.astimezone()  # a naive time is local time
    return int(when.timestamp() * 1000)


_DURATION = re.compile(r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
                       re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """Kafka's ``--by-duration``: an ISO-8601 duration 'PnDTnHnMnS' (e.g. PT10M, P1DT2H) in ms."""
    match = _DURATION.fullmatch(text.strip())
    if not match or not any(match.groupdict().values()) or text.strip().upper().endswith("T"):
        raise ToolError(f"--by-duration {text!r} is not an ISO-8601 duration such as PT10M, PT1H30M or P1DT2H")
    d, h, m, s = (float(match[g] or 0) for g in "dhms")
    return int(((d * 24 + h) * 60 + m) * 60_000 + s * 1000)


__all__ = ["GroupTool", "parse_datetime_ms", "parse_duration_ms"]
