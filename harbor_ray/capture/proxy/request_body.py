"""Reading a request's body within the app's size limit: as bytes, or as a JSON object.

A body past the limit is refused (413) before more of it is read; a client that leaves
mid-body raises `_ClientGone`, since nobody is left to answer.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request

from harbor_ray.capture.proxy.refusals import _ClientGone, _HttpError


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused (413) past `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _HttpError(f"request body exceeds {limit} bytes", status=413, kind="too_large")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _HttpError(
                    f"request body exceeds {limit} bytes", status=413, kind="too_large"
                )
            chunks.append(chunk)
    except ClientDisconnect as exc:
        # Clients leave mid-body routinely (a cancelled call); nobody is left to answer.
        raise _ClientGone from exc
    return b"".join(chunks)


async def read_json_object(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object, sent as application/json (415 / 400 otherwise)."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise _HttpError(
            "content-type must be application/json", status=415, kind="invalid_request"
        )
    raw = await read_body(request, limit)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _HttpError(
            f"request body is not valid JSON: {exc}", status=400, kind="invalid_request"
        ) from exc
    if not isinstance(body, dict):
        raise _HttpError("request body must be a JSON object", status=400, kind="invalid_request")
    return body
