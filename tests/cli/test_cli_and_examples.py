from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)


def test_demo_prints_every_transition_and_the_answer() -> None:
    done = run("-m", "agentfsm.cli", "demo")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    edges = [line.split() for line in out.splitlines() if line.startswith("  step ")]
    assert len(edges) == 11
    assert edges[0][:4] == ["step", "0", "IDLE", "--start-->"]
    assert edges[3][:5] == ["step", "1", "TOOL_RUN", "--tools_done-->", "EXIT_CHECK"]
    assert edges[-1][:5] == ["step", "3", "EXIT_CHECK", "--exit-->", "DONE"]
    assert "tool result get_weather -> " in out
    assert out.rstrip().endswith("(3 model calls, 11 transitions, exit: text)")
    assert "Lisbon is 5.5 °C warmer" in out


def test_demo_quiet() -> None:
    done = run("-m", "agentfsm.cli", "demo", "--quiet")
    assert done.returncode == 0
    assert "  step " not in done.stdout
    assert "(3 model calls, 11 transitions, exit: text)" in done.stdout


def test_cli_usage_errors() -> None:
    done = run("-m", "agentfsm.cli")
    assert done.returncode == 2
    assert "usage: agentfsm" in done.stderr
    assert run("-m", "agentfsm.cli", "--help").returncode == 0
    assert run("-m", "agentfsm.cli", "demo", "--help").returncode == 0


def test_quickstart_example_runs() -> None:
    done = run("examples/quickstart.py")
    assert done.returncode == 0, done.stderr
    assert "Rome is warmer" in done.stdout
    assert "visited: ['Rome']" in done.stdout
    assert "path: IDLE -> LLM_CALL -> TOOL_PENDING -> TOOL_RUN -> EXIT_CHECK -> LLM_CALL" in done.stdout
    assert "trigger='tools_done'" in done.stderr


def test_pause_and_resume_example_runs() -> None:
    done = run("examples/pause_and_resume.py")
    assert done.returncode == 0, done.stderr
    assert "paused before TOOL_RUN at step 1" in done.stdout
    assert "pending: [('transfer', {'amount': 30, 'to': 'ann'})]" in done.stdout
    assert done.stdout.count("-> transferring 30 to ann") == 1
    assert done.stdout.rstrip().endswith("Done: 30 sent to Ann.")


def test_durable_run_example_runs() -> None:
    done = run("examples/durable_run.py")
    assert done.returncode == 0, done.stderr
    assert "crashed: simulated crash" in done.stdout
    assert "finished before the crash: ['1']" in done.stdout
    assert "each lookup ran once: ['a', 'b']" in done.stdout


def test_hooks_example_runs() -> None:
    done = run("examples/hooks.py")
    assert done.returncode == 0, done.stderr
    assert "require_search: no search yet, sending the model back" in done.stdout
    assert "audit: about to run ['search']" in done.stdout
    assert "answer: Startups reported net-energy-gain milestones this year." in done.stdout
    assert "exit: text, model calls: 3, tokens: {'total_tokens': 900}" in done.stdout
    assert "hooks before_llm - build_context" in done.stdout


def test_hitl_approve_later_example_runs() -> None:
    done = run("examples/hitl_approve_later.py")
    assert done.returncode == 0, done.stderr
    assert "paused: pay p1 waits for a decision" in done.stdout
    assert "reviewer: Send a payment. {'to': 'bob', 'amount': 9000}" in done.stdout
    assert "tool result p1: paid 30 to ann" in done.stdout
    assert (
        "tool result p2: Tool execution for 'pay' was rejected by the user. With feedback: over the 100 EUR limit"
        in done.stdout
    )
    assert "paid: ['30 to ann']" in done.stdout


def test_cassette_example_runs() -> None:
    done = run("examples/cassette.py")
    assert done.returncode == 0, done.stderr
    assert "recorded add.json: 5." in done.stdout
    assert "replayed: 5. (same conversation: True)" in done.stdout
    assert "a changed agent is caught: Request 1 differs" in done.stdout


def test_ready_hooks_example_runs() -> None:
    done = run("examples/ready_hooks.py")
    assert done.returncode == 0, done.stderr
    assert "budget: exit token_budget after 3 model calls" in done.stdout
    assert "budget: I stopped here: this run used 1200 tokens, its budget is 1000." in done.stdout
    assert "compaction: largest request 8 messages; the whole conversation kept: 62 messages" in done.stdout
    assert "offload: read back '<html>https://example.com'" in done.stdout
    assert "rejected by the user. With feedback: never delete files" in done.stdout


def test_scaling_out_example_runs() -> None:
    done = run("examples/scaling_out.py")
    assert done.returncode == 0, done.stderr
    assert "ann: Done: ann: 120 EUR." in done.stdout and "bob: Done: bob: 120 EUR." in done.stdout
    assert "waits for a decision on pay" in done.stdout
    assert "paused runs: ['rent']" in done.stdout
    assert "run rent continues as workflow rent/1 (1 decisions)" in done.stdout
    assert "rent: Done: paid 900 to landlord." in done.stdout
    assert "Duplicate registration" not in done.stdout + done.stderr


def test_from_haystack_example_runs() -> None:
    done = run("examples/from_haystack.py")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "review: search({'query': 'fusion', 'filters': {'min_year': 1900, 'max_results': 3}})" in out
    assert "documents: [('A startup reported n', 2026), ('Inertial confinement', 2022)]" in out
    assert "trace (the state_schema's key): ['search(fusion)']" in out
    assert "exit: text after 3 model calls" in out


def test_guardrails_example_runs() -> None:
    done = run("examples/guardrails.py")
    assert done.returncode == 0, done.stderr
    assert "tool_call c2: rewrites=[] tripped=no_test_cards test cards are not looked up" in done.stdout
    assert "tool_result c1: rewrites=[['redact_cards', 'card number redacted']]" in done.stdout
    assert "output output: rewrites=[] tripped=polite be polite" in done.stdout
    assert "answer: It is Ann Lee. | exit: text" in done.stdout
    assert done.stdout.rstrip().endswith("exit: guardrail:no_passwords")


def test_every_example_is_tested() -> None:
    tested = {
        "scaling_out.py",
        "durable_clerk.py",  # the agent scaling_out.py's worker runs
        "quickstart.py",
        "pause_and_resume.py",
        "durable_run.py",
        "hooks.py",
        "hitl_approve_later.py",
        "cassette.py",
        "ready_hooks.py",
        "from_haystack.py",
        "mcp_tools.py",  # tested in tests/mcp/test_example.py
        "check_payments.py",  # tested in tests/checking/test_example.py
        "guardrails.py",
        "tool_retries.py",  # tested in tests/test_retries.py
        "interrupts.py",  # tested in tests/test_interrupts.py (and from the command line in tests/cli/test_cli_answers.py)
        "a2a_agents.py",  # tested in tests/a2a/test_example.py (and ag_ui_chat/ in tests/ag_ui/test_chat_example.py)
        "chat_thread.py",
        "reconcile_payments.py",  # tested in tests/test_reconcile.py
    }
    assert {p.name for p in (ROOT / "examples").glob("*.py")} == tested


def test_chat_thread_example_runs(tmp_path: Path) -> None:
    done = run("examples/chat_thread.py", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "answer: You like tea. | likes: ['tea']" in done.stdout, "the second turn continued the first"
    assert "thread chat: 2 turns, done" in done.stdout and "thread chat-coffee: 2 turns, done" in done.stdout
    assert "  turn 2: ['What do I like?', 'You like tea.']" in done.stdout
    assert "  turn 2: ['And coffee?', 'On this branch, you asked about coffee instead.']" in done.stdout
