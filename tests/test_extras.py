"""Every feature that needs an extra says so in one line, the same typed error everywhere: ``MissingExtraError``.

Each case runs in a fresh interpreter where the extra's module cannot be imported
(``sys.modules[name] = None``, as when it is not installed), and does what a user would.
"""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentfsm import diagrams
from agentfsm.errors import AgentFSMError, MissingExtraError, MissingRendererError

ROOT = Path(__file__).resolve().parents[1]

#: Imports the ``blocked`` modules cannot give, runs ``code``, and prints what it raised as JSON.
PROBE = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None
from agentfsm.errors import AgentFSMError, MissingExtraError
try:
    exec({code!r})
except MissingExtraError as exc:
    raised = {{"message": str(exc), "extra": exc.extra, "feature": exc.feature, "name": exc.name}}
    raised["kinds"] = [isinstance(exc, ImportError), isinstance(exc, AgentFSMError)]
    print(json.dumps(raised))
else:
    print(json.dumps(None))
"""

#: A catalog large enough to be searched (``search_threshold`` is 8 by default).
CATALOG = """
from agentfsm import SearchableToolset, Tool
tools = [Tool(f"t{i}", "a tool", {"type": "object", "properties": {}}, lambda: "") for i in range(8)]
SearchableToolset(tools).warm_up()
"""
#: An agent with more paths than ``max_paths=1`` lets the checker explore: the rest is sampled.
SAMPLED_CHECK = """
from agentfsm import Agent, tool
from agentfsm.checking import check_agent
from agentfsm.generators import ScriptedChatGenerator

@tool
def add(a: int, b: int) -> int:
    '''Add two integers.'''
    return a + b

check_agent(Agent(chat_generator=ScriptedChatGenerator([]), tools=[add]), max_steps=1, max_paths=1)
"""

CASES = {
    "durable": (["dbos"], "import agentfsm.durable", "agentfsm.durable", "dbos"),
    "web": (["starlette"], "import agentfsm.web", "agentfsm.web", "web"),
    "web forms": (["python_multipart", "multipart"], "import agentfsm.web", "agentfsm.web", "web"),
    "mcp": (["mcp"], "import agentfsm.mcp", "agentfsm.mcp", "mcp"),
    "ag-ui": (["ag_ui"], "import agentfsm.ag_ui", "agentfsm.ag_ui", "ag-ui"),
    "ag-ui server": (["starlette"], "import agentfsm.ag_ui", "agentfsm.ag_ui", "ag-ui"),
    "a2a": (["a2a"], "import agentfsm.a2a", "agentfsm.a2a", "a2a"),
    "a2a server": (["sse_starlette"], "import agentfsm.a2a", "agentfsm.a2a", "a2a"),
    "telemetry": (["opentelemetry"], "import agentfsm.telemetry", "agentfsm.telemetry", "otel"),
    "testing": (["hypothesis"], "import agentfsm.testing", "agentfsm.testing", "testing"),
    "sampling": (["hypothesis"], SAMPLED_CHECK, "check_agent's sampling past max_paths (or give samples=0)", "testing"),
    "rich": (["rich"], "from agentfsm.hitl import RichConsoleUI; RichConsoleUI()", "RichConsoleUI", "rich"),
    "search": (["bm25s"], CATALOG, "SearchableToolset (a catalog of search_threshold tools or more)", "search"),
}


def probe(blocked: list[str], code: str) -> dict[str, object] | None:
    """What ``code`` raised (a ``MissingExtraError``'s message, extra, feature, module), None if nothing."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(blocked=blocked, code=code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_missing_extra_is_one_typed_error_naming_it(case: str) -> None:
    blocked, code, feature, extra = CASES[case]
    raised = probe(blocked, code)
    assert raised is not None, f"{case}: nothing was raised without {blocked}"
    assert raised["kinds"] == [True, True], "an ImportError and an AgentFSMError"
    assert (raised["feature"], raised["extra"], str(raised["name"]).partition(".")[0]) == (feature, extra, blocked[0])
    message = str(raised["message"])
    assert message.startswith(f"{feature} needs the {extra} extra: pip install 'agentfsm[{extra}]' ("), message
    assert blocked[0] in message.partition("]' (")[2] and message.endswith(").") and "\n" not in message, message


def test_check_agent_explores_every_path_without_hypothesis() -> None:
    """The README's check_agent example runs on a plain install: only sampling needs hypothesis."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Check every path\n", 1)[1].split("\n## ", 1)[0]
    example = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert example and "check_agent" in example[1] and "agentfsm[testing]" in section
    assert probe(["hypothesis"], example[1]) is None
    assert probe(["hypothesis"], SAMPLED_CHECK.replace("max_paths=1", "max_paths=1, samples=0")) is None


def test_svg_without_graphviz_names_the_diagrams_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diagrams, "find_renderer", lambda: None)
    with pytest.raises(MissingRendererError) as raised:
        diagrams.render("digraph { a }", "svg")
    error = raised.value
    assert isinstance(error, MissingExtraError) and isinstance(error, RuntimeError) and error.extra == "diagrams"
    assert str(error).startswith("SVG and PNG output needs the diagrams extra: pip install 'agentfsm[diagrams]' (")


def test_the_command_line_says_it_in_the_same_words() -> None:
    for blocked, args, feature, extra in [
        ("dbos", ["runs", "--system-db", "sqlite:///runs.db"], "--system-db", "dbos"),
        ("dbos", ["decide", "r1", "--system-db", "sqlite:///runs.db", "--approve-all"], "agentfsm.durable", "dbos"),
        ("uvicorn", ["serve", "--store", "runs.db"], "agentfsm serve", "web"),
    ]:
        code = (
            f"import sys; sys.modules[{blocked!r}] = None; from agentfsm.cli import main; sys.exit(main(sys.argv[1:]))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
        )
        line = (
            f"agentfsm: error: {MissingExtraError(feature, extra, f'import of {blocked} halted; None in sys.modules')}"
        )
        assert (done.returncode, done.stderr) == (1, line + "\n"), args


def test_the_error_pickles_with_its_fields() -> None:
    error = MissingExtraError("agentfsm.web", "web", "No module named 'starlette'", name="starlette")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.feature, copy.extra, copy.reason, copy.name) == (
        MissingExtraError,
        str(error),
        "agentfsm.web",
        "web",
        "No module named 'starlette'",
        "starlette",
    )
    assert isinstance(copy, AgentFSMError) and isinstance(copy, ImportError)
