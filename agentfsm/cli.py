"""The ``agentfsm`` command line: demo, diagrams, snapshots, resume and stored runs."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from agentfsm.errors import AgentFSMError
from agentfsm.messages import ChatMessage
from agentfsm.pauses import AwaitingDecision
from agentfsm.serialization import import_named_module

if TYPE_CHECKING:
    from agentfsm.snapshot import AgentSnapshot, ToolCallData


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
    """``module:attr`` -> a ``kind`` (``attr`` may also be a function that returns one)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CLIError(f"--agent takes module:attribute (e.g. myapp.agents:support_agent), got {spec!r}.")
    sys.path.insert(0, os.getcwd())
    try:
        module = import_named_module(module_name)
    except ImportError as exc:
        raise CLIError(f"cannot import {module_name!r}: {exc}") from None
    finally:
        sys.path.pop(0)
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise CLIError(f"module {module_name!r} has no attribute {attr!r}.") from None
    if callable(obj) and not isinstance(obj, kind):
        obj = obj()
    if not isinstance(obj, kind):
        raise CLIError(
            f"{spec} is a {type(obj).__name__}, not {article} {kind.__name__} (or a function returning one)."
        )
    return obj


def load_agent(spec: str) -> Any:
    """``module:attr`` -> an Agent (``attr`` may also be a function that returns one)."""
    from agentfsm.agent import Agent

    return _load(spec, Agent, "an")


def load_durable_agent(spec: str) -> Any:
    """``module:attr`` -> a DurableAgent (or a function that returns one)."""
    return _load(spec, _durable_module().DurableAgent, "a")


def _durable_module() -> Any:
    try:
        from agentfsm import durable
    except ImportError as exc:
        raise CLIError(f"durable runs need the dbos extra: pip install 'agentfsm[dbos]' ({exc}).") from None
    return durable


def _load_snapshot(path: str) -> Any:
    from agentfsm.snapshot import AgentSnapshot

    return AgentSnapshot.from_file(path)


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


def _diagram(args: argparse.Namespace) -> int:
    from agentfsm.diagrams import machine_diagram, write_diagram

    if args.system_db:
        if not args.run:
            raise CLIError("--system-db draws a durable run: give its id with --run RUN_ID.")
        runs, durable = _durable_runs(args.system_db, args.agent)
        try:
            snapshot = runs.latest(args.run)
        finally:
            runs.db.destroy()
        agent = durable.agent if durable is not None else None
    else:
        if args.run:
            raise CLIError("--run names a durable run: give its DBOS system database with --system-db URL.")
        agent = load_agent(args.agent) if args.agent else None
        snapshot = _load_snapshot(args.snapshot) if args.snapshot else None
    write_diagram(args.output, machine_diagram(args.format, agent=agent, snapshot=snapshot))
    return 0


def _durable_runs(system_db: str, agent: str | None) -> tuple[Any, Any]:
    """The durable runs of a system database (through a DBOSClient), and the DurableAgent ``--agent`` names."""
    from dbos import DBOSClient

    durable = _durable_module()
    agent_ = load_durable_agent(agent) if agent else None
    return durable.DurableRuns(DBOSClient(system_database_url=system_db), agent_), agent_


def _snapshot_show(args: argparse.Namespace) -> int:
    snapshot = _load_snapshot(args.file)
    if args.json:
        sys.stdout.write(orjson.dumps(snapshot.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print(f"run          {snapshot.run_id}")
    print(f"paused       before {snapshot.phase.value} at step {snapshot.step} ({snapshot.created_at})")
    if snapshot.break_point:
        described = ", ".join(
            f"{k}={v}"
            for k, v in snapshot.break_point.items()
            if k not in ("type", "tool_descriptions") and v is not None
        )
        print(f"break point  {snapshot.break_point.get('type')}({described})")
    print(f"agent        fingerprint {snapshot.agent_fingerprint}")
    if snapshot.pending_tool_calls:
        print("pending tool calls:")
        decided = {d["tool_call_id"]: d for d in snapshot.decisions if d.get("step") == snapshot.step}
        waiting = isinstance(snapshot.pause, AwaitingDecision)
        for key, call in snapshot.pending_calls_by_key().items():
            if key in snapshot.completed_tool_results:
                status = " (finished)"
            elif key in decided:
                status = " (approved)" if decided[key]["execute"] else " (rejected)"
            else:
                status = " (waiting for a decision)" if waiting else ""
            print(f"  {key}: {call['tool_name']}({orjson.dumps(call['arguments']).decode()}){status}")
    shown = snapshot.messages[-args.last :] if args.last else []
    if shown:
        print(f"last {len(shown)} of {len(snapshot.messages)} messages:")
        for message in map(ChatMessage.from_dict, shown):
            text = message.text or ""
            calls = ", ".join(c.tool_name for c in message.tool_calls)
            body = (text + (f" [calls: {calls}]" if calls else "")) or _result_text(message)
            print(f"  {message.role.value:>9}: {body[:200]}")
    return 0


def _result_text(message: ChatMessage) -> str:
    """A tool result as one line: its text, or its parts (``[image]`` for images)."""
    result = message.tool_call_result
    if result is None:
        return ""
    if isinstance(result.result, str):
        return result.result
    return " ".join(getattr(part, "text", "[image]") for part in result.result)


def decisions_from_args(snapshot: AgentSnapshot, approve: list[str], reject: list[str], modify: list[str]) -> list[Any]:
    """``--approve ID``, ``--reject ID:feedback`` and ``--modify ID:{json}`` as decisions bound to the snapshot's calls."""
    from agentfsm.hitl.strategies import decision_from

    pending = snapshot.pending_calls_by_key()

    def call(call_id: str) -> ToolCallData:
        if call_id not in pending:
            raise CLIError(f"the snapshot has no pending call {call_id!r}; its pending calls are {sorted(pending)}.")
        return pending[call_id]

    decisions = []
    for call_id in approve:
        c = call(call_id)
        decisions.append(decision_from(c["tool_name"], c["arguments"], call_id, "confirm"))
    for entry in reject:
        call_id, _, feedback = entry.partition(":")
        c = call(call_id)
        decisions.append(decision_from(c["tool_name"], c["arguments"], call_id, "reject", feedback=feedback or None))
    for entry in modify:
        call_id, _, raw = entry.partition(":")
        c = call(call_id)
        try:
            params = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise CLIError(f"--modify {call_id}: the new arguments are not JSON ({exc}).") from None
        if not isinstance(params, dict):
            raise CLIError(f"--modify {call_id}: the new arguments must be a JSON object.")
        decisions.append(decision_from(c["tool_name"], c["arguments"], call_id, "modify", new_tool_params=params))
    return decisions


def _resume(args: argparse.Namespace) -> int:
    agent = load_agent(args.agent)
    if args.db:
        from agentfsm.stores import SQLiteSnapshotStore

        if not os.path.exists(args.db):
            raise CLIError(f"no database at {args.db!r}.")
        # The run goes on in the database it comes from, recorded at every transition.
        store = SQLiteSnapshotStore(args.db, durable=True)
        agent.snapshot_store = store
        snapshot = store.latest(args.file) if args.seq is None else store.load(args.file, args.seq)
    else:
        if args.seq is not None or args.take_over:
            raise CLIError("--seq and --take-over are about a run in a store: give its database with --db.")
        snapshot = _load_snapshot(args.file)
    decisions = decisions_from_args(snapshot, args.approve, args.reject, args.modify)
    result = agent.run(snapshot=snapshot, decisions=decisions, fork=args.fork, take_over=args.take_over)
    if args.fork:
        print(f"(a new run, forked from run {snapshot.run_id} at snapshot {snapshot.seq})", file=sys.stderr)
    last = result["last_message"]
    print(last.text if last is not None and last.text is not None else "")
    print(f"(exit: {result['exit_reason']}, {result['step_count']} model calls)", file=sys.stderr)
    return 0


def _runs(args: argparse.Namespace) -> int:
    from agentfsm.stores import SQLiteSnapshotStore

    if args.system_db:
        return _list_durable_runs(args)
    if args.db is None:
        raise CLIError("give the runs' database: --db FILE (a snapshot store) or --system-db URL (durable runs).")
    if not os.path.exists(args.db):
        raise CLIError(f"no database at {args.db!r}.")
    runs = SQLiteSnapshotStore(args.db).runs()
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
    print(f"{'run':<34} {'status':<8} {'phase':<13} {'step':>4} {'snapshots':>9}  {'updated':<32}  forked from")
    for r in runs:
        parent = f"{r.parent_run_id} #{r.parent_seq}" if r.parent_run_id else "-"
        print(
            f"{r.run_id:<34} {r.status:<8} {r.phase or '-':<13} {r.step:>4} {r.snapshots:>9}  {r.updated_at:<32}  {parent}"
        )
    return 0


def _list_durable_runs(args: argparse.Namespace) -> int:
    from dbos import DBOSClient

    durable = _durable_module()
    client = DBOSClient(system_database_url=args.system_db)
    try:
        records = durable.list_runs(client)
    finally:
        client.destroy()
    rows = [
        {
            "run_id": r.run_id,
            "status": r.status,
            "workflow_id": r.workflow_id,
            "workflow_status": r.workflow_status,
            "workflow_name": r.workflow_name,
            "phase": r.paused.phase.value if r.paused else None,
            "waiting_for": sorted(r.paused.pending_calls_by_key()) if r.paused else [],
            "exit_reason": r.done["exit_reason"] if r.done else None,
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


def _approve(args: argparse.Namespace) -> int:
    from dbos import DBOSClient

    durable = _durable_module()
    client = DBOSClient(system_database_url=args.system_db)
    try:
        record = durable.find_run(client, args.run_id)
        if record.paused is None:
            raise CLIError(f"run {args.run_id} is {record.status}, not paused: there is nothing to decide.")
        approve = args.approve
        if not (approve or args.reject or args.modify):  # every call the run waits for, as proposed
            approve = record.paused.awaited_decisions()
        decisions = decisions_from_args(record.paused, approve, args.reject, args.modify)
        workflow_id = durable.continue_run(client, args.run_id, decisions)
    finally:
        client.destroy()
    print(f"run {args.run_id} continues as workflow {workflow_id} ({len(decisions)} decisions)")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from dbos import DBOS

    durable = _durable_module()
    agents = [load_durable_agent(spec) for spec in args.agent]
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


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from agentfsm.web import create_app
    except ImportError as exc:
        raise CLIError(f"the review page needs the web extra: pip install 'agentfsm[web]' ({exc}).") from None
    from agentfsm.stores import SQLiteSnapshotStore

    token = args.token or os.environ.get("AGENTFSM_TOKEN")
    if args.host not in LOOPBACK and not token:
        raise CLIError(
            f"--host {args.host} opens the page to other machines: give it a --token (or AGENTFSM_TOKEN), "
            "which every request must then carry."
        )
    if args.system_db:  # durable runs: decisions go to the run's queue, for a worker
        runs, durable = _durable_runs(args.system_db, args.agent)
        agent = durable.agent if durable is not None else None
        app = create_app(runs, agent, token=token, resume=runs.decide if agent is not None else None)
    else:
        if args.store is None:
            raise CLIError(
                "give the runs' database: --store FILE (a snapshot store) or --system-db URL (durable runs)."
            )
        if not os.path.exists(args.store):
            raise CLIError(f"no database at {args.store!r}.")
        agent = load_agent(args.agent) if args.agent else None
        app = create_app(SQLiteSnapshotStore(args.store, durable=True), agent, token=token)
    where = f"http://{args.host}:{args.port}/" + (f"?token={token}" if token else "")
    print(f"agentfsm review page: {where}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", http="h11", loop="asyncio")
    return 0


def _add_durable_commands(commands: Any) -> None:
    """``agentfsm worker`` and ``agentfsm approve``: durable runs on DBOS."""
    worker = commands.add_parser("worker", help="run durable agents' runs from their DBOS queue (until SIGTERM)")
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
        "--poll-interval", type=float, default=0.1, metavar="SECONDS", help="how often to look for queued runs (0.1)"
    )
    worker.add_argument(
        "--drain",
        type=int,
        default=10,
        metavar="SECONDS",
        help="on SIGTERM, let the runs under way finish for up to SECONDS (default 10)",
    )
    worker.add_argument("--log-level", default="WARNING", help="DBOS's log level (default WARNING)")
    worker.set_defaults(handler=_worker)

    approve = commands.add_parser("approve", help="decide a paused durable run; a worker continues it")
    approve.add_argument("run_id", metavar="RUN_ID")
    approve.add_argument("--system-db", required=True, metavar="URL", help="the DBOS system database of the run")
    approve.add_argument(
        "--approve", action="append", default=[], metavar="ID", help="run call ID as proposed (default: every call)"
    )
    approve.add_argument(
        "--reject", action="append", default=[], metavar="ID:FEEDBACK", help="do not run call ID; tell the model why"
    )
    approve.add_argument(
        "--modify", action="append", default=[], metavar="ID:JSON", help="run call ID with these arguments instead"
    )
    approve.set_defaults(handler=_approve)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentfsm`` command."""
    parser = argparse.ArgumentParser(prog="agentfsm", description="Tool-using LLM agents as declared state machines.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="run a two-tool agent on the scripted model and print every transition")
    demo.add_argument("-q", "--quiet", action="store_true", help="do not print the transitions")
    demo.add_argument(
        "--model",
        metavar="PROVIDER:MODEL",
        help="run on a real model: openai:MODEL or anthropic:MODEL (default: the script)",
    )
    demo.add_argument("--base-url", metavar="URL", help="the API's base URL, e.g. a local OpenAI-compatible server")
    demo.set_defaults(handler=_demo)

    diagram = commands.add_parser("diagram", help="draw the machine, an agent, or where a paused run stands")
    diagram.add_argument("--agent", metavar="MODULE:ATTR", help="an Agent (or a function returning one) to draw")
    diagram.add_argument("--format", choices=["mermaid", "dot", "svg", "png"], default="mermaid")
    diagram.add_argument("--snapshot", metavar="FILE", help="highlight where this snapshot's run stands")
    diagram.add_argument("--system-db", metavar="URL", help="with --run: a durable run's DBOS system database")
    diagram.add_argument(
        "--run", metavar="RUN_ID", help="highlight where this durable run stands (--agent: its DurableAgent)"
    )
    diagram.add_argument("-o", "--output", default="-", metavar="FILE", help="output file (default: stdout)")
    diagram.set_defaults(handler=_diagram)

    snapshot = commands.add_parser("snapshot", help="inspect snapshot files")
    snapshot_commands = snapshot.add_subparsers(dest="snapshot_command", required=True, metavar="COMMAND")
    show = snapshot_commands.add_parser("show", help="phase, step, pending tool calls, last messages, break point")
    show.add_argument("file", metavar="FILE")
    show.add_argument("--json", action="store_true", help="print the whole snapshot as JSON")
    show.add_argument(
        "--last", type=int, default=5, metavar="N", help="how many of the last messages to show (default 5)"
    )
    show.set_defaults(handler=_snapshot_show)

    resume = commands.add_parser("resume", help="resume a paused or crashed run and print its answer")
    resume.add_argument("file", metavar="FILE", help="a snapshot file, or a run id with --db")
    resume.add_argument("--agent", required=True, metavar="MODULE:ATTR", help="the agent that runs it")
    resume.add_argument("--db", metavar="FILE", help="resume the latest snapshot of run FILE from this SQLite store")
    resume.add_argument("--seq", type=int, metavar="N", help="with --db: snapshot N of the run (with --fork)")
    resume.add_argument(
        "--fork", action="store_true", help="start a new run from the snapshot; the snapshot's run stays as it is"
    )
    resume.add_argument(
        "--take-over", action="store_true", help="with --db: take the run over from a process that is gone"
    )
    resume.add_argument("--approve", action="append", default=[], metavar="ID", help="run pending call ID as proposed")
    resume.add_argument(
        "--reject", action="append", default=[], metavar="ID:FEEDBACK", help="do not run call ID; tell the model why"
    )
    resume.add_argument(
        "--modify", action="append", default=[], metavar="ID:JSON", help="run call ID with these arguments instead"
    )
    resume.set_defaults(handler=_resume)

    serve = commands.add_parser("serve", help="the review page: runs, diagrams, decisions from a browser")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--store", metavar="FILE", help="the SQLite file of a SQLiteSnapshotStore")
    source.add_argument("--system-db", metavar="URL", help="the DBOS system database of durable runs")
    serve.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="the agent that resumes runs decided on the page (a DurableAgent with --system-db)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="the port (default 8765)")
    serve.add_argument("--token", help="an access token every request must carry (required off loopback)")
    serve.set_defaults(handler=_serve)

    runs = commands.add_parser("runs", help="list the runs of an SQLite snapshot store, or the durable runs")
    where = runs.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="FILE", help="the SQLite file of a SQLiteSnapshotStore")
    where.add_argument("--system-db", metavar="URL", help="the DBOS system database of durable runs")
    runs.add_argument("--json", action="store_true", help="print JSON")
    runs.set_defaults(handler=_runs)

    _add_durable_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentfsm`` command."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except (CLIError, AgentFSMError) as exc:
        print(f"agentfsm: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
