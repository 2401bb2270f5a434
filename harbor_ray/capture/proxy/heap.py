"""Keeping the garbage collector's full passes short in a process that serves the proxy.

A full collection walks every container object alive, and every model call in flight
in the process waits it out. What a serving process imports (Ray, pydantic, Starlette,
Harbor) never becomes garbage: frozen once startup is over, it is never walked again
(the cost it saved: docs/performance.md, "The capture proxy").
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Exempt everything alive now from future collections.

    Call it once startup is over and before traffic: garbage in a cycle that is alive at
    this moment would never be collected, so it collects first.
    """
    gc.collect()
    gc.freeze()
