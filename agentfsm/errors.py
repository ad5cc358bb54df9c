"""The errors and signals of agentfsm: two trees, every exception the library raises.

Every error derives from ``AgentFSMError``. Where the documented API names a built-in exception,
the error subclasses it too (in brackets below), so ``except ValueError`` keeps working.
A pause is no error: ``BreakpointException`` and its subclasses derive from ``AgentFSMSignal``
and carry the snapshot the run goes on from, so ``except AgentFSMError`` never swallows a pause
(``except BreakpointException`` catches every one).
Subpackages re-export their errors (``agentfsm.mcp.MCPToolError``); they are defined here.
``tests/test_errors.py`` keeps this drawing true::

    AgentFSMError
    ├── ConfigurationError (ValueError)                  an agent, tool or schema got invalid values
    │   ├── ToolConfigurationError (TypeError)           a tool's state or output mapping is wrongly shaped
    │   ├── UsageNotCountedError                         a usage limit cannot count a reply (no price, no usage)
    │   └── SchemaError                                  a tool's parameter schema or a State schema is invalid
    │       └── SchemaGenerationError                    no JSON schema from a function's signature
    ├── ConfigurationTypeError (TypeError)               a configuration value has the wrong type
    ├── UnsupportedOperationError (NotImplementedError)  the object does not support the operation
    ├── SerializationError (TypeError)                   a value has no JSON-compatible form
    ├── DeserializationError (ValueError)                data is malformed, or names code the allow-list refuses
    ├── MissingExtraError (ImportError)                  an optional dependency is missing (names its extra)
    │   └── MissingRendererError (RuntimeError)          SVG/PNG output needs Graphviz's ``dot``
    ├── SnapshotError (ValueError)                       a snapshot is malformed, unknown or cannot resume here
    │   ├── StaleSnapshotError                           not the stored run's head, or another process runs it
    │   └── StoreError                                   a store cannot be read or written: damaged, locked, not one
    ├── DurabilityError (RuntimeError)                   a durable run cannot start or be found as asked
    ├── DecisionError (ValueError)                       a decision names no waiting call, or a changed one
    │   └── AnswerError                                  an answer names no open question, or breaks its schema
    ├── ProtocolRequestError (ValueError)                an AG-UI or A2A request does not fit the agent or its thread
    │   └── ThreadBusyError                              the thread has a run going on already
    ├── RemoteAgentError (RuntimeError)                  a remote A2A agent was not reached, or did not do the task
    ├── ToolError                                        preparing or running a tool call failed
    │   ├── ToolNotFoundError (ValueError)               the model asked for a tool the run does not have
    │   │   └── MCPToolNotFoundError                     the MCP server does not offer the tool (any more)
    │   ├── ToolArgumentsError (ValueError)              the arguments are not JSON, or not the tool's schema
    │   ├── ToolCallLimitError                           the call would go past UsageLimits(tool_calls=...)
    │   ├── ToolCallBlockedError                         a tool-call guardrail refused the call: it never ran
    │   ├── ToolProgressError (TypeError)                a tool reported progress that is not a finite number
    │   └── ToolInvocationError (RuntimeError)           the tool's function raised
    │       ├── MCPToolError                             the MCP tool ran and reported an error
    │       └── ToolTimeoutError (TimeoutError)          the tool did not finish within its timeout
    ├── MCPConnectionError (ConnectionError)             the MCP server could not be reached
    │   └── MCPConnectionLostError                       the connection dropped while a call was in flight
    ├── MCPTimeoutError (TimeoutError)                   connecting, listing tools or an MCP call took too long
    ├── MCPServerError (RuntimeError)                    the MCP server answered with a protocol error, or not MCP
    ├── ModelClientError (RuntimeError)                  the chat generator produced no reply
    │   ├── ModelHTTPError                               the model server answered with an error status
    │   │   ├── AuthenticationError                      401 or 403: the API key was refused
    │   │   ├── RateLimitError                           429, and the retries ran out
    │   │   ├── BadRequestError                          another 4xx: the model, a parameter or the messages
    │   │   └── ServerError                              5xx, and the retries ran out
    │   ├── ModelTimeoutError                            no answer in time, and the retries ran out
    │   │   └── ModelDeadlineError                       the call, retries included, outlived its deadline
    │   ├── ModelConnectionError                         the server could not be reached, and the retries ran out
    │   ├── ModelResponseError                           the answer could not be read
    │   ├── AllChatGeneratorsFailedError                 every generator of a fallback failed
    │   ├── ScriptExhaustedError                         a scripted model ran out of replies
    │   └── CassetteMismatchError                        a replayed request differs from the recorded one
    ├── OutputValidationError (ValueError)               the final answer did not fit output_type, retries spent
    ├── GuardrailError (TypeError)                       a guardrail returned no GuardrailResult, or a rewrite of the wrong type
    ├── MachineError (RuntimeError)                      an edge the transition table does not declare (a bug)
    ├── ResumeDivergence (AssertionError)                a resumed run ended unlike the uninterrupted one
    ├── IterationStoppedError (RuntimeError)             the loop over Agent.iter() stopped before the run ended
    └── AgentCheckFailed (AssertionError)                ``check_agent`` found paths that violate invariants

    AgentFSMSignal                                       the run stopped where it can go on: no failure
    ├── BreakpointException                              a breakpoint paused the run; carries the snapshot
    │   ├── HITLBreakpointException                      a confirmation strategy paused the run for a decision
    │   ├── InputBreakpointException                     a tool or a hook paused the run to ask a person
    │   └── RunCancelled                                 the run was cancelled from outside; carries the snapshot
    └── InputRequired                                    raised by ask_user inside a tool or hook: no answer yet
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


class AgentFSMError(Exception):
    """Base class of every error raised by agentfsm."""


class AgentFSMSignal(Exception):
    """Base class of agentfsm's signals: the run stopped where it can go on, and did not fail.

    Not an ``AgentFSMError``, so ``except AgentFSMError`` lets a pause through to its caller.
    """


class ConfigurationError(AgentFSMError, ValueError):
    """An agent, tool or state schema was configured with invalid values."""


class ConfigurationTypeError(AgentFSMError, TypeError):
    """A configuration value has the wrong type (for example a chat generator without ``tools``)."""


class UnsupportedOperationError(AgentFSMError, NotImplementedError):
    """The operation is not supported by this object."""


class ToolConfigurationError(ConfigurationError, TypeError):
    """A tool's ``outputs_to_state``, ``outputs_to_string`` or ``inputs_from_state`` is wrongly shaped.

    Both a ``ValueError`` (what Haystack raises) and a ``TypeError`` (what its docs name for a value
    of the wrong type), so either ``except`` catches it.
    """


class UsageNotCountedError(ConfigurationError):
    """A usage limit cannot count a reply: its model has no price, or it reports no token usage.

    Reaching a limit never raises: the run ends with ``exit_reason`` ``"usage_limit:<name>"``.
    """


class SchemaError(ConfigurationError):
    """A schema cannot be used: a tool's parameters, an output type, a state schema (or a ``$ref`` pointing outside it)."""


class SchemaGenerationError(SchemaError):
    """A JSON schema could not be generated from a function's signature."""


class SerializationError(AgentFSMError, TypeError):
    """A value could not be converted to its serialized (JSON-compatible) form."""


class DeserializationError(AgentFSMError, ValueError):
    """Serialized data could not be turned back into objects: it is malformed, or names code the allow-list refuses.

    What a dotted path in data may name, and how to allow your modules: ``agentfsm.serialization``.
    """


class MissingExtraError(AgentFSMError, ImportError):
    """A feature's optional dependency is not installed: ``extra`` names the extra that brings it.

    Its message is one line, the same wherever it is raised (the command line prints it as it is):
    ``agentfsm.durable needs the dbos extra: pip install 'agentfsm[dbos]' (No module named 'dbos').``
    ``feature`` is what needs it, ``reason`` what is missing; ``name`` (``ImportError``'s) is the
    module that could not be imported, when one could not.
    """

    def __init__(self, feature: str, extra: str, reason: str = "", *, name: str | None = None) -> None:
        why = f" ({reason})" if reason else ""
        super().__init__(f"{feature} needs the {extra} extra: pip install 'agentfsm[{extra}]'{why}.", name=name)
        self.feature, self.extra, self.reason = feature, extra, reason

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.feature, self.extra, self.reason), {"name": self.name}


class MissingRendererError(MissingExtraError, RuntimeError):
    """SVG/PNG output needs a Graphviz ``dot`` program (the ``diagrams`` extra brings one), and none was found."""


def as_set(names: Iterable[str]) -> str:
    """``names`` written as a set, sorted: ``{'a', 'b'}``, as Haystack's messages write them."""
    return "{" + ", ".join(repr(n) for n in sorted(names)) + "}"


def check_int(name: str, value: Any, least: int) -> int:
    """``value``, when it is an int (not a bool) of at least ``least``; else ``ConfigurationError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigurationError(f"{name} must be an int >= {least}, got {value!r}.")
    return value


def check_timeout(name: str, value: Any) -> float | None:
    """``value`` as seconds when it is ``None`` or a finite number above 0; else ``ConfigurationError`` naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ConfigurationError(f"{name} must be a number of seconds above 0, or None for no limit; got {value!r}.")
    return float(value)


class SnapshotError(AgentFSMError, ValueError):
    """A snapshot is malformed, truncated, tampered with, of an unknown version, or cannot resume here."""


class StaleSnapshotError(SnapshotError):
    """A stored run cannot be resumed from this snapshot: it is not the run's head, or another process runs it.

    ``run_id``, ``seq`` (the snapshot's number in the store, ``None`` when it does not say) and
    ``head`` (the run's newest number) say which; ``owner`` is the claim that holds the run, if any.
    Nothing ran. Resume the head (``store.latest(run_id)``), take over a crashed run
    (``take_over=True``), or start a new run from this point (``fork=True``).
    """

    def __init__(
        self, message: str, run_id: str, seq: int | None = None, head: int | None = None, owner: str | None = None
    ) -> None:
        super().__init__(message)
        self.run_id, self.seq, self.head, self.owner = run_id, seq, head, owner

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.args[0], self.run_id, self.seq, self.head, self.owner)


class StoreError(SnapshotError):
    """A snapshot store cannot be read or written: its file is damaged, locked past its timeout, or not a store's.

    Raised for the run it touches (another run of the same store may still be read), never as the
    database driver's own error.
    """


class DurabilityError(AgentFSMError, RuntimeError):
    """A durable run cannot start or be found as asked: DBOS is not launched here, the run is unknown, its id is taken."""


class BreakpointException(AgentFSMSignal):
    """A breakpoint paused the run; ``snapshot`` holds everything needed to resume it.

    A signal, not an error: ``except AgentFSMError`` does not catch it.
    """

    def __init__(self, message: str, snapshot: Any = None, snapshot_file_path: str | None = None) -> None:
        super().__init__(message)
        self.snapshot = snapshot
        self.snapshot_file_path = snapshot_file_path

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.snapshot, self.snapshot_file_path)


class HITLBreakpointException(BreakpointException):
    """A confirmation strategy paused the run: ``tool_name`` (``tool_call_id``) waits for a decision.

    The snapshot is in ``snapshot`` and, when the strategy names a directory, in ``snapshot_file_path``.
    """

    def __init__(
        self,
        message: str,
        tool_name: str,
        snapshot_file_path: str | None = None,
        tool_call_id: str | None = None,
        snapshot: Any = None,
    ) -> None:
        super().__init__(message, snapshot, snapshot_file_path)
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.tool_name, self.snapshot_file_path, self.tool_call_id, self.snapshot)


class InputBreakpointException(BreakpointException):
    """A tool or a hook asked a person (``ask_user``): the run waits for the answers; ``questions`` lists them.

    Resume it with ``agent.run(snapshot=exc.snapshot, decisions=[InputAnswer(question_id, answer), ...])``.
    """

    def __init__(self, message: str, snapshot: Any = None, snapshot_file_path: str | None = None) -> None:
        super().__init__(message, snapshot, snapshot_file_path)
        pause = getattr(snapshot, "pause", None)
        #: The open questions (``agentfsm.pauses.InputQuestion``), each answered by its ``id``.
        self.questions: list[Any] = list(getattr(pause, "questions", ()))


class InputRequired(AgentFSMSignal):
    """Raised by ``ask_user`` in a tool or a hook when its question has no answer yet: the run pauses for it.

    Let it through: the run catches it. A tool that swallows it has asked all the same (the run
    records the question when it is asked), and what the tool returns then is dropped.
    """

    def __init__(self, message: str, question_id: str) -> None:
        super().__init__(message)
        self.question_id = question_id

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.question_id)


class RunCancelled(BreakpointException):
    """The run was cancelled (``RunHandle.cancel()``) and stopped at a transition; ``snapshot`` resumes it."""


class DecisionError(AgentFSMError, ValueError):
    """A confirmation decision cannot be applied: unknown call, a call that changed, or one decided already."""


class AnswerError(DecisionError):
    """An answer cannot be taken: it names no open question, answers one twice, or does not fit the question's schema.

    Nothing ran, and the run still waits where it paused.
    """


class ProtocolRequestError(AgentFSMError, ValueError):
    """A request to an agent served over AG-UI or A2A does not fit the agent or its thread; nothing ran.

    Answers to interrupts the thread is not waiting for, a thread waiting for answers that the
    request does not give, an answer that does not fit its schema, a message the agent cannot read.
    The endpoints send it as the protocol's error (``RUN_ERROR``, a rejected or failed task).
    """


class ThreadBusyError(ProtocolRequestError):
    """A thread has a run going on already: one thread, one timeline, so a second run on it is refused."""


class RemoteAgentError(AgentFSMError, RuntimeError):
    """A remote A2A agent could not be reached, answered with an error, or did not complete the task it was given."""


class ToolError(AgentFSMError):
    """Base class of errors raised while preparing or running a tool call."""


class ToolNotFoundError(ToolError, ValueError):
    """The model asked for a tool that is not available in this run."""


class ToolArgumentsError(ToolError, ValueError):
    """The model's arguments for a tool call are not valid JSON or do not match the tool's schema."""


class ToolCallLimitError(ToolError):
    """The call was not run: it would have gone past ``UsageLimits(tool_calls=...)``, and the run ends."""


class ToolCallBlockedError(ToolError):
    """The call was not run: a tool-call guardrail refused it, and its result (an error) says why."""


class ToolProgressError(ToolError, TypeError):
    """A tool reported progress that is not a finite number, a total that is not one, or a message that is no string.

    Raised in the tool, by the ``report_progress`` it was given: like any error the tool raises,
    it is the call's outcome unless the tool catches it.
    """


class ToolInvocationError(ToolError, RuntimeError):
    """A tool's function raised an exception."""


class MCPConnectionError(AgentFSMError, ConnectionError):
    """The MCP server could not be reached: it did not start, or refused the connection."""


class MCPConnectionLostError(MCPConnectionError):
    """The connection dropped while a call was in flight: the call may or may not have run.

    It is not sent again (a tool that is not idempotent must not run twice); the next call
    reconnects.
    """


class MCPTimeoutError(AgentFSMError, TimeoutError):
    """Connecting, listing the tools or a tool call took longer than its timeout."""

    def __init__(self, message: str, *, operation: str) -> None:
        super().__init__(message)
        #: ``"connect"``, ``"list"`` or ``"call"``.
        self.operation = operation

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), str(self), {"operation": self.operation}))


class MCPServerError(AgentFSMError, RuntimeError):
    """The server answered a request with a JSON-RPC error (for example, invalid parameters), or with no MCP answer."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        #: The JSON-RPC error code; ``None`` for an answer that is not MCP's (malformed, or nested too deeply).
        self.code = code

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), str(self), {"code": self.code}))


class MCPToolNotFoundError(ToolNotFoundError):
    """The MCP server does not offer a tool of that name (or no longer does)."""

    def __init__(self, message: str, *, tool_name: str, available_tools: list[str]) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.available_tools = available_tools

    def __reduce__(self) -> Any:
        return (
            _rebuild,
            (type(self), str(self), {"tool_name": self.tool_name, "available_tools": self.available_tools}),
        )


class MCPToolError(ToolInvocationError):
    """The tool ran and reported an error (an ``isError`` result); ``result`` holds what it returned."""

    def __init__(self, message: str, *, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result

    def __reduce__(self) -> Any:
        return (_rebuild, (type(self), str(self), {"result": self.result}))


class ModelClientError(AgentFSMError, RuntimeError):
    """The chat generator failed to produce a reply."""


class ModelHTTPError(ModelClientError):
    """The model server answered with an error status: ``status_code`` and the server's ``body``."""

    def __init__(self, message: str, status_code: int, body: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
        #: The server's Retry-After header, when it sent one.
        self.retry_after: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.status_code, self.body)


class AuthenticationError(ModelHTTPError):
    """The server refused the API key (401 or 403): check the key and the base URL."""


class RateLimitError(ModelHTTPError):
    """The server asked to slow down (429), and the retries ran out."""


class BadRequestError(ModelHTTPError):
    """The server refused the request (another 4xx): the model name, a parameter or the messages."""


class ServerError(ModelHTTPError):
    """The server failed (5xx), and the retries ran out."""


class ModelTimeoutError(ModelClientError):
    """The model server did not answer in time (connecting, or between two reads), and the retries ran out."""


class ModelDeadlineError(ModelTimeoutError):
    """The model call, retries included, did not finish before its overall ``deadline``."""


class ModelConnectionError(ModelClientError):
    """The model server could not be reached (refused, reset, DNS), and the retries ran out."""


class ModelResponseError(ModelClientError):
    """The model server's answer could not be read (not the expected JSON, or a garbled event stream)."""


class AllChatGeneratorsFailedError(ModelClientError):
    """Every chat generator of a ``FallbackChatGenerator`` failed; ``errors`` holds each one's error, in order."""

    def __init__(self, message: str, errors: Sequence[BaseException] = ()) -> None:
        super().__init__(message)
        self.errors = list(errors)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.errors)


class ScriptExhaustedError(ModelClientError):
    """A ScriptedChatGenerator was asked for more replies than its script holds."""


class CassetteMismatchError(ModelClientError):
    """A replayed request differs from the recorded one, or asks for more exchanges than were recorded."""


class ToolTimeoutError(ToolInvocationError, TimeoutError):
    """A tool call did not finish within its timeout: an async tool was cancelled, a sync one abandoned.

    ``tool_name`` and ``timeout`` (seconds) say which call and how long it had.
    """

    def __init__(self, message: str, tool_name: str, timeout: float) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.timeout = timeout

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.tool_name, self.timeout)


class OutputValidationError(AgentFSMError, ValueError):
    """The final answer did not fit the agent's ``output_type``, and the model's tries ran out.

    ``output_name`` names the type, ``problems`` lists what was wrong with the last answer (one
    line each), ``answer`` is that answer, and ``retries`` how often the model was sent back first.
    """

    def __init__(self, output_name: str, problems: Sequence[str], answer: str, retries: int) -> None:
        listed = "; ".join(problems)
        super().__init__(
            f"The final answer does not fit output_type {output_name} after {retries} retries: {listed}. "
            "Raise output_retries, or describe the expected answer in the system prompt."
        )
        self.output_name = output_name
        self.problems = list(problems)
        self.answer = answer
        self.retries = retries

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.output_name, self.problems, self.answer, self.retries)


class GuardrailError(AgentFSMError, TypeError):
    """A guardrail returned something other than a ``GuardrailResult``, or a rewrite of a value of the wrong type."""


class MachineError(AgentFSMError, RuntimeError):
    """The runtime tried to take an edge that the transition table does not declare (a bug)."""


class ResumeDivergence(AgentFSMError, AssertionError):
    """A run resumed from a snapshot ended differently from the uninterrupted run."""


class AgentCheckFailed(AgentFSMError, AssertionError):
    """``check_agent`` found paths that violate invariants: ``result`` holds the counterexamples."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), None)


def _rebuild(cls: type[Exception], message: str, fields: dict[str, Any]) -> Exception:
    """Unpickle an error whose fields are keyword-only arguments."""
    return cls(message, **fields)


class IterationStoppedError(AgentFSMError, RuntimeError):
    """The loop over ``Agent.iter`` / ``iter_async`` stopped before the run ended.

    The run never fails with it: raised where the run waited for the loop, it cancels the run there
    (the ``cancel`` edge to PAUSED), and the snapshot resumes it like any cancelled run's.
    """
