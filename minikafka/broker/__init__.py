"""The broker: Partition, ReplicaManager, the idempotent-producer state and KafkaApis."""

from minikafka.broker.broker import Broker
from minikafka.broker.config import BrokerConfig
from minikafka.broker.partition import Partition
from minikafka.broker.replica_manager import ReplicaManager

__all__ = ["Broker", "BrokerConfig", "Partition", "ReplicaManager"]
