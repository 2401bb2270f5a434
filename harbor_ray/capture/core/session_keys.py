"""Session keys: minted unguessable, read from wherever each SDK puts its API key.

The key names its session (`hr-<session id>-<secret>`) so that any proxy replica can
find the session's owner without shared state; the secret carries 192 random bits and
is checked by the owner, which stores only its hash.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

_PREFIX = "hr-"


def new_session_id(owner: str | None = None) -> str:
    """A fresh id; `<owner>.<random>` when an owner (letters and digits) mints it."""
    assert owner is None or owner.isalnum(), f"owner must be letters and digits, not {owner!r}"
    random = secrets.token_hex(8)
    return random if owner is None else f"{owner}.{random}"


def owner_of(session_id: str) -> str | None:
    """The owner named in a session id, or None for an id minted without one."""
    owner, sep, _ = session_id.partition(".")
    return owner if sep and owner else None


def mint_key(session_id: str) -> str:
    return f"{_PREFIX}{session_id}-{secrets.token_urlsafe(24)}"


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def digest_matches(key: str, digest: bytes) -> bool:
    return hmac.compare_digest(key_digest(key), digest)


def session_of(key: str) -> str | None:
    """The session id a key names, or None when it is not one of ours."""
    if not key.startswith(_PREFIX):
        return None
    session_id, sep, secret = key[len(_PREFIX) :].partition("-")
    return session_id if sep and session_id and secret else None


def extract_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The API key as OpenAI, Anthropic and Google clients send it (headers lower-case).
    A header sent twice counts as not sent (the controller refuses two Authorization
    headers alike), whichever of the two a server or a proxy in between would keep."""
    auth = _once(headers, "authorization")
    # An empty `Bearer ` (an SDK with no OpenAI key set) must not hide a key sent the
    # other ways.
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    for name in ("x-api-key", "x-goog-api-key"):
        if given := _once(headers, name).strip():
            return given
    return query.get("key") or None


def _once(headers: Mapping[str, str], name: str) -> str:
    """The header's value; "" if it is absent or sent more than once (`headers` with a
    `getlist`, as Starlette's, tells; a plain mapping holds one value a name)."""
    getlist = getattr(headers, "getlist", None)
    values = getlist(name) if getlist is not None else [headers.get(name, "")]
    return values[0] if len(values) == 1 else ""
