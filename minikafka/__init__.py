"""minikafka: a working mini-Kafka, built step by step in a Jupyter course.

The layers, each importing only from the ones before it: ``records`` (Kafka's v2 record
batches), ``storage`` (segments, indexes, the log), ``partitioner``; then the brokers,
clients and runtimes the later chapters add.
"""

from minikafka.clients import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer, RecordMetadata
from minikafka.cluster import Cluster
from minikafka.errors import CorruptRecordError, KafkaError, OffsetOutOfRangeError
from minikafka.records import MemoryRecords, Record, RecordBatch
from minikafka.storage import Log, LogConfig, LogManager
from minikafka.topic import OffsetAndMetadata, TopicPartition

__version__ = "0.1.0"

__all__ = [
    "Cluster",
    "ConsumerRebalanceListener",
    "KafkaAdminClient",
    "KafkaConsumer",
    "OffsetAndMetadata",
    "CorruptRecordError",
    "KafkaProducer",
    "RecordMetadata",
    "KafkaError",
    "Log",
    "LogConfig",
    "LogManager",
    "MemoryRecords",
    "OffsetOutOfRangeError",
    "Record",
    "RecordBatch",
    "TopicPartition",
]
