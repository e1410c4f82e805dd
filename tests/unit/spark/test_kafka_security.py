"""The jobs' Kafka link: the options its environment gives the driver's client and Spark's Kafka
source (spark/common.py ``KafkaSecurity``)."""

from __future__ import annotations

import pytest

from spark.common import KafkaSecurity

SASL = {
    "AMS_SPARK_KAFKA_PROTOCOL": "SASL_SSL",
    "AMS_SPARK_KAFKA_SASL_USERNAME": "spark",
    "AMS_SPARK_KAFKA_SASL_PASSWORD": 'pa"ss\\word',
    "AMS_SPARK_KAFKA_CA_FILE": "/etc/ams-spark/ca.pem",
}


def test_plaintext_by_default() -> None:
    security = KafkaSecurity.from_env({})
    assert security.librdkafka() == {}
    assert security.spark_options() == {}


def test_sasl_ssl_for_the_driver() -> None:
    assert KafkaSecurity.from_env(SASL).librdkafka() == {
        "security.protocol": "sasl_ssl",
        "ssl.ca.location": "/etc/ams-spark/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "spark",
        "sasl.password": 'pa"ss\\word',
    }


def test_sasl_ssl_for_spark_with_the_password_quoted() -> None:
    assert KafkaSecurity.from_env(SASL).spark_options() == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ams-spark/ca.pem",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="spark" password="pa\\"ss\\\\word";',
    }


@pytest.mark.parametrize(
    "env",
    [
        {"AMS_SPARK_KAFKA_PROTOCOL": "SASL_PLAINTEXT"},
        {"AMS_SPARK_KAFKA_PROTOCOL": "SASL_SSL", "AMS_SPARK_KAFKA_SASL_USERNAME": "spark"},
    ],
)
def test_settings_that_cannot_work_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="AMS_SPARK_KAFKA_"):
        KafkaSecurity.from_env(env)
