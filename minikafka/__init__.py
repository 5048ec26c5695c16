"""minikafka: a working mini-Kafka, built step by step in a Jupyter course.

The layers, each importing only from the ones before it: ``records`` (Kafka's v2 record
batches), ``storage`` (segments, indexes, the log), ``partitioner``; then the brokers,
clients and runtimes the later chapters add.

The top-level names (``from minikafka import Cluster``) are imported on first use, not
here: ``import minikafka.records`` in chapter 1, or in every Python worker Spark starts for
the capstone's source, then loads only the records layer, not every later one.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_WHERE = {
    "ConsumerRebalanceListener": "minikafka.clients",
    "KafkaAdminClient": "minikafka.clients",
    "KafkaConsumer": "minikafka.clients",
    "KafkaProducer": "minikafka.clients",
    "NewPartitions": "minikafka.clients",
    "NewTopic": "minikafka.clients",
    "RecordMetadata": "minikafka.clients",
    "Cluster": "minikafka.cluster",
    "LocalCluster": "minikafka.wire.process",
    "launch": "minikafka.wire.process",
    "CorruptRecordError": "minikafka.errors",
    "KafkaError": "minikafka.errors",
    "OffsetOutOfRangeError": "minikafka.errors",
    "MemoryRecords": "minikafka.records",
    "Record": "minikafka.records",
    "RecordBatch": "minikafka.records",
    "Log": "minikafka.storage",
    "LogConfig": "minikafka.storage",
    "LogManager": "minikafka.storage",
    "OffsetAndMetadata": "minikafka.topic",
    "TopicPartition": "minikafka.topic",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'minikafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
