"""The trust boundary: an agent dict, a snapshot or a durable request never runs code it names unless allowed.

Each attack below ran a shell command or emptied a file before the allow-list resolved paths only
to classes and functions defined in allowed modules. Each payload's effect is observable (a file
created, a file emptied, a call recorded), and each test checks that it never happens.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import http.server
import os  # also named by hostile paths: tests.test_trust_boundary.os.system
import subprocess
import sys
import threading
from collections.abc import Iterator
from os.path import join as path_join  # noqa: F401  (a function of another module, named from this one)
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import (
    Agent,
    AgentFSMError,
    AgentSnapshot,
    BreakpointException,
    ChatMessage,
    Phase,
    SnapshotError,
    hook,
    merge_lists,
    tool,
)
from agentfsm.breakpoints import Breakpoint
from agentfsm.demo import demo_agent
from agentfsm.durable import DurableAgent, DurableRun, launch
from agentfsm.errors import DeserializationError, SchemaError
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import (
    AlwaysAskPolicy,
    BlockingConfirmationStrategy,
    BreakpointConfirmationStrategy,
    HITLBreakpointException,
    SimpleConsoleUI,
)
from agentfsm.hitl.strategies import decision_from
from agentfsm.hooks import hook_from_dict
from agentfsm.serialization import TAG, deserialize_value, import_path
from agentfsm.tools.toolset import tool_or_toolset_from_dict
from agentfsm.web import resume_here
from tests.helpers import call, calls

ROOT = Path(__file__).resolve().parent.parent
USER = [ChatMessage.from_user("go")]
ALLOWED = ["tests"]

#: Paths that reach code no data may name: through a module an allowed module imported, through
#: ``typing``'s re-exports, through dunders, ``builtins``' functions, or agentfsm's own machinery.
DANGEROUS_PATHS = [
    "agentfsm.serialization.os.system",
    "agentfsm.serialization.os.abort",
    "agentfsm.serialization.importlib.import_module",
    "agentfsm.snapshot.os.remove",
    "agentfsm.files.Path",
    "typing.sys.exit",
    "typing.cast",
    "typing.get_type_hints",
    "builtins.eval",
    "builtins.exec",
    "builtins.open",
    "builtins.__import__",
    "builtins.compile",
    "builtins.getattr",
    "builtins.type",
    "builtins.str.__class__",
    "builtins.str.format",
    "builtins.str.format_map",
    "builtins.str.center",
    "builtins.int.to_bytes",
    "os.system",
    "subprocess.run",
    "agentfsm.serialization.import_named_module",
    "agentfsm.cli.load_agent",
    "agentfsm.files.atomic_write",
    "tests.test_trust_boundary.os.system",
    "tests.test_trust_boundary.path_join",
    "tests.test_trust_boundary.Recorder.__init__.__globals__",
    "tests.test_trust_boundary.Recorder.__subclasses__",
]

#: What user code in an allowed module (``tests``) did when data made agentfsm call it.
CALLED: list[str] = []


def record_call(*args: Any, **kwargs: Any) -> None:
    """A function named where a class is expected: calling it would be the attack."""
    CALLED.append(f"record_call{args}")


class Recorder:
    """A class without ``run`` or ``from_dict``: instantiating it where a hook is expected would be the attack."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        CALLED.append("Recorder")


class RecordingGenerator:
    """A chat generator that records being rebuilt: a document refused later must not get that far."""

    def run(self, messages: list[ChatMessage], tools: Any = None, streaming_callback: Any = None) -> dict[str, Any]:
        return {"replies": [ChatMessage.from_assistant("done")]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordingGenerator:
        CALLED.append("RecordingGenerator.from_dict")
        return cls()


@tool
def note(text: str) -> str:
    """Take a note."""
    return text


@tool
def shell(command: str) -> str:
    """The shape of os.system: a tool whose function an attacker swaps."""
    return command


@tool
def opener(file: str, mode: str) -> str:
    """The shape of builtins.open: a tool whose function an attacker swaps."""
    return file + mode


@hook
def count_model_calls(state: Any) -> None:
    """A hook for the fuzzed agent."""


NOTES = {"notes": {"type": list[str], "handler": merge_lists}}


def victim(position: int = 0, strategies: dict[str, Any] | None = None) -> Agent:
    """The agent of the snapshots below (``agentfsm resume --agent tests.test_trust_boundary:resumable_victim``)."""
    script = [calls(call("note", "c1", text="a")), ChatMessage.from_assistant("done")]
    return Agent(
        chat_generator=ScriptedChatGenerator(script, position=position),
        tools=[note],
        state_schema=NOTES,
        confirmation_strategies=strategies,
    )


def resumable_victim() -> Agent:
    """``victim`` where its paused runs left its model (one reply used)."""
    return victim(position=1)


@pytest.fixture(autouse=True)
def nothing_called() -> Iterator[None]:
    CALLED.clear()
    yield
    assert CALLED == [], "data made agentfsm call user code"


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    """A file that a payload would create: it must not exist after the test."""
    path = tmp_path / "pwned"
    yield path
    assert not path.exists(), "the payload ran a shell command"


@pytest.fixture
def precious(tmp_path: Path) -> Iterator[Path]:
    """A file that a payload would empty: it must keep its content."""
    path = tmp_path / "precious.txt"
    path.write_text("keep me")
    yield path
    assert path.read_text() == "keep me", "the payload opened the file for writing"


def run_shell(marker: Path) -> dict[str, Any]:
    """A tagged value that, were its 'class' resolved and called, would create ``marker``."""
    return {TAG: "dataclass", "type": "agentfsm.serialization.os.system", "data": {"command": f"touch {marker}"}}


def truncate(target: Path) -> dict[str, Any]:
    """A tagged value that, were ``builtins.open`` resolved and called, would empty ``target``."""
    return {TAG: "dataclass", "type": "builtins.open", "data": {"file": str(target), "mode": "w"}}


def paused_in_tool_run() -> AgentSnapshot:
    with pytest.raises(BreakpointException) as paused:
        victim().run(USER, break_point=Breakpoint(phase=Phase.TOOL_RUN, step=1))
    return paused.value.snapshot


def paused_for_a_decision(tmp_path: Path) -> AgentSnapshot:
    with pytest.raises(HITLBreakpointException) as paused:
        victim(strategies={"note": BreakpointConfirmationStrategy(str(tmp_path))}).run(USER)
    snapshot = paused.value.snapshot
    assert snapshot is not None and snapshot.phase is Phase.CONFIRM
    return snapshot


def tampered(snapshot: AgentSnapshot, **changes: Any) -> AgentSnapshot:
    return AgentSnapshot.from_dict({**snapshot.to_dict(), **changes})


def refused(error: BaseException) -> bool:
    """Whether ``error`` (or what it wraps) is the allow-list's refusal."""
    while error is not None:
        if isinstance(error, DeserializationError):
            return True
        error = error.__cause__  # type: ignore[assignment]
    return False


# -- the rule ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", DANGEROUS_PATHS)
@pytest.mark.parametrize("expect", ["class", "callable"])
def test_dangerous_paths_are_refused_whatever_the_slot(path: str, expect: Any, allow_tests_modules: None) -> None:
    with pytest.raises(DeserializationError):
        import_path(path, expect=expect)


def test_what_stays_resolvable(allow_tests_modules: None) -> None:
    assert import_path("agentfsm.messages.ChatMessage") is ChatMessage
    assert import_path("agentfsm.agent.Agent") is Agent
    assert import_path("agentfsm.state.merge_lists", expect="callable") is merge_lists
    assert import_path("builtins.str") is str
    assert import_path("builtins.str.upper", expect="callable") is str.upper
    assert import_path("tests.test_trust_boundary.note", expect="callable") is note  # a module-level @tool
    assert import_path("tests.test_trust_boundary.Recorder") is Recorder
    assert import_path("agentfsm.demo.get_weather", expect="callable").name == "get_weather"  # agentfsm's @tool
    assert Agent.from_dict(demo_agent().to_dict()).to_dict() == demo_agent().to_dict()
    assert CALLED == [], "resolving calls nothing"


def test_refusals_say_why() -> None:
    with pytest.raises(DeserializationError, match=r"'agentfsm\.serialization\.os' is a module"):
        import_path("agentfsm.serialization.os.system", expect="callable")
    with pytest.raises(DeserializationError, match=r"'posixpath'.*allow-list"):
        import_path("tests.test_trust_boundary.path_join", ALLOWED, expect="callable")
    with pytest.raises(DeserializationError, match="builtins offers only the plain data types"):
        import_path("builtins.eval", expect="callable")
    with pytest.raises(DeserializationError, match="does not name a class"):
        import_path("tests.test_trust_boundary.record_call", ALLOWED)
    with pytest.raises(DeserializationError, match="functions its packages export"):
        import_path("agentfsm.cli.load_agent", expect="callable")
    with pytest.raises(DeserializationError, match="functions its packages export"):
        import_path("agentfsm.stores.sqlite.SQLiteSnapshotStore", expect="callable")  # a store made by a model


# -- an agent dict ----------------------------------------------------------------------------------


def agent_dict_with_tool(swapped: Any, function: str, **arguments: str) -> dict[str, Any]:
    """An agent dict whose model calls tool ``swapped`` with ``arguments``, and whose tool names ``function``."""
    script = [calls(call(swapped.name, "c1", **arguments)), "done"]
    data = Agent(chat_generator=ScriptedChatGenerator(script), tools=[swapped]).to_dict()
    data["init_parameters"]["tools"][0]["data"]["function"] = function
    return data


def test_a_tool_function_path_through_a_module_never_runs(marker: Path) -> None:
    data = agent_dict_with_tool(shell, "agentfsm.serialization.os.system", command=f"touch {marker}")
    with pytest.raises(DeserializationError, match="is a module"):
        Agent.from_dict(data, allowed_modules=ALLOWED).run(USER)


def test_builtins_open_as_a_tool_function_never_runs(precious: Path) -> None:
    data = agent_dict_with_tool(opener, "builtins.open", file=str(precious), mode="w")
    with pytest.raises(DeserializationError, match="builtins offers only"):
        Agent.from_dict(data, allowed_modules=ALLOWED).run(USER)


@pytest.fixture
def schema_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on 127.0.0.1 that serves a JSON schema to whoever asks, and the paths it was asked for."""
    asked: list[str] = []

    class Serve(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/schema.json", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_tool_schema_from_data_never_fetches_what_its_refs_name(
    schema_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    # An MCP server or an agent dict gives tool schemas: a $ref naming a URL or a file is refused, unread.
    url, asked = schema_server
    local = tmp_path / "schema.json"
    local.write_text('{"type": "string"}')
    data = copy.deepcopy(agent_dict_with_tool(note, "tests.test_trust_boundary.note", text="a"))
    for ref in (url, local.as_uri()):
        data["init_parameters"]["tools"][0]["data"]["parameters"]["properties"]["text"] = {"$ref": ref}
        with pytest.raises(SchemaError, match=r"\$ref must point inside the schema") as refused:
            Agent.from_dict(data, allowed_modules=ALLOWED)
        assert "note" in str(refused.value)
    with pytest.raises(SchemaError, match="output_type cannot be used"):
        Agent(chat_generator=ScriptedChatGenerator(["{}"]), output_type={"$ref": url})
    assert asked == [], "the server was never asked"


@pytest.mark.parametrize("method", ["format", "format_map"])
def test_str_format_never_reads_globals_from_data(method: str) -> None:
    # str.format as a State handler would walk a value's attributes to a module's globals:
    # "{0.__class__.from_user.__globals__[__builtins__][open]}" prints `open`, and the environment.
    noting = dataclasses.replace(note, outputs_to_state={"seen": {"handler": str.upper}})
    data = Agent(chat_generator=ScriptedChatGenerator(["done"]), tools=[noting], state_schema={"seen": {"type": str}})
    data = data.to_dict()
    assert Agent.from_dict(data, allowed_modules=ALLOWED).tools[0].outputs_to_state["seen"]["handler"] is str.upper
    data["init_parameters"]["tools"][0]["data"]["outputs_to_state"] = {"seen": {"handler": f"builtins.str.{method}"}}
    with pytest.raises(DeserializationError, match=r"never str\.format"):
        Agent.from_dict(data, allowed_modules=ALLOWED)


def test_a_legitimate_agent_dict_still_runs() -> None:
    data = agent_dict_with_tool(note, "tests.test_trust_boundary.note", text="a")
    result = Agent.from_dict(data, allowed_modules=ALLOWED).run(USER)
    assert result["last_message"].text == "done"


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "agentfsm.serialization.os.abort", "data": None},
        {"function": "agentfsm.serialization.os.abort"},
        {"type": "tests.test_trust_boundary.record_call", "data": None},
        {"type": "tests.test_trust_boundary.Recorder", "data": None},
        {"type": "tests.test_trust_boundary.Recorder", "data": {"x": 1}},
        {"function": "builtins.exec"},
        {"type": None},
        {"data": None},
        "agentfsm.serialization.os.abort",
    ],
)
def test_hooks_from_data_are_never_called_before_they_are_checked(entry: Any, allow_tests_modules: None) -> None:
    with pytest.raises(DeserializationError):
        hook_from_dict(entry)
    data = Agent(chat_generator=ScriptedChatGenerator(["done"])).to_dict()
    data["init_parameters"]["hooks"] = {"before_llm": [entry]}
    with pytest.raises(DeserializationError):
        Agent.from_dict(data)


def test_a_refused_path_anywhere_stops_the_document_before_any_part_is_rebuilt() -> None:
    # The generator comes first in the document; the refused hook, last: nothing was rebuilt.
    data = Agent(chat_generator=ScriptedChatGenerator(["done"]), tools=[note]).to_dict()
    data["init_parameters"]["chat_generator"] = {"type": "tests.test_trust_boundary.RecordingGenerator", "data": {}}
    data["init_parameters"]["hooks"] = {"on_exit": [{"function": "typing.sys.exit"}]}
    with pytest.raises(DeserializationError, match=r"typing\.sys\.exit"):
        Agent.from_dict(data, allowed_modules=ALLOWED)


@pytest.mark.parametrize(
    ("slot", "entry", "message"),
    [
        (
            "chat_generator",
            {"type": "agentfsm.builtin_hooks.offload.SQLiteToolResultStore", "path": "x"},
            "chat generator",
        ),
        ("tools", [{"type": "agentfsm.generators.scripted.ScriptedChatGenerator", "data": {}}], "Tool or Toolset"),
        ("confirmation_strategies", [{"key": "*", "strategy": {"type": "agentfsm.hitl.AlwaysAskPolicy"}}], "strategy"),
    ],
)
def test_each_slot_takes_only_the_kind_of_class_it_uses(slot: str, entry: Any, message: str, tmp_path: Path) -> None:
    data = Agent(chat_generator=ScriptedChatGenerator(["done"]), tools=[note]).to_dict()
    data["init_parameters"][slot] = entry
    with pytest.raises(DeserializationError, match=message):
        Agent.from_dict(data, allowed_modules=ALLOWED)
    assert not (ROOT / "x").exists()


def test_nested_parts_take_only_the_kind_of_class_they_use(tmp_path: Path) -> None:
    from agentfsm.builtin_hooks import SQLiteToolResultStore, ToolResultOffloadHook
    from agentfsm.generators import CassetteChatGenerator

    # An offload store that is a cassette would write its recording where the data says.
    written = tmp_path / "written.json"
    cassette = {"path": str(written), "mode": "record", "generator": None}
    offload = ToolResultOffloadHook(SQLiteToolResultStore(tmp_path / "results.db")).to_dict()
    offload["store"] = {"type": "agentfsm.generators.cassette.CassetteChatGenerator", "data": cassette}
    with pytest.raises(DeserializationError, match="is not a tool result store class"):
        ToolResultOffloadHook.from_dict(offload)
    # A cassette's model that is a store would open an SQLite file where the data says.
    opened = tmp_path / "opened.db"
    recording = CassetteChatGenerator(tmp_path / "c.json", ScriptedChatGenerator(["hi"]), "record").to_dict()
    store = {"type": "agentfsm.builtin_hooks.offload.SQLiteToolResultStore", "data": {"path": str(opened)}}
    recording["data"]["generator"] = store
    with pytest.raises(DeserializationError, match="is not a chat generator class"):
        CassetteChatGenerator.from_dict(recording)
    # A component tool's component that is a class without run() (here, one whose constructor records).
    search = agent_dict_with_tool(note, "tests.test_trust_boundary.note", text="a")["init_parameters"]["tools"][0]
    component = {"type": "agentfsm.tools.component.ComponentTool", "data": {**search["data"], "component": None}}
    component["data"]["component"] = {"type": "tests.test_trust_boundary.Recorder", "data": {}}
    with pytest.raises(DeserializationError, match="is not a component class"):
        tool_or_toolset_from_dict(component, ALLOWED)
    assert not written.exists() and not opened.exists()


# -- a snapshot -------------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [run_shell, truncate])
def test_a_state_value_naming_code_never_runs_on_resume(payload: Any, marker: Path, precious: Path) -> None:
    target = marker if payload is run_shell else precious
    snapshot = paused_in_tool_run()
    bad = tampered(snapshot, state={**snapshot.state, "notes": payload(target)})
    with pytest.raises(SnapshotError) as info:
        resumable_victim().run(snapshot=bad)
    assert refused(info.value)


def test_an_undeclared_state_key_is_refused_before_its_value_is_read(marker: Path) -> None:
    snapshot = paused_in_tool_run()
    with pytest.raises(SnapshotError, match=r"\['payload'\].*state_schema"):
        resumable_victim().run(snapshot=tampered(snapshot, state={"payload": run_shell(marker)}))
    with pytest.raises(SnapshotError, match="not in this agent's state_schema"):
        resumable_victim().run(snapshot=tampered(snapshot, state=run_shell(marker)))


def test_a_completed_tool_result_naming_code_never_runs(marker: Path, precious: Path) -> None:
    snapshot = paused_in_tool_run()
    for payload in (run_shell(marker), truncate(precious)):
        bad = tampered(snapshot, phase="TOOL_RUN", completed_tool_results={"c1": {"value": payload}})
        with pytest.raises(SnapshotError) as info:
            resumable_victim().run(snapshot=bad)
        assert refused(info.value)


def test_a_value_tag_must_name_the_kind_of_class_it_says(allow_tests_modules: None) -> None:
    for kind in ("object", "pydantic", "dataclass"):
        with pytest.raises(DeserializationError, match="is not a"):
            deserialize_value({TAG: kind, "type": "tests.test_trust_boundary.Recorder", "data": {}})
    with pytest.raises(DeserializationError, match="only its messages and decisions"):
        deserialize_value({TAG: "object", "type": "agentfsm.stores.sqlite.SQLiteSnapshotStore", "data": {}})


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm.cli", *args], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )


def test_agentfsm_resume_of_a_hostile_snapshot_file_runs_nothing(tmp_path: Path, marker: Path) -> None:
    snapshot = paused_in_tool_run()
    path = tampered(snapshot, state={**snapshot.state, "notes": run_shell(marker)}).to_file(tmp_path / "snap.json")
    done = cli("resume", str(path), "--agent", "tests.test_trust_boundary:resumable_victim")
    assert done.returncode != 0
    assert "is a module" in done.stderr and "Traceback" not in done.stderr


def test_agentfsm_resume_of_the_same_file_untampered_works(tmp_path: Path) -> None:
    path = paused_in_tool_run().to_file(tmp_path / "snap.json")
    done = cli("resume", str(path), "--agent", "tests.test_trust_boundary:resumable_victim")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"


# -- a decision -------------------------------------------------------------------------------------


def test_a_decision_on_the_command_line_runs_nothing_of_a_hostile_snapshot(tmp_path: Path, marker: Path) -> None:
    snapshot = paused_for_a_decision(tmp_path)
    path = tampered(snapshot, state={"notes": run_shell(marker)}).to_file(tmp_path / "hostile.json")
    done = cli("resume", str(path), "--agent", "tests.test_trust_boundary:resumable_victim", "--approve", "c1")
    assert done.returncode != 0 and "is a module" in done.stderr


def test_a_decision_from_the_review_page_runs_nothing_of_a_hostile_snapshot(tmp_path: Path, precious: Path) -> None:
    snapshot = paused_for_a_decision(tmp_path)
    hostile = tampered(snapshot, state={"notes": truncate(precious)})
    approve = decision_from("note", {"text": "a"}, "c1", "confirm")
    with pytest.raises(SnapshotError) as info:
        resume_here(resumable_victim(), hostile, [approve])
    assert refused(info.value)
    resume_here(resumable_victim(), snapshot, [approve])  # the same decision on the run as it was


# -- a durable worker reading a request ---------------------------------------------------------------

#: Registered with DBOS at import, before any test launches it.
DURABLE_VICTIM = DurableAgent(victim(), "trust-boundary")


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[str]:
    from dbos import DBOS

    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    launch(url, executor_id="pytest")
    yield url
    DBOS.destroy(workflow_completion_timeout_sec=0)


def test_a_durable_worker_runs_nothing_a_hostile_request_names(launched: str, marker: Path) -> None:
    from dbos import DBOSClient

    request = {
        "run_id": "hostile",
        "messages": [m.to_dict() for m in USER],
        "system_prompt": None,
        "state": {"notes": run_shell(marker)},
        "break_point": None,
        "fingerprint": DURABLE_VICTIM.agent.fingerprint,
    }
    client = DBOSClient(system_database_url=launched)
    try:
        options: Any = {
            "workflow_name": DURABLE_VICTIM.workflow_name,
            "queue_name": DURABLE_VICTIM.queue,
            "workflow_id": "hostile",
        }
        handle = client.enqueue(options, request)
        with pytest.raises(DeserializationError, match="is a module"):
            DurableRun(DURABLE_VICTIM, "hostile", handle.workflow_id, client).result(timeout=60)
    finally:
        client.destroy()


# -- fuzzing agent dicts ------------------------------------------------------------------------------


def fuzzed_base() -> dict[str, Any]:
    """An agent dict using every slot that names code."""
    return Agent(
        chat_generator=ScriptedChatGenerator([calls(call("note", "c1", text="a")), "done"]),
        tools=[note, shell],
        state_schema=NOTES,
        hooks={"before_llm": [count_model_calls]},
        confirmation_strategies={"shell": BlockingConfirmationStrategy(AlwaysAskPolicy(), SimpleConsoleUI())},
    ).to_dict()


BASE = fuzzed_base()

HOSTILE_VALUES = [
    *DANGEROUS_PATHS,
    "tests.test_trust_boundary.record_call",
    "tests.test_trust_boundary.Recorder",
    "agentfsm.stores.sqlite.SQLiteSnapshotStore",
    "agentfsm.agent.Agent",
    "nodots",
    "",
    "a..b",
    None,
    0,
    -1,
    1.5,
    True,
    [],
    {},
    [None],
    {"type": "tests.test_trust_boundary.Recorder", "data": None},
    {TAG: "dataclass", "type": "builtins.open", "data": {}},
]


def positions(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document, by its keys and indexes."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from positions(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from positions(item, (*path, index))


PLACES = [p for p in positions(BASE) if p]


def mutate(document: dict[str, Any], place: tuple[Any, ...], change: str, value: Any) -> dict[str, Any]:
    mutated = copy.deepcopy(document)
    parent: Any = mutated
    for key in place[:-1]:
        parent = parent[key]
    if change == "drop":
        del parent[place[-1]]
    elif change == "add" and isinstance(parent, dict):
        parent["surprise"] = value
    else:
        parent[place[-1]] = value
    return mutated


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutations=st.lists(
        st.tuples(
            st.sampled_from(PLACES), st.sampled_from(["set", "set", "drop", "add"]), st.sampled_from(HOSTILE_VALUES)
        ),
        min_size=1,
        max_size=3,
    )
)
def test_fuzzed_agent_dicts_load_or_fail_typed_and_never_call_what_they_name(mutations: list[Any]) -> None:
    document: Any = BASE
    for place, change, value in mutations:
        try:
            document = mutate(document, place, change, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this place
    CALLED.clear()
    with contextlib.suppress(AgentFSMError):
        Agent.from_dict(document, allowed_modules=ALLOWED)
    assert CALLED == []


VALUE_CLASSES = [
    *DANGEROUS_PATHS,
    "tests.test_trust_boundary.Recorder",
    "tests.test_trust_boundary.record_call",
    "agentfsm.messages.ChatMessage",
    "agentfsm.stores.json_files.JsonFileStore",
    "builtins.dict",
    None,
    7,
]

tagged_values = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.fixed_dictionaries(
            {
                TAG: st.sampled_from(["object", "pydantic", "dataclass", "tuple", "dict", "pickle"]),
                "type": st.sampled_from(VALUE_CLASSES),
                "data": inner,
                "items": st.lists(inner, max_size=2),
            }
        )
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(tagged_values)
def test_fuzzed_tagged_values_load_or_fail_typed_and_never_call_what_they_name(value: Any) -> None:
    CALLED.clear()
    with contextlib.suppress(DeserializationError):
        deserialize_value(value, ALLOWED)
    assert CALLED == []


# -- a model's usage: data, not trusted -------------------------------------------------------------


def reported(usage: dict[str, Any], *tool_calls: Any, text: str | None = None) -> ChatMessage:
    """A reply whose ``meta`` reports ``usage``, as a model server gives it."""
    return ChatMessage.from_assistant(text, tool_calls=list(tool_calls), meta={"model": "m", "usage": usage})


HONEST = {"prompt_tokens": 100, "completion_tokens": 20}


def usage_run(first: dict[str, Any], limits: Any = None) -> tuple[Any, list[Any]]:
    """A run whose first reply reports ``first`` and each later one honest counts, with ``limits``; its result and events."""
    from agentfsm import UsageLimits

    script = [reported(first, call("note", "c0", text="a"))]
    script += [reported(HONEST, call("note", f"c{i}", text="a")) for i in range(1, 20)] + [
        reported(HONEST, text="done")
    ]
    priced = UsageLimits(total_tokens=1000, cost=10.0, prices={"m": (1.0, 1.0)}) if limits is None else limits
    events: list[Any] = []
    agent = Agent(chat_generator=ScriptedChatGenerator(script), tools=[note], usage_limits=priced)
    return agent.run(USER, on_event=events.append), events


def test_a_negative_token_count_never_lets_a_run_past_its_limits() -> None:
    # One reply reporting -10**9 input tokens made 8 model calls of a run limited to 1000 tokens,
    # at a cost of -999.986: it is counted as 0 tokens, and the run ends where an honest one does.
    honest, _ = usage_run({"prompt_tokens": 0, "completion_tokens": 20})
    hostile, events = usage_run({"prompt_tokens": -(10**9), "completion_tokens": 20})
    assert hostile.exit_reason == honest.exit_reason == "usage_limit:total_tokens"
    assert hostile["step_count"] == honest["step_count"] == 10  # 20 + 9 * 120 tokens reach 1000
    assert hostile["token_usage"] == honest["token_usage"] and hostile["run_usage"]["cost"] >= 0
    [warning] = [e for e in events if e.kind == "warning"]
    assert warning.warning == "usage_corrected" and "prompt_tokens' -1000000000 counted as 0" in warning.message
    assert all(n >= 0 for e in events if e.kind == "model_ended" for n in e.usage.values())


def test_an_absurd_token_count_is_counted_as_the_most_one_reply_can_use() -> None:
    from agentfsm.limits import MAX_REPLY_TOKENS

    result, events = usage_run({"prompt_tokens": 10**400, "completion_tokens": 1})
    assert result.exit_reason == "usage_limit:total_tokens" and result["step_count"] == 1
    assert result["token_usage"]["prompt_tokens"] == MAX_REPLY_TOKENS
    assert [e.warning for e in events if e.kind == "warning"] == ["usage_corrected"]


@pytest.mark.parametrize("count", ["lots", 12.5, None, [], True, {"n": 1}])
def test_a_token_count_that_is_no_number_fails_a_limited_run_typed(count: Any) -> None:
    from agentfsm import UsageLimits
    from agentfsm.errors import UsageNotCountedError

    with pytest.raises(UsageNotCountedError, match="prompt_tokens"):
        usage_run({"prompt_tokens": count, "completion_tokens": 1}, UsageLimits(total_tokens=1000))
    # Without limits the run goes on: the count is left out, and a warning says so.
    script = [reported({"prompt_tokens": count, "completion_tokens": 1, "prompt_tokens_details": {"x": 1}}, text="hi")]
    events: list[Any] = []
    result = Agent(chat_generator=ScriptedChatGenerator(script)).run(USER, on_event=events.append)
    assert result["token_usage"] == {"completion_tokens": 1}
    [warning] = [e for e in events if e.kind == "warning"]
    assert "prompt_tokens" in warning.message and "left out" in warning.message


# -- no schema can hold the process -------------------------------------------------------------------

#: A pattern Python's backtracking ``re`` tries 2**40 ways to read on 40 ``a``s and a ``!``: hours.
BACKTRACKING = {"type": "object", "properties": {"text": {"type": "string", "pattern": "^(a|a)*$"}}}
HOSTILE_TEXT = "a" * 40 + "!"


def bounded(code: str, seconds: float = 120) -> str:
    """What ``code`` prints, run in a process of its own that must end within ``seconds`` (a hang fails the test)."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=seconds,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_backtracking_pattern_in_a_tools_schema_is_checked_in_bounded_time() -> None:
    printed = bounded(
        f"""
from agentfsm import Agent, ChatMessage, Tool
from agentfsm.generators import ScriptedChatGenerator
from tests.helpers import call, calls
match = Tool("match", "Match a text.", {BACKTRACKING!r}, lambda text: "ran")
script = [calls(call("match", "c1", text={HOSTILE_TEXT!r})), "done"]
result = Agent(chat_generator=ScriptedChatGenerator(script), tools=[match]).run([ChatMessage.from_user("go")])
answer = result["messages"][2].tool_call_result
print(answer.error, answer.result)
"""
    )
    assert printed.startswith("True ") and "does not match '^(a|a)*$'" in printed and "ran" not in printed


def test_a_backtracking_pattern_in_an_agent_dicts_tool_schema_is_checked_in_bounded_time() -> None:
    data = agent_dict_with_tool(note, "tests.test_trust_boundary.note", text=HOSTILE_TEXT)
    data["init_parameters"]["tools"][0]["data"]["parameters"] = {**BACKTRACKING, "required": ["text"]}
    printed = bounded(
        f"""
from agentfsm import Agent, ChatMessage
result = Agent.from_dict({data!r}, allowed_modules=["tests"]).run([ChatMessage.from_user("go")])
print(result["messages"][2].tool_call_result.result)
"""
    )
    assert "does not match" in printed
