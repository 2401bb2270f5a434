"""The reply an agent gets once its session's model-call budget is spent.

docs/lessons.md: an empty or non-SSE stop was retried 281 times in one rollout. So the stop
is a terminal, non-empty assistant message, rendered by the caller's own dialect
(streamed when it streams), and it is never recorded as a model turn.
"""

from __future__ import annotations

from harbor_ray.capture.core.completion import Completion

BUDGET_MESSAGE = (
    "The model-call budget for this session is spent, so no further model calls will be "
    "answered. Stop here and end the task with the work done so far."
)


def budget_stop() -> Completion:
    return Completion(text=BUDGET_MESSAGE, finish_reason="stop")
