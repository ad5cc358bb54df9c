"""ComponentTool and PipelineTool: objects with a ``run`` method, used as tools.

A *component* is any object with ``run(**kwargs) -> dict`` whose signature and type hints
describe its inputs (Haystack components are such objects; nothing here imports Haystack). An
``Agent`` is a component too: its tool takes ``messages`` (and its State keys), so an agent can be
a tool of another agent. A *pipeline* is any object with ``run(data: dict) -> dict``.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, Field, TypeAdapter, create_model

from agentfsm.errors import ConfigurationError, ConfigurationTypeError, SchemaGenerationError
from agentfsm.messages import ChatMessage
from agentfsm.serialization import Slot, object_from_dict, object_path, object_to_dict
from agentfsm.tools.from_function import (
    Parameter,
    add_property,
    fields_schema,
    json_schema_for,
    parameter_fields,
)
from agentfsm.tools.tool import Tool, _deserialize_specs, _serialize_specs, function_inputs, state_inputs

CHAT_MESSAGES_SCHEMA: dict[str, Any] = {
    "type": "array",
    "description": "The conversation to send, oldest first.",
    "items": {
        "type": "object",
        "properties": {
            "role": {"type": "string", "enum": ["user", "system", "assistant"]},
            "content": {"type": "string"},
        },
        "required": ["role", "content"],
    },
}


def snake_case(name: str) -> str:
    """``SerperDevWebSearch`` -> ``serper_dev_web_search``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _to_chat_messages(value: Any) -> list[ChatMessage]:
    builders = {
        "user": ChatMessage.from_user,
        "system": ChatMessage.from_system,
        "assistant": ChatMessage.from_assistant,
    }
    return [builders[item["role"]](item["content"]) for item in value]


def _is_chat_messages(hint: Any) -> bool:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        hint = args[0]
    return hint is ChatMessage or (typing.get_origin(hint) is list and typing.get_args(hint) == (ChatMessage,))


def _last_message_text(message: ChatMessage | None) -> str:
    return "" if message is None else message.text or ""


def param_descriptions(doc: str | None) -> dict[str, str]:
    """Each parameter's description in a docstring: Sphinx ``:param x:`` fields or a Google ``Args:`` section."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None  # the description that an indented line continues
    args_indent: int | None = None  # inside a Google ``Args:`` section: the header's indentation
    entry_indent: int | None = None
    for line in inspect.cleandoc(doc or "").splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if args_indent is not None and stripped and indent <= args_indent:
            args_indent = None  # the section ended
        if sphinx := _SPHINX_PARAM.match(stripped):
            current = found.setdefault(sphinx["name"], [])
            current.append(sphinx["text"])
            args_indent = None
        elif stripped in _GOOGLE_ARGS_HEADERS:
            args_indent, entry_indent, current = indent, None, None
        elif (
            args_indent is not None
            and (entry_indent is None or indent == entry_indent)
            and (google := _GOOGLE_PARAM.match(stripped))
        ):
            entry_indent = indent
            current = found.setdefault(google["name"], [])
            current.append(google["text"])
        elif current is not None and stripped and indent > (entry_indent or 0) and not stripped.startswith(":"):
            current.append(stripped)
        else:
            current = None
    return {name: " ".join(part for part in parts if part) for name, parts in found.items() if any(parts)}


_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(?P<name>\w+)\s*:\s*(?P<text>.*)$")
_GOOGLE_ARGS_HEADERS = frozenset({"Args:", "Arguments:", "Parameters:"})
_GOOGLE_PARAM = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")


def doc_summary(doc: str | None) -> str:
    """A docstring's first line (none when it opens with its parameters): Haystack's schema ``description``."""
    first = inspect.cleandoc(doc or "").partition("\n")[0].strip()
    return "" if first.startswith(":") or first in _DOC_SECTION_HEADERS else first


_DOC_SECTION_HEADERS = _GOOGLE_ARGS_HEADERS | {"Returns:", "Raises:", "Yields:", "Example:", "Examples:"}


class _DescribedTypes:
    """Types as a component's schema shows them: each dataclass a model whose fields are described.

    As Haystack describes a dataclass parameter: each field by its ``:param`` (or ``Args:``) entry
    in the class docstring, else ``"Field '<name>' of '<Class>'."``, with its default (a
    ``default_factory``'s value) — in nested dataclasses and in lists, dicts and unions of them too.
    Pydantic models describe themselves and are left as they are. One instance per schema, so that
    a dataclass used twice is one model (one ``$defs`` entry).
    """

    def __init__(self) -> None:
        self._models: dict[type, type[BaseModel]] = {}
        self._building: set[type] = set()

    def of(self, hint: Any) -> Any:
        """``hint`` with each dataclass in it replaced by its described model."""
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return self._model(hint)
        args = typing.get_args(hint)
        origin = typing.get_origin(hint)
        if not args or origin is typing.Literal:
            return hint
        resolved = tuple(self.of(arg) for arg in args)
        if all(new is old for new, old in zip(resolved, args, strict=True)):
            return hint
        if origin is typing.Annotated:
            return typing.Annotated[(resolved[0], *hint.__metadata__)]
        if origin in (typing.Union, types.UnionType):
            return typing.Union[resolved]  # noqa: UP007 (a union built from a tuple of types)
        return origin[resolved]

    def _model(self, cls: type) -> Any:
        if cls in self._models:
            return self._models[cls]
        if cls in self._building:  # a dataclass that holds itself: pydantic describes the inner one
            return cls
        self._building.add(cls)
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except NameError as exc:
            raise SchemaGenerationError(f"Cannot resolve the type hints of {cls!r}: {exc}") from exc
        documented = param_descriptions(inspect.getdoc(cls))
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            default: Any = ...
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            description = documented.get(f.name, f"Field '{f.name}' of '{cls.__name__}'.")
            fields[f.name] = (self.of(hints[f.name]), Field(default, description=description))
        self._models[cls] = create_model(cls.__name__, **fields)
        self._building.discard(cls)
        return self._models[cls]


def _needs_conversion(hint: Any) -> bool:
    """Whether JSON arguments for ``hint`` must be converted: it is or holds a dataclass or a pydantic model."""
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or issubclass(hint, BaseModel)):
        return True
    return any(_needs_conversion(arg) for arg in typing.get_args(hint))


#: Where a document names the component a tool wraps, and the pipeline.
COMPONENT = Slot("a component class (with run())", methods=("run", "from_dict"))
PIPELINE = Slot("a pipeline class (with run())", methods=("run", "from_dict"))


class ComponentTool(Tool):
    """A Tool that calls a component's ``run``; the schema comes from ``run``'s signature.

    The schema is the one Haystack generates for the same component: its ``description`` is the
    first line of ``run``'s docstring, and every parameter is described — by ``Annotated``, else by
    ``run``'s docstring (``:param x:`` lines or a Google ``Args:`` section), else as
    ``"Input 'x' for the component."``; a dataclass parameter's fields are described by the
    dataclass's docstring, else as ``"Field 'f' of 'Class'."``, nested and in lists too. The tool's
    own description defaults to the component's docstring, else to its name.

    The model's arguments are converted to what ``run`` takes: dataclasses and pydantic models (and
    lists of them) are built from their JSON objects, and parameters typed ``ChatMessage`` /
    ``list[ChatMessage]`` are offered to the model as a list of ``{"role", "content"}`` objects.
    Parameters with defaults whose types JSON schema cannot describe (callbacks, snapshots...) are
    not offered to the model.
    """

    def __init__(
        self,
        component: Any,
        name: str | None = None,
        description: str | None = None,
        parameters: dict[str, Any] | None = None,
        *,
        outputs_to_string: dict[str, Any] | None = None,
        inputs_from_state: dict[str, str] | None = None,
        outputs_to_state: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        run = getattr(component, "run", None)
        if isinstance(component, type) or not callable(run):
            raise ConfigurationTypeError(
                f"Object {component!r} is not a component: pass an instance with a run(**kwargs) -> dict method."
            )
        from agentfsm.agent import Agent

        self.component = component
        self._is_warmed_up = False
        self._message_params: set[str] = set()
        #: How the model's JSON arguments become what ``run`` takes, per parameter that needs it.
        self._converters: dict[str, TypeAdapter[Any]] = {}
        skip = set(state_inputs(inputs_from_state))
        if isinstance(component, Agent):
            self._message_params = {"messages"}
            if parameters is None:
                parameters = self._agent_parameters(component, skip)
        else:
            hints = self._run_hints(run)
            if parameters is None:
                parameters = self._run_parameters(run, hints, skip)
        if outputs_to_string is None and isinstance(component, Agent):
            outputs_to_string = {"source": "last_message", "handler": _last_message_text}
        name = name or snake_case(type(component).__name__)
        super().__init__(
            name=name,
            description=description if description is not None else inspect.getdoc(component) or name,
            parameters=parameters,
            function=self._call_component,
            outputs_to_string=outputs_to_string,
            inputs_from_state=inputs_from_state,
            outputs_to_state=outputs_to_state,
        )

    def _agent_parameters(self, agent: Any, skip: set[str]) -> dict[str, Any]:
        """An agent takes the conversation, and the keys of its State schema."""
        properties: dict[str, Any] = {"messages": CHAT_MESSAGES_SCHEMA}
        schema: dict[str, Any] = {"type": "object", "properties": properties, "required": ["messages"]}
        for key, definition in agent.state_schema.items():
            if key not in skip:
                add_property(schema, key, json_schema_for(definition["type"], key))
        return schema

    def _run_hints(self, run: Callable[..., Any]) -> dict[str, Any]:
        """``run``'s type hints; notes the parameters whose arguments are converted (messages, dataclasses, models)."""
        try:
            hints = typing.get_type_hints(run, include_extras=True)
        except NameError as exc:
            raise SchemaGenerationError(f"Cannot resolve the type hints of {run!r}: {exc}") from exc
        for name, hint in hints.items():
            if name == "return":
                continue
            if _is_chat_messages(hint):
                self._message_params.add(name)
            elif _needs_conversion(hint):
                self._converters[name] = TypeAdapter(hint)
        return hints

    def _run_parameters(self, run: Callable[..., Any], hints: dict[str, Any], skip: set[str]) -> dict[str, Any]:
        """The schema of ``run``'s parameters, described as Haystack describes a component's inputs.

        The schema's ``description`` is the first line of ``run``'s docstring; each parameter's is its
        ``Annotated`` text, else its docstring entry, else ``"Input '<name>' for the component."``;
        dataclasses (also nested, and in lists) describe their fields the same way (``_DescribedTypes``).
        """
        signature = inspect.signature(run)
        undescribable = set()
        for name, param in signature.parameters.items():
            hint = hints.get(name)
            if name in self._message_params:
                continue
            if param.default is not inspect.Parameter.empty and hint is not None:
                try:
                    json_schema_for(hint, name)
                except SchemaGenerationError:
                    undescribable.add(name)
        doc = inspect.getdoc(run)
        documented = param_descriptions(doc)
        described = _DescribedTypes()
        fields = parameter_fields(run, skip | self._message_params | undescribable)
        for name, (hint, default, description) in fields.items():
            fallback = documented.get(name, f"Input '{name}' for the component.")
            fields[name] = Parameter(described.of(hint), default, fallback if description is None else description)
        schema = fields_schema(getattr(run, "__name__", "run"), fields, doc_summary(doc))
        for name in sorted(self._message_params - skip):
            schema.setdefault("properties", {})[name] = CHAT_MESSAGES_SCHEMA
            if signature.parameters[name].default is inspect.Parameter.empty:
                schema.setdefault("required", []).append(name)
        return schema

    def _valid_inputs(self) -> set[str] | None:
        """The parameters of the component's ``run`` (``None`` when it takes ``**kwargs``, as an agent does)."""
        return function_inputs(self.component.run, self.parameters)

    def _call_component(self, **kwargs: Any) -> Any:
        for name in self._message_params & set(kwargs):
            kwargs[name] = _to_chat_messages(kwargs[name])
        for name, adapter in self._converters.items():
            if name in kwargs:
                kwargs[name] = adapter.validate_python(kwargs[name])
        return self.component.run(**kwargs)

    def warm_up(self) -> None:
        """Warm up the component (if it has ``warm_up``), once: later calls do nothing until ``close``."""
        if self._is_warmed_up:
            return
        warm = getattr(self.component, "warm_up", None)
        if callable(warm):
            warm()
        self._is_warmed_up = True

    async def warm_up_async(self) -> None:
        """Like ``warm_up``; the component's ``warm_up_async`` is awaited if it has one (an agent does)."""
        if self._is_warmed_up:
            return
        warm_async = getattr(self.component, "warm_up_async", None)
        if callable(warm_async):
            await warm_async()
            self._is_warmed_up = True
        else:
            self.warm_up()

    def close(self) -> None:
        """Close the component (if it has ``close``): an inner agent's MCP sessions end with the outer agent.

        The component warms up again at its next use.
        """
        close = getattr(self.component, "close", None)
        if callable(close):
            close()
        self._is_warmed_up = False

    async def close_async(self) -> None:
        """Like ``close``; the component's ``close_async`` is awaited if it has one."""
        close_async = getattr(self.component, "close_async", None)
        if callable(close_async):
            await close_async()
            self._is_warmed_up = False
        else:
            self.close()

    def _config(self) -> dict[str, Any]:
        return {"component": object_to_dict(self.component), **self._tool_config()}

    def _tool_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "outputs_to_string": _serialize_specs(self.outputs_to_string),
            "inputs_from_state": self.inputs_from_state,
            "outputs_to_state": _serialize_specs(self.outputs_to_state),
        }

    def to_dict(self) -> dict[str, Any]:
        """Serialize the tool and its component (which needs ``to_dict``/``from_dict``)."""
        return {"type": object_path(type(self)), "data": self._config()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> ComponentTool:
        """Deserialize; the component's class is resolved through the allow-list."""
        body = data["data"]
        component = object_from_dict(body["component"], allowed_modules, COMPONENT)
        return cls(component, **cls._tool_kwargs(body, allowed_modules))

    @staticmethod
    def _tool_kwargs(body: dict[str, Any], allowed_modules: Iterable[str] | None) -> dict[str, Any]:
        """The inverse of ``_tool_config``."""
        return {
            "name": body["name"],
            "description": body["description"],
            "parameters": body["parameters"],
            "outputs_to_string": _deserialize_specs(body.get("outputs_to_string"), allowed_modules),
            "inputs_from_state": body.get("inputs_from_state"),
            "outputs_to_state": _deserialize_specs(body.get("outputs_to_state"), allowed_modules),
        }


class PipelineTool(ComponentTool):
    """A Tool that runs a pipeline: ``run(data: dict) -> dict`` with ``{component: {input: value}}`` data.

    ``input_mapping`` maps each tool parameter to pipeline inputs (``{"query": ["embedder.text"]}``)
    and ``output_mapping`` pipeline outputs to result keys (``{"retriever.documents": "documents"}``).
    Without them, a pipeline that describes itself (``inputs()``/``outputs()``, as Haystack's do)
    exposes all its inputs and outputs.
    """

    def __init__(
        self,
        pipeline: Any,
        *,
        name: str,
        description: str,
        input_mapping: dict[str, list[str]] | None = None,
        output_mapping: dict[str, str] | None = None,
        parameters: dict[str, Any] | None = None,
        outputs_to_string: dict[str, Any] | None = None,
        inputs_from_state: dict[str, str] | None = None,
        outputs_to_state: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        if isinstance(pipeline, type) or not callable(getattr(pipeline, "run", None)):
            raise ConfigurationError(f"{pipeline!r} is not a pipeline: pass an object with run(data: dict) -> dict.")
        self.pipeline = pipeline
        sockets = self._sockets(pipeline)
        self.input_mapping = input_mapping if input_mapping is not None else self._default_inputs(sockets)
        self.output_mapping = output_mapping if output_mapping is not None else self._default_outputs(pipeline)
        for param, targets in self.input_mapping.items():
            if not isinstance(targets, list) or not all(isinstance(t, str) and "." in t for t in targets):
                raise ConfigurationError(f"input_mapping[{param!r}] must be a list of 'component.input' paths.")
        for path in self.output_mapping:
            if "." not in path:
                raise ConfigurationError(f"output_mapping key {path!r} must be a 'component.output' path.")
        if parameters is None:
            parameters = self._parameters(sockets, set(state_inputs(inputs_from_state)))
        super().__init__(
            _PipelineRunner(self),
            name=name,
            description=description,
            parameters=parameters,
            outputs_to_string=outputs_to_string,
            inputs_from_state=inputs_from_state,
            outputs_to_state=outputs_to_state,
        )

    @staticmethod
    def _sockets(pipeline: Any) -> dict[str, dict[str, Any]]:
        inputs = getattr(pipeline, "inputs", None)
        return dict(inputs()) if callable(inputs) else {}

    @staticmethod
    def _default_inputs(sockets: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
        if not sockets:
            raise ConfigurationError("This pipeline does not describe its inputs (no inputs()): pass input_mapping.")
        mapping: dict[str, list[str]] = {}
        for component, inputs in sockets.items():
            for socket in inputs:
                mapping.setdefault(socket, []).append(f"{component}.{socket}")
        return mapping

    @staticmethod
    def _default_outputs(pipeline: Any) -> dict[str, str]:
        outputs = getattr(pipeline, "outputs", None)
        if not callable(outputs):
            return {}
        return {f"{component}.{socket}": socket for component, sockets in outputs().items() for socket in sockets}

    def _parameters(self, sockets: dict[str, dict[str, Any]], skip: set[str]) -> dict[str, Any]:
        required: list[str] = []
        schema: dict[str, Any] = {"type": "object", "properties": {}, "required": required}
        for param, targets in self.input_mapping.items():
            if param in skip:
                continue
            component, _, socket = targets[0].partition(".")
            info = sockets.get(component, {}).get(socket)
            if info is None:
                raise ConfigurationError(
                    f"Cannot tell the type of pipeline input {targets[0]!r}: pass parameters (a JSON schema) for this tool."
                )
            add_property(schema, param, json_schema_for(info.get("type", Any), param))
            description = self._socket_description(component, socket)
            if description and "description" not in schema["properties"][param]:
                schema["properties"][param]["description"] = description
            if info.get("is_mandatory", True):
                required.append(param)
        return schema

    def _socket_description(self, component: str, socket: str) -> str | None:
        """A pipeline input's description, from its component's ``run`` docstring (Haystack pipelines name their components)."""
        get_component = getattr(self.pipeline, "get_component", None)
        if not callable(get_component):
            return None
        run = getattr(get_component(component), "run", None)
        return param_descriptions(inspect.getdoc(run)).get(socket) if callable(run) else None

    def _valid_inputs(self) -> set[str] | None:
        """The tool's parameters: the keys of ``input_mapping``."""
        return set(self.input_mapping)

    def run_pipeline(self, **kwargs: Any) -> dict[str, Any]:
        """Spread the tool's arguments over the pipeline inputs, run it, and map its outputs."""
        data: dict[str, dict[str, Any]] = {}
        for param, value in kwargs.items():
            for target in self.input_mapping.get(param, []):
                component, _, socket = target.partition(".")
                data.setdefault(component, {})[socket] = value
        result = self.pipeline.run(data)
        if not self.output_mapping:
            return dict(result)
        mapped = {}
        for path, key in self.output_mapping.items():
            component, _, socket = path.partition(".")
            if socket in result.get(component, {}):
                mapped[key] = result[component][socket]
        return mapped

    def _config(self) -> dict[str, Any]:
        return {
            **self._tool_config(),
            "pipeline": object_to_dict(self.pipeline),
            "input_mapping": self.input_mapping,
            "output_mapping": self.output_mapping,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> PipelineTool:
        """Deserialize; the pipeline's class is resolved through the allow-list."""
        body = data["data"]
        return cls(
            object_from_dict(body["pipeline"], allowed_modules, PIPELINE),
            input_mapping=body["input_mapping"],
            output_mapping=body["output_mapping"],
            **cls._tool_kwargs(body, allowed_modules),
        )


class _PipelineRunner:
    """The component a PipelineTool calls: maps the arguments in and the results out."""

    def __init__(self, tool: PipelineTool) -> None:
        self._tool = tool

    def run(self, **kwargs: Any) -> dict[str, Any]:
        return self._tool.run_pipeline(**kwargs)

    def warm_up(self) -> None:
        warm = getattr(self._tool.pipeline, "warm_up", None)
        if callable(warm):
            warm()
