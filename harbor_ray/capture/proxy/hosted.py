"""The upstream a run forwards model calls to, built for its profile (upstream_profile.py),
and the one place an engine is made from a URL, a profile and a credential.

`openai-chat` (and `hf`, the same API at a Hugging Face router) is an `HttpEngine`:
nothing changes on the hot path of a vLLM engine. A hosted API in another format is a
`HostedUpstream`: an `Engine` that takes the proxy's chat bodies (certification's
probes, calls converted from another dialect) and writes them in its upstream's format
(native_request.py), and reads the replies back as chat completions (native_reply.py);
a call in the upstream's own dialect is `prepare`d as it came.

The credential is read once, here, from a file or a value, and lives only in the
client's headers: it is never logged, never in an error message, never handed to the
agent (which keeps its session key) and never recorded. A sweep carries it to every
proxy (the rollout hosts with host ingress, the replicas otherwise) as an `UpstreamKey`
in Ray's actor and task arguments: never in an environment variable, which a sandbox
or an agent could inherit, nor in any file the run writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harbor_ray.capture.core.dialects.base import DialectName, EngineCall
from harbor_ray.capture.core.native_reply import as_chat_completion, listed_models
from harbor_ray.capture.core.native_request import NativeRequest, converted, passthrough
from harbor_ray.capture.core.upstream_profile import PROFILES, UpstreamName, UpstreamProfile
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S, HttpEngine
from harbor_ray.errors import AgentRequestError, EngineError, EngineReplyError, StartError

__all__ = ["HostedUpstream", "UpstreamKey", "build_upstream", "read_key", "upstream_key"]


@dataclass(frozen=True)
class UpstreamKey:
    """An upstream credential on its way to a proxy in another process. Its repr hides
    the value, so an argument Ray or Serve logs, or an error that shows a target, shows
    no key."""

    value: str = field(repr=False)


def upstream_key(path: Path | None) -> UpstreamKey | None:
    """`read_key`'s credential, for sending to the proxies."""
    key = read_key(path)
    return None if key is None else UpstreamKey(key)


def read_key(path: Path | None) -> str | None:
    """The upstream credential in `path` (its first line, stripped), or None."""
    if path is None:
        return None
    try:
        key = path.read_text().strip().splitlines()
    except OSError as exc:
        raise StartError(f"cannot read --upstream-key-file {path}: {exc.strerror}") from exc
    if not key or not key[0].strip():
        raise StartError(f"--upstream-key-file {path} is empty")
    return key[0].strip()


def build_upstream(
    profile: UpstreamName,
    url: str | None,
    *,
    key: str | UpstreamKey | None = None,
    timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S,
) -> HttpEngine | HostedUpstream:
    """The upstream for `profile` at `url` (None: the profile's own address), sending
    `key` as the profile says. Close it with `aclose`."""
    if isinstance(key, UpstreamKey):
        key = key.value
    chosen = PROFILES[profile]
    where = url or chosen.default_url
    if where is None:
        raise StartError(f"--upstream {profile} needs --llm-url (it has no default address)")
    http = HttpEngine(where, timeout_s=timeout_s, headers=chosen.headers(key) or None)
    return HostedUpstream(http, chosen) if chosen.native else http


class HostedUpstream:
    """A hosted API behind the proxy's `Engine` seam, in its own wire format."""

    def __init__(self, http: HttpEngine, profile: UpstreamProfile) -> None:
        self.http, self.profile = http, profile
        self.root = http.root

    @property
    def dialect(self) -> DialectName:
        return self.profile.dialect

    def prepare(
        self, dialect: DialectName, body: dict[str, Any], call: EngineCall, payload: dict[str, Any]
    ) -> NativeRequest:
        """The request for one agent call: its own `body` when the upstream speaks its
        `dialect`, else the chat `payload` (made of `call`) converted. AgentRequestError
        (a 400 in the agent's dialect) for what the conversion cannot carry, including
        what the dialect's translation left out (an engine records those and goes on)."""
        if dialect == self.profile.dialect:
            return passthrough(dialect, body, payload)
        if call.not_forwarded:
            raise AgentRequestError(
                f"{', '.join(call.not_forwarded)} cannot be sent to the {self.profile.name} "
                f"upstream: the conversion from the {dialect} format has no place for it"
            )
        return converted(self.profile.dialect, payload)

    async def send(self, native: NativeRequest) -> dict[str, Any]:
        """The upstream's reply to `native`, as a chat completion."""
        reply = await self._call("POST", native.path, native.body)
        try:
            return as_chat_completion(self.profile.dialect, reply, self.profile.name)
        except EngineReplyError as exc:
            raise EngineError(str(exc), status=502) from exc

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        session: str | None = None,  # a hosted API places calls itself: not sent
    ) -> dict[str, Any]:
        if method == "GET" and path == "/v1/models":
            return listed_models(self.profile.dialect, await self._call("GET", path))
        if method == "POST" and path == "/v1/chat/completions" and body is not None:
            try:
                native = converted(self.profile.dialect, body)
            except AgentRequestError as exc:
                # What a hosted API answers a field it does not know: certification then
                # asks again without it.
                raise EngineError(exc.message, status=400) from exc
            return await self.send(native)
        # No /tokenize, /version or ids: the callers fall back (an estimated count).
        raise EngineError(f"the {self.profile.name} upstream has no {path}", status=404)

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The upstream's answer; its failures name the profile (a wrong `--upstream` is
        the likeliest cause of an API that answers in another shape, or not at all)."""
        try:
            return await self.http.request(method, path, body)
        except EngineError as exc:
            raise EngineError(
                f"the {self.profile.name} upstream ({method} {path}): {exc.message}",
                status=exc.status,
                retry_after_s=exc.retry_after_s,
            ) from exc

    async def aclose(self) -> None:
        await self.http.aclose()
