"""``minikafka metadata-quorum``: Kafka's ``kafka-metadata-quorum.sh``.

``describe --status`` prints the quorum's leader, epoch, high watermark, the largest
follower lag and the voters and observers; ``describe --replication`` one row per replica
(log end offset, lag, last fetch and last caught-up times, status). Both come from one
DescribeQuorum request (api 55) to a broker, which forwards it to the active controller,
as Kafka's brokers do. Layout and field names are those of Kafka's tool.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import ToolError, add_bootstrap, check_reachable, parse_bootstrap, run_tool

ERROR_PREFIX = "Error while executing metadata quorum command : "
DESCRIBE_QUORUM_VERSION = 1


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "metadata-quorum", help="kafka-metadata-quorum: describe the KRaft controller quorum",
        description="kafka-metadata-quorum.sh over the Kafka protocol: the metadata quorum's leader, "
        "epoch and high watermark (--status), or every replica's progress (--replication).")
    add_bootstrap(p)
    sub = p.add_subparsers(dest="action", required=True, metavar="describe")
    d = sub.add_parser("describe", help="describe the metadata quorum")
    what = d.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="the quorum's leader, epoch, high watermark, voters")
    what.add_argument("--replication", action="store_true", help="one row per voter and observer")
    d.set_defaults(_parser=d)
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    return run_tool(_run, args, ERROR_PREFIX)


def describe_quorum(bootstrap: str) -> Any:
    """The ``__cluster_metadata-0`` partition of a DescribeQuorum answer from the first
    broker that gives one."""
    from kafka.protocol.admin import DescribeQuorumRequest, DescribeQuorumResponse

    from minikafka.wire.admin_probe import roundtrip

    check_reachable(bootstrap)
    failures = []
    for host, port in parse_bootstrap(bootstrap):
        T = DescribeQuorumRequest.TopicData
        request = DescribeQuorumRequest(version=DESCRIBE_QUORUM_VERSION, topics=[
            T(topic_name="__cluster_metadata", partitions=[T.PartitionData(partition_index=0)])])
        try:
            response = roundtrip(host, port, request, DescribeQuorumResponse, DESCRIBE_QUORUM_VERSION,
                                 timeout_s=35.0)
        except OSError as e:
            failures.append(f"{host}:{port} ({e})")
            continue
        if response.error_code:
            failures.append(f"{host}:{port} ({_error_name(response.error_code)})")
            continue
        partition = response.topics[0].partitions[0]
        if partition.error_code:
            raise ToolError(f"{_error_name(partition.error_code)}: the quorum has no leader the broker could reach "
                            "(is a majority of the controllers up?)")
        return partition
    raise ToolError(f"no broker answered DescribeQuorum: {', '.join(failures)}")


def _error_name(code: int) -> str:
    import kafka.errors

    return kafka.errors.for_code(code).__name__


def _run(args: argparse.Namespace) -> int:
    q = describe_quorum(args.bootstrap_server)
    voters = sorted(q.current_voters, key=lambda r: (r.replica_id != q.leader_id, r.replica_id))
    observers = sorted(q.observers, key=lambda r: r.replica_id)
    leader = next((r for r in voters if r.replica_id == q.leader_id), None)
    leader_end = leader.log_end_offset if leader else q.high_watermark
    if args.status:
        followers = [r for r in voters if r.replica_id != q.leader_id]
        max_lag = max((leader_end - r.log_end_offset for r in followers), default=0)
        now = leader.last_caught_up_timestamp if leader else -1
        caught = [r.last_caught_up_timestamp for r in followers]
        max_lag_time = -1 if not caught or min(caught) < 0 or now < 0 else max(0, now - min(caught))
        rows = [
            ("ClusterId", "minikafka"),
            ("LeaderId", q.leader_id),
            ("LeaderEpoch", q.leader_epoch),
            ("HighWatermark", q.high_watermark),
            ("MaxFollowerLag", max_lag),
            ("MaxFollowerLagTimeMs", max_lag_time),
            ("CurrentVoters", "[" + ",".join(str(r.replica_id) for r in sorted(voters, key=lambda r: r.replica_id)) + "]"),
            ("CurrentObservers", "[" + ",".join(str(r.replica_id) for r in observers) + "]"),
        ]
        for key, value in rows:
            print(f"{key + ':':<24}{value}")
        return 0
    table = [("NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status")]
    for r in voters:
        status = "Leader" if r.replica_id == q.leader_id else "Follower"
        table.append((r.replica_id, r.log_end_offset, max(0, leader_end - r.log_end_offset),
                      r.last_fetch_timestamp, r.last_caught_up_timestamp, status))
    for r in observers:
        table.append((r.replica_id, r.log_end_offset, max(0, leader_end - r.log_end_offset),
                      r.last_fetch_timestamp, r.last_caught_up_timestamp, "Observer"))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("\t".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
    return 0
