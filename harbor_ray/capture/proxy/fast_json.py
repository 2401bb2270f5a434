"""A Starlette JSON response rendered with orjson.

Replies on the hot path carry long arrays (token ids, logprobs); the stdlib encoder
was a measurable share of the proxy's CPU per call.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse as _StarletteJSONResponse


class JSONResponse(_StarletteJSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
