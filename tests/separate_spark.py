"""A Structured Streaming query in a Spark of its own (a plain ``pyspark`` local session, not
RayDP), whose driver publishes into a named cluster on an existing Ray by its address, for
tests/test_streaming.py:

    python -m tests.separate_spark ADDRESS NAMESPACE CLUSTER SINK LANDING CHECKPOINT [HANG_AT]

The query reads the Parquet files landing in ``LANDING`` (one file per micro-batch, the
schema of its first file) and publishes each micro-batch through ``ClusterSink``. Each
micro-batch's result is printed as one JSON line as it is applied. With ``HANG_AT``, the
driver stops answering right after the cluster applied that micro-batch, before Spark
commits it (it prints ``{"hang": HANG_AT}`` and sleeps): the test kills it there. Without,
the query processes every file there is, stops, and the driver prints ``{"done": true}``.
"""
from __future__ import annotations

import json
import os
import sys
import time

from rankcast.ingest.session import configure_java, java_options
from rankcast.ingest.streaming import ClusterSink


def spark_session():
    """A local Spark of one core in this process, listening on loopback only."""
    configure_java()
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[1]").appName("rankcast-separate-spark")
            .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
            .config("spark.driver.extraJavaOptions", java_options())
            .getOrCreate())


class Reporting(ClusterSink):
    """The sink, printing each micro-batch's result; it hangs after applying ``hang_at``."""

    def __init__(self, *a, hang_at: int | None = None, **kw):
        super().__init__(*a, **kw)
        self.hang_at = hang_at

    def __call__(self, df, batch_id):
        out = super().__call__(df, batch_id)
        print(json.dumps({"batch_id": out.batch_id, "applied": out.applied, "items": out.items}), flush=True)
        if batch_id == self.hang_at:
            print(json.dumps({"hang": batch_id}), flush=True)
            while True:             # killed here, before Spark commits the micro-batch
                time.sleep(60)
        return out


def main(argv: list[str]) -> int:
    address, namespace, cluster, sink, landing, checkpoint = argv[:6]
    hang_at = int(argv[6]) if len(argv) > 6 else None
    spark = spark_session()
    first = sorted(p for p in os.listdir(landing) if p.endswith(".parquet"))[0]
    schema = spark.read.parquet(f"{landing}/{first}").schema
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(landing)
    q = (stream.writeStream
         .foreachBatch(Reporting(cluster, sink=sink, address=address, namespace=namespace, hang_at=hang_at))
         .option("checkpointLocation", checkpoint).start())
    q.processAllAvailable()
    q.stop()
    print(json.dumps({"done": True}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
