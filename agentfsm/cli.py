"""The ``agentfsm`` command line: demo, diagrams, snapshots, resume and stored runs."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import os
import re
import shlex
import signal
import sqlite3
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import orjson

from agentfsm._extras import extra_needed
from agentfsm.errors import AgentFSMError, BreakpointException
from agentfsm.messages import ChatMessage
from agentfsm.pauses import AwaitingDecision, BreakpointHit, OutcomeUnknown
from agentfsm.serialization import dump_json, import_named_module

if TYPE_CHECKING:
    from agentfsm.snapshot import AgentSnapshot


class _TransitionPrinter(logging.Handler):
    """Prints agentfsm's structured transition events as they happen, one aligned line each."""

    def emit(self, record: logging.LogRecord) -> None:
        event = record.msg
        if isinstance(event, dict) and event.get("event") == "transition":
            edge = f"{event['source']:>12} --{event['trigger']}--> {event['dest']}"
            print(f"  step {event['step']}  {edge:<48} {event['duration_us']:>8.1f} µs", flush=True)


class CLIError(Exception):
    """A problem with the command's input, reported as ``agentfsm: error: ...`` and exit code 1."""


def _load(spec: str, kind: type, article: str) -> Any:
    """``module:attr`` -> a ``kind`` (``attr`` may also be a Python function of no arguments that returns one).

    Nothing else the attribute names is called: not a class, not a built-in function (``sys:exit``),
    not a function that needs arguments.
    """
    obj = _import_attribute(spec, "--agent")
    if callable(obj) and not isinstance(obj, kind):
        if not inspect.isfunction(obj) or _needs_arguments(obj):
            raise CLIError(
                f"{spec} is {_what(obj)}, not {article} {kind.__name__} or a function of no arguments returning one."
            )
        try:
            obj = obj()
        except Exception as exc:  # the first line of its message: the command's error is one line
            said = str(exc).strip().splitlines()
            raise CLIError(f"{spec}() raised {type(exc).__name__}{': ' + said[0] if said else ''}") from None
    if not isinstance(obj, kind):
        raise CLIError(f"{spec} is {_what(obj)}, not {article} {kind.__name__} (or a function returning one).")
    return obj


def _needs_arguments(function: Any) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters)


def _what(obj: Any) -> str:
    """What ``obj`` is, in a few words: ``a function that needs arguments``, ``a built-in function``, ``a str``."""
    if inspect.isclass(obj):
        return f"the class {obj.__name__}"
    if inspect.isfunction(obj):
        return "a function that needs arguments"
    if callable(obj) and inspect.isbuiltin(obj):
        return "a built-in function"
    return f"a {type(obj).__name__}"


def _import_attribute(spec: str, option: str) -> Any:
    """The attribute ``module:attr`` names, imported from the current directory."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CLIError(f"{option} takes module:attribute (e.g. myapp.agents:support_agent), got {spec!r}.")
    if not all(part.isidentifier() for part in module_name.split(".")) or not attr.isidentifier():
        raise CLIError(
            f"{option} takes module:attribute with a module's dotted name and an attribute's name (e.g. "
            f"myapp.agents:support_agent, run from the folder that holds myapp), not a path: got {spec!r}."
        )
    sys.path.insert(0, os.getcwd())
    try:
        module = import_named_module(module_name)
    except ImportError as exc:
        raise CLIError(f"cannot import {module_name!r}: {exc}") from None
    finally:
        sys.path.pop(0)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise CLIError(f"module {module_name!r} has no attribute {attr!r}.") from None


def load_agent(spec: str) -> Any:
    """``module:attr`` -> an Agent (``attr`` may also be a function that returns one)."""
    from agentfsm.agent import Agent

    return _load(spec, Agent, "an")


def load_durable_agent(spec: str) -> Any:
    """``module:attr`` -> a DurableAgent (or a function that returns one)."""
    return _load(spec, _durable_module().DurableAgent, "a")


def _durable_module() -> Any:
    # Imported when a command needs it: without the dbos extra, it says how to install it.
    from agentfsm import durable

    return durable


def _load_snapshot(path: str, *, stores: str = "--store PATH or --system-db URL") -> Any:
    """The snapshot file at ``path``; when there is none, a hint that ``path`` may be a run id.

    A store's database given in its place is refused unread: ``--agent``'s module may hold it open.
    """
    from agentfsm.snapshot import AgentSnapshot

    if not os.path.exists(path):
        raise CLIError(f"no snapshot file {path!r} (a run id? give {stores}).")
    with contextlib.suppress(sqlite3.Error):  # a file SQLite cannot open is read below, for that error
        if os.stat(path).st_size and is_sqlite_database(path):
            raise CLIError(f"{path!r} is a store, not a snapshot file: name one of its runs, RUN_ID --store {path}.")
    return AgentSnapshot.from_file(path)


def is_sqlite_database(path: str) -> bool:
    """Whether SQLite reads the file at ``path`` as a database (an empty file is one); ``sqlite3.Error`` if it cannot.

    Never through ``open()``: closing a descriptor of a file drops every POSIX lock the process
    holds on it, and ``--agent``'s module may hold the store open, SQLite's locks with it; another
    process could then delete the write-ahead log that connection writes to. SQLite's own
    connections keep a descriptor open while another of the process holds locks. Read-only, the
    connection writes nothing to the database (SQLite may create its ``-wal`` and ``-shm`` files).
    """
    uri = f"{Path(path).absolute().as_uri()}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            db.execute("PRAGMA schema_version")
    except sqlite3.DatabaseError as exc:
        if exc.sqlite_errorcode == sqlite3.SQLITE_NOTADB:
            return False
        raise
    return True


# -- commands ---------------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from agentfsm.demo import DEMO_QUESTION, demo_agent
    from agentfsm.logs import stdlib_logger

    printer = _TransitionPrinter()
    if not args.quiet:
        stdlib_logger.addHandler(printer)
        stdlib_logger.setLevel(logging.DEBUG)
    print(f"user: {DEMO_QUESTION}\n")
    try:
        result = demo_agent(model_from_args(args.model, args.base_url)).run([ChatMessage.from_user(DEMO_QUESTION)])
    finally:
        stdlib_logger.removeHandler(printer)
    print()
    for message in result["messages"][1:]:
        for call in message.tool_calls:
            print(f"  tool call   {call.tool_name}({call.arguments})")
        for res in message.tool_call_results:
            print(f"  tool result {res.origin.tool_name} -> {res.result}")
    print(f"\nassistant: {result['last_message'].text}")
    print(f"({result['step_count']} model calls, {len(result['trace'])} transitions, exit: {result['exit_reason']})")
    return 0


def model_from_args(model: str | None, base_url: str | None) -> Any:
    """``--model openai:NAME`` or ``anthropic:NAME`` (with ``--base-url``) as a model client; None: the script."""
    if model is None:
        if base_url is not None:
            raise CLIError("--base-url needs --model, e.g. --model openai:my-model.")
        return None
    from agentfsm.generators import AnthropicChatGenerator, OpenAIChatGenerator
    from agentfsm.secrets import Secret

    provider, _, name = model.partition(":")
    clients = {
        "openai": (OpenAIChatGenerator, "OPENAI_API_KEY"),
        "anthropic": (AnthropicChatGenerator, "ANTHROPIC_API_KEY"),
    }
    if provider not in clients or not name:
        raise CLIError(f"--model takes openai:MODEL or anthropic:MODEL, got {model!r}.")
    client, variable = clients[provider]
    # A local server (--base-url) may need no key; the provider's own API does.
    return client(name, Secret.from_env_var(variable, strict=base_url is None), base_url)


def _check(args: argparse.Namespace) -> int:
    from agentfsm.checking import Invariant, check_agent

    invariants = []
    for spec in args.invariant:
        found = _import_attribute(spec, "--invariant")
        if not isinstance(found, Invariant) and not callable(found):
            raise CLIError(f"{spec} is a {type(found).__name__}, not an Invariant or a function of a RecordedRun.")
        invariants.append(found)
    bounds = {"max_steps": args.max_steps, "max_paths": args.max_paths}
    # The check lists the agent's toolsets (an MCP toolset connects for it): the command owns the
    # agent it loaded, so it closes what that opened (no server process outlives the command).
    with contextlib.closing(load_agent(args.agent)) as agent:
        result = check_agent(
            agent,
            **{name: value for name, value in bounds.items() if value is not None},
            invariants=invariants,
            crashes=not args.no_crashes,
            breakpoints=not args.no_breakpoints,
            progress=None if args.format == "text" else False,
            agent_ref=args.agent,
            tool_timeout=args.tool_timeout,
        )
    print(result.to_json() if args.format == "json" else result.text())
    return 0 if result.ok else 1


def _diagram(args: argparse.Namespace) -> int:
    from agentfsm.diagrams import machine_diagram, write_diagram

    snapshot: AgentSnapshot | None
    if args.run:
        if args.snapshot:
            raise CLIError("give --snapshot FILE or --run RUN_ID, not both.")
        snapshot, agent = _stored_snapshot(args, args.run, None)
    else:
        if args.store or args.system_db:
            raise CLIError("--store and --system-db hold runs: name the one to draw with --run RUN_ID.")
        agent = load_agent(args.agent) if args.agent else None
        snapshot = _load_snapshot(args.snapshot) if args.snapshot else None
    write_diagram(args.output, machine_diagram(args.format, agent=agent, snapshot=snapshot))
    return 0


def open_store(path: str, *, durable: bool = False, record_events: bool = False) -> Any:
    """``--store PATH``: a directory is a ``JsonFileStore``, a file an ``SQLiteSnapshotStore``."""
    from agentfsm.stores import JsonFileStore, SQLiteSnapshotStore

    if os.path.isdir(path):
        return JsonFileStore(path, record_events=record_events)
    if not os.path.exists(path):
        raise CLIError(f"no store at {path!r}: give an SQLite file or a directory of JSON snapshots.")
    if not is_sqlite_database(path):
        if Path(path).suffix == ".json":
            raise CLIError(
                f"{path!r} is a snapshot file, not a store: resume it with agentfsm resume {path} --agent "
                f"MODULE:ATTR (deciding its calls with --approve ID...), or show it with agentfsm snapshot show {path}."
            )
        raise CLIError(f"{path!r} is not a store: give an SQLite file or a directory of JSON snapshots.")
    return SQLiteSnapshotStore(path, durable=durable, record_events=record_events)


def _stored_snapshot(args: argparse.Namespace, run_id: str, seq: int | None) -> tuple[AgentSnapshot, Any]:
    """Snapshot ``seq`` (None: the latest) of run ``run_id`` in ``--store`` or ``--system-db``, and ``--agent``.

    With ``--system-db``, ``--agent`` names the runs' DurableAgent (it derives where a running run
    stands); the agent returned is the ``Agent`` it runs.
    """
    if args.system_db:
        with _durable_runs(args.system_db, args.agent) as (runs, durable):
            snapshot = runs.latest(run_id) if seq is None else runs.load(run_id, seq)
        return snapshot, durable.agent if durable is not None else None
    _require_source(args)
    store = open_store(args.store)
    snapshot = store.latest(run_id) if seq is None else store.load(run_id, seq)
    return snapshot, load_agent(args.agent) if args.agent else None


#: What a command that reads runs says when it is given none.
_NO_SOURCE = "give the runs' store: --store PATH (a snapshot store) or --system-db URL (durable runs)."


def _require_source(args: argparse.Namespace) -> None:
    if not args.store and not getattr(args, "system_db", None):
        raise CLIError(_NO_SOURCE)


@contextlib.contextmanager
def _durable_runs(system_db: str, agent: str | None) -> Iterator[tuple[Any, Any]]:
    """The durable runs of a system database (through a DBOSClient), and the DurableAgent ``--agent`` names."""
    durable = _durable_module()
    agent_ = load_durable_agent(agent) if agent else None
    with _dbos_client(system_db) as client:
        yield durable.DurableRuns(client, agent_), agent_


@contextlib.contextmanager
def _dbos_client(system_db: str) -> Iterator[Any]:
    """``dbos_client(system_db)``, destroyed (its connections closed) when the block ends."""
    client = dbos_client(system_db)
    try:
        yield client
    finally:
        client.destroy()


def dbos_client(system_db: str) -> Any:
    """A ``DBOSClient`` of the system database at ``system_db``.

    When the database cannot be reached, main() says so in one line; DBOS's own log of the failure
    (several lines, on stderr through logging's last resort) is left out. A worker launches DBOS,
    which sets up its own log, and does not come here.
    """
    with extra_needed("--system-db", "dbos"):
        from dbos import DBOSClient
        from sqlalchemy.engine import make_url

    url = make_url(system_db)
    # A client opening an SQLite file that is not there would create it, empty, and fail on it.
    file = url.database if url.get_backend_name() == "sqlite" and url.database != ":memory:" else None
    if file and not os.path.isfile(file):
        raise CLIError(
            f"no DBOS system database at {system_db}: {file!r} does not exist (a worker started with this "
            "--system-db creates it)."
        )
    dbos_log = logging.getLogger("dbos")
    if not dbos_log.handlers:
        dbos_log.addHandler(logging.NullHandler())
    return DBOSClient(system_database_url=system_db)


def _snapshot_show(args: argparse.Namespace) -> int:
    if args.agent and not args.system_db:
        raise CLIError("--agent is for --system-db runs (their DurableAgent derives where a run stands); leave it out.")
    if args.store or args.system_db:
        snapshot, _ = _stored_snapshot(args, args.target, args.seq)
    else:
        if args.seq is not None:
            raise CLIError(
                "--seq numbers a stored run's snapshots: give its store with --store PATH or --system-db URL."
            )
        snapshot = _load_snapshot(args.target)
    if args.json:
        sys.stdout.write(dump_json(snapshot.to_dict(), indent=True).decode() + "\n")
        return 0
    print(f"run          {snapshot.run_id}")
    if snapshot.ended:
        ended = f"ended        in {snapshot.phase.value} at step {snapshot.step} ({snapshot.created_at})"
        print(ended + (f": {snapshot.exit_reason}" if snapshot.exit_reason else ""))
    else:
        print(f"paused       before {snapshot.phase.value} at step {snapshot.step} ({snapshot.created_at})")
    pause = snapshot.pause
    if pause is not None:
        # A breakpoint is shown as its class and settings; a pause for decisions as its kind.
        data = pause.breakpoint if isinstance(pause, BreakpointHit) else pause.to_dict()
        name = data.get("type") if isinstance(pause, BreakpointHit) else pause.kind
        described = ", ".join(
            f"{k}={v}" for k, v in data.items() if k not in ("type", "tool_descriptions") and v is not None
        )
        print(f"break point  {name}({described})")
    print(f"agent        fingerprint {snapshot.agent_fingerprint}")
    if snapshot.pending_tool_calls:
        print("pending tool calls:")
        decided = {d["tool_call_id"]: d for d in snapshot.decisions if d.get("step") == snapshot.step}
        waiting = isinstance(snapshot.pause, AwaitingDecision)
        doubt = snapshot.pause if isinstance(snapshot.pause, OutcomeUnknown) else None
        for key, call in snapshot.pending_calls_by_key().items():
            if key in snapshot.completed_tool_results:
                status = " (finished)"
            elif key in decided:
                status = " (approved)" if decided[key]["execute"] else " (rejected)"
            elif doubt is not None and key in doubt.tool_call_ids:
                status = f" ({_doubt_text(doubt, key)})"
            else:
                status = " (waiting for a decision)" if waiting else ""
            print(f"  {key}: {call['tool_name']}({dump_json(call['arguments']).decode()}){status}")
    shown = snapshot.messages[-args.last :] if args.last else []
    if shown:
        print(f"last {len(shown)} of {len(snapshot.messages)} messages:")
        for message in map(ChatMessage.from_dict, shown):
            text = message.text or ""
            calls = ", ".join(c.tool_name for c in message.tool_calls)
            body = (text + (f" [calls: {calls}]" if calls else "")) or _result_text(message)
            print(f"  {message.role.value:>9}: {body[:200]}")
    return 0


def _doubt_text(pause: OutcomeUnknown, key: str) -> str:
    """Why a call waits: in doubt after a crash, and why its reconcile function could not tell, if it said."""
    note = pause.notes.get(key)
    return "in doubt after a crash" + (f": {note}" if note else "")


def _result_text(message: ChatMessage) -> str:
    """A tool result as one line: its text, or its parts (``[image]`` for images)."""
    result = message.tool_call_result
    if result is None:
        return ""
    if isinstance(result.result, str):
        return result.result
    return " ".join(getattr(part, "text", "[image]") for part in result.result)


def decisions_from_args(
    snapshot: AgentSnapshot, approve: list[str], reject: list[str], modify: list[str], tools: Iterable[Any] = ()
) -> list[Any]:
    """``--approve ID``, ``--reject ID:feedback`` and ``--modify ID:{json}`` as decisions bound to the snapshot's calls.

    New arguments are checked against their tool in ``tools`` (the agent's, when it runs here).
    """
    from agentfsm.hitl.answers import Answer, decisions_from_answers

    pending = snapshot.pending_calls_by_key()
    answers: dict[str, Answer] = {}

    def answer(given: str, action: str, **details: str | None) -> None:
        # A call without an id (in snapshots written before every call got one) is known as "#0";
        # in a shell "#" starts a comment, so "0" names it too.
        key = given if given in pending else f"#{given}" if f"#{given}" in pending else None
        if key is None:
            raise CLIError(f"the snapshot has no pending call {given!r}; its pending calls are {sorted(pending)}.")
        if key in answers:
            raise CLIError(
                f"call {given!r} is named twice: give one decision (--approve, --reject or --modify) per call."
            )
        answers[key] = Answer(action, **details)

    for given in approve:
        answer(given, "approve")
    for entry in reject:
        given, _, feedback = entry.partition(":")
        answer(given, "reject", feedback=feedback or None)
    for entry in modify:
        given, _, raw = entry.partition(":")
        answer(given, "modify", arguments=raw)
    return decisions_from_answers(pending, answers, tools)


def _resume(args: argparse.Namespace) -> int:
    if args.system_db:  # a paused durable run (a cancelled one, say) goes on in a worker
        if args.seq is not None or args.fork or args.take_over:
            raise CLIError(
                "--seq, --fork and --take-over are about a run in a store: a durable run goes on from its pause."
            )
        return _continue_durable(args, args.target, required=False)
    if not args.agent:
        raise CLIError("a run goes on in this process: give its agent with --agent MODULE:ATTR.")
    if args.store:
        agent, snapshot = _stored_run(args, args.target, args.seq)
    else:
        if args.seq is not None or args.take_over:
            raise CLIError("--seq and --take-over are about a run in a store: give its store with --store PATH.")
        agent, snapshot = load_agent(args.agent), _load_snapshot(args.target, stores="--store PATH")
    decisions = _decisions_taken(args, snapshot, agent.known_tools(), required=False)
    if args.fork:
        print(f"(a new run, forked from run {snapshot.run_id} at snapshot {snapshot.seq})", file=sys.stderr)
    return _go_on(args, agent, snapshot, decisions, fork=args.fork, take_over=args.take_over)


def _stored_run(args: argparse.Namespace, run_id: str, seq: int | None = None) -> tuple[Any, AgentSnapshot]:
    """``--agent``'s Agent, recording in ``--store``, and snapshot ``seq`` (None: the latest) of run ``run_id``."""
    agent = load_agent(args.agent)
    # The run goes on in the store it comes from (an SQLite store records every transition).
    store = open_store(args.store, durable=True)
    agent.snapshot_store = store
    return agent, store.latest(run_id) if seq is None else store.load(run_id, seq)


#: The exit code of ``decide`` and ``resume`` when the run paused again (a decision, a breakpoint).
PAUSED_AGAIN = 3


def _go_on(args: argparse.Namespace, agent: Any, snapshot: AgentSnapshot, decisions: list[Any], **options: Any) -> int:
    """Run the rest of ``snapshot``'s run: print its answer, or how to go on when it pauses again."""
    from agentfsm.errors import BreakpointException

    try:
        result = agent.run(snapshot=snapshot, decisions=decisions, **options)
    except BreakpointException as paused:
        print(_paused_again(args, paused), file=sys.stderr)
        return PAUSED_AGAIN
    last = result["last_message"]
    print(last.text if last is not None and last.text is not None else "")
    print(f"(exit: {result['exit_reason']}, {result['step_count']} model calls)", file=sys.stderr)
    return 0


def _paused_again(args: argparse.Namespace, paused: Any) -> str:
    """Where a run that paused again stands, and the command that takes it on."""
    snapshot: AgentSnapshot = paused.snapshot
    agent = f"--agent {shlex.quote(args.agent)}"
    if args.store:
        where = f"{snapshot.run_id} --store {shlex.quote(args.store)} {agent}"
    else:
        # Out of any store, the paused run lives in a file: the strategy's, or one beside the resumed file.
        path = paused.snapshot_file_path or str(
            snapshot.to_file(os.path.join(os.path.dirname(args.target), f"{snapshot.run_id}-step{snapshot.step}.json"))
        )
        where = f"{shlex.quote(path)} {agent}"
    verb = "decide" if args.store else "resume"
    questions = snapshot.awaited_answers()
    if questions:
        asked = "; ".join(f"{q.id}: {q.question} (schema {json.dumps(q.response_schema)})" for q in questions)
        return f"run {snapshot.run_id} asks: {asked}; go on with: agentfsm {verb} {where} --answer ID=JSON"
    waiting = snapshot.awaited_decisions()
    if not waiting:
        return (
            f"run {snapshot.run_id} paused at a breakpoint before {snapshot.phase.value} at step {snapshot.step}; "
            f"go on with: agentfsm resume {where}"
        )
    if isinstance(snapshot.pause, OutcomeUnknown):
        waiting = [f"{key} ({_doubt_text(snapshot.pause, key)})" for key in waiting]
    return (
        f"run {snapshot.run_id} paused again: it waits for a decision on {', '.join(waiting)}; go on with: "
        f"agentfsm {verb} {where} --approve ID | --reject ID:FEEDBACK | --modify ID:JSON"
    )


def _runs(args: argparse.Namespace) -> int:
    if args.system_db:
        return _list_durable_runs(args)
    _require_source(args)
    runs = open_store(args.store).runs()
    if args.json:
        rows = [
            {
                "run_id": r.run_id,
                "status": r.status,
                "phase": r.phase,
                "step": r.step,
                "snapshots": r.snapshots,
                "updated_at": r.updated_at,
                "owner": r.owner,
                "taken_over_from": r.taken_over_from,
                "taken_over_by": r.taken_over_by,
                "exit_reason": r.exit_reason,
                "parent_run_id": r.parent_run_id,
                "parent_seq": r.parent_seq,
            }
            for r in runs
        ]
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print(
        f"{'run':<34} {'status':<8} {'phase':<13} {'step':>4} {'snapshots':>9}  {'updated':<32}  {'forked from':<38}  "
        "exit reason"
    )
    for r in runs:
        parent = f"{r.parent_run_id} #{r.parent_seq}" if r.parent_run_id else "-"
        print(
            f"{r.run_id:<34} {r.status:<8} {r.phase or '-':<13} {r.step:>4} {r.snapshots:>9}  {r.updated_at:<32}  "
            f"{parent:<38}  {(r.exit_reason or '-')[:80]}"
        )
    return 0


def _threads(args: argparse.Namespace) -> int:
    """``agentfsm threads --store PATH [THREAD]``: the store's threads, or one thread turn by turn."""
    from agentfsm.threads import turn_messages

    store = open_store(args.store)
    if args.thread is None:
        threads = store.threads()
        if args.json:
            rows = [
                {
                    "thread_id": t.thread_id,
                    "turns": t.turns,
                    "status": t.status,
                    "head_run_id": t.head_run_id,
                    "head_seq": t.head_seq,
                    "forked_from": t.parent_thread_id,
                    "updated_at": t.updated_at,
                }
                for t in threads
            ]
            sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
            return 0
        print(f"{'thread':<34} {'turns':>5} {'status':<8} {'head run':<34} {'updated':<32}  forked from")
        for t in threads:
            head = t.head_run_id if t.head_seq is None else f"{t.head_run_id} #{t.head_seq}"
            status = t.status or "-"
            print(
                f"{t.thread_id:<34} {t.turns:>5} {status:<8} {head:<34} {t.updated_at:<32}  {t.parent_thread_id or '-'}"
            )
        return 0
    turns = store.thread_turns(args.thread)
    if not turns:
        raise CLIError(f"no thread {args.thread!r} in {args.store}.")
    rows = []
    for turn in turns:
        said = [{"role": m.role.value, "text": _said(m)} for m in turn_messages(store, turn)]
        rows.append({"turn": turn.number, "run_id": turn.run_id, "status": turn.status, "messages": said})
    if args.json:
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    for row in rows:
        print(f"turn {row['turn']}  run {row['run_id']}  {row['status'] or '-'}")
        for said_one in row["messages"]:
            print(f"  {said_one['role']:<9} {said_one['text'][:200]}")
    return 0


def _said(message: ChatMessage) -> str:
    """A message as one line: its text, the calls it asks for, or the result it gives."""
    if message.tool_call_result is not None:
        return _result_text(message)
    calls = [f"{c.tool_name}({orjson.dumps(c.arguments).decode()})" for c in message.tool_calls]
    return " ".join([*([message.text] if message.text else []), *calls])


def _list_durable_runs(args: argparse.Namespace) -> int:
    with _dbos_client(args.system_db) as client:
        records = _durable_module().list_runs(client)
    rows = [
        {
            "run_id": r.run_id,
            "status": r.status,
            "workflow_id": r.workflow_id,
            "workflow_status": r.workflow_status,
            "workflow_name": r.workflow_name,
            "phase": r.phase.value if r.phase else None,
            "waiting_for": sorted(r.paused.pending_calls_by_key()) if r.paused else [],
            "exit_reason": r.exit_reason,
            "error": repr(r.error) if r.error is not None else None,
        }
        for r in records
    ]
    if args.json:
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print(f"{'run':<34} {'status':<8} {'workflow':<38} {'phase':<13} detail")
    for row in rows:
        detail = row["exit_reason"] or row["error"] or ", ".join(row["waiting_for"]) or ""
        print(f"{row['run_id']:<34} {row['status']:<8} {row['workflow_id']:<38} {row['phase'] or '-':<13} {detail}")
    return 0


def _decide(args: argparse.Namespace) -> int:
    """A person's decisions on the calls a paused run waits for, in a snapshot store or on DBOS."""
    if args.system_db:
        return _continue_durable(args, args.run_id, required=True)
    _require_source(args)
    if not args.agent:
        raise CLIError("a run of a snapshot store goes on in this process: give its agent with --agent MODULE:ATTR.")
    agent, snapshot = _stored_run(args, args.run_id)
    return _go_on(args, agent, snapshot, _decisions_taken(args, snapshot, agent.known_tools()))


def _continue_durable(args: argparse.Namespace, run_id: str, *, required: bool) -> int:
    """Continue paused durable run ``run_id`` on its queue, for a worker (decisions ``required`` or not)."""
    if args.agent:
        raise CLIError("--agent is for --store runs: a durable run goes on in a worker, which has its agent.")
    durable = _durable_module()
    with _dbos_client(args.system_db) as client:
        record = durable.find_run(client, run_id)
        if record.paused is None:
            raise CLIError(f"run {run_id} is {record.status}, not paused: there is nothing to decide.")
        decisions = _decisions_taken(args, record.paused, required=required)
        workflow_id = durable.continue_run(client, run_id, decisions, expected_segment=record.segment)
    print(f"run {run_id} continues as workflow {workflow_id} ({len(decisions)} decisions)")
    return 0


def _decisions_taken(
    args: argparse.Namespace, snapshot: AgentSnapshot, tools: Iterable[Any] = (), *, required: bool = True
) -> list[Any]:
    """The decision options as decisions; ``--approve-all`` approves every awaited call not decided otherwise."""
    approve = list(args.approve)
    answers = answers_from_args(args.answer)
    if args.approve_all or (args.approve_all is None and not (approve or args.reject or args.modify or answers)):
        named = {entry.partition(":")[0] for entry in [*args.reject, *args.modify]}
        approve += [key for key in snapshot.awaited_decisions() if key not in named and key not in approve]
    if required and not (approve or args.reject or args.modify or answers):
        questions = [q.id for q in snapshot.awaited_answers()]
        if questions:
            raise CLIError(f"run {snapshot.run_id} waits for answers to {', '.join(questions)}: --answer ID=JSON.")
        waiting = ", ".join(snapshot.awaited_decisions()) or "nothing: a breakpoint paused it"
        raise CLIError(
            f"say what to do with the calls run {snapshot.run_id} waits for ({waiting}): "
            "--approve ID, --reject ID:FEEDBACK, --modify ID:JSON or --approve-all."
        )
    return [*decisions_from_args(snapshot, approve, args.reject, args.modify, tools), *answers]


def answers_from_args(given: Iterable[str]) -> list[Any]:
    """``--answer ID=JSON`` as ``InputAnswer``s; ``CLIError`` for one without ``=`` or whose value is not JSON."""
    from agentfsm.errors import DeserializationError
    from agentfsm.interrupts import InputAnswer
    from agentfsm.serialization import load_json

    answers = []
    for entry in given:
        question_id, equals, text = entry.partition("=")
        if not equals or not question_id:
            raise CLIError(f"--answer takes ID=JSON (a question's id, then its answer as JSON), got {entry!r}.")
        try:
            answers.append(InputAnswer(question_id, load_json(text.encode())))
        except DeserializationError as exc:
            raise CLIError(
                f"the answer to {question_id} is not JSON ({exc}); quote a string: {question_id}='\"text\"'."
            ) from None
    return answers


class _Holder(logging.Filter):
    """Keeps a logger's records instead of letting them through."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


@contextlib.contextmanager
def _held_log(name: str, *, show_on_error: bool) -> Iterator[None]:
    """Holds logger ``name``'s records for the block: let through after it, dropped when it fails.

    A DBOS that cannot launch logs the failure with its traceback; main() says it in one line.
    """
    logger, holder = logging.getLogger(name), _Holder()
    logger.addFilter(holder)
    try:
        yield
    except BaseException:
        logger.removeFilter(holder)
        if show_on_error:
            for record in holder.records:
                logger.handle(record)
        raise
    logger.removeFilter(holder)
    for record in holder.records:
        logger.handle(record)


def _worker(args: argparse.Namespace) -> int:
    durable = _durable_module()
    from dbos import DBOS  # installed: agentfsm.durable, just imported, needs it

    agents = [load_durable_agent(spec) for spec in args.agent]
    with _held_log("dbos", show_on_error=args.debug):
        durable.launch(
            args.system_db,
            executor_id=args.executor_id,
            queues={agent.queue: args.concurrency for agent in agents},
            polling_interval=args.poll_interval,
            log_level=args.log_level,
        )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    names = ", ".join(agent.workflow_name for agent in agents)
    print(f"agentfsm worker {args.executor_id or 'local'}: running {names}", file=sys.stderr, flush=True)
    stop.wait()
    # No more runs are taken; those under way get --drain seconds to finish. The rest are recovered
    # by the next worker started with this executor id.
    DBOS.destroy(workflow_completion_timeout_sec=args.drain)
    return 0


LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Addresses that listen on every interface: no one name the page is reached by.
EVERY_ADDRESS = ("0.0.0.0", "::", "")


def _serve(args: argparse.Namespace) -> int:
    with extra_needed("agentfsm serve", "web"):
        import uvicorn

    from agentfsm.web import allowed_host_names, create_app

    token = args.token or os.environ.get("AGENTFSM_TOKEN")
    missing = []
    if args.host not in LOOPBACK and not token:
        missing.append("a --token (or AGENTFSM_TOKEN), which every request must then carry")
    if args.host in EVERY_ADDRESS and not args.allowed_host:
        missing.append(
            "the host names browsers reach the page by, with --allowed-host NAME (repeatable): it listens on "
            "every address and answers no other name"
        )
    if missing:
        raise CLIError(f"--host {args.host!r} opens the page to other machines: give it {'; and '.join(missing)}.")
    # The page answers to its loopback names, the name it is served under and those given.
    allowed_hosts = allowed_host_names(
        [*args.allowed_host, *([] if args.host in LOOPBACK + EVERY_ADDRESS else [args.host])]
    )
    with contextlib.ExitStack() as resources:
        if args.system_db:  # durable runs: decisions go to the run's queue, for a worker
            runs, durable = resources.enter_context(_durable_runs(args.system_db, args.agent))
            agent = durable.agent if durable is not None else None
            resume = runs.decide if agent is not None else None
            app = create_app(runs, agent, token=token, resume=resume, allowed_hosts=allowed_hosts)
        else:
            _require_source(args)
            agent = load_agent(args.agent) if args.agent else None
            # Runs resumed from the page record their events too: every open page follows them live.
            store = open_store(args.store, durable=True, record_events=True)
            app = create_app(store, agent, token=token, allowed_hosts=allowed_hosts)
        where = f"http://{args.host}:{args.port}/" + (f"?token={token}" if token else "")
        print(f"agentfsm review page: {where}", file=sys.stderr)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", http="h11", loop="asyncio")
    return 0


def _add_run_source(parser: argparse.ArgumentParser) -> None:
    """``--store PATH`` (``--db`` is still accepted) or ``--system-db URL``: where a command finds runs."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--store", metavar="PATH", help="a snapshot store: an SQLite file, or a directory of JSON snapshots"
    )
    where.add_argument("--db", dest="store", help=argparse.SUPPRESS)
    where.add_argument(
        "--system-db",
        metavar="URL",
        help="the DBOS system database of durable runs (sqlite:///... or postgresql://...)",
    )


def _add_decision_options(parser: argparse.ArgumentParser) -> None:
    """``--approve``, ``--reject`` and ``--modify``: a person's decision on each call a run waits for."""
    parser.add_argument("--approve", action="append", default=[], metavar="ID", help="run call ID as proposed")
    parser.add_argument(
        "--reject", action="append", default=[], metavar="ID:FEEDBACK", help="do not run call ID; tell the model why"
    )
    parser.add_argument(
        "--modify", action="append", default=[], metavar="ID:JSON", help="run call ID with these arguments instead"
    )
    parser.add_argument(
        "--answer",
        action="append",
        default=[],
        metavar="ID=JSON",
        help="answer question ID a tool or a hook asked (a JSON value, checked against its schema)",
    )


def _add_check_command(commands: Any, common: argparse.ArgumentParser) -> None:
    """``agentfsm check MODULE:ATTR``: explore the agent's paths and check the invariants."""
    check = commands.add_parser(
        "check",
        parents=[common],
        help="explore an agent's paths (replies, tool outcomes, decisions, crashes) and check invariants",
        description="Explore an agent's paths up to the bounds and check the invariants on each (see "
        "docs/checking.md). Exits with 1 when an invariant is violated, printing the shortest counterexample.",
    )
    check.add_argument("agent", metavar="MODULE:ATTR", help="an Agent (or a function returning one)")
    check.add_argument(
        "--max-steps", type=int, default=None, metavar="N", help="model calls explored with every kind of reply"
    )
    check.add_argument("--max-paths", type=int, default=None, metavar="N", help="paths explored before sampling")
    check.add_argument(
        "--invariant",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="a user invariant (an Invariant, or a function of a RecordedRun) to check too; repeatable",
    )
    check.add_argument(
        "--tool-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a tool call may take before it counts as timed out (default 10); MCP servers' tools "
        "are never called, their results are played",
    )
    check.add_argument("--no-crashes", action="store_true", help="do not kill and resume the run at each write")
    check.add_argument("--no-breakpoints", action="store_true", help="do not pause and resume at each transition")
    check.add_argument("--format", choices=["text", "json"], default="text", help="(default text)")
    check.set_defaults(handler=_check)


def _add_decide_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """``agentfsm decide``, and ``approve``, its former spelling (durable runs only, all calls by default)."""
    for name in ("decide", "approve"):
        listed = {"help": "decide the calls a paused run waits for; the run goes on"} if name == "decide" else {}
        decide = commands.add_parser(name, parents=[common], **listed)
        decide.add_argument("run_id", metavar="RUN_ID", help="the paused run (agentfsm runs lists them)")
        _add_run_source(decide)
        decide.add_argument(
            "--agent", metavar="MODULE:ATTR", help="with --store: the agent that runs the rest in this process"
        )
        _add_decision_options(decide)
        decide.add_argument(
            "--approve-all",
            action="store_true",
            # None: the former spelling, which approves every awaited call when none is named.
            default=False if name == "decide" else None,
            help="approve every call the run waits for that no other option names",
        )
        decide.set_defaults(handler=_decide)


def _add_worker_command(commands: Any, common: argparse.ArgumentParser) -> None:
    """``agentfsm worker``: durable runs on DBOS."""
    worker = commands.add_parser(
        "worker", parents=[common], help="run durable agents' runs from their DBOS queue (until SIGTERM)"
    )
    worker.add_argument(
        "--agent", action="append", required=True, metavar="MODULE:ATTR", help="a DurableAgent (repeatable)"
    )
    worker.add_argument(
        "--system-db", required=True, metavar="URL", help="the DBOS system database (sqlite:///... or postgresql://...)"
    )
    worker.add_argument(
        "--executor-id",
        metavar="ID",
        help="this worker's id, the same when it restarts: it recovers its unfinished runs",
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="at most N runs at once per worker (the queue's setting, kept in the database: the last given wins)",
    )
    worker.add_argument(
        "--poll-interval",
        type=float,
        default=0.1,
        metavar="SECONDS",
        help="how often to look for queued runs (default 0.1)",
    )
    worker.add_argument(
        "--drain",
        type=int,
        default=10,
        metavar="SECONDS",
        help="on SIGTERM, let the runs under way finish for up to SECONDS (default 10)",
    )
    worker.add_argument("--log-level", default="WARNING", metavar="LEVEL", help="DBOS's log level (default WARNING)")
    worker.set_defaults(handler=_worker)


def _add_resume_command(commands: Any, common: argparse.ArgumentParser) -> None:
    """``agentfsm resume``: a paused or crashed run goes on in this process."""
    resume = commands.add_parser("resume", parents=[common], help="resume a paused or crashed run and print its answer")
    resume.add_argument("target", metavar="FILE_OR_RUN_ID", help="a snapshot file, or a run id with --store")
    resume.add_argument(
        "--agent", metavar="MODULE:ATTR", help="the agent that runs it (a durable run goes on in a worker instead)"
    )
    _add_run_source(resume)
    resume.add_argument("--seq", type=int, metavar="N", help="with --store: snapshot N of the run (with --fork)")
    resume.add_argument(
        "--fork", action="store_true", help="start a new run from the snapshot; the snapshot's run stays as it is"
    )
    resume.add_argument(
        "--take-over", action="store_true", help="with --store: take the run over from a process that is gone"
    )
    _add_decision_options(resume)
    resume.add_argument(
        "--approve-all", action="store_true", help="approve every call the run waits for that no other option names"
    )
    resume.set_defaults(handler=_resume)


def _add_threads_command(commands: Any, common: argparse.ArgumentParser) -> None:
    threads = commands.add_parser(
        "threads", parents=[common], help="list the threads of a snapshot store, or read one turn by turn"
    )
    threads.add_argument(
        "--store", required=True, metavar="PATH", help="an SQLite file or a directory of JSON snapshots"
    )
    threads.add_argument("thread", nargs="?", help="the thread to read back, turn by turn")
    threads.add_argument("--json", action="store_true", help="print JSON")
    threads.set_defaults(handler=_threads)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentfsm`` command."""
    parser = argparse.ArgumentParser(prog="agentfsm", description="Tool-using LLM agents as declared state machines.")
    parser.add_argument("--version", action="version", version=f"agentfsm {version('agentfsm')}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    # Every command takes --debug after its name too; SUPPRESS leaves the one given before it alone.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an error"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo", parents=[common], help="run a two-tool agent on the scripted model and print every transition"
    )
    demo.add_argument("-q", "--quiet", action="store_true", help="do not print the transitions")
    demo.add_argument(
        "--model",
        metavar="PROVIDER:MODEL",
        help="run on a real model: openai:MODEL or anthropic:MODEL (default: the script)",
    )
    demo.add_argument("--base-url", metavar="URL", help="the API's base URL, e.g. a local OpenAI-compatible server")
    demo.set_defaults(handler=_demo)

    _add_check_command(commands, common)

    diagram = commands.add_parser(
        "diagram", parents=[common], help="draw the machine, an agent, or where a paused or stored run stands"
    )
    diagram.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="an Agent (or a function returning one) to draw (with --system-db: the runs' DurableAgent)",
    )
    diagram.add_argument(
        "--format", choices=["mermaid", "dot", "svg", "png"], default="mermaid", help="(default mermaid)"
    )
    diagram.add_argument("--snapshot", metavar="FILE", help="highlight where this snapshot's run stands")
    diagram.add_argument("--run", metavar="RUN_ID", help="with --store or --system-db: highlight where this run stands")
    _add_run_source(diagram)
    diagram.add_argument("-o", "--output", default="-", metavar="FILE", help="output file (default: stdout)")
    diagram.set_defaults(handler=_diagram)

    snapshot = commands.add_parser("snapshot", parents=[common], help="inspect a snapshot, from a file or a store")
    snapshot_commands = snapshot.add_subparsers(dest="snapshot_command", required=True, metavar="COMMAND")
    show = snapshot_commands.add_parser(
        "show", parents=[common], help="phase, step, pending tool calls, last messages, break point"
    )
    show.add_argument("target", metavar="FILE_OR_RUN_ID", help="a snapshot file, or a run id with --store/--system-db")
    _add_run_source(show)
    show.add_argument("--seq", type=int, metavar="N", help="snapshot N of the stored run (default: the latest)")
    show.add_argument("--agent", metavar="MODULE:ATTR", help="with --system-db: the runs' DurableAgent")
    show.add_argument("--json", action="store_true", help="print the whole snapshot as JSON")
    show.add_argument(
        "--last", type=int, default=5, metavar="N", help="how many of the last messages to show (default 5)"
    )
    show.set_defaults(handler=_snapshot_show)

    _add_resume_command(commands, common)
    _add_decide_commands(commands, common)

    serve = commands.add_parser(
        "serve", parents=[common], help="the review page: runs, diagrams, decisions from a browser"
    )
    _add_run_source(serve)
    serve.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="the agent that resumes runs decided on the page (a DurableAgent with --system-db)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", metavar="ADDRESS", help="the address to listen on (default 127.0.0.1)"
    )
    serve.add_argument("--port", type=int, default=8765, metavar="PORT", help="the port (default 8765)")
    serve.add_argument(
        "--token", metavar="TOKEN", help="an access token every request must carry (required off loopback)"
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name the page answers to besides localhost, 127.0.0.1, [::1] and --host, e.g. a proxy's "
        "(repeatable)",
    )
    serve.set_defaults(handler=_serve)

    runs = commands.add_parser("runs", parents=[common], help="list the runs of a snapshot store, or the durable runs")
    _add_run_source(runs)
    runs.add_argument("--json", action="store_true", help="print JSON")
    runs.set_defaults(handler=_runs)

    _add_threads_command(commands, common)

    _add_worker_command(commands, common)
    return parser


#: Where a database driver's errors come from: an error of these modules means the database was not reached.
_DATABASE_MODULES = ("sqlalchemy.", "psycopg.", "psycopg2.", "sqlite3")


def _database_error(exc: BaseException) -> bool:
    return any(cls.__module__.startswith(_DATABASE_MODULES) for cls in type(exc).__mro__)


def _url_secrets(url: str) -> list[str]:
    """The passwords in a database URL: after ``user:`` and in query parameters such as ``?password=``."""
    _, sep, rest = url.partition("://")
    location, _, query = rest.partition("?")
    credentials, at, _ = location.rpartition("@")
    secrets = [credentials.partition(":")[2]] if sep and at else []
    for parameter in query.split("&"):
        key, _, value = parameter.partition("=")
        if "pass" in key.lower():
            secrets.append(value)
    return [secret for secret in secrets if secret]


def without_secrets(text: str, url: str) -> str:
    """``text`` (the URL itself, or a driver's error about it) with every password of ``url`` as ``***``."""
    for secret in _url_secrets(url):
        for form in sorted({secret, unquote(secret)}, key=len, reverse=True):
            text = text.replace(form, "***")
        # A driver may split an unencoded password where a URL's parts begin (``bob:p@ss@host``
        # is password ``p`` and host ``ss@host`` to libpq) and quote a piece: mask each piece.
        pieces = [piece for piece in re.split(r"[@:/?#&=]", unquote(secret)) if piece]
        for piece in pieces if len(pieces) > 1 else []:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(piece)}(?![A-Za-z0-9])", "***", text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentfsm`` command."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    # A pause no command takes on (a run started by the agent module itself, say) ends with its message too.
    except (CLIError, AgentFSMError, BreakpointException) as exc:
        if args.debug:
            raise
        message = str(exc)
    except Exception as exc:
        url = getattr(args, "system_db", None) or getattr(args, "store", None)
        if not _database_error(exc) or url is None or args.debug:
            raise
        # A driver's message can run over many lines (SQL, hints): its first line says why.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = without_secrets(f"{url}: {reason}", url)
        if "no such table" in reason or ("relation" in reason and "does not exist" in reason):
            # Reached, but without DBOS's tables: another database, or a snapshot store.
            message = f"not a DBOS system database: {where} (--debug shows the traceback)."
        else:
            message = f"cannot reach the database {where} (--debug shows the traceback)."
    print(f"agentfsm: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
