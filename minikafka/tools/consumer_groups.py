"""``minikafka consumer-groups``: ``kafka-consumer-groups.sh`` over the Kafka protocol.

Theory of operation
-------------------
One action per run, each a few admin requests through kafka-python's ``KafkaAdminClient``
(ListGroups to every broker; FindCoordinator, then DescribeGroups, OffsetFetch, OffsetCommit
and DeleteGroups to the group's coordinator; ListOffsets to partition leaders):

- ``--list [--state [STATES]]``: the consumer groups, one per line; with ``--state`` a
  ``GROUP STATE`` table, optionally only the groups in STATES (``Stable,Empty``).
- ``--describe --group G`` (or ``--all-groups``): per partition, the group's committed
  offset (CURRENT-OFFSET), the partition's high watermark (LOG-END-OFFSET), their difference
  (LAG) and the member that owns it (CONSUMER-ID HOST CLIENT-ID, '-' when no member does).
  ``--members [--verbose]`` lists the members instead, ``--state`` the group's coordinator,
  assignment strategy, state and size. As in Kafka, "Consumer group 'G' has no active
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

The tables are the simulated ``ConsumerGroupCommand``'s (``minikafka.clients.admin``: the same
columns, widths and row order as Kafka's tool), filled from kafka-python's answers. Retriable
answers (the coordinator not known yet, ``__consumer_offsets`` being created) are retried for
``--timeout`` ms; other failures print ``Error: <why>`` on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from typing import Any, Iterable

from minikafka.group_state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE

from .common import ToolError, UsageError, add_bootstrap, admin_client, retrying, run_tool

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
                   help="with --describe --members: each member's partitions; with --offsets: LEADER-EPOCH")
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


def _assigned(member: dict) -> list:
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
        from minikafka.clients.admin import GroupListing, _state_name

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
        from minikafka.clients.admin import (
            GroupMembers,
            GroupOffsets,
            GroupStateInformation,
            GroupStateReport,
            MemberAssignmentState,
        )

        missing = []
        for group in groups:
            info = self.describe_group(group)
            group_state = info["group_state"]
            if group_state == DEAD:
                missing.append(group)
                print(f"{ERROR_PREFIX}Consumer group '{group}' does not exist.", file=sys.stderr)
                continue
            self._notice(group, group_state)
            if state:
                node, where = self.coordinator(group)
                report: Any = GroupStateReport([GroupStateInformation(
                    group, where, node, info.get("protocol_data") or "", group_state, len(info["members"]))])
            elif members:
                rows = [MemberAssignmentState(group, m["member_id"], m.get("client_host") or "-",
                                              m.get("client_id") or "", len(_assigned(m)), tuple(_assigned(m)))
                        for m in info["members"]]
                report = GroupMembers(group, group_state, rows, verbose)
            else:
                report = GroupOffsets(group, group_state, self._offset_rows(group, info), verbose)
            if len(report):
                print("\n" + _without_notice(report.table(), group, group_state))
        return 1 if missing else 0

    def _offset_rows(self, group: str, info: dict) -> list:
        from kafka.admin import OffsetSpec

        from minikafka.clients.admin import PartitionAssignmentState

        committed = self.committed(group)
        owned = [(m, _assigned(m)) for m in info["members"] if _assigned(m)]
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

        from minikafka.clients.admin import OffsetReset, ResetPlan

        strategy = _strategy(args)
        timestamp = self._timestamp_ms(args) if strategy in ("to_datetime", "by_duration") else None
        # Only an inactive group's offsets may move: checked first, even for a dry run (Kafka too).
        state = self.describe_group(group)["group_state"]
        if state not in ACTIVE_STATES_OK:
            raise ToolError(f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                            f"state is {state}.")
        tps = self._scope(group, args)
        warnings = []
        if strategy == "to_earliest":
            new = self.log_offsets(tps, OffsetSpec.EARLIEST)
        elif strategy == "to_latest":
            new = self.log_offsets(tps, OffsetSpec.LATEST)
        elif timestamp is not None:
            found = self.log_offsets(tps, OffsetTimestamp(timestamp))
            empty = [tp for tp in tps if found.get(tp) is None or found[tp] < 0]
            ends = self.log_offsets(empty, OffsetSpec.LATEST)
            for tp in empty:
                warnings.append(f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. "
                                "Falling back to latest known offset.")
            new = {**found, **ends}
        else:
            committed = self.committed(group)
            ends = self.log_offsets(tps, OffsetSpec.LATEST)
            if strategy == "to_current":
                new = {tp: committed[tp].offset if tp in committed else ends[tp] for tp in tps}
            else:
                if strategy == "shift_by":
                    for tp in tps:
                        if tp not in committed:
                            raise ToolError(f"Cannot shift offset for partition {tp.topic}-{tp.partition} since "
                                            "there is no current committed offset")
                    wanted = {tp: committed[tp].offset + args.shift_by for tp in tps}
                else:
                    wanted = {tp: args.to_offset for tp in tps}
                starts = self.log_offsets(tps, OffsetSpec.EARLIEST)
                # Kafka's checkOffsetsRange: past the end -> the end; before the start -> the start.
                new = {tp: _clamp(o, starts[tp], ends[tp]) for tp, o in wanted.items()}
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

        from minikafka.clients.admin import _ERROR_TEXT

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
    from minikafka.clients.admin import _state_notice

    notice = _state_notice(group, state)
    return table[len(notice):].lstrip("\n") if notice and table.startswith(notice) else table


def _clamp(offset: int, start: int | None, end: int | None) -> int | None:
    if start is None or end is None:
        return None
    return end if offset > end else max(offset, start)


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
