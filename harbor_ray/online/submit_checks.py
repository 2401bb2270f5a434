"""What a submit names, checked against what the controller serves: its dataset (only a
configured one is read), its tasks, agents and sandbox backend, and the replacements of
its groups without signal. Every refusal is a `FieldError` naming the field, and quotes
the caller's value cut short (`shown`)."""

from __future__ import annotations

from functools import lru_cache

from harbor_ray.errors import DatasetError, FieldError, UnknownAgentError
from harbor_ray.online.controller_config import ControllerConfig
from harbor_ray.online.no_signal import Refill
from harbor_ray.online.wire import SubmitRequest
from harbor_ray.trials.backends import backend_names
from harbor_ray.trials.datasets import TaskRef, resolve_dataset

__all__ = ["TASK_LISTS_CACHED", "Served", "shown"]

# Task lists kept resolved: only configured datasets are ever listed, so this bounds
# nothing a caller can grow; it bounds a config that names very many.
TASK_LISTS_CACHED = 64
_SHOWN_CHARS = 120  # of a refused value, in the refusal


def shown(value: str) -> str:
    """`value` quoted for a refusal, cut short: a caller's 5,000 characters are not
    echoed back whole."""
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"


@lru_cache(maxsize=TASK_LISTS_CACHED)
def _tasks(dataset: str) -> dict[str, TaskRef]:
    try:
        report = resolve_dataset(dataset)
    except (DatasetError, OSError, RuntimeError) as exc:
        # A configured spec: naming it, and why it does not resolve, tells nothing new.
        raise FieldError(
            f"{shown(dataset)} cannot be read: {shown(str(exc))}", status=404, field="dataset"
        ) from exc
    return {t.name: t for t in report.tasks}


class Served:
    """What a controller serves, from its config: the datasets, agents and defaults a
    submit is checked against (the allow-list made once, its import paths checked at
    the controller's start)."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self._datasets = frozenset((config.dataset, *config.datasets))
        self._agents = config.allowed_agents()

    def tasks(self, dataset: str | None) -> dict[str, TaskRef]:
        """The tasks of a configured dataset (None: the default). Any other spec is
        refused before it is read, in words that tell nothing about it (whether it
        exists, what it holds): the caller learns only that it is not configured."""
        spec = self.config.dataset if dataset is None else dataset
        if spec not in self._datasets:
            raise FieldError(
                f"{shown(spec)} is not a dataset this "
                "controller serves: name its default, or add the spec to "
                "the controller's `datasets:`",
                status=404,
                field="dataset",
            )
        return _tasks(spec)

    def check(self, request: SubmitRequest) -> tuple[dict[str, TaskRef], str]:
        """The tasks of `request`'s dataset and its sandbox backend, once every task,
        agent and the backend it names is one this controller serves."""
        tasks = self.tasks(request.dataset)
        for i, asked in enumerate(request.tasks):
            if asked.task not in tasks:
                raise FieldError(
                    f"no task {shown(asked.task)} in the dataset",
                    status=404,
                    field=f"tasks[{i}].task",
                )
        for where, agent in (
            ("agent", request.agent),
            *(
                (f"tasks[{i}].agent", asked.agent)
                for i, asked in enumerate(request.tasks)
                if asked.agent is not None
            ),
        ):
            try:
                self._agents.check(agent, shown(agent))
            except UnknownAgentError as exc:
                raise FieldError(str(exc), status=404, field=where) from exc
        sandbox = self.config.sandbox if request.sandbox is None else request.sandbox
        if sandbox not in backend_names():
            raise FieldError(f"no sandbox backend {shown(sandbox)}", status=404, field="sandbox")
        return tasks, sandbox

    def refill(
        self, request: SubmitRequest, tasks: dict[str, TaskRef], sandbox: str
    ) -> Refill | None:
        """The request's replacements when it drops groups without signal (explicitly,
        or by the controller's default for its groups of 2 or more); None otherwise."""
        drop = request.drop_no_signal
        if drop:
            ones = [i for i, t in enumerate(request.tasks) if t.n < 2]
            if ones:
                raise FieldError(
                    "drop_no_signal judges a group by its rewards' spread, "
                    "which a group of 1 has none of: ask n of 2 or more, or "
                    "leave drop_no_signal out",
                    status=400,
                    field=f"tasks[{ones[0]}].n",
                )
        if not (self.config.drop_no_signal if drop is None else drop):
            return None
        judged = tuple(t.task for t in request.tasks if t.n >= 2)
        if not judged:
            return None
        for i, task in enumerate(request.replacement_tasks or ()):
            if task not in tasks:
                raise FieldError(
                    f"no task {shown(task)} in the dataset",
                    status=404,
                    field=f"replacement_tasks[{i}]",
                )
        bound = next(
            b
            for b in (request.max_extra_groups, self.config.max_extra_groups, len(request.tasks))
            if b is not None
        )
        return Refill(
            tasks=tuple(request.replacement_tasks or judged),
            max_extra=bound,
            origin=(request, tasks, sandbox),
        )
