"""A minimal chat page over agentfsm's AG-UI endpoint: it streams a run and asks you to approve a payment.

Run it with ``python examples/ag_ui_chat/server.py`` and open http://127.0.0.1:8000/ (the scripted
model: no API key, no network). The page is plain HTML and a script that uses the official AG-UI
client (``@ag-ui/client``), bundled into one file from the repository's ``node_modules`` by
``npm run bundle-ag-ui`` (``make node-tools`` installs it; this script bundles it when it is missing),
so it loads nothing from the network. Ask it to pay someone: its reply streams in, the payment
waits for your approval, and approving or rejecting it resumes the same run.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route

from agentfsm import Agent, ChatMessage, ToolCall, tool
from agentfsm.ag_ui import create_app
from agentfsm.generators import ScriptedChatGenerator
from agentfsm.hitl import BreakpointConfirmationStrategy
from agentfsm.stores import SQLiteSnapshotStore

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: The AG-UI client bundled for the page (``npm run bundle-ag-ui`` writes it; it is not committed).
BUNDLE = HERE / "static" / "ag-ui-client.js"
#: The page's own files, and what each is served as.
FILES = {
    "/": ("index.html", "text/html"),
    "/chat.js": ("chat.js", "text/javascript"),
    "/chat.css": ("chat.css", "text/css"),
}
#: The page runs only its own script and style, and talks only to its own server.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}

PAID: list[str] = []


@tool
def pay(to: str, amount: int) -> str:
    """Send a payment in EUR."""
    PAID.append(f"{to}:{amount}")
    return f"paid {amount} EUR to {to}"


def chat_agent(store: SQLiteSnapshotStore, folder: Path) -> Agent:
    """A scripted assistant: it offers to pay Ann, waits for your approval, then says what happened."""
    script = [
        ChatMessage.from_assistant(
            "Sure, I will send Ann 30 EUR.", tool_calls=[ToolCall("pay", {"to": "ann", "amount": 30}, "pay-1")]
        ),
        "Done: the payment went through. Anything else?",
        "Goodbye!",
    ]
    return Agent(
        chat_generator=ScriptedChatGenerator(script),
        tools=[pay],
        confirmation_strategies={"pay": BreakpointConfirmationStrategy(str(folder))},
        snapshot_store=store,
    )


def ensure_bundle() -> Path:
    """The bundled AG-UI client, bundled now from ``node_modules`` when it is missing."""
    if not BUNDLE.exists():
        npm = shutil.which("npm")
        if npm is None or not (ROOT / "node_modules" / "@ag-ui" / "client").exists():
            raise SystemExit("The page needs the AG-UI client: run `make node-tools` (Node and npm) first.")
        BUNDLE.parent.mkdir(exist_ok=True)
        subprocess.run([npm, "run", "--silent", "bundle-ag-ui"], cwd=ROOT, check=True, timeout=120)
    return BUNDLE


def page_app(agent: Agent) -> Starlette:
    """The page, its script, style and client bundle, and the agent's AG-UI endpoint at ``/agent/``."""
    bundle = ensure_bundle()

    def serve_file(url: str, path: Path, media_type: str) -> Route:
        async def endpoint(request: Request) -> Response:
            return FileResponse(path, media_type=media_type, headers=PAGE_HEADERS)

        return Route(url, endpoint)

    routes: list[Route | Mount] = [serve_file(url, HERE / name, kind) for url, (name, kind) in FILES.items()]
    routes.append(serve_file("/ag-ui-client.js", bundle, "text/javascript"))
    routes.append(Mount("/agent", app=create_app(agent)))
    return Starlette(routes=routes)


def main() -> None:
    """Serve the page on 127.0.0.1 until interrupted."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    port = parser.parse_args().port
    folder = Path(tempfile.mkdtemp())
    store = SQLiteSnapshotStore(folder / "runs.db")
    print(f"Chat page on http://127.0.0.1:{port}/ (Ctrl-C stops it)")
    uvicorn.run(page_app(chat_agent(store, folder)), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
