"""The clients: what applications use to talk to a minikafka cluster.

``KafkaProducer`` (this chapter) mirrors kafka-python's producer: a thin user-facing object
over a sans-I/O ``Sender`` node and its ``RecordAccumulator``; the consumer and admin
clients join it in later chapters. ``KafkaConsumer`` mirrors kafka-python's consumer: a thin
object over a ``ConsumerNetworkClient`` node with its ``Fetcher`` and ``ConsumerCoordinator``.
"""

from minikafka.clients.admin import KafkaAdminClient
from minikafka.clients.consumer import CommitFuture, ConsumerRebalanceListener, KafkaConsumer
from minikafka.clients.fetcher import ConsumerRecord
from minikafka.clients.future import FutureRecordMetadata, RecordMetadata
from minikafka.clients.new_topic import NewPartitions, NewTopic
from minikafka.clients.producer import KafkaConfigurationError, KafkaProducer
from minikafka.clients.record_accumulator import ProducerBatch, RecordAccumulator
from minikafka.clients.sender import Sender

__all__ = [
    "CommitFuture",
    "KafkaAdminClient",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "KafkaConsumer",
    "FutureRecordMetadata",
    "KafkaConfigurationError",
    "KafkaProducer",
    "NewPartitions",
    "NewTopic",
    "ProducerBatch",
    "RecordAccumulator",
    "RecordMetadata",
    "Sender",
]
