"""Who may use the playground: the key, when it is served beyond loopback, and the
visitor a browser is (its own runs, unless runs are shared).

The key is never sent back to a browser. A visitor proves it once (`POST /login`, or an
`Authorization: Bearer` header from a script) and gets a cookie holding an HMAC of the
key, which the server recomputes; the visitor id is a random cookie the server signs
with the same secret, so a visitor cannot take another's id by writing its cookie.
Both cookies are HttpOnly and SameSite=Strict: another site's page cannot send them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

__all__ = ["KEY_COOKIE", "VISITOR_COOKIE", "Access"]

KEY_COOKIE = "harbor_ray_playground_key"
VISITOR_COOKIE = "harbor_ray_playground_visitor"
_BEARER = "bearer "


@dataclass(frozen=True)
class Access:
    """`key`: None on loopback (anyone who can reach the port is this machine's user).
    `secret` signs visitor ids (random per server when not given)."""

    key: str | None
    secret: bytes

    @classmethod
    def create(cls, key: str | None) -> Access:
        return cls(key=key, secret=secrets.token_bytes(32))

    def key_cookie(self) -> str:
        """What the key cookie holds: the key's HMAC, not the key."""
        return self._sign(f"key:{self.key}")

    def admits(self, cookies: dict[str, str], authorization: str | None) -> bool:
        if self.key is None:
            return True
        if authorization and authorization.lower().startswith(_BEARER):
            return hmac.compare_digest(
                authorization[len(_BEARER) :].strip().encode(), self.key.encode()
            )
        return hmac.compare_digest(cookies.get(KEY_COOKIE, "").encode(), self.key_cookie().encode())

    def key_matches(self, offered: str) -> bool:
        return self.key is not None and hmac.compare_digest(offered.encode(), self.key.encode())

    def new_visitor(self) -> tuple[str, str]:
        """(a fresh visitor id, the cookie value that carries it)."""
        visitor = secrets.token_urlsafe(12)
        return visitor, f"{visitor}.{self._sign(f'visitor:{visitor}')}"

    def visitor(self, cookie: str | None) -> str | None:
        """The visitor id a cookie carries, or None when it carries none signed here."""
        visitor, _, signature = (cookie or "").partition(".")
        if visitor and hmac.compare_digest(
            signature.encode(), self._sign(f"visitor:{visitor}").encode()
        ):
            return visitor
        return None

    def _sign(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()
