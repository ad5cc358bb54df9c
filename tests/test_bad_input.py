"""Input from outside the process either works or fails with a typed error: fuzzed snapshots and decisions."""

from __future__ import annotations

import copy
import os
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm import Agent, AgentSnapshot, ChatMessage, ToolCall, tool
from agentfsm.cli import main as cli_main
from agentfsm.decisions import as_decision
from agentfsm.errors import (
    AgentFSMError,
    BreakpointException,
    DecisionError,
    DeserializationError,
    SerializationError,
    SnapshotError,
)
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy, HITLBreakpointException, ToolExecutionDecision
from agentfsm.serialization import dump_json, load_json, serialize_value
from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore
from tests.helpers import add, call, calls, finish

USER = [ChatMessage.from_user("go")]
#: Where the confirmation strategy writes the paused runs' snapshots.
PAUSES = tempfile.TemporaryDirectory()
SCHEMA = {"notes": {"type": list[str]}, "pair": {"type": tuple}, "big": {"type": int}}


def paused_agent(position: int = 0, store: Any = None) -> Agent:
    script = [calls(call("add", "c1", a=1, b=2), call("add", "c2", a=4, b=4)), "done"]
    return Agent(
        chat_generator=ScriptedChatGenerator(script, position=position),
        tools=[add, finish],
        state_schema=SCHEMA,
        confirmation_strategies={"add": BreakpointConfirmationStrategy(PAUSES.name)},
        snapshot_store=store,
    )


def real_snapshot() -> AgentSnapshot:
    """A snapshot taken from a run: paused in CONFIRM, with tagged State values and two pending calls."""
    with pytest.raises(HITLBreakpointException) as paused:
        paused_agent().run(USER, notes=["a", "é"], pair=(1, "x"), big=2**70)
    snapshot = paused.value.snapshot
    assert isinstance(snapshot, AgentSnapshot)
    return snapshot


SNAPSHOT = real_snapshot().to_dict()

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["\udcff", "__agentfsm__", "builtins.int", "CONFIRM", "c1", "add", ""]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["__agentfsm__", "type", "data", "x"]), inner)
    ),
    max_leaves=6,
)


def deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in a JSON document, but those inside the deep values a change put there."""
    found = [prefix]
    if len(prefix) > 12:
        return found
    if isinstance(document, dict):
        for key, value in document.items():
            found += paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += paths(value, (*prefix, index))
    return found


HUGE = [2**70, -(2**70), 10**400, 1e308, "x" * 10_000]
#: One change to a snapshot: (which value, by its position in a walk of the document; what to do; with what).
mutations = st.lists(
    st.tuples(
        st.integers(0, 10_000),
        st.sampled_from(["delete", "replace", "deep", "huge", "version", "duplicate"]),
        st.one_of(json_values, st.sampled_from([150, 990, 2000]), st.integers(0, len(HUGE) - 1)),
    ),
    min_size=1,
    max_size=3,
)


def mutate(changes: list[tuple[int, str, Any]], base: Any = None) -> Any:
    """The real snapshot (or ``base``) with a few keys deleted, retyped, nested deep, made huge or badly encoded.

    The document is built from the (small) changes inside the test: hypothesis would recurse too
    deep printing a deeply nested example.
    """
    document = copy.deepcopy(SNAPSHOT if base is None else base)
    for selector, operation, payload in changes:
        every = paths(document)[1:]
        if not every:
            break
        *parent_path, last = every[selector % len(every)]
        parent: Any = document
        for step in parent_path:
            parent = parent[step]
        if operation == "delete":
            del parent[last]
        elif operation == "replace":
            parent[last] = payload
        elif operation == "deep":
            parent[last] = deep(payload if payload in (150, 990, 2000) else 990)
        elif operation == "huge":
            parent[last] = HUGE[payload % len(HUGE)] if isinstance(payload, int) else HUGE[0]
        elif operation == "version" and isinstance(document, dict):
            document["format_version"] = [0, 1, 2, 5, -1, "3", 3.5, None][selector % 8]
        elif isinstance(document, dict):  # a pending call's id given to another call too
            pending = document.get("pending_tool_calls")
            if isinstance(pending, list) and len(pending) > 1 and all(isinstance(c, dict) for c in pending[:2]):
                pending[1] = {**pending[1], "id": pending[0].get("id")}
    return document


def fine_or_typed(action: Any) -> Any:
    """What ``action()`` returns, or None when it raised an AgentFSMError or paused; any other exception fails the test."""
    try:
        return action()
    except (AgentFSMError, BreakpointException):  # a resumed run may pause again: no failure
        return None


def resume(snapshot: AgentSnapshot, decisions: Any = None, **kwargs: Any) -> Any:
    """Resume the paused run with ``decisions`` (by default: approve c1, reject c2)."""
    if decisions is None:
        decisions = [ToolExecutionDecision("add", True, "c1"), ToolExecutionDecision("add", False, "c2")]
    return paused_agent(position=1, **kwargs).run(snapshot=snapshot, decisions=decisions)


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(mutations)
def test_mutated_snapshots_load_and_resume_or_fail_typed(changes: list[tuple[int, str, Any]]) -> None:
    document = mutate(changes)
    snapshot = fine_or_typed(lambda: AgentSnapshot.from_dict(document))
    encoded = fine_or_typed(lambda: dump_json(document))
    if encoded is not None:
        from_bytes = fine_or_typed(lambda: AgentSnapshot.from_bytes(encoded))
        assert (from_bytes is None) == (snapshot is None), "bytes and dict are checked alike"
    if snapshot is not None:
        assert AgentSnapshot.from_bytes(snapshot.to_bytes()) == snapshot, "what loads, writes and loads again"
        loaded = snapshot.to_dict()
        kept = {k: v for k, v in document.items() if k != "format_version"}  # an older format is migrated
        assert {k: loaded[k] for k in kept} == kept, "what loads is what was given: nothing coerced"
        fine_or_typed(lambda: resume(snapshot))


@FUZZ
@given(st.binary(max_size=64), st.integers(0, 4000))
def test_damaged_snapshot_bytes_fail_typed(noise: bytes, cut: int) -> None:
    encoded = AgentSnapshot.model_validate(SNAPSHOT).to_bytes()
    fine_or_typed(lambda: AgentSnapshot.from_bytes(encoded[:cut] + noise + encoded[cut:]))
    fine_or_typed(lambda: AgentSnapshot.from_bytes(encoded[:cut]))


def test_json_nested_990_deep_is_refused_typed() -> None:
    with pytest.raises(SnapshotError, match=r"deeper|recursion"):
        AgentSnapshot.from_bytes(b'{"state": ' + b"[" * 990 + b"]" * 990 + b"}")
    with pytest.raises(SnapshotError, match="deeper"):
        AgentSnapshot.from_dict({**SNAPSHOT, "state": {"notes": deep(990)}})
    # Within the snapshot's depth, beyond what a State value may nest: refused on resume, nothing ran.
    snapshot = AgentSnapshot.from_dict({**SNAPSHOT, "state": {"notes": deep(100)}})
    with pytest.raises(SnapshotError, match="deeper than 64"):
        resume(snapshot)
    with pytest.raises(SerializationError, match="deeper than 64"):
        serialize_value(deep(100))


# -- strict fields: what comes from outside is taken as it is, or refused naming the field --------------


def changed(place: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """The real snapshot with the value at ``place`` (keys and indexes) replaced by ``value``."""
    document = copy.deepcopy(SNAPSHOT)
    parent: Any = document
    for step in place[:-1]:
        parent = parent[step]
    parent[place[-1]] = value
    return document


@pytest.mark.parametrize(
    ("place", "value", "field"),
    [
        (("step",), "0", "step"),
        (("step",), True, "step"),
        (("step",), 1.0, "step"),
        (("stage",), "0", "stage"),
        (("seq",), "3", "seq"),
        (("format_version",), True, "format_version"),
        (("trace", 0, "step"), "0", "trace.0.step"),
        (("trace", 0, "duration_us"), "1.5", "trace.0.duration_us"),
        (("pending_tool_calls", 0, "id"), 1, "pending_tool_calls.0.id"),
        (("started_tool_calls",), ["c1", 2], "started_tool_calls.1"),
    ],
)
def test_snapshot_fields_of_another_type_are_refused_naming_the_field_never_coerced(
    place: tuple[Any, ...], value: Any, field: str
) -> None:
    with pytest.raises(SnapshotError, match=rf"(^|[ ;]){re.escape(field)}: "):
        AgentSnapshot.from_dict(changed(place, value))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("pair", {"__agentfsm__": "tuple", "items": "ab"}),  # read as ('a', 'b')
        ("pair", {"__agentfsm__": "set", "items": {"a": 1}}),
        ("big", {"__agentfsm__": "dict", "items": ["ab", "cd"]}),  # read as {'a': 'b', 'c': 'd'}
        ("token_usage", []),  # read as no tokens used
        ("token_usage", {"input_tokens": -(10**9)}),
        ("tool_call_counts", {"add": "1"}),
        ("step_count", True),
        ("run_usage", None),
        ("run_usage", {"cost": {"__agentfsm__": "float", "value": "-inf"}}),
        ("stop_run", 3),
    ],
)
def test_state_values_that_are_not_what_they_say_are_refused_naming_the_key(key: str, value: Any) -> None:
    snapshot = AgentSnapshot.from_dict(changed(("state", key), value))  # State values are checked on resume
    with pytest.raises(SnapshotError, match=rf"State value {key!r}"):
        resume(snapshot)


def test_state_values_of_their_types_resume_and_user_keys_as_they_were_stored() -> None:
    # State does not check the types of the user's keys: a run may hold anything there, read back as stored.
    state = {**SNAPSHOT["state"], "token_usage": {"input_tokens": 3}, "notes": {"a": 1}, "stop_run": None}
    assert resume(AgentSnapshot.from_dict(changed(("state",), state)))["last_message"].text == "done"


def test_a_stored_event_with_a_field_of_another_type_is_refused_naming_it() -> None:
    from agentfsm.events import event_from_dict

    good = {"kind": "tool_ended", "run_id": "r", "step": 1, "at": 1.0, "call": "c1", "call_id": "c1"}
    good |= {"tool": "add", "result": 3, "error": None, "duration_us": 1.0}
    assert event_from_dict(good).duration_us == 1.0
    for field, value in [("duration_us", "1"), ("tool", 5), ("error", []), ("step", "1"), ("call_id", True)]:
        with pytest.raises(DeserializationError, match=rf"'tool_ended' event's {field!r}"):
            event_from_dict(good | {field: value})
    ended = {"kind": "model_ended", "run_id": "r", "step": 1, "at": 1.0, "model": "m", "finish_reasons": []}
    with pytest.raises(DeserializationError, match=r"'model_ended' event's 'usage'"):
        event_from_dict(ended | {"usage": [], "duration_us": 1.0})


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutations)
def test_mutated_snapshots_in_stores_load_and_resume_or_fail_typed(changes: list[tuple[int, str, Any]]) -> None:
    document = mutate(changes)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        run_id = document.get("run_id") if isinstance(document.get("run_id"), str) else "run"
        folder = root / "files" / "r"
        folder.mkdir(parents=True)
        (folder / "000000_0001_CONFIRM.json").write_bytes(fine_or_typed(lambda: dump_json(document)) or b"{")
        shown = cli_main(["snapshot", "show", str(folder / "000000_0001_CONFIRM.json"), "--last", "5"])
        assert shown in (0, 1), "shown, or refused with a message"
        files = JsonFileStore(root / "files")
        stored = fine_or_typed(lambda: files.latest("r"))
        if stored is not None:
            fine_or_typed(lambda: resume(stored, store=files))
        snapshot = fine_or_typed(lambda: AgentSnapshot.from_dict(document))
        if snapshot is not None:
            database = SQLiteSnapshotStore(root / "runs.db")
            try:
                fine_or_typed(lambda: database.save(snapshot))
                latest = fine_or_typed(lambda: database.latest(run_id))
                if latest is not None:
                    fine_or_typed(lambda: resume(latest, store=database))
                assert all(r.owner is None for r in database.runs()), "no run is left claimed"
            finally:
                database.close()


# -- data a run meets on its way: lone surrogates, huge numbers -------------------------------------

#: What ``os.listdir`` gives for a file name that is not UTF-8.
NOT_UTF8_NAME = os.fsdecode(b"report-\xff.txt")


@tool
def list_files() -> str:
    """List the files of a folder."""
    return NOT_UTF8_NAME


@pytest.mark.parametrize("durable", [True, False])
def test_a_lone_surrogate_from_a_tool_is_stored_and_read_back_exactly(tmp_path: Path, durable: bool) -> None:
    assert "\udcff" in NOT_UTF8_NAME
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=durable)
    script = [calls(call("list_files", "c1")), calls(call("add", "c2", a=1, b=2)), "done"]
    agent = Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[list_files, add],
        confirmation_strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))},
        snapshot_store=store,
    )
    with pytest.raises(HITLBreakpointException) as paused:
        agent.run(USER)
    [run] = store.runs()
    assert (run.status, run.owner) == ("paused", None)
    stored = store.latest(run.run_id)
    assert stored.messages[2]["content"][0]["tool_call_result"]["result"] == NOT_UTF8_NAME
    assert AgentSnapshot.from_bytes(stored.to_bytes()) == stored
    assert AgentSnapshot.from_file(paused.value.snapshot_file_path or "") == paused.value.snapshot
    agent.chat_generator = ScriptedChatGenerator(script, position=2)
    result = agent.run(snapshot=stored, decisions=[ToolExecutionDecision("add", True, "c2")])
    assert result["messages"][2].tool_call_result.result == NOT_UTF8_NAME
    [run] = store.runs()
    assert (run.status, run.owner) == ("done", None)
    store.close()


@pytest.mark.parametrize("durable", [True, False])
def test_data_no_json_writer_takes_fails_the_run_typed_and_leaves_it_unclaimed(tmp_path: Path, durable: bool) -> None:
    too_long = 10**5000  # past the digits Python turns into text: no JSON writer takes it
    script = [calls(call("add", "c1", a=too_long, b=1)), "done"]
    store = SQLiteSnapshotStore(tmp_path / "runs.db", durable=durable)
    files = JsonFileStore(tmp_path / "files")
    for each in (store, files):
        agent = Agent(
            chat_generator=ScriptedChatGenerator(script),
            tools=[add],
            confirmation_strategies={"add": BreakpointConfirmationStrategy(str(tmp_path / "pauses"))},
            snapshot_store=each,
        )
        with pytest.raises(SerializationError):
            agent.run(USER)
        # A store that saw the run (a durable one always does) keeps it failed, and claimed by no one.
        runs = [(r.status, r.owner) for r in each.runs()]
        assert runs == [("failed", None)] or (runs == [] and not each.durable)
    store.close()


# -- tool-call ids from the model --------------------------------------------------------------------


def replies_with_ids(*ids: str | None) -> ChatMessage:
    """An assistant reply with one ``add`` call per id (ids as the model gave them, even shared or missing)."""
    return ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": n, "b": 1}, i) for n, i in enumerate(ids)])


class RawIdsGenerator:
    """A model that gives its tool calls the ids it likes, and checks each request as the OpenAI API does."""

    def __init__(self, *ids: str | None) -> None:
        self.replies = [replies_with_ids(*ids), ChatMessage.from_assistant("done")]
        self.requests: list[list[dict[str, Any]]] = []

    def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, Any]:
        # to_openai_dict_format raises for a call or a result without an id.
        request = [m.to_openai_dict_format() for m in messages]
        asked = [c["id"] for m in request for c in m.get("tool_calls", [])]
        answered = [m["tool_call_id"] for m in request if m["role"] == "tool"]
        assert len(set(asked)) == len(asked) and sorted(asked) == sorted(answered), "each call answered once"
        self.requests.append(request)
        return {"replies": [self.replies[len(self.requests) - 1]]}


@pytest.mark.parametrize(
    ("ids", "keys"),
    [
        (("x", "x", "y"), ["x", "call_1_1", "y"]),
        ((None, None, "z"), ["call_1_0", "call_1_1", "z"]),
        (("", "call_1_0", None), ["call_1_0_2", "call_1_0", "call_1_2"]),
        (("call_1_1", "call_1_1", None), ["call_1_1", "call_1_1_2", "call_1_2"]),
    ],
)
def test_shared_or_missing_call_ids_are_made_unique_and_every_call_is_decided(
    tmp_path: Path, ids: tuple[str | None, ...], keys: list[str]
) -> None:
    model = RawIdsGenerator(*ids)
    agent = Agent(
        chat_generator=model,
        tools=[add],
        confirmation_strategies={"add": BreakpointConfirmationStrategy(str(tmp_path))},
    )
    with pytest.raises(HITLBreakpointException) as paused:
        agent.run(USER)
    snapshot = paused.value.snapshot
    assert snapshot.awaited_decisions() == keys, "a call keeps the model's id unless an earlier call has it"
    renamed = snapshot.messages[1]["meta"].get("given_tool_call_ids", {})
    assert {k: i for k, i in zip(keys, ids, strict=True) if k != i} == renamed, "the model's ids are kept"
    decisions = [ToolExecutionDecision("add", n != 1, key) for n, key in enumerate(keys)]
    result = agent.run(snapshot=snapshot, decisions=decisions)
    assert result["last_message"].text == "done"
    answers = {r.origin.id: (r.result, r.error) for m in result["messages"] for r in m.tool_call_results}
    assert answers[keys[0]] == ("1", False) and answers[keys[2]] == ("3", False) and answers[keys[1]][1]


def test_a_snapshot_whose_pending_calls_share_an_id_is_refused() -> None:
    pending = [{"tool_name": "add", "arguments": {}, "id": "x"}, {"tool_name": "add", "arguments": {}, "id": "x"}]
    with pytest.raises(SnapshotError, match="share the ids"):
        AgentSnapshot.from_dict({**SNAPSHOT, "pending_tool_calls": pending})


# -- decisions from outside ----------------------------------------------------------------------------

DECISION_KEYS = ["tool_name", "execute", "tool_call_id", "feedback", "final_tool_params", "call_fingerprint"]
decision_values = st.one_of(
    json_values,
    st.sampled_from(["add", "c1", "c2", "false", "true", 0, 1, True, False]),
    st.dictionaries(st.sampled_from(["a", "b", "c", ""]), json_values, max_size=3),
)
decision_dicts = st.fixed_dictionaries(
    {"tool_name": st.sampled_from(["add", "finish", 7]), "tool_call_id": st.sampled_from(["c1", "c2", None, 3, ""])},
    optional={key: decision_values for key in DECISION_KEYS[1:] if key != "tool_call_id"},
)
decision_objects = st.builds(
    ToolExecutionDecision,
    tool_name=st.sampled_from(["add", "finish"]) | decision_values,
    execute=st.booleans() | decision_values,
    tool_call_id=st.sampled_from(["c1", "c2"]) | decision_values,
    feedback=st.none() | decision_values,
    final_tool_params=st.none() | decision_values,
    call_fingerprint=st.none() | decision_values,
)
any_decision = st.one_of(decision_dicts, decision_objects, decision_values)


@FUZZ
@given(st.lists(any_decision, max_size=3) | decision_values)
def test_malformed_decisions_are_applied_or_refused_typed(decisions: Any) -> None:
    snapshot = AgentSnapshot.model_validate(SNAPSHOT)
    fine_or_typed(lambda: paused_agent(position=1).run(snapshot=snapshot, decisions=decisions))


@given(any_decision)
def test_a_decision_given_as_data_is_checked_field_by_field(decision: Any) -> None:
    checked = fine_or_typed(lambda: as_decision(decision))
    if checked is not None:
        assert isinstance(checked.execute, bool) and isinstance(checked.tool_name, str)
        assert checked == ToolExecutionDecision.from_dict(checked.to_dict())


def deep_list(depth: int) -> list[Any]:
    outer: list[Any] = []
    inner = outer
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


def test_values_nested_too_deeply_to_repr_are_named_in_typed_errors() -> None:
    """Error messages name the value without a repr that would exhaust the stack."""
    deep = deep_list(100_000)
    with pytest.raises(DecisionError, match="feedback"):
        as_decision({"tool_name": "add", "execute": True, "feedback": deep})
    with pytest.raises(DeserializationError, match="content part"):
        ChatMessage.from_dict({"role": "user", "content": [deep]})


def test_execute_given_as_a_string_is_refused_not_taken_for_true() -> None:
    with pytest.raises(DecisionError, match="execute"):
        as_decision({"tool_name": "add", "execute": "false", "tool_call_id": "c1"})


def cli_agent() -> Agent:
    """The agent ``agentfsm resume`` resumes the fuzzed snapshot with."""
    return paused_agent(position=1)


cli_ids = st.sampled_from(["c1", "c2", "c3", "", ":", "c1:", "c2:x"]) | st.text(max_size=6)
cli_json = st.sampled_from(['{"a": 5, "b": 1}', "{}", "[]", "nan", '{"a": 1e999}', '{"a": ' + str(2**70) + "}"])


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(
        st.tuples(st.sampled_from(["--approve", "--reject", "--modify"]), cli_ids, cli_json | st.text()), max_size=3
    )
)
def test_resume_decision_arguments_work_or_fail_with_a_message(options: list[tuple[str, str, str]]) -> None:
    arguments = []
    for option, call_id, tail in options:
        arguments += [option, f"{call_id}:{tail}" if option == "--modify" else call_id]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "paused.json"
        AgentSnapshot.model_validate(SNAPSHOT).to_file(path)
        # 0: resumed; 1: refused, with a message; 2: argparse refused the command line itself (an id
        # that looks like an option); 3: paused again, waiting for the calls not decided.
        try:
            code = cli_main(["resume", str(path), "--agent", "tests.test_bad_input:cli_agent", *arguments])
        except SystemExit as usage_error:
            code = usage_error.code
        assert code in (0, 1, 2, 3)


# -- stored rows and records ---------------------------------------------------------------------------


def stored_run() -> tuple[Path, str]:
    """A folder holding the real run in both stores (the SQLite one with every transition before the pause)."""
    root = Path(PAUSES.name) / "stores"
    root.mkdir()
    database = SQLiteSnapshotStore(root / "runs.db", durable=True)
    with pytest.raises(HITLBreakpointException) as paused:
        paused_agent(store=database).run(USER, notes=["a"], pair=(1, "x"), big=2**70)
    database.close()
    JsonFileStore(root / "files").save(paused.value.snapshot)
    return root, paused.value.snapshot.run_id


STORED, STORED_RUN = stored_run()


def stores_copy(root: Path) -> tuple[SQLiteSnapshotStore, JsonFileStore]:
    """A copy of the stored run's stores in ``root``, to tamper with."""
    shutil.copytree(STORED, root, dirs_exist_ok=True)
    return SQLiteSnapshotStore(root / "runs.db", durable=True), JsonFileStore(root / "files")


def read_everything(store: Any, run_id: str) -> None:
    """Every way a store is read, each one working or failing typed; then resuming its newest snapshot."""
    fine_or_typed(store.runs)
    fine_or_typed(lambda: store.history(run_id))
    fine_or_typed(lambda: store.load(run_id, 0))
    latest = fine_or_typed(lambda: store.latest(run_id))
    if latest is not None:
        fine_or_typed(lambda: resume(latest, store=store))


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutations, st.sampled_from(["entries", "phase", "step", "count", "status", "lease_until"]))
def test_tampered_sqlite_rows_are_read_or_refused_typed(changes: list[tuple[int, str, Any]], column: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        database, _ = stores_copy(Path(directory))
        run_id = STORED_RUN
        try:
            # the rows as someone with the file could change them: through a connection of their own
            db = sqlite3.connect(Path(directory) / "runs.db", isolation_level=None)
            if column == "entries":
                [(key, blob)] = db.execute("SELECT key, entries FROM snapshot_batches ORDER BY key DESC LIMIT 1")
                tampered = fine_or_typed(lambda: dump_json(mutate(changes, load_json(blob)))) or b"["
                db.execute("UPDATE snapshot_batches SET entries = ? WHERE key = ?", (tampered, key))
            else:
                table = "runs" if column in ("status", "lease_until") else "snapshot_batches"
                value = mutate(changes, {"v": 1})
                value = value.get("v") if isinstance(value, dict) else value
                stored = value if isinstance(value, (str, int, float)) and abs(hash(value)) < 2**62 else "x"
                stored = stored if not isinstance(stored, int) or -(2**63) <= stored < 2**63 else "x"
                db.execute(f"UPDATE {table} SET {column} = ?", (stored,))
            db.close()
            read_everything(database, run_id)
        finally:
            database.close()


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutations, st.sampled_from(["run.json", "claim.json"]))
def test_tampered_json_store_records_are_read_or_refused_typed(
    changes: list[tuple[int, str, Any]], record: str
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        database, files = stores_copy(Path(directory))
        database.close()
        run_id = STORED_RUN
        path = files.directory / run_id / record
        base = {"owner": "elsewhere:1:x", "lease_until": 0.0} if record == "claim.json" else {"status": "paused"}
        path.write_bytes(fine_or_typed(lambda: dump_json(mutate(changes, base))) or b"{")
        read_everything(files, run_id)


def test_decision_arguments_nested_990_deep_are_refused_typed(tmp_path: Path, capsys: Any) -> None:
    snapshot = AgentSnapshot.model_validate(SNAPSHOT)
    deep_params = {"a": deep(990), "b": 1}
    with pytest.raises(DecisionError, match="deeper than 64"):
        resume(snapshot, decisions=[ToolExecutionDecision("add", True, "c1", final_tool_params=deep_params)])
    path = tmp_path / "paused.json"
    snapshot.to_file(path)
    modify = "c1:" + '{"a": ' + "[" * 990 + "]" * 990 + ', "b": 1}'
    code = cli_main(["resume", str(path), "--agent", "tests.test_bad_input:cli_agent", "--modify", modify])
    assert code == 1 and "deeper" in capsys.readouterr().err


@pytest.mark.parametrize("run_id", ["../outside", "..", "a/b", "x" * 300])
def test_a_json_store_never_writes_outside_its_folder(tmp_path: Path, run_id: str) -> None:
    snapshot = AgentSnapshot.model_validate({**SNAPSHOT, "run_id": run_id})
    store = JsonFileStore(tmp_path / "store")
    with pytest.raises(SnapshotError, match="cannot name a folder"):
        store.save(snapshot)
    with pytest.raises(SnapshotError, match="cannot name a folder"):
        store.latest(run_id)
    assert list(tmp_path.iterdir()) == [], "nothing written, in the store or beside it"


def test_tool_arguments_nested_990_deep_from_a_model_are_reported_to_it() -> None:
    script = [ChatMessage.from_assistant(tool_calls=[ToolCall("add", {"a": deep(990), "b": 1}, "c1")]), "done"]
    result = Agent(chat_generator=ScriptedChatGenerator(script), tools=[add]).run(USER)
    answer = result["messages"][2].tool_call_result
    assert answer.error and "deeper than 64" in answer.result
    assert result["last_message"].text == "done"
