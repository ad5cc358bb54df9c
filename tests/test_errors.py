"""The error and signal trees: each is defined in ``agentfsm.errors``, and its docstring draws them as they are."""

from __future__ import annotations

import inspect
import pickle
import pkgutil
import re
from importlib import import_module

import pytest

import agentfsm
from agentfsm import errors

#: The roots of the two trees: what went wrong, and where a run stopped without failing.
ROOTS = (errors.AgentFSMError, errors.AgentFSMSignal)

#: ``├── Name (BuiltinA, BuiltinB)   what it means``: depth from the prefix, then name and built-ins.
DRAWN = re.compile(
    r"^(?P<prefix>(?:│   |    )*)(?:├── |└── )?(?P<name>\w+)(?: \((?P<builtins>[\w, ]+)\))?(?:\s{2,}.*)?$"
)


def drawn_tree() -> dict[str, tuple[str | None, set[str]]]:
    """Each drawn error: its parent in the drawing and the built-ins named beside it."""
    doc = errors.__doc__ or ""
    block = doc.split("::\n\n", 1)[1]
    lines = [line[4:] for line in block.splitlines() if line.startswith("    ")]
    tree: dict[str, tuple[str | None, set[str]]] = {}
    parents: list[str] = []
    for line in lines:
        match = DRAWN.match(line)
        assert match, f"cannot read the drawn line {line!r}"
        depth = 0 if line == line.lstrip("│├└ ") else len(match["prefix"]) // 4 + 1
        del parents[depth:]
        builtins = {b.strip() for b in (match["builtins"] or "").split(",") if b.strip()}
        tree[match["name"]] = (parents[-1] if parents else None, builtins)
        parents.append(match["name"])
    return tree


def defined_tree() -> dict[str, tuple[str | None, set[str]]]:
    """Each error and signal class of ``agentfsm.errors``: its first agentfsm base and its other (built-in) bases."""
    tree: dict[str, tuple[str | None, set[str]]] = {}
    for name, cls in vars(errors).items():
        if inspect.isclass(cls) and issubclass(cls, ROOTS) and cls.__module__ == errors.__name__:
            ours = [b.__name__ for b in cls.__bases__ if issubclass(b, ROOTS)]
            others = {b.__name__ for b in cls.__bases__ if not issubclass(b, ROOTS)} - {"Exception"}
            tree[name] = (ours[0] if ours else None, others)
    return tree


def test_the_drawn_tree_is_the_tree_of_the_classes() -> None:
    assert drawn_tree() == defined_tree()


def test_every_agentfsm_error_is_defined_in_the_errors_module() -> None:
    elsewhere = set()
    for info in pkgutil.walk_packages(agentfsm.__path__, "agentfsm."):
        module = import_module(info.name)  # the dev extras hold every optional dependency
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, ROOTS) and cls.__module__ != errors.__name__:
                elsewhere.add(f"{cls.__module__}.{name}")
    assert not elsewhere


#: One of each pause, as the drivers raise them (a snapshot stands in as any picklable value).
PAUSES = [
    errors.BreakpointException("paused at LLM_CALL", {"run_id": "r"}, "/tmp/r.json"),
    errors.HITLBreakpointException("add waits", "add", "/tmp/r.json", "c1", {"run_id": "r"}),
    errors.RunCancelled("cancelled", {"run_id": "r"}),
]


@pytest.mark.parametrize("pause", PAUSES, ids=lambda p: type(p).__name__)
def test_except_agentfsm_error_lets_a_pause_through(pause: errors.BreakpointException) -> None:
    assert not isinstance(pause, errors.AgentFSMError)
    with pytest.raises(type(pause)):
        try:
            raise pause
        except errors.AgentFSMError:
            pytest.fail("except AgentFSMError caught a pause")
    try:
        raise pause
    except errors.BreakpointException as caught:  # every pause, as the seeds' own except clause
        assert caught is pause and isinstance(caught, errors.AgentFSMSignal)


@pytest.mark.parametrize("pause", PAUSES, ids=lambda p: type(p).__name__)
def test_a_pause_pickles_with_everything_it_carries(pause: errors.BreakpointException) -> None:
    again = pickle.loads(pickle.dumps(pause))
    assert type(again) is type(pause) and str(again) == str(pause)
    assert vars(again) == vars(pause)


def test_the_reader_sees_a_wrong_drawing() -> None:
    match = DRAWN.match("│   └── StaleSnapshotError                           not the head")
    assert match and match["name"] == "StaleSnapshotError" and len(match["prefix"]) == 4
    match = DRAWN.match("├── ConfigurationError (ValueError)   bad values")
    assert match and match["builtins"] == "ValueError"
