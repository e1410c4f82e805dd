"""PySpark jobs over the service's message logs (Kafka) and metadata (MongoDB). See docs/spark.md."""
