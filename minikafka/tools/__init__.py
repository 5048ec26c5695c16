"""Kafka's command-line tools as ``minikafka`` subcommands, with Kafka's own flags.

Theory of operation
-------------------
``minikafka topics``, ``configs``, ``delete-records``, ``console-producer``, ``console-consumer``, ``consumer-groups`` and
``metadata-quorum`` are ``kafka-topics.sh``, ``kafka-configs.sh``, ``kafka-delete-records.sh``, ``kafka-console-producer.sh``,
``kafka-console-consumer.sh``, ``kafka-consumer-groups.sh`` and ``kafka-metadata-quorum.sh``: the same flags, the same output (as closely as a Python client
allows), the same exit codes where Kafka has one. They are protocol clients built on
kafka-python (``KafkaAdminClient``, ``KafkaProducer``, ``KafkaConsumer``), so they work against
minikafka's broker processes (``minikafka cluster up``) and against a real Kafka alike; they do
not touch the simulated ``Cluster`` (its notebooks have ``cluster.consumer_groups`` for that: the
``ConsumerGroupCommand`` of ``consumer_groups``, the same tool over the course's own admin client).

``register(commands)`` adds the seven subparsers to ``minikafka``'s argparse subcommands
(``minikafka.cli.build_parser`` calls it). Each tool's module defines its parser and its
``run(args)``; the modules import kafka-python only when a tool runs, so ``minikafka --help``
stays fast and works without it. Failures print one line on stderr and exit 1; usage errors
exit 2 (see ``minikafka.tools.common``). ``--broker-list`` is accepted as the deprecated alias of
``--bootstrap-server`` it was (with a notice); ``--zookeeper`` gets one line naming what replaced
it and the command to type, exit code 1 (Kafka 4 refuses it as an unknown option).
"""

from __future__ import annotations

from typing import Any


def register(commands: Any) -> None:
    """Add the tools' subparsers to ``commands`` (an argparse ``add_subparsers()`` object)."""
    from . import (configs, console_consumer, console_producer, consumer_groups, delete_records, metadata_quorum,
                   topics)

    for module in (topics, configs, delete_records, console_producer, console_consumer, consumer_groups,
                   metadata_quorum):
        module.add_parser(commands)


__all__ = ["register"]
