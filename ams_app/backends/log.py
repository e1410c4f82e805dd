"""MessageLog: per-topic append-only logs addressed by offset."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class NewMessage:
    data: str  # base64 text as the client sent it
    attributes: dict[str, str]
    ordering_key: str = ""
    #: ``data`` was checked to be base64 (the API's publish does), so its JSON string needs no
    #: escaping: the Kafka record is built without a scan of the data (docs/benchmarks.md)
    base64_checked: bool = False


@dataclass
class StoredMessage:
    offset: int
    publish_ns: int
    data: str
    attributes: dict[str, str]
    ordering_key: str = ""


class MessageLog(Protocol):
    def ping(self) -> None: ...
    def close(self) -> None: ...

    def create_topic(self, key: str, retention_seconds: int = 0) -> None:
        """Make the topic (or keep it, when it exists); keep its messages ``retention_seconds``
        after their publication (0: the log's retention)."""
        ...

    def delete_topic(self, key: str) -> None:
        """Remove the messages; offsets of a topic re-created under the same key continue."""
        ...

    def drop_topic(self, key: str) -> None:
        """Remove the messages and the offset counter (the topic's project is gone)."""
        ...

    def append(self, key: str, messages: list[NewMessage]) -> list[StoredMessage]:
        """Append atomically and durably; return what was stored, with offsets and times."""
        ...

    def read(self, key: str, start: int, end: int, max_bytes: int) -> list[StoredMessage]:
        """Messages with start <= offset < end, stopping past max_bytes (at least one)."""
        ...

    def peek(self, key: str, offset: int) -> StoredMessage | None:
        """The first retained message at or after ``offset`` (None: there is none), read aside:
        what a monitoring scrape reads, without moving anything the hot path keeps in place."""
        ...

    def bounds(self, key: str) -> tuple[int, int]:
        """(min, max): the oldest retained offset and the next offset to be written."""
        ...

    def known_bounds(self, key: str) -> tuple[int, int] | None:
        """(min, end) known here without asking the backend, or None: ``min`` as ``bounds`` last
        said, ``end`` an offset up to which messages are known to exist (at most the true end).
        A lease that fits below ``end`` can be made without asking; anything else asks ``bounds``."""
        ...

    def offset_for_time(self, key: str, publish_ns: int) -> int | None:
        """The first offset published at or after ``publish_ns``; None if there is none."""
        ...

    def marker(self, key: str) -> int:
        """A value that changes whenever this process appends to the topic."""
        ...

    def wait_for_append(self, key: str, marker: int, timeout: float) -> None:
        """Return when the topic may have grown since ``marker`` was read, or after ``timeout`` s."""
        ...

    def wake(self, key: str) -> None:
        """Wake the pulls of this process waiting on the topic as an append would: something
        else made messages deliverable (an acknowledgement freed an ordering key, a nack gave
        messages back)."""
        ...
