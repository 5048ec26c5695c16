"""minikafka: a working mini-Kafka, built step by step in a Jupyter course."""

__version__ = "0.1.0"
