"""Confirmation UIs: ask a person about one tool call, on the console."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentfsm._extras import extra_needed
from agentfsm.hitl.types import ConfirmationUIResult
from agentfsm.schemas import CompiledSchema
from agentfsm.serialization import object_path


class ConfirmationUI:
    """Base class of confirmation UIs: ``get_user_confirmation`` returns what the person answered.

    A UI that declares a ``tool_schema`` keyword parameter is also given the tool's parameter schema
    (to check edited arguments); one written to the three-argument signature is called with those.
    """

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        """Ask about one call."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_user_confirmation().")

    def to_dict(self) -> dict[str, Any]:
        """Serialize the UI."""
        return {"type": object_path(type(self)), "init_parameters": {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfirmationUI:
        """Deserialize the UI."""
        return cls(**data.get("init_parameters", {}))


def schema_problems(tool_schema: dict[str, Any] | None, params: Any) -> str | None:
    """Why ``params`` do not fit ``tool_schema`` (None when they do, or when there is no schema)."""
    if not isinstance(params, dict):
        return "the parameters must be a JSON object"
    if tool_schema is None:
        return None
    errors = CompiledSchema(tool_schema, "The tool's schema").errors(params)
    return "; ".join(e.message for e in errors) or None


class SimpleConsoleUI(ConfirmationUI):
    """Asks on standard input and output: confirm, reject (with feedback) or modify (with JSON parameters).

    Answers that cannot be used (an unknown choice, JSON that does not parse, parameters that break
    the tool's schema) ask again; they never end the run.
    """

    def __init__(self, input_function: Callable[[str], str] = input, output: Callable[[str], Any] = print) -> None:
        self._input = input_function
        self._print = output

    def get_user_confirmation(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        *,
        tool_schema: dict[str, Any] | None = None,
    ) -> ConfirmationUIResult:
        """Show the call and read the answer."""
        self._print(f"Tool: {tool_name}\nDescription: {tool_description}\nArguments: {json.dumps(tool_params)}")
        while True:
            choice = self._input("Confirm [y], reject [n] or modify [m]? ").strip().lower()
            if choice in ("y", "yes", "confirm"):
                return ConfirmationUIResult("confirm")
            if choice in ("n", "no", "reject"):
                feedback = self._input("Why (optional)? ").strip()
                return ConfirmationUIResult("reject", feedback=feedback or None)
            if choice in ("m", "modify"):
                raw = self._input("New arguments as JSON: ")
                try:
                    params = json.loads(raw)
                except json.JSONDecodeError as exc:
                    self._print(f"That is not JSON ({exc.msg}); try again.")
                    continue
                problem = schema_problems(tool_schema, params)
                if problem:
                    self._print(f"Those arguments do not fit the tool: {problem}; try again.")
                    continue
                return ConfirmationUIResult("modify", new_tool_params=params)
            self._print("Answer y, n or m.")


class RichConsoleUI(ConfirmationUI):
    """Like ``SimpleConsoleUI``, drawn with ``rich`` (``pip install 'agentfsm[rich]'``).

    ``console`` is a ``rich.console.Console`` (a new one on the terminal by default); ``stream``, a
    text stream to read answers from instead of the keyboard.
    """

    def __init__(self, console: Any = None, stream: Any = None) -> None:
        with extra_needed("RichConsoleUI", "rich"):
            from rich.console import Console
        self._console = console or Console()
        self._stream = stream

    def get_user_confirmation(
        self,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        *,
        tool_schema: dict[str, Any] | None = None,
    ) -> ConfirmationUIResult:
        """Show the call in a panel and read the answer."""
        from rich.panel import Panel
        from rich.prompt import Prompt
        from rich.syntax import Syntax

        body = Syntax(json.dumps(tool_params, indent=2), "json")
        self._console.print(Panel(body, title=f"[bold]{tool_name}[/bold]", subtitle=tool_description))
        while True:
            choice = Prompt.ask(
                "Confirm, reject or modify?", choices=["y", "n", "m"], console=self._console, stream=self._stream
            )
            if choice == "y":
                return ConfirmationUIResult("confirm")
            if choice == "n":
                feedback = Prompt.ask("Why (optional)?", default="", console=self._console, stream=self._stream).strip()
                return ConfirmationUIResult("reject", feedback=feedback or None)
            raw = Prompt.ask("New arguments as JSON", console=self._console, stream=self._stream)
            try:
                params = json.loads(raw)
            except json.JSONDecodeError as exc:
                self._console.print(f"[red]That is not JSON ({exc.msg}); try again.[/red]")
                continue
            problem = schema_problems(tool_schema, params)
            if problem:
                self._console.print(f"[red]Those arguments do not fit the tool: {problem}; try again.[/red]")
                continue
            return ConfirmationUIResult("modify", new_tool_params=params)

    def to_dict(self) -> dict[str, Any]:
        """Serialize the UI (the console is not kept)."""
        return {"type": object_path(type(self)), "init_parameters": {}}
