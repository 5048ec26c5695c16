"""``minikafka delete-records``: ``kafka-delete-records.sh`` over the Kafka protocol.

Theory of operation
-------------------
``--offset-json-file F`` names Kafka's JSON file,
``{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}``: for each
partition, DeleteRecords at its leader (through kafka-python's ``KafkaAdminClient``) makes
``offset`` the partition's first (its log start offset, the "low watermark"; -1: the high
watermark). Kafka's output::

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 3

A partition that failed (an offset past its high watermark, an unknown partition) gets
``partition: t-0	error: <why>`` instead and, as in Kafka, the others still go; the exit
code is 1 if any failed (Kafka's tool exits 0 there: a script could not tell). A file that
cannot be read or is not that JSON: one line, exit 1.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import ToolError, add_bootstrap, admin_client, describe_error, run_tool

ERROR_PREFIX = "Error while executing delete records command : "


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "delete-records", help="kafka-delete-records: delete records before an offset",
        description="kafka-delete-records.sh over the Kafka protocol: each partition of the JSON file "
        "starts at its offset from now on (the records before it are gone).")
    add_bootstrap(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}; '
                   "offset -1: the high watermark")
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    return run_tool(_run, args, ERROR_PREFIX)


def read_offsets(path: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) from Kafka's offset JSON file; ToolError naming what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ToolError(f"cannot read --offset-json-file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ToolError(f"--offset-json-file {path} is not JSON: {e}") from None
    entries = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ToolError(f'--offset-json-file {path} needs {{"partitions": [{{"topic": ..., "partition": ..., '
                        '"offset": ...}, ...], "version": 1}')
    out = []
    for i, e in enumerate(entries):
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
                and isinstance(e.get("offset"), int)):
            raise ToolError(f"--offset-json-file {path}: partitions[{i}] must have a \"topic\" (a string), "
                            f"a \"partition\" and an \"offset\" (integers), not {json.dumps(e)}")
        out.append((e["topic"], e["partition"], e["offset"]))
    keys = [(t, p) for t, p, _ in out]
    if len(set(keys)) != len(keys):
        raise ToolError(f"--offset-json-file {path} names a partition twice")
    return out


def _run(args: argparse.Namespace) -> int:
    from kafka import TopicPartition
    import kafka.errors as Errors

    offsets = read_offsets(args.offset_json_file)
    admin = admin_client(args.bootstrap_server)
    failed = False
    try:
        print("Executing records delete operation")
        lines = []
        for topic, partition, offset in offsets:
            tp = TopicPartition(topic, partition)
            try:
                low = admin.delete_records({tp: offset})[tp]["low_watermark"]
                lines.append(f"partition: {topic}-{partition}\tlow_watermark: {low}")
            except (Errors.KafkaError, KeyError) as exc:
                failed = True
                why = describe_error(exc) if isinstance(exc, Errors.KafkaError) else "no such partition"
                lines.append(f"partition: {topic}-{partition}\terror: {why}")
        print("Records delete operation completed:")
        for line in lines:
            print(line)
    finally:
        admin.close()
    return 1 if failed else 0
