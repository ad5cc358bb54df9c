"""Structured output: the final answer of a run, checked against a type the agent declares.

``Agent(output_type=...)`` takes a pydantic model, a dataclass or a JSON schema (a ``dict``).
``OutputType`` turns it into a JSON schema for the model and a check for its answer: the answer
(a text reply, or the arguments of a call to the final-answer tool) is parsed as JSON and
validated (pydantic for classes, ``jsonschema`` for a schema); the result is the parsed value
(an instance of the class, or the JSON value). How the schema reaches the model depends on the
chat generator: one that sets ``supports_response_format = True`` (the OpenAI-compatible client,
the scripted model) is given ``generation_kwargs={"response_format": ...}`` in the Chat
Completions form; any other is shown a tool, ``final_answer``, whose parameters are the schema.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import pydantic

from agentfsm.errors import ConfigurationTypeError, DeserializationError
from agentfsm.schemas import CompiledSchema
from agentfsm.serialization import import_path, object_path
from agentfsm.slices.output import FINAL_ANSWER_TOOL, RETRY_META_KEY
from agentfsm.tools.tool import Tool

__all__ = ["FINAL_ANSWER_TOOL", "RETRY_META_KEY", "FinalAnswerTool", "OutputType", "resolve_output_type"]

#: Where schemas keep the definitions their ``$ref``s point to (2020-12's name and draft 7's).
_DEFINITIONS = ("$defs", "definitions")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(.*?)\n?```$", re.DOTALL)


class OutputType:
    """What ``Agent(output_type=...)`` was given, as a JSON schema and a check of answers against it.

    Args:
        output_type: A pydantic model class, a dataclass, or a JSON schema (a ``dict``).
    """

    __slots__ = ("_adapter", "_final_answer", "_validator", "name", "parameters", "schema", "source", "wrapped")

    def __init__(self, output_type: Any) -> None:
        #: The type or schema as given.
        self.source = output_type
        self._adapter: pydantic.TypeAdapter[Any] | None = None
        self._validator: CompiledSchema | None = None
        if isinstance(output_type, dict):
            self._validator = CompiledSchema(output_type, "output_type")
            self.schema: dict[str, Any] = output_type
            title = output_type.get("title")
            name = title if isinstance(title, str) else "output"
        elif isinstance(output_type, type) and (
            issubclass(output_type, pydantic.BaseModel) or dataclasses.is_dataclass(output_type)
        ):
            self._adapter = pydantic.TypeAdapter(output_type)
            self.schema = self._adapter.json_schema()
            name = output_type.__name__
        else:
            raise ConfigurationTypeError(
                f"output_type must be a pydantic model class, a dataclass or a JSON schema (a dict), got {output_type!r}."
            )
        #: A name for the schema, as the APIs take it (letters, digits, ``_`` and ``-``).
        self.name = re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64] or "output"
        #: The schema with an object at its root, as tools and APIs take it; ``wrapped``: the answer is its ``answer``.
        self.parameters, self.wrapped = _object_rooted(self.schema)
        # Built (and its schema compiled) here, so that a schema no tool can take fails at ``Agent(...)``.
        self._final_answer = FinalAnswerTool(
            FINAL_ANSWER_TOOL,
            "Give your final answer by calling this tool: its arguments are the answer.",
            self.parameters,
            _echo,
        )

    def response_format(self) -> dict[str, Any]:
        """The schema as the Chat Completions API's ``response_format`` (llama.cpp's server takes it too).

        An object's schema goes out with its fields at the root (a recursive model's root ``$ref``
        resolved); any other as it is, since the answer is then the bare value.
        """
        schema = self.schema if self.wrapped else self.parameters
        return {"type": "json_schema", "json_schema": {"name": self.name, "schema": schema}}

    def final_answer_tool(self) -> Tool:
        """The tool the model calls with its final answer as the arguments (for clients without a response format)."""
        return self._final_answer

    def check(self, answer: str | Mapping[str, Any]) -> tuple[Any, list[str]]:
        """The parsed answer and ``[]``, or ``None`` and what is wrong with it (one line per problem, ten at most).

        A problem quoting a value of the answer is cut short: a wrong answer is not sent back whole.

        ``answer`` is a text reply (JSON, possibly in a Markdown code fence) or a final-answer tool's arguments.
        """
        if isinstance(answer, str):
            text = answer.strip()
            fenced = _FENCE.match(text)
            try:
                value = orjson.loads(fenced.group(1) if fenced else text)
            except orjson.JSONDecodeError as exc:
                return None, [f"the answer is not JSON ({exc})"]
        else:
            value = dict(answer)
            if self.wrapped:
                value = value.get("answer")
        if self._adapter is not None:
            try:
                return self._adapter.validate_python(value), []
            except pydantic.ValidationError as exc:
                return None, _listed([_pydantic_problem(e) for e in exc.errors(include_url=False, include_input=False)])
        assert self._validator is not None
        problems = [_schema_problem(e) for e in self._validator.errors(value)]
        return (None, _listed(problems)) if problems else (value, [])

    def to_data(self) -> Any:
        """The type as data: a class by its import path, a JSON schema as itself."""
        return dict(self.schema) if self._adapter is None else object_path(self.source)

    @classmethod
    def from_data(cls, data: Any, allowed_modules: Iterable[str] | None = None) -> OutputType:
        """Invert ``to_data``: a class path resolves through the allow-list (``agentfsm.serialization``)."""
        return cls(resolve_output_type(data, allowed_modules))


def resolve_output_type(data: Any, allowed_modules: Iterable[str] | None = None) -> Any:
    """The ``output_type`` that ``OutputType.to_data`` wrote: a schema as itself, a class through the allow-list."""
    if isinstance(data, dict):
        return data
    if not isinstance(data, str):
        raise DeserializationError(f"output_type is a class path or a JSON schema, got {type(data).__name__}.")
    cls = import_path(data, allowed_modules)
    if not (isinstance(cls, type) and (issubclass(cls, pydantic.BaseModel) or dataclasses.is_dataclass(cls))):
        raise DeserializationError(f"{data!r} is not a pydantic model or a dataclass: it cannot be an output_type.")
    return cls


class FinalAnswerTool(Tool):
    """The final-answer tool: its arguments are checked as the answer (``output_invalid``), not as a call.

    Arguments that do not fit are not refused when the call is checked: the call runs (and returns
    them), and the answer's check in EXIT_CHECK sends the model back with the problems, on the
    agent's ``output_retries``.
    """

    is_answer = True

    def validate_arguments(self, arguments: dict[str, Any]) -> None:
        """Accept any arguments: the answer is checked once the call ran."""


def _object_rooted(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``schema`` with an object at its root (tools and APIs take only objects), and whether it was wrapped.

    An object's schema stays as it is; a root ``$ref`` to an object's definition (pydantic's shape for a
    recursive model) is resolved in place, ``$defs`` kept at the root so that the references inside
    resolve; any other schema becomes the one property, ``answer``, of an object, its ``$defs`` moved to
    the wrapper's root (as ``definitions``) for the same reason.
    """
    ref, defs = schema.get("$ref"), schema.get("$defs")
    if ref is None:
        if schema.get("type", "object") == "object":
            return schema, False
    elif isinstance(ref, str) and ref.startswith("#/$defs/") and isinstance(defs, dict):
        target = defs.get(ref.removeprefix("#/$defs/"))
        if isinstance(target, dict) and target.get("type") == "object":
            return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}, False
    hoisted = {k: v for k, v in schema.items() if k in _DEFINITIONS}
    inner = {k: v for k, v in schema.items() if k not in _DEFINITIONS}
    return {"type": "object", "properties": {"answer": inner}, "required": ["answer"], **hoisted}, True


def _echo(**arguments: Any) -> dict[str, Any]:
    return arguments


#: What the model is told of a wrong answer: so many problems, each so long at most (a problem may
#: quote the answer's values, and the answer may be megabytes).
_MAX_PROBLEMS = 10
_MAX_PROBLEM_CHARS = 300


def _listed(problems: list[str]) -> list[str]:
    """``problems`` as the model is told them: the first ``_MAX_PROBLEMS``, each cut to ``_MAX_PROBLEM_CHARS``."""
    shown = [p if len(p) <= _MAX_PROBLEM_CHARS else p[:_MAX_PROBLEM_CHARS] + "... (cut short)" for p in problems]
    if len(shown) > _MAX_PROBLEMS:
        shown = [*shown[:_MAX_PROBLEMS], f"... and {len(shown) - _MAX_PROBLEMS} more problems"]
    return shown


def _pydantic_problem(error: Any) -> str:
    where = "/".join(str(p) for p in error.get("loc", ()))
    return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))


def _schema_problem(error: Any) -> str:
    where = "/".join(str(p) for p in error.path)
    return f"{where}: {error.message}" if where else error.message
