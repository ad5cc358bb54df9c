"""The package's layout: the core imports no application, and no two modules import each other in a ring.

Imports are read from the source (``ast``), at module level and inside functions alike: a lazy import
is still a dependency. Imports under ``if TYPE_CHECKING:`` are left out of the cycle check (they
never run) but count for the core's rule. Importing ``a.b.c`` runs ``a/b/__init__.py`` first; those
implicit edges are left out of the package-wide check, as every module would otherwise depend on the
whole package, and counted between the core and ``agentfsm.hitl``: the decision type sits below both
(``agentfsm.decisions``), so the core imports ``hitl`` and never the other way round.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agentfsm"

#: The run core: the transition tables and the run, its drivers, its resume and its decision check.
CORE = ("agentfsm._core", "agentfsm.machine")
#: Confirmation: the core asks its strategies, so it must never import the core back.
HITL = ("agentfsm.hitl",)
#: What sits on top of the core: users' entry points and the capabilities built from it.
APPLICATIONS = (
    "agentfsm._serving",
    "agentfsm.a2a",
    "agentfsm.ag_ui",
    "agentfsm.builtin_hooks",
    "agentfsm.cli",
    "agentfsm.demo",
    "agentfsm.diagrams",
    "agentfsm.durable",
    "agentfsm.mcp",
    "agentfsm.testing",
    "agentfsm.web",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(name: str, *, typing_only: bool, packages: bool = False) -> set[str]:
    """The agentfsm modules ``name`` imports (with those under ``if TYPE_CHECKING:`` when ``typing_only``).

    ``packages``: with the subpackages whose ``__init__`` such an import runs first (``agentfsm.hitl``
    for ``agentfsm.hitl.types``), but ``agentfsm`` itself and the packages ``name`` is part of.
    """
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing_only:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    if packages:
        found.update(
            parent
            for module in list(found)
            for parent in (module.rsplit(".", depth)[0] for depth in range(1, module.count(".")))
            if not within(name, (parent,))
        )
    return {m for m in found if m in MODULES and m != name}


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import ring of ``graph`` (its modules in order, the first repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []

    def walk(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(graph[module]):
            if ring := walk(target):
                return ring
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if ring := walk(module):
            return ring
    return None


def within(module: str, parts: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in parts)


def test_no_module_imports_itself_through_others() -> None:
    ring = cycle_in({m: imports(m, typing_only=False) for m in MODULES})
    assert ring is None, "import cycle: " + " -> ".join(ring or [])


@pytest.mark.parametrize("module", sorted(m for m in MODULES if within(m, CORE)))
def test_the_core_imports_no_application(module: str) -> None:
    assert not {m for m in imports(module, typing_only=True) if within(m, APPLICATIONS)}


def test_the_core_and_hitl_import_each_other_in_no_ring() -> None:
    """Counting the ``__init__`` an import runs: ``_core.decisions`` -> ``hitl.types`` ran all of ``hitl``."""
    parts = (*CORE, *HITL, "agentfsm.decisions")
    graph = {m: {t for t in imports(m, typing_only=False, packages=True) if within(t, parts)} for m in MODULES}
    ring = cycle_in({m: targets for m, targets in graph.items() if within(m, parts)})
    assert ring is None, "import cycle: " + " -> ".join(ring or [])


@pytest.mark.parametrize("module", sorted(m for m in MODULES if within(m, HITL)))
def test_hitl_imports_nothing_of_the_core(module: str) -> None:
    assert not {m for m in imports(module, typing_only=True) if m.startswith("agentfsm._core")}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if within(m, CORE)))
def test_the_core_takes_the_decision_type_from_below_hitl(module: str) -> None:
    assert "agentfsm.hitl.types" not in imports(module, typing_only=True)


def test_the_decision_type_imports_neither_the_core_nor_hitl() -> None:
    assert not {m for m in imports("agentfsm.decisions", typing_only=True) if within(m, (*CORE, *HITL))}


def test_the_checks_see_a_cycle_and_an_application_import() -> None:
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None
    assert "agentfsm.machine" in imports("agentfsm._core.runtime", typing_only=False)
    assert "agentfsm.hitl" in imports("agentfsm._core.config", typing_only=False, packages=True)
    assert "agentfsm.hitl" not in imports("agentfsm.hitl.strategies", typing_only=False, packages=True)
    assert "agentfsm" not in imports("agentfsm.hitl", typing_only=False, packages=True)
    assert within("agentfsm.durable.driver", APPLICATIONS) and not within("agentfsm.durability", APPLICATIONS)


def private_reads_of_an_agent(source: str) -> list[str]:
    """The private attributes read off something called ``agent`` (``self.agent._x``, ``agent._x``)."""
    reads = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
            if name == "agent":
                reads.append(f"{ast.unparse(node)} (line {node.lineno})")
    return reads


@pytest.mark.parametrize("module", [m for m in MODULES if m.startswith(APPLICATIONS)])
def test_the_applications_read_no_private_attribute_of_the_agent(module: str) -> None:
    assert private_reads_of_an_agent(MODULES[module].read_text(encoding="utf-8")) == []


def test_the_check_sees_a_private_read_of_the_agent() -> None:
    assert private_reads_of_an_agent("self.agent._full_schema\nagent.fingerprint\n") == [
        "self.agent._full_schema (line 1)"
    ]
