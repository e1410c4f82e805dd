"""MessageLog on Apache Kafka (confluent-kafka)."""
