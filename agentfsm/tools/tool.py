"""Tool: a named function with a JSON-schema description that a model can prepare calls for."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import orjson

from agentfsm.errors import (
    ConfigurationError,
    SchemaError,
    ToolArgumentsError,
    ToolConfigurationError,
    as_set,
    check_timeout,
)
from agentfsm.interrupts import ASK_USER
from agentfsm.reconcile import ReconcileFunction, reconcile_at, reconcile_of
from agentfsm.retries import Retry, retry_of
from agentfsm.schemas import CompiledSchema
from agentfsm.serialization import (
    Slot,
    deserialize_callable,
    import_path,
    object_from_dict,
    object_path,
    serialize_callable,
)
from agentfsm.signatures import accepted_keywords, names_keyword
from agentfsm.workers import run_in_worker

_OUTPUTS_TO_STRING_SINGLE_KEYS = {"source", "handler", "raw_result"}


def default_output_to_string(result: Any) -> str:
    """Strings pass through; other results become JSON (or ``str()`` when not JSON-encodable)."""
    if isinstance(result, str):
        return result
    try:
        return orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
    except TypeError:
        return str(result)


# Each message opens with the sentence Haystack's Tool raises, which its users' tests match.


def _check_mapping(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, dict):
        raise ToolConfigurationError(f"{name} must be a dict or None, got {type(value).__name__}.")


def _check_spec(name: str, key: str | None, spec: Any) -> None:
    """Check one output's ``source`` and ``handler`` (``key`` ``None``: the single-output format)."""
    where = "" if key is None else f" for key {key!r}"
    if not isinstance(spec, dict):
        raise ToolConfigurationError(
            f"{name} configuration{where} must be a dictionary. Give it 'source' and/or 'handler', "
            f"not a {type(spec).__name__}."
        )
    source = spec.get("source")
    if source is not None and not isinstance(source, str):
        raise ToolConfigurationError(
            f"{name} source{where} must be a string. Got {type(source).__name__}: name the output's key."
        )
    handler = spec.get("handler")
    if handler is not None and not callable(handler):
        raise ToolConfigurationError(
            f"{name} handler{where} must be callable. Got {type(handler).__name__}: give a function."
        )


def validate_tool_config(
    outputs_to_string: dict[str, Any] | None,
    inputs_from_state: dict[str, str] | None,
    outputs_to_state: dict[str, dict[str, Any]] | None,
) -> None:
    """Check the shape of the three state/string mappings (``ToolConfigurationError``: a ValueError and a TypeError)."""
    _check_mapping("outputs_to_string", outputs_to_string)
    _check_mapping("inputs_from_state", inputs_from_state)
    _check_mapping("outputs_to_state", outputs_to_state)
    for state_key, param in (inputs_from_state or {}).items():
        if not isinstance(param, str):
            raise ToolConfigurationError(
                f"inputs_from_state values must be str, not {type(param).__name__}. Got {param!r} for key "
                f"{state_key!r}. Map each State key to the name of the parameter it fills: {{'repository': 'repo'}}."
            )
    for state_key, spec in (outputs_to_state or {}).items():
        _check_spec("outputs_to_state", state_key, spec)
    if outputs_to_string:
        single = set(outputs_to_string) & _OUTPUTS_TO_STRING_SINGLE_KEYS
        if single and set(outputs_to_string) - _OUTPUTS_TO_STRING_SINGLE_KEYS:
            others = sorted(map(str, set(outputs_to_string) - _OUTPUTS_TO_STRING_SINGLE_KEYS))
            raise ToolConfigurationError(
                "Invalid outputs_to_string config. When using 'source', 'handler' or 'raw_result' at the root "
                f"level, no other keys are allowed; this one also has {others}. Use one format: a single output "
                "at the root, or one configuration per output."
            )
        if single:
            _check_spec("outputs_to_string", None, outputs_to_string)
            raw = outputs_to_string.get("raw_result", False)
            if not isinstance(raw, bool):
                raise ToolConfigurationError(
                    f"outputs_to_string raw_result must be a boolean. Got {type(raw).__name__}: True or False."
                )
        else:
            for key, spec in outputs_to_string.items():
                _check_spec("outputs_to_string", key, spec)
                if "raw_result" in spec:
                    raise ToolConfigurationError(
                        f"Invalid outputs_to_string configuration for key {key!r}: 'raw_result' is not supported "
                        "in the multiple output format. Give it at the root, beside 'source': raw_result is not "
                        "supported in the multiple-output format, where each output becomes text."
                    )


def state_inputs(inputs_from_state: Any) -> frozenset[str]:
    """The parameters ``inputs_from_state`` fills, left out of a schema (``Tool`` refuses a wrongly shaped one)."""
    if not isinstance(inputs_from_state, dict):
        return frozenset()
    return frozenset(p for p in inputs_from_state.values() if isinstance(p, str))


def function_inputs(function: Callable[..., Any], parameters: dict[str, Any]) -> set[str] | None:
    """The parameters ``function`` takes (``None``: any, it takes ``**kwargs``; the schema's when it has no signature)."""
    keywords = accepted_keywords(function, without_signature=frozenset(parameters.get("properties", {})))
    return None if keywords is None else set(keywords)


def _serialize_specs(specs: dict[str, Any] | None) -> dict[str, Any] | None:
    if specs is None:
        return None
    out: dict[str, Any] = {}
    for key, value in specs.items():
        if key == "handler" and callable(value):
            out[key] = serialize_callable(value)
        elif isinstance(value, dict):
            out[key] = _serialize_specs(value)
        else:
            out[key] = value
    return out


def _deserialize_specs(specs: dict[str, Any] | None, allowed: Iterable[str] | None) -> dict[str, Any] | None:
    if specs is None:
        return None
    out: dict[str, Any] = {}
    for key, value in specs.items():
        if key == "handler" and isinstance(value, str):
            out[key] = deserialize_callable(value, allowed)
        elif isinstance(value, dict):
            out[key] = _deserialize_specs(value, allowed)
        else:
            out[key] = value
    return out


#: The parameter through which a tool's function receives its call's idempotency key.
IDEMPOTENCY_KEY = "idempotency_key"


def idempotency_key(run_id: str, step: int, call_key: str) -> str:
    """The idempotency key of the call ``call_key`` of step ``step`` of run ``run_id``: the same each time it runs.

    A tool that takes an ``idempotency_key`` parameter is given it, and so is a confirmation
    strategy that declares one: both can name the call's effect outside the run with it.
    """
    return hashlib.sha256(f"{run_id}/{step}/{call_key}".encode()).hexdigest()[:32]


#: The parameter through which a tool's function receives its call's progress reporter
#: (``agentfsm.tools.progress``).
REPORT_PROGRESS = "report_progress"


@dataclass
class Tool:
    """A function the model can call, described by a name, a description and a JSON schema.

    >>> add = Tool("add", "Add two numbers.", {"type": "object", "properties": {"a": {"type": "number"},
    ...     "b": {"type": "number"}}, "required": ["a", "b"]}, lambda a, b: a + b)
    >>> add.invoke(a=1, b=2)
    3
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    outputs_to_string: dict[str, Any] | None = None
    inputs_from_state: dict[str, str] | None = None
    outputs_to_state: dict[str, dict[str, Any]] | None = None
    #: Running a call twice has the effect of running it once: a call interrupted by a crash runs again
    #: on resume (otherwise its outcome is unknown, and the run waits for a decision).
    idempotent: bool = False
    #: Seconds a call may take (``None``: the agent's ``tool_timeout``, if any). Past it, the run stops
    #: waiting: the call's result is a ``ToolTimeoutError`` (a sync function keeps running in its
    #: thread, and what it returns then is dropped).
    timeout: float | None = None
    #: How a failed call is run again (``agentfsm.retries.Retry``; ``None``: a failed call is answered
    #: with its error at once). Each attempt is an edge of the call machine.
    retry: Retry | None = None
    #: Looks a call in doubt up after a crash: did its effect happen? (``agentfsm.reconcile``; ``None``:
    #: a call in doubt of a tool that is not idempotent waits for a person's decision).
    reconcile: ReconcileFunction | None = None
    #: A call of this tool is the run's final answer, not a tool call (the final-answer tool's
    #: class sets it): it counts toward neither ``tool_call_counts`` nor ``UsageLimits(tool_calls=...)``,
    #: no ``"*"`` confirmation strategy covers it, and loop detection does not read it.
    is_answer: ClassVar[bool] = False
    #: The parameters' schema, compiled: every call's arguments are checked against it.
    _schema: CompiledSchema = field(init=False, repr=False, compare=False)
    #: The function has an ``idempotency_key`` parameter: each call is given a key of its own, the
    #: same when the call runs again after a crash, so that an external system can deduplicate it.
    takes_idempotency_key: bool = field(init=False, repr=False, compare=False)
    #: The function has a ``report_progress`` parameter: each call is given a ``ProgressReporter``
    #: whose reports are ``tool_progress`` events of the run (``agentfsm.tools.progress``).
    takes_progress: bool = field(init=False, repr=False, compare=False)
    #: The function has an ``ask_user`` parameter: it may ask a person mid-call (``agentfsm.interrupts``);
    #: the run pauses, and the call runs again with the answers.
    takes_ask: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(f"A tool needs a non-empty string name, got {self.name!r}.")
        if inspect.iscoroutinefunction(self.function):
            raise ConfigurationError(
                f"Async functions are not supported as tools. The function "
                f"{getattr(self.function, '__name__', self.function)!r} is a coroutine function. Tool "
                f"{self.name!r}: async functions are not supported; pass a synchronous function (agentfsm "
                "runs sync tools in a thread pool under run_async)."
            )
        if not callable(self.function):
            raise ConfigurationError(f"Tool {self.name!r}: function must be callable, got {self.function!r}.")
        try:
            self._schema = CompiledSchema(self.parameters, f"Tool {self.name!r}: parameters")
        except SchemaError as exc:
            raise SchemaError(f"The provided parameters do not define a valid JSON schema. {exc}") from None
        if self.parameters.get("type", "object") != "object":
            raise SchemaError(f"Tool {self.name!r}: parameters must describe an object (type 'object').")
        validate_tool_config(self.outputs_to_string, self.inputs_from_state, self.outputs_to_state)
        self.timeout = check_timeout(f"Tool {self.name!r}: timeout", self.timeout)
        self.retry = retry_of(self.retry, f"Tool {self.name!r}")
        self.reconcile = reconcile_of(self.reconcile, f"Tool {self.name!r}")
        self._check_inputs_from_state()
        self.takes_idempotency_key = names_keyword(self.function, IDEMPOTENCY_KEY)
        self.takes_progress = names_keyword(self.function, REPORT_PROGRESS)
        self.takes_ask = names_keyword(self.function, ASK_USER)

    def _valid_inputs(self) -> set[str] | None:
        """The parameters ``inputs_from_state`` may name (``None``: any).

        Subclasses whose function forwards its arguments (to a component, a pipeline) say where.
        """
        return function_inputs(self.function, self.parameters)

    def _check_inputs_from_state(self) -> None:
        valid = self._valid_inputs() if self.inputs_from_state else None
        if valid is None:
            return
        for state_key, param in (self.inputs_from_state or {}).items():
            if param not in valid:
                raise ToolConfigurationError(
                    f"inputs_from_state maps {state_key!r} to unknown parameter {param!r}. Valid parameters are: "
                    f"{as_set(valid)}. Tool {self.name!r} maps State key {state_key!r} to {param!r}, which is "
                    f"not a parameter of the tool; its parameters are {sorted(valid)}."
                )

    @property
    def tool_spec(self) -> dict[str, Any]:
        """The specification sent to the model: name, description and parameters."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def warm_up(self) -> None:
        """Prepare the tool for use; idempotent. Override for expensive set-up."""

    def validate_arguments(self, arguments: dict[str, Any]) -> None:
        """Raise ``ToolArgumentsError`` listing every way ``arguments`` breaks the schema."""
        if self._schema.is_valid(arguments):
            return
        problems = []
        for error in self._schema.errors(arguments):
            where = "/".join(str(p) for p in error.path)
            problems.append(f"{where}: {error.message}" if where else error.message)
        raise ToolArgumentsError(f"Invalid arguments for tool {self.name!r}: " + "; ".join(problems))

    def invoke(self, **kwargs: Any) -> Any:
        """Call the tool's function with ``kwargs``."""
        return self.function(**kwargs)

    async def invoke_async(self, **kwargs: Any) -> Any:
        """Call the tool from an event loop (``run_async``): by default, ``invoke`` in a worker thread.

        Override it for a tool that can be awaited (an MCP tool): then cancelling the run cancels the call.
        """
        return await run_in_worker(self.invoke, **kwargs)

    @property
    def awaitable(self) -> bool:
        """The tool has an ``invoke_async`` of its own (not ``invoke`` in a worker thread)."""
        return type(self).invoke_async is not Tool.invoke_async

    def to_dict(self) -> dict[str, Any]:
        """Serialize; the function is stored as its import path."""
        return {
            "type": object_path(type(self)),
            "data": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
                "function": serialize_callable(self.function),
                "outputs_to_string": _serialize_specs(self.outputs_to_string),
                "inputs_from_state": self.inputs_from_state,
                "outputs_to_state": _serialize_specs(self.outputs_to_state),
                "idempotent": self.idempotent,
                **({"timeout": self.timeout} if self.timeout is not None else {}),
                **({"retry": self.retry.to_dict()} if self.retry is not None else {}),
                **({"reconcile": serialize_callable(self.reconcile)} if self.reconcile is not None else {}),
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> Tool:
        """Deserialize; see ``agentfsm.serialization`` for ``allowed_modules``."""
        fields = dict(data["data"])
        function = import_path(fields["function"], allowed_modules, expect="callable")
        # A module-level ``@tool`` rebinds the function's name to the Tool: take its function back.
        fields["function"] = function.function if isinstance(function, Tool) else function
        fields["outputs_to_string"] = _deserialize_specs(fields.get("outputs_to_string"), allowed_modules)
        fields["outputs_to_state"] = _deserialize_specs(fields.get("outputs_to_state"), allowed_modules)
        if fields.get("retry") is not None:
            fields["retry"] = Retry.from_dict(fields["retry"], allowed_modules)
        fields["reconcile"] = reconcile_at(fields.get("reconcile"), allowed_modules)
        return cls(**fields)


#: Where a document names a tool.
TOOL = Slot("a Tool class", base=Tool)


def tool_from_dict(data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> Tool:
    """Deserialize any Tool subclass from its ``to_dict`` output."""
    return cast(Tool, object_from_dict(data, allowed_modules, TOOL, whole=True))
