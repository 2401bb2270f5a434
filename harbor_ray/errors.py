"""Every exception harbor_ray raises on purpose, in one tree named by the boundary that
failed. A class keeps the stdlib base it had (in parentheses), since callers catch it by
that base: an owner's `SessionGone` reaches a replica through Ray and is caught there as a
`LookupError`, and an `ExecTimeoutError` is the `RuntimeError` Harbor's own Docker
environment raises. The few private classes are signals that never leave their module;
they are defined there and drawn here.

HarborRayError                           harbor_ray refused or failed something
├── StartError (ValueError)              a job's request cannot work here (harbor_ray.jobs)
├── Interrupted                          a job stopped by SIGINT or SIGTERM (harbor_ray.jobs)
├── CaptureError                         the capture proxy (harbor_ray.capture)
│   ├── AgentCallError                   an agent's call cannot be served as sent
│   │   ├── AgentRequestError            not translatable; a 4xx in the agent's dialect
│   │   ├── SessionGone (LookupError)    the session ended after its key was accepted
│   │   ├── _HttpError                   a refused call and its status (capture.refusals)
│   │   └── _ClientGone                  the agent left mid-request (capture.refusals)
│   ├── EngineCallError                  the proxy's call to the engine failed
│   │   ├── EngineError                  an error status, or no answer at all
│   │   ├── EngineReplyError (ValueError)  a 200 that is not a usable chat completion
│   │   ├── Http1Error                   the engine client's transport failed
│   │   │   ├── EngineConnectError       no connection: refused, unreachable, DNS, TLS
│   │   │   ├── Http1Timeout             the whole request exceeded its timeout
│   │   │   └── EngineProtocolError      bytes that are not HTTP/1.1, or cut mid-answer
│   │   └── _Stale                       a reused connection closed idle (capture.http1)
│   ├── CertificationError               the engine cannot serve capture
│   └── ServeError                       the proxy cannot start
├── TrialError                           a Harbor trial cannot be set up (harbor_ray.trials)
│   ├── DatasetError (ValueError)        no usable dataset, or tasks it does not hold
│   ├── AgentError                       the agent cannot be run through the proxy
│   │   ├── UnknownAgentError (ValueError)  not a Harbor agent name, not an import path
│   │   ├── AgentNotWiredError (ValueError)  no way to point it at the proxy
│   │   │   └── ProfileNotSupportedError  not wired to speak that profile (dialect)
│   │   ├── AgentInstallError            its CLI is not installed, or will not install
│   │   └── AgentPinError (ValueError)   an agent_versions.toml entry that cannot work
│   └── BackendError                     the sandbox backend
│       ├── UnknownBackendError (ValueError)  not a backend harbor_ray or Harbor knows
│       ├── SandboxArgumentError (ValueError)  a --sandbox-arg that is not KEY=VALUE
│       │   └── WarmPoolUnsupportedError  a --warm-pool on a backend that has none
│       ├── SandboxSetupError (ValueError)  a task, tool, forward or user it cannot set up
│       ├── SandboxUnavailableError (RuntimeError)  this machine cannot run the sandbox
│       ├── SandboxError (RuntimeError)  it could not start, stopped, or leaked a process
│       ├── ExecTimeoutError (RuntimeError)  a command outlived its timeout; killed
│       ├── EnvironmentUnsupportedError (ValueError)  it cannot give the task its own image
│       └── EnvironmentBuildError (RuntimeError)  the task's image failed to build; its log
├── DataError                            the Parquet dataset under OUT (harbor_ray.data)
│   ├── NotADatasetError (FileNotFoundError)  a directory with no dataset in it
│   ├── DuplicateRolloutError (ValueError)  a rollout id the dataset already holds
│   ├── SchemaMismatchError (ValueError)  rows or a directory of another schema version
│   └── BrokenRowsError (ValueError)     turns whose parent links do not hold
├── ReportError                          the report and its viewer (harbor_ray.report)
│   ├── ViewerError                      the live viewer cannot start
│   └── ComparisonError (ValueError)     datasets that cannot be compared as asked
├── PlaygroundError                      the playground (harbor_ray.playground)
│   └── PlaygroundRefusal (LookupError)  a request names nothing it serves; its status
├── EngineSetupError                     the engine harbor_ray starts (harbor_ray.engine)
│   ├── ModelUnavailableError (RuntimeError)  the default model cannot be prepared here
│   └── EngineStartError (RuntimeError)  the engine did not start or become ready
├── WeightsRefusedError                  a weight update cannot start (engine.weights)
│   ├── CheckpointError (ValueError)     not a checkpoint the served model can load
│   └── WeightVersionError (ValueError)  the version does not increase
├── TrainerError                         a trainer integration cannot go on (integrations)
├── OnlineError                          the online controller refused a call (online)
│   ├── FieldError                       a field names nothing usable; its status and name
│   ├── OverCapacity                     too many accepted rollouts unfinished (429)
│   ├── WeightUpdateError                a weight update failed; the old version serves
│   ├── _Refused                         a refused request and its reply (online.app)
│   └── ServiceConfigError (ValueError)  the service's YAML cannot work (online.serve)
└── ClientError                          a call by the trainer's client failed (client)

Every class takes the message first; what else it carries (`status`, `field`, ...) is
keyword-only, so a raise site reads the same whichever class it raises.
"""

from typing import Any


class HarborRayError(Exception):
    """Root of every exception harbor_ray raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross Ray (raised in an actor, caught by its caller), which pickles them.
        # Exception's own pickling calls __init__ with `args` (the message alone here),
        # which a subclass taking more arguments refuses: rebuild without __init__.
        return _rebuilt, (type(self), self.args, self.__dict__)


def _rebuilt(
    cls: type[HarborRayError], args: tuple[Any, ...], state: dict[str, Any]
) -> HarborRayError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


# --- jobs (harbor_ray.jobs): sweeps, rollouts, qualification ----------------------------


class StartError(HarborRayError, ValueError):
    """A job's request cannot work here (flags that contradict each other, a sandbox this
    machine cannot run); nothing was started. The message names what to change."""


class Interrupted(HarborRayError):
    """A job was stopped by a signal (`signal`: SIGINT or SIGTERM): no rollout started
    after it, the running ones were cancelled and their sandboxes torn down."""

    def __init__(self, message: str, *, signal: int) -> None:
        super().__init__(message)
        self.signal = signal


# --- the capture proxy -------------------------------------------------------------------


class CaptureError(HarborRayError):
    """The capture proxy refused or failed a call, or cannot start."""


class AgentCallError(CaptureError):
    """An agent's call cannot be served as sent; the agent is answered, not the engine."""


class AgentRequestError(AgentCallError):
    """The agent's request cannot be translated. Answered with a 4xx in its dialect."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class SessionGone(AgentCallError, LookupError):
    """The session ended (closed, or its owner died) after its key was accepted.

    A replica's cached grant can outlive the session, and a session can end while one
    of its calls runs: admission, record and release find out, and the agent gets a 401
    rather than a 500.
    """


class EngineCallError(CaptureError):
    """The proxy's call to the engine failed."""


class EngineError(EngineCallError):
    """The engine answered an error status, or could not be reached (`status` says which)."""

    def __init__(self, message: str, *, status: int, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        # What a 429's Retry-After asked for, in seconds (None: no such header).
        self.retry_after_s = retry_after_s

    @property
    def retryable(self) -> bool:
        return self.status >= 500 or self.status == 429


class EngineReplyError(EngineCallError, ValueError):
    """The engine answered 200 with a body that is not a usable chat completion."""


class Http1Error(EngineCallError):
    """Base of the engine client's errors; the caller maps each kind to its own status."""


class EngineConnectError(Http1Error):
    """No connection could be made: refused, unreachable, DNS or the TLS handshake."""


class Http1Timeout(Http1Error):
    """The whole request, waiting for a free connection included, exceeded `timeout_s`."""


class EngineProtocolError(Http1Error):
    """The origin answered bytes that are not HTTP/1.1, or dropped the connection mid-answer."""


class CertificationError(CaptureError):
    """The engine cannot serve capture; the message says what to change."""


class ServeError(CaptureError):
    """The proxy cannot start; the message names the fix."""


# --- Harbor trials -----------------------------------------------------------------------


class TrialError(HarborRayError):
    """A Harbor trial cannot be set up: its dataset, agent or sandbox backend."""


class DatasetError(TrialError, ValueError):
    """A spec that names no usable dataset, or a selection of tasks it does not hold."""


class AgentError(TrialError):
    """The agent cannot be run through the capture proxy."""


class UnknownAgentError(AgentError, ValueError):
    """Not a Harbor agent name, not an import path."""


class AgentNotWiredError(AgentError, ValueError):
    """A Harbor agent harbor_ray cannot point at the capture proxy; the message says why."""


class ProfileNotSupportedError(AgentNotWiredError):
    """An agent asked to speak a profile (dialect) it is not wired for; the message lists
    the profiles it has."""


class AgentInstallError(AgentError):
    """An agent CLI could not be installed into the host's cache, or is not in it."""


class AgentPinError(AgentError, ValueError):
    """An `agent_versions.toml` entry that names no installable CLI (its registry, bins
    or interpreter); the message names the agent and the key to fix."""


class BackendError(TrialError):
    """The sandbox backend is unknown, unusable on this machine, or failed."""


class UnknownBackendError(BackendError, ValueError):
    """Not a sandbox backend harbor_ray or Harbor knows."""


class SandboxArgumentError(BackendError, ValueError):
    """A backend constructor argument given on the command line that is not KEY=VALUE."""


class WarmPoolUnsupportedError(SandboxArgumentError):
    """A warm pool asked of a backend that has none (only the local sandbox hands a
    started sandbox to a trial); the message names the backends that do."""


class SandboxSetupError(BackendError, ValueError):
    """The sandbox cannot be set up as asked: a task definition, tool directory, port
    forward or user it does not support. Nothing was started."""


class SandboxUnavailableError(BackendError, RuntimeError):
    """This machine cannot run the sandbox; the message lists every reason."""


class SandboxError(BackendError, RuntimeError):
    """The sandbox could not start, is not running, or left a process behind."""


class ExecTimeoutError(BackendError, RuntimeError):
    """A command outlived its timeout; its process tree has been killed.

    A RuntimeError, as Harbor's Docker environment raises, and deliberately not a
    TimeoutError: Harbor reads a TimeoutError inside an agent's run as the agent's own
    timeout.
    """


class EnvironmentUnsupportedError(BackendError, ValueError):
    """The sandbox cannot give the task its own environment (a Dockerfile that installs
    or copies, a `docker_image`, a compose file), and the user did not opt in to the
    host's userland. Nothing was started; the message names the fix."""


class EnvironmentBuildError(BackendError, RuntimeError):
    """The task's image could not be built, found or unpacked; `log` is the build log
    kept on the node that tried (None when nothing was run)."""

    def __init__(self, message: str, *, log: str | None = None) -> None:
        super().__init__(message)
        self.log = log


# --- the dataset (harbor_ray.data) -------------------------------------------------------


class DataError(HarborRayError):
    """The Parquet dataset under OUT cannot be read or written as asked."""


class NotADatasetError(DataError, FileNotFoundError):
    """A directory that holds no dataset (no rollouts/ in it)."""


class DuplicateRolloutError(DataError, ValueError):
    """A rollout the dataset already holds: writing it again would duplicate its rows."""


class SchemaMismatchError(DataError, ValueError):
    """Rows, or a dataset directory, of another schema version than this writer's."""


class BrokenRowsError(DataError, ValueError):
    """Turns whose parent links do not hold (a parent missing, without ids, or a cycle):
    their prompts cannot be rebuilt."""


# --- the report (harbor_ray.report) ------------------------------------------------------


class ReportError(HarborRayError):
    """The report or its live viewer cannot be made."""


class ViewerError(ReportError):
    """The live viewer cannot start (its port, most often); the message names the fix."""


class ComparisonError(ReportError, ValueError):
    """Datasets that cannot be compared as asked (no task they all hold, two under one
    label); the message names the fix."""


# --- the playground (harbor_ray.playground) ---------------------------------------------


class PlaygroundError(HarborRayError):
    """The playground cannot start, or refused a request."""


class PlaygroundRefusal(PlaygroundError, LookupError):
    """A request names a dataset, task, file or run the playground does not serve to its
    visitor (or no valid key): answered with `status`, never a 5xx."""

    def __init__(self, message: str, *, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


# --- the engine harbor_ray starts itself --------------------------------------------------


class EngineSetupError(HarborRayError):
    """The engine harbor_ray starts itself could not be made or started."""


class ModelUnavailableError(EngineSetupError, RuntimeError):
    """The default model cannot be prepared on this installation."""


class EngineStartError(EngineSetupError, RuntimeError):
    """The engine application could not be started or did not become ready."""


# --- in-flight weight updates (harbor_ray.engine.weights) --------------------------------


class WeightsRefusedError(HarborRayError):
    """A weight update cannot start: nothing was changed on any replica."""


class CheckpointError(WeightsRefusedError, ValueError):
    """The directory is not a safetensors checkpoint of the served model's tensors."""


class WeightVersionError(WeightsRefusedError, ValueError):
    """The requested policy version is not above the one serving."""


# --- trainer integrations (harbor_ray.integrations) ---------------------------------------


class TrainerError(HarborRayError):
    """A trainer's call cannot be served as asked: prompts that name no tasks, groups
    that never came, a trainer setting the integration cannot honour."""


# --- the online controller ---------------------------------------------------------------


class OnlineError(HarborRayError):
    """The online controller refused or failed a trainer's call; `status` is its HTTP one."""

    status = 500


class FieldError(OnlineError):
    """A request field names nothing the controller can use (an unknown task, agent,
    sandbox or dataset, a version that does not increase)."""

    def __init__(self, message: str, *, status: int, field: str) -> None:
        super().__init__(message)
        self.status, self.field = status, field


class OverCapacity(OnlineError):
    """Accepting the submit would put more rollouts unfinished than the capacity."""

    status = 429

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class WeightUpdateError(OnlineError):
    """A weight update failed or timed out; the old version keeps serving. `replicas`
    holds each replica's result (the wire's `ReplicaResult`s)."""

    status = 502

    def __init__(self, message: str, *, replicas: list[Any]) -> None:
        super().__init__(message)
        self.replicas = replicas


class ServiceConfigError(OnlineError, ValueError):
    """The online service's YAML (`args:` of its apps) names something unusable: the
    application does not deploy, saying which field."""


# --- the client (harbor_ray.client): the trainer's side of the online service -----------


class ClientError(HarborRayError):
    """A call through `harbor_ray.client` failed: the controller refused it (`status`,
    the `field` it named, and for a weight update each replica's result), or it could not
    be reached after the retries, or was given no key (`status` None)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        field: str | None = None,
        replicas: list[Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.field = status, field
        self.replicas = replicas or []
