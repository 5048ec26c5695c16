"""minikafka on Spark: a ``format("minikafka")`` source with the options and schema of Spark's Kafka source.

    from minikafka import spark as mkspark
    spark = mkspark.session()            # a small local session; registers the source
    df = (spark.readStream.format("minikafka")
          .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
          .option("subscribe", "trucks_gps").load())

Needs the ``spark`` extra (pyspark, pandas, pyarrow) and Java 17 or 21.
"""

from __future__ import annotations

from minikafka.spark.session import register, session

__all__ = ["register", "session"]
