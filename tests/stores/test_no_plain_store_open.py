"""No code that may hold a store's path opens a file other than through SQLite (issue 51).

Closing any descriptor of a file drops every POSIX lock the process holds on that file, SQLite's
among them: one ``open()``/``close()`` of a store's database, next to a live connection, lets
another process delete the write-ahead log that connection still writes to. SQLite's own
connections never do so (it keeps a descriptor open while another holds locks), so a file's kind
is asked of ``os.stat``, of a path's suffix, or of a ``sqlite3`` connection.

What this test reads, from the source (``ast``):

- **Where a store's path may be**: ``agentfsm/cli.py`` (``--store``, ``--system-db`` and the files
  a command is given), every module of ``agentfsm/web/``, of of ``agentfsm/stores/`` and
  ``agentfsm/durable/``, and any other module that imports ``sqlite3`` or a store.
- **A plain open**: a call of ``open``, ``io.open``, ``os.open``, ``codecs.open``, ``shutil.copy``,
  ``shutil.copy2`` or ``shutil.copyfile``; of a method ``open``, ``read_bytes``, ``read_text``,
  ``write_bytes`` or ``write_text`` (``pathlib.Path``'s); and of agentfsm's readers built on them,
  ``read_file`` and ``from_file`` (``AgentSnapshot.from_file``). Writing through ``atomic_write``
  (a new file, renamed into place) opens no existing file and is not one.
- **Allowed** (``ALLOWED``): the functions whose path cannot be a store's database, each with why.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agentfsm"

#: Functions called by name that open the path they are given.
OPENING_FUNCTIONS = {
    "open",
    "io.open",
    "os.open",
    "codecs.open",
    "shutil.copy",
    "shutil.copy2",
    "shutil.copyfile",
    "read_file",
    "files.read_file",
}
#: Methods that open the path they are called on, or are given.
OPENING_METHODS = {"open", "read_bytes", "read_text", "write_bytes", "write_text", "from_file"}
#: Modules where a store's path may be, besides those that import sqlite3 or a store.
STORE_MODULES = ("cli.py", "web/", "stores/", "durable/")
#: ``(module, function)`` pairs (``"*"``: the whole module) that may open files, and why none is a store's database.
ALLOWED = {
    ("stores/json_files.py", "*"): "a directory store: it opens the files it names in its own directory, "
    "<seq>_<step>_<phase>.json, run.json, claim.json and events.jsonl, never a path it is given",
    ("builtin_hooks/offload.py", "DirectoryToolResultStore.get"): "reads <directory>/<ref>.txt, a name it makes",
    ("cli.py", "_load_snapshot"): "reads the snapshot file named only once SQLite has said it is no database",
    ("web/assets.py", "*"): "reads the page's own script and style files, from the package",
    ("checking/journal.py", "EffectLog.record"): "appends to a test's effect log, a file the test names for its tools",
    ("checking/journal.py", "EffectLog.effects"): "reads that effect log back",
}


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a name or an attribute chain, None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def plain_opens(source: str) -> list[tuple[str, int, str]]:
    """``(function, line, call)`` of each plain open in ``source``; ``function`` is ``Class.method`` or ``""``."""
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, where: tuple[str, ...]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            where = (*where, node.name)
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            method = node.func.attr if isinstance(node.func, ast.Attribute) else None
            if name in OPENING_FUNCTIONS or method in OPENING_METHODS:
                found.append((".".join(where), node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(source), ())
    return found


def may_hold_a_store_path(relative: str, source: str) -> bool:
    """Whether a module is one where a store's path may be (see the module docstring)."""
    if relative.startswith(STORE_MODULES):
        return True
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == "sqlite3" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("sqlite3", "agentfsm.stores")):
            return True
    return False


def modules() -> dict[str, str]:
    """Each module of the package where a store's path may be, by its path below ``agentfsm/``, and its source."""
    sources = {p.relative_to(PACKAGE).as_posix(): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}
    return {relative: source for relative, source in sources.items() if may_hold_a_store_path(relative, source)}


def refused(relative: str, source: str) -> list[str]:
    """The plain opens of a module that ``ALLOWED`` does not allow, as ``path:line function: call``."""
    if (relative, "*") in ALLOWED:
        return []
    return [
        f"agentfsm/{relative}:{line} {function}: {call}"
        for function, line, call in plain_opens(source)
        if (relative, function) not in ALLOWED
    ]


def test_no_module_where_a_store_path_may_be_opens_a_file_but_through_sqlite() -> None:
    found = [entry for relative, source in modules().items() for entry in refused(relative, source)]
    assert found == [], "plain opens of paths that may be a store's (ask os.stat, a suffix or sqlite3):\n" + "\n".join(
        found
    )


def test_the_scope_is_the_modules_that_reach_stores() -> None:
    scoped = modules()
    for relative in ("cli.py", "web/review.py", "stores/sqlite.py", "stores/_checkpoint.py", "durable/records.py"):
        assert relative in scoped, relative
    assert "builtin_hooks/offload.py" in scoped, "it imports sqlite3"
    assert "checking/world.py" in scoped, "it imports a store"
    assert "messages.py" not in scoped


@pytest.mark.parametrize(("relative", "function"), sorted(ALLOWED))
def test_every_allowance_is_still_needed(relative: str, function: str) -> None:
    source = (PACKAGE / relative).read_text(encoding="utf-8")
    assert may_hold_a_store_path(relative, source), f"{relative} is out of scope: drop its allowance"
    opens = plain_opens(source)
    assert any(function in ("*", f) for f, _, _ in opens), f"{relative} {function} opens nothing: drop its allowance"


#: ``open_store`` as it was when issue 51 was filed: it sniffed the store's file with a plain open.
SNIFFING_OPEN_STORE = """
def open_store(path, *, durable=False, record_events=False):
    if os.path.isdir(path):
        return JsonFileStore(path, record_events=record_events)
    with open(path, "rb") as file:
        head = file.read(64).lstrip()
    return SQLiteSnapshotStore(path, durable=durable, record_events=record_events)
"""


def test_the_check_sees_each_kind_of_plain_open() -> None:
    assert refused("cli.py", SNIFFING_OPEN_STORE) == ["agentfsm/cli.py:5 open_store: open(path, 'rb')"]
    source = """
class Store:
    def head(self):
        return Path(self.path).read_bytes()[:16] + io.open(self.path).read(1).encode()

def backup(path):
    os.open(path, os.O_RDONLY)
    shutil.copy2(path, path + ".bak")
    return AgentSnapshot.from_file(path), read_file(path, "store"), Path(path).open("rb")
"""
    assert [(f, line) for f, line, _ in plain_opens(source)] == [
        ("Store.head", 4),
        ("Store.head", 4),
        ("backup", 7),
        ("backup", 8),
        ("backup", 9),
        ("backup", 9),
        ("backup", 9),
    ]
    harmless = (
        "sqlite3.connect(f'file:{path}?mode=ro', uri=True)\nos.stat(path)\nos.path.isfile(path)\nPath(path).suffix"
    )
    assert plain_opens(harmless) == []
