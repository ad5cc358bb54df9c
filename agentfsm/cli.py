"""The ``agentfsm`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from agentfsm.messages import ChatMessage


class _TransitionPrinter(logging.Handler):
    """Prints agentfsm's structured transition events as they happen, one aligned line each."""

    def emit(self, record: logging.LogRecord) -> None:
        event = record.msg
        if isinstance(event, dict) and event.get("event") == "transition":
            edge = f"{event['source']:>12} --{event['trigger']}--> {event['dest']}"
            print(f"  step {event['step']}  {edge:<48} {event['duration_us']:>8.1f} µs", flush=True)


def _demo(args: argparse.Namespace) -> int:
    from agentfsm.demo import DEMO_QUESTION, demo_agent
    from agentfsm.logs import stdlib_logger

    printer = _TransitionPrinter()
    if not args.quiet:
        stdlib_logger.addHandler(printer)
        stdlib_logger.setLevel(logging.DEBUG)
    print(f"user: {DEMO_QUESTION}\n")
    try:
        result = demo_agent().run([ChatMessage.from_user(DEMO_QUESTION)])
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentfsm`` command."""
    parser = argparse.ArgumentParser(prog="agentfsm", description="Tool-using LLM agents as declared state machines.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="run a two-tool agent on the scripted model and print every transition")
    demo.add_argument("-q", "--quiet", action="store_true", help="do not print the transitions")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentfsm`` command."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
