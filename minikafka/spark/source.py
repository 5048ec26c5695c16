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

What differs from Spark's Kafka source (``format("kafka")``):

- It reads in Spark's Python workers: Fetch requests on kafka-python's connections, the
  record batches decoded straight into Arrow columns (``arrow_records.py``), a fraction of
  the rate Spark reads a text file here (``make bench`` measures it). Tasks are planned
  as Spark's: one per topic-partition, cut by ``minPartitions`` and ``maxRecordsPerPartition``
  (``offset_range_calculator``), but without preferred executors (Spark's source asks for
  the same executor for a partition each batch, to reuse its cached consumer).
- Options it does not implement are refused, never ignored: ``startingTimestamp``,
  ``startingOffsetsByTimestamp``, ``endingTimestamp``, ``endingOffsetsByTimestamp``,
  ``minOffsetsPerTrigger``, ``maxTriggerDelay``, ``groupIdPrefix``, ``fetchOffset.*``. ``kafka.*`` settings are kafka-python's (a setting
  kafka-python lacks is an error).
- ``maxOffsetsPerTrigger`` is shared out exactly: a batch never exceeds it (Spark's
  rounding may exceed it by a few records).
- ``subscribe`` or ``assign`` naming a topic that does not exist fails the query at once
  (with Spark the query would wait, or the broker create the topic); a
  ``subscribePattern`` that matches nothing waits, as with Spark.
- Offsets with no record are skipped without a data-loss report in a compacted topic (the
  planner asks each topic's ``cleanup.policy``); in any other topic they fail the query,
  naming the broker, the partition and the offsets (``failOnDataLoss=false`` reads on).
- No ``latestOffset`` metrics in ``query.lastProgress`` (``avgOffsetsBehindLatest``, ...).
- No Kafka sink (``writeStream.format("kafka")``): write from ``foreachBatch``, e.g. with
  ``minikafka.spark.sink.KafkaBatchSink`` or
  ``minikafka.spark.transactional_sink.KafkaTransactionalSink``, which are exactly-once where
  Spark's Kafka sink is at-least-once.

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
