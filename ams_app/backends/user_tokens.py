"""How both metadata stores keep a user's token (ams_app/tokenseal.py says why).

With a keyring (the ``token_key_file`` setting), the token column or field holds the token sealed
under the primary key, and ``token_hash`` beside it the keyed hash the store finds it by. Without
one, the token is kept in clear and found by itself, as before (and as the original AMS keeps it),
and there is no ``token_hash``. Either way the stores hand out users with their token in clear: the
service and the API never see a sealed value.

When a store opens, it looks at every user's stored token:

- in clear, with a keyring: sealed now (the first start with a keyring; idempotent);
- sealed under a key of the ring other than the primary: left as it is. Every node still holds that
  key (a rotation adds the new key first and keeps the old one), and a node not restarted yet may
  not hold the new one: re-sealing is ``ams admin reseal-tokens``, once every node has the new
  keyring (docs/production.md, "Tokens at rest");
- sealed under a key id the ring does not hold, or under a key of that id that does not open it,
  or sealed at all while no keyring is set: the store refuses to open, saying so. Those users'
  tokens would not be readable, nor findable; a node that started anyway would refuse them.

A keyring lookup never accepts a token in clear: once a node has a keyring, every stored token is
sealed (above), and a user written in clear afterwards (by a node started without the keyring)
is not found until it is sealed too, at the next start or by ``ams admin reseal-tokens``. So the
store is no place to write a working credential into without the key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from ams_app.tokenseal import Keyring, TokenSealError, UnsealError, is_sealed, key_id_of

K = TypeVar("K")


@dataclass(frozen=True)
class StoredToken:
    """What a store writes for a token: the ``token`` value and its ``token_hash`` (None in clear)."""

    value: str
    hash: str | None


class UserTokens:
    """A store's way with tokens: sealed under ``keyring``, or in clear when it is None."""

    def __init__(self, keyring: Keyring | None) -> None:
        self.keyring = keyring

    def stored(self, token: str) -> StoredToken:
        if self.keyring is None:
            return StoredToken(token, None)
        return StoredToken(self.keyring.seal(token), self.keyring.lookup(token)[0])

    def clear(self, stored: str) -> str:
        """The token of a stored value."""
        if self.keyring is None:
            if is_sealed(stored):
                raise UnsealError("a user's token is sealed, and token_key_file is not set")
            return stored
        return self.keyring.open(stored)

    def hashes(self, token: str) -> list[str] | None:
        """The ``token_hash`` values to find ``token``'s user by; None: find it by ``token`` itself."""
        return None if self.keyring is None else self.keyring.lookup(token)

    def plan(self, rows: Iterable[tuple[K, str]], rotate: bool) -> list[tuple[K, str, StoredToken]]:
        """(row, stored value, what to store instead) of the users among ``rows`` (row, stored
        value) to seal: those in clear, and with ``rotate`` those sealed under an older key.
        Raises TokenSealError, before anything is written, when a token could not be read (the
        module's docstring)."""
        rows = list(rows)
        keyring = self.keyring
        if keyring is None:
            sealed = sum(1 for _, stored in rows if is_sealed(stored))
            if sealed:
                raise TokenSealError(
                    f"the metadata store holds the sealed tokens of {sealed} user(s), and token_key_file is "
                    "not set: give every AMS process the keyring they were sealed with (docs/production.md, "
                    "'Tokens at rest')"
                )
            return []
        unknown: dict[str, int] = {}
        checked: set[str] = set()
        changes: list[tuple[K, str, StoredToken]] = []
        for row, stored in rows:
            if not is_sealed(stored):
                changes.append((row, stored, self.stored(stored)))
                continue
            key_id = key_id_of(stored) or "?"
            if not keyring.holds(key_id):
                unknown[key_id] = unknown.get(key_id, 0) + 1
                continue
            if key_id not in checked:  # one value per key id: is it that key?
                keyring.open(stored)
                checked.add(key_id)
            if rotate and not keyring.is_current(stored):
                changes.append((row, stored, self.stored(keyring.open(stored))))
        if unknown:
            which = ", ".join(f"{key_id!r} ({n} user(s))" for key_id, n in sorted(unknown.items()))
            raise TokenSealError(
                f"tokens in the metadata store are sealed under key id(s) {which} that {keyring.source} does "
                "not hold: put the key back as a later line, run `ams admin reseal-tokens`, and only then "
                "remove it (docs/production.md, 'Tokens at rest')"
            )
        return changes
