"""Tools and scripts used by several test modules (module-level so that they serialize)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import time
import traceback
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from agentfsm import AgentSnapshot, ChatMessage, State, ToolCall, hook, tool

SIDE_EFFECTS: list[str] = []

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, seconds: float = 60.0) -> T:
    """``condition()``'s first true value, polled every 20 ms; fails, naming ``what``, after ``seconds``.

    Tests that act on another thread or process (signal it, kill it, cut its connection) wait for
    it to say it is ready (a line, a file, a state) instead of sleeping: how long that takes is up
    to the machine's load, so the bound is generous and only there to fail clearly.
    """
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.02)
    return value


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``agentfsm ARGS`` run in this process, read as a finished process: exit code, stdout, stderr.

    What a separate process adds (the interpreter's start, ``import agentfsm``: about half a second)
    is the same for every command, so most tests call the CLI's ``main`` here and keep a real
    process where one is what they test: the entry point, DBOS, signals, another process deciding.
    An exception ``main`` lets through is exit code 1 with its traceback on stderr, as the
    interpreter's own ending would be; argparse's ``SystemExit`` keeps its code.
    """
    from agentfsm.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 2
        except Exception:
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess(["agentfsm", *args], code, out.getvalue(), err.getvalue())


@tool
def add(a: Annotated[int, "first"], b: Annotated[int, "second"]) -> int:
    """Add two integers."""
    SIDE_EFFECTS.append(f"add({a},{b})")
    return a + b


@tool
def fail(reason: str) -> str:
    """Always raises."""
    raise RuntimeError(reason)


@tool
def finish(answer: str) -> str:
    """Give the final answer."""
    return answer


def call(name: str, call_id: str | None = None, **arguments: object) -> ToolCall:
    """A tool call for scripts."""
    return ToolCall(name, dict(arguments), id=call_id)


def calls(*tool_calls: ToolCall, text: str | None = None) -> ChatMessage:
    """An assistant reply with tool calls."""
    return ChatMessage.from_assistant(text, tool_calls=list(tool_calls))


@tool(outputs_to_state={"notes": {"source": "note"}}, inputs_from_state={"prefix": "prefix"})
def remember(text: str, prefix: str = "") -> dict[str, str]:
    """Write a note into State."""
    SIDE_EFFECTS.append(f"remember({text})")
    return {"note": prefix + text}


RESUME_SCHEMA = {"notes": {"type": list[str]}, "prefix": {"type": str}}


CRASH_ON: set[str] = set()


@tool
def flaky(label: str) -> str:
    """Record the call; crash the process-like way (KeyboardInterrupt) when told to."""
    if label in CRASH_ON:
        CRASH_ON.discard(label)
        raise KeyboardInterrupt(f"crash while running {label}")
    SIDE_EFFECTS.append(f"flaky({label})")
    return label.upper()


@tool
def logged_step(label: str) -> str:
    """Append ``label`` to the file named by $AGENTFSM_TEST_LOG; exit the process if it equals $AGENTFSM_TEST_KILL."""
    import os

    if os.environ.get("AGENTFSM_TEST_KILL") == label:
        os._exit(9)
    with open(os.environ["AGENTFSM_TEST_LOG"], "a", encoding="utf-8") as log:
        log.write(label + "\n")
    return label


def rerun_in_doubt(snapshot: AgentSnapshot) -> list[Any]:
    """Decisions to run again every call of ``snapshot`` whose outcome is unknown (it may have run)."""
    from agentfsm.hitl import ToolExecutionDecision

    return [ToolExecutionDecision(name, True, key) for key, name in snapshot.outcome_unknown_calls().items()]


KILL_SCRIPT = [calls(call("logged_step", "s1", label="one"), call("logged_step", "s2", label="two")), "done"]


# -- hooks (module-level, so that agents holding them serialize) --------------------------------------


@hook
def stop_at_once(state: State) -> None:
    """Ask the run to stop."""
    state.set("stop_run", "stopped by a hook")


@hook
def continue_once(state: State) -> None:
    """Keep the run going past its first exit only."""
    if state.get("step_count") == 1:
        state.set("continue_run", True)


@hook
def always_continue(state: State) -> None:
    """Keep the run going past every exit (max_agent_steps ends it)."""
    state.set("continue_run", True)


@hook
def raise_in_hook(state: State) -> None:
    """Fail."""
    raise RuntimeError("the hook failed")


# -- confirmation UIs for tests (module-level, so that agents holding them serialize) -----------------


class ScriptedUI:
    """Answers confirmations from a list of (action, feedback, new_tool_params); records what it was asked."""

    def __init__(self, answers: list[list[Any]]) -> None:
        self.answers = [list(a) for a in answers]
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        from agentfsm.hitl import ConfirmationUIResult

        self.asked.append((tool_name, tool_params))
        action, feedback, params = self.answers.pop(0)
        return ConfirmationUIResult(action, feedback, params)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "tests.helpers.ScriptedUI", "init_parameters": {"answers": self.answers}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptedUI:
        return cls(data["init_parameters"]["answers"])


class RuleUI:
    """Decides by the call's arguments, the same way every time: reject an odd ``a``, change ``a == 2`` to 20."""

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any], **kwargs: Any
    ) -> Any:
        from agentfsm.hitl import ConfirmationUIResult

        a = tool_params.get("a")
        if isinstance(a, int) and a % 2:
            return ConfirmationUIResult("reject", feedback=f"{a} is odd")
        if a == 2:
            return ConfirmationUIResult("modify", new_tool_params={**tool_params, "a": 20})
        return ConfirmationUIResult("confirm")

    def to_dict(self) -> dict[str, Any]:
        return {"type": "tests.helpers.RuleUI", "init_parameters": {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleUI:
        return cls()


@hook
def cancel_from_hook(state: State, hook_context: dict[str, Any]) -> None:
    """Cancel the run through the ``RunHandle`` its hook context holds, as another thread would."""
    hook_context["handle"].cancel()
