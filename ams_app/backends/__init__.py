"""The two seams between the service layer and storage: a metadata store and a message log."""

from __future__ import annotations

from ams_app.backends.log import MessageLog
from ams_app.backends.store import MetadataStore
from ams_app.settings import Settings
from ams_app.tokenseal import Keyring


def token_keyring(settings: Settings) -> Keyring | None:
    """The keyring that seals users' tokens in the store (``token_key_file``); None: in clear.
    KeyringError names the file and line when it cannot be used."""
    return Keyring.load(settings.token_key_file) if settings.token_key_file else None


def open_backends(settings: Settings) -> tuple[MetadataStore, MessageLog]:
    """Open the backend pair the settings name."""
    keyring = token_keyring(settings)
    if settings.backend == "embedded":
        from ams_app.backends.sqlite import open_embedded

        return open_embedded(settings, keyring)
    if settings.backend == "kafka":
        from ams_app.backends.kafka.connect import client_security, discover_brokers
        from ams_app.backends.kafka.log import KafkaMessageLog
        from ams_app.backends.mongo.store import MongoMetadataStore

        timeout = settings.kafka_timeout_seconds
        bootstrap = settings.kafka_bootstrap_servers or discover_brokers(settings)
        store = MongoMetadataStore(settings.mongo_uri, settings.mongo_database, timeout, keyring)
        log = KafkaMessageLog(
            bootstrap,
            replication_factor=settings.kafka_replication_factor,
            retention_seconds=settings.log_retention_seconds,
            max_message_bytes=settings.max_message_bytes,
            timeout_seconds=timeout,
            security=client_security(settings),
        )
        return store, log
    raise ValueError(f"unknown backend {settings.backend!r}")


def open_metadata_store(settings: Settings) -> MetadataStore:
    """Only the metadata store of the settings' backend (``ams authn`` needs no message log)."""
    keyring = token_keyring(settings)
    if settings.backend == "embedded":
        import os

        from ams_app.backends.sqlite.store import SqliteMetadataStore

        os.makedirs(settings.data_dir, mode=0o700, exist_ok=True)
        return SqliteMetadataStore(os.path.join(settings.data_dir, "metadata.db"), keyring)
    if settings.backend == "kafka":
        from ams_app.backends.mongo.store import MongoMetadataStore

        return MongoMetadataStore(settings.mongo_uri, settings.mongo_database, settings.kafka_timeout_seconds, keyring)
    raise ValueError(f"unknown backend {settings.backend!r}")
