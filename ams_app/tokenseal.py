"""Users' tokens at rest: sealed (encrypted) in the metadata store, found there by a keyed hash.

Why: a user's token is the whole credential at the front door (``x-api-key``, ``?key=``). Kept in
clear, a copy of the metadata store (a MongoDB dump, a backup of ``metadata.db``) is every user's
credential. A one-way hash is not enough: the API gives tokens back (``GET /v1/users/{name}``,
``ams admin show-token``, AuthN hands a certificate its user's token). So the store keeps each
token encrypted (AES-256-GCM), and beside it a keyed hash of it (HMAC-SHA256), by which a request's
token finds its user. The keys are in a keyring file that only the AMS nodes hold (the
``token_key_file`` setting): a copy of the store without it yields no usable token, and no hash to
guess tokens against offline either, the hash being keyed (docs/production.md, "Tokens at rest").

The keyring: one key per line, ``KEY_ID:BASE64`` of 32 random bytes; ``#`` comments and blank lines
are ignored. The first key is the primary: every token written is sealed under it. The others only
open, and find, what was sealed under them: a key is rotated by adding its successor, re-sealing
(``ams admin reseal-tokens``), then removing it.

From each key, HKDF-SHA256 derives two subkeys under distinct labels, one for AES-256-GCM and one
for HMAC-SHA256: no key material serves two algorithms.

A sealed value says how to open it: ``sealed:v1:KEY_ID:BASE64(nonce || ciphertext and tag)``, with
a random 96-bit nonce, and the purpose and the key id as associated data (a value whose key id was
changed does not open). A stored value without the ``sealed:`` prefix is a token in clear: how the
store kept them before, and keeps them while no keyring is set (the original AMS's layout). Tokens
made by AMS are 64 hex digits, so none begins with the prefix.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

#: What every sealed value begins with; then the format version, the key id and the payload.
PREFIX = "sealed:"
FORMAT = "v1"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
#: A key id: what a sealed value names its key by, so no ``:``; short, as it is in every value.
KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
#: The HKDF labels of the two subkeys, and the purpose bound into every sealed value.
_SEAL_LABEL = b"ams user token v1: aes-256-gcm"
_LOOKUP_LABEL = b"ams user token v1: hmac-sha256 lookup"
_PURPOSE = b"ams user token v1"


class TokenSealError(ValueError):
    """A token keyring that cannot be used, or a stored token that it does not open."""


class KeyringError(TokenSealError):
    """The keyring file is missing, unreadable, readable by others, or malformed."""


class UnsealError(TokenSealError):
    """A sealed token does not open: its key is not in the keyring, the key of that id is not the
    one it was sealed with, or the value was altered."""


def _subkey(secret: bytes, label: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=label).derive(secret)


@dataclass(frozen=True)
class _Key:
    id: str
    seal: AESGCM = field(repr=False)
    lookup: bytes = field(repr=False)

    @classmethod
    def derive(cls, key_id: str, secret: bytes) -> _Key:
        return cls(key_id, AESGCM(_subkey(secret, _SEAL_LABEL)), _subkey(secret, _LOOKUP_LABEL))

    def associated_data(self) -> bytes:
        return _PURPOSE + b":" + self.id.encode()


def is_sealed(stored: str) -> bool:
    return stored.startswith(PREFIX)


def key_id_of(stored: str) -> str | None:
    """The key id a sealed value names (None for a token in clear, or a value of another format)."""
    parts = stored.split(":", 3)
    if len(parts) == 4 and parts[0] + ":" == PREFIX and parts[1] == FORMAT:
        return parts[2]
    return None


class Keyring:
    """The token keys, the primary first; ``source`` names where they came from in messages."""

    def __init__(self, keys: Sequence[tuple[str, bytes]], source: str = "the token keyring") -> None:
        if not keys:
            raise KeyringError(f"{source}: no key (a line KEY_ID:BASE64 of {KEY_BYTES} random bytes)")
        seen: set[str] = set()
        for key_id, secret in keys:
            if not KEY_ID.fullmatch(key_id):
                raise KeyringError(f"{source}: {key_id!r} is not a key id (letters, digits, '.', '_', '-')")
            if key_id in seen:
                raise KeyringError(f"{source}: key id {key_id!r} twice")
            if len(secret) != KEY_BYTES:
                raise KeyringError(f"{source}: key {key_id!r} is {len(secret)} bytes, not {KEY_BYTES}")
            seen.add(key_id)
        self.source = source
        self._keys = [_Key.derive(key_id, secret) for key_id, secret in keys]
        self._by_id = {k.id: k for k in self._keys}

    def __repr__(self) -> str:
        return f"Keyring({self.source!r}, ids={self.key_ids})"

    @classmethod
    def load(cls, path: str) -> Keyring:
        """The keyring of the file ``path``; KeyringError names the file (and line) that is wrong."""
        try:
            mode = os.stat(path).st_mode
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise KeyringError(f"{path}: cannot read the token keyring (token_key_file): {reason}") from None
        if mode & stat.S_IRWXO:
            raise KeyringError(
                f"{path}: the token keyring is open to every user (mode {stat.S_IMODE(mode):04o}): "
                "make it readable by the service only (chmod 0600, or 0640 with the service's group)"
            )
        return cls.parse(text, path)

    @classmethod
    def parse(cls, text: str, source: str) -> Keyring:
        """The keyring of a file's ``text``; errors name ``source`` and the line."""
        keys: list[tuple[str, bytes]] = []
        first_line: dict[str, int] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{source}:{number}"
            key_id, colon, encoded = line.partition(":")
            key_id, encoded = key_id.strip(), encoded.strip()
            if not colon or not KEY_ID.fullmatch(key_id):
                raise KeyringError(
                    f"{where}: not a key line: KEY_ID:BASE64, the id of letters, digits, '.', '_', '-' "
                    "(at most 32), then the base64 of 32 random bytes"
                )
            if key_id in first_line:
                raise KeyringError(f"{where}: key id {key_id!r} again (first on line {first_line[key_id]})")
            try:
                secret = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise KeyringError(f"{where}: the key {key_id!r} is not base64") from None
            if len(secret) != KEY_BYTES:
                raise KeyringError(
                    f"{where}: the key {key_id!r} is {len(secret)} bytes, not {KEY_BYTES} "
                    "(make one with: openssl rand -base64 32)"
                )
            first_line[key_id] = number
            keys.append((key_id, secret))
        if not keys:
            raise KeyringError(f"{source}: no key in the token keyring (a line KEY_ID:BASE64 of 32 random bytes)")
        return cls(keys, source)

    @property
    def primary_id(self) -> str:
        return self._keys[0].id

    @property
    def key_ids(self) -> list[str]:
        return [k.id for k in self._keys]

    def seal(self, token: str) -> str:
        """``token`` encrypted under the primary key, as the store keeps it."""
        key = self._keys[0]
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = key.seal.encrypt(nonce, token.encode(), key.associated_data())
        return f"{PREFIX}{FORMAT}:{key.id}:{base64.b64encode(nonce + sealed).decode()}"

    def open(self, stored: str) -> str:
        """The token a stored value holds: opened when sealed, as it is when in clear."""
        if not is_sealed(stored):
            return stored
        key_id = key_id_of(stored)
        if key_id is None:
            raise UnsealError(f"a stored token of a format this version does not know ({stored[:12]}...)")
        key = self._by_id.get(key_id)
        if key is None:
            raise UnsealError(f"a token is sealed under key {key_id!r}, which {self.source} does not hold")
        try:
            raw = base64.b64decode(stored.split(":", 3)[3], validate=True)
        except (binascii.Error, ValueError):
            raise UnsealError(f"a token sealed under key {key_id!r} is not base64: altered") from None
        if len(raw) < NONCE_BYTES + TAG_BYTES:
            raise UnsealError(f"a token sealed under key {key_id!r} is too short: altered")
        try:
            clear = key.seal.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], key.associated_data())
        except InvalidTag:
            raise UnsealError(
                f"a token sealed under key {key_id!r} does not open with that key of {self.source}: "
                "not the key it was sealed with, or the value was altered"
            ) from None
        return clear.decode()

    def lookup(self, token: str) -> list[str]:
        """The keyed hashes by which the store finds ``token``'s user: one under each key, the
        primary's first (a user sealed under an older key is found until it is re-sealed)."""
        return [hmac.new(k.lookup, token.encode(), hashlib.sha256).hexdigest() for k in self._keys]

    def is_current(self, stored: str) -> bool:
        """Sealed under the primary key: nothing to re-seal."""
        return key_id_of(stored) == self.primary_id

    def holds(self, key_id: str) -> bool:
        return key_id in self._by_id
