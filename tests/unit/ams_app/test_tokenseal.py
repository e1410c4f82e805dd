"""Users' tokens sealed at rest (ams_app/tokenseal.py): what a keyring seals it opens, and nothing
else does; the lookup hashes are keyed and stable; a keyring file that cannot be used says where."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest

from ams_app.tokenseal import Keyring, KeyringError, UnsealError, is_sealed, key_id_of

TOKEN = "5f0c2a" * 10 + "beef"  # the shape of an AMS token: 64 hex digits


def key() -> bytes:
    return os.urandom(32)


def line(key_id: str, secret: bytes) -> str:
    return f"{key_id}:{base64.b64encode(secret).decode()}"


def test_a_sealed_token_opens_and_says_its_key_but_not_the_token() -> None:
    ring = Keyring([("k1", key())])
    sealed = ring.seal(TOKEN)
    assert sealed.startswith("sealed:v1:k1:")
    assert (is_sealed(sealed), key_id_of(sealed), ring.is_current(sealed)) == (True, "k1", True)
    assert TOKEN not in sealed
    assert TOKEN[:8] not in sealed
    assert ring.open(sealed) == TOKEN
    assert ring.seal(TOKEN) != sealed  # a fresh nonce each time


def test_a_token_in_clear_is_given_back_as_it_is() -> None:
    ring = Keyring([("k1", key())])
    assert ring.open(TOKEN) == TOKEN
    assert (is_sealed(TOKEN), key_id_of(TOKEN), ring.is_current(TOKEN)) == (False, None, False)


@pytest.mark.parametrize("where", [-1, -20, 20])
def test_an_altered_sealed_token_is_refused(where: int) -> None:
    ring = Keyring([("k1", key())])
    sealed = ring.seal(TOKEN)
    prefix, payload = sealed.rsplit(":", 1)
    raw = bytearray(base64.b64decode(payload))
    raw[where] ^= 1
    with pytest.raises(UnsealError, match="'k1'"):
        ring.open(f"{prefix}:{base64.b64encode(bytes(raw)).decode()}")


def test_a_token_moved_to_another_key_id_or_cut_short_is_refused() -> None:
    secret = key()
    ring = Keyring([("k1", secret), ("k2", secret)])  # the same bytes under two ids: bound to the id anyway
    sealed = ring.seal(TOKEN)
    with pytest.raises(UnsealError, match="does not open"):
        ring.open(sealed.replace(":k1:", ":k2:"))
    with pytest.raises(UnsealError, match="too short"):
        ring.open("sealed:v1:k1:" + base64.b64encode(b"x" * 27).decode())
    with pytest.raises(UnsealError, match="not base64"):
        ring.open("sealed:v1:k1:***")
    with pytest.raises(UnsealError, match="format"):
        ring.open("sealed:v9:k1:AAAA")


def test_a_token_under_a_key_the_ring_lacks_or_under_other_bytes_does_not_open() -> None:
    sealed = Keyring([("k1", key())]).seal(TOKEN)
    with pytest.raises(UnsealError, match=r"key 'k1', which .* does not hold"):
        Keyring([("k2", key())]).open(sealed)
    with pytest.raises(UnsealError, match="not the key it was sealed with"):
        Keyring([("k1", key())]).open(sealed)


def test_a_key_after_the_first_opens_and_the_first_seals() -> None:
    old, new = key(), key()
    sealed_old = Keyring([("old", old)]).seal(TOKEN)
    rotated = Keyring([("new", new), ("old", old)])
    assert rotated.open(sealed_old) == TOKEN
    assert not rotated.is_current(sealed_old)
    resealed = rotated.seal(TOKEN)
    assert key_id_of(resealed) == "new"
    assert rotated.is_current(resealed)
    assert Keyring([("new", new)]).open(resealed) == TOKEN


def test_lookup_hashes_are_stable_per_key_and_differ_between_keys_and_tokens() -> None:
    first, second = key(), key()
    ring = Keyring([("a", first), ("b", second)])
    hashes = ring.lookup(TOKEN)
    assert len(hashes) == 2
    assert hashes[0] != hashes[1]
    assert hashes == Keyring([("a", first), ("b", second)]).lookup(TOKEN)  # stable: it is an index
    assert Keyring([("b", second), ("a", first)]).lookup(TOKEN) == hashes[::-1]  # the primary's first
    assert ring.lookup(TOKEN + "0") != hashes
    assert TOKEN not in "".join(hashes)


def test_the_sealing_and_lookup_keys_are_not_the_key_itself() -> None:
    """Each is derived with its own label: neither the raw key nor one subkey for both jobs."""
    import hashlib
    import hmac

    secret = key()
    ring = Keyring([("k1", secret)])
    assert ring.lookup(TOKEN)[0] != hmac.new(secret, TOKEN.encode(), hashlib.sha256).hexdigest()
    assert "secret" not in repr(ring)
    assert base64.b64encode(secret).decode() not in repr(ring)


def test_a_keyring_file_is_read_with_comments_and_blank_lines(tmp_path: Path) -> None:
    first, second = key(), key()
    path = tmp_path / "token-keys"
    path.write_text(f"# AMS token keys\n\n{line('2026-01', first)}\n  {line('2025.old', second)}  \n")
    path.chmod(0o640)
    ring = Keyring.load(str(path))
    assert ring.key_ids == ["2026-01", "2025.old"]
    assert ring.primary_id == "2026-01"
    assert Keyring([("2026-01", first)]).open(ring.seal(TOKEN)) == TOKEN


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("k1:{good}\nk1 {good}\n", r":2: not a key line"),
        ("ams/k1:{good}\n", r":1: not a key line"),
        (":{good}\n", r":1: not a key line"),
        ("k1:not base64!\n", r":1: the key 'k1' is not base64"),
        ("k1:" + base64.b64encode(b"x" * 16).decode() + "\n", r":1: the key 'k1' is 16 bytes, not 32"),
        ("# old\nk1:{good}\n\nk1:{good}\n", r":4: key id 'k1' again \(first on line 2\)"),
        ("# nothing here\n\n", r": no key in the token keyring"),
    ],
    ids=["no-colon", "bad-id", "empty-id", "bad-base64", "short-key", "duplicate-id", "empty"],
)
def test_a_malformed_keyring_file_says_which_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "token-keys"
    path.write_text(text.replace("{good}", base64.b64encode(key()).decode()))
    path.chmod(0o600)
    with pytest.raises(KeyringError, match="^" + re.escape(str(path)) + message) as refused:
        Keyring.load(str(path))
    assert "Traceback" not in str(refused.value)


def test_a_keyring_file_others_may_read_or_none_at_all_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token-keys"
    path.write_text(line("k1", key()) + "\n")
    path.chmod(0o644)
    with pytest.raises(KeyringError, match=r"open to every user \(mode 0644\).*chmod 0600"):
        Keyring.load(str(path))
    with pytest.raises(KeyringError, match=r"missing: cannot read the token keyring \(token_key_file\)"):
        Keyring.load(str(tmp_path / "missing"))
