"""The "minikafka" Spark data source: Spark's Kafka source, written with PySpark's Python Data Source API.

Theory of operation
-------------------
``spark.read.format("minikafka")`` and ``spark.readStream.format("minikafka")`` take the
options of Spark's Kafka source (``options.py``) and give rows with its schema::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int [, headers array<struct<key string, value binary>>]

Spark's own connector is a JVM jar (``format("kafka")``); this one is Python that Spark runs
in its Python workers, separate processes that reach the brokers over TCP through the Kafka
protocol. So it reads minikafka's multi-process cluster and a real Kafka alike, and the
query is the same code as with Spark's connector but for the format's name.

This module only wires Spark's entry points to the readers (``reader.py``); option checking
happens here, when Spark first asks for a reader, so a mistake fails the query at once.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from minikafka.spark.options import KafkaSourceOptions
from minikafka.spark.reader import KafkaBatchReader, KafkaMicroBatchStream

NAME = "minikafka"

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
HEADERS = "headers array<struct<key: string, value: binary>>"


class MinikafkaDataSource(DataSource):
    """Registered as ``format("minikafka")`` by ``minikafka.spark.register(spark)``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return SCHEMA + (", " + HEADERS if headers else "")

    def reader(self, schema) -> KafkaBatchReader:
        return KafkaBatchReader(KafkaSourceOptions.parse(self.options, batch=True))

    def streamReader(self, schema) -> KafkaMicroBatchStream:
        return KafkaMicroBatchStream(KafkaSourceOptions.parse(self.options, batch=False))
