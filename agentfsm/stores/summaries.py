"""What a store keeps of each run to find it: its title, the tools it called, its text, whether it waits for a person.

A run's summary is what its newest snapshot says, kept beside it: written with each snapshot, in
the same transaction (``SQLiteSnapshotStore``), so a list of thousands of runs is one query and never
reads a snapshot. ``Summary`` is built from a conversation's messages (``of``) and then follows the
messages appended to it (``add``); a conversation rewritten (compacted) is summarised again from the
whole. ``Finding`` is what a list asks for (words, dates) and ``SummaryStore`` a store that answers it
from its summaries; ``summarised`` answers it for any store by reading each run's newest snapshot.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentfsm._core.decisions import decidable_calls
from agentfsm.pauses import RunStatus

if TYPE_CHECKING:
    from agentfsm.snapshot import AgentSnapshot
    from agentfsm.stores.base import RunInfo

#: How long a title is kept.
TITLE_CHARS = 100


@dataclass(slots=True)
class Summary:
    """What a conversation says to a search: its title, the tools it called, its messages' texts (lower-cased)."""

    #: Its first user message's first text, its white space made single spaces, at most ``TITLE_CHARS``.
    title: str = ""
    #: The tools its messages called, in the order they were first called.
    tools: list[str] = field(default_factory=list)
    #: Every text part of its messages, then each tool's name, lower-cased (what its search matches).
    texts: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, messages: Iterable[Mapping[str, Any]]) -> Summary:
        """The summary of a conversation (messages as ``ChatMessage.to_dict`` gives them)."""
        summary = cls()
        summary.add(messages)
        return summary

    def add(self, messages: Iterable[Mapping[str, Any]]) -> list[str]:
        """Take in messages appended to the conversation: the texts they add (new tools' names among them)."""
        added: list[str] = []
        for message in messages:
            for part in message.get("content") or []:
                if not isinstance(part, dict):
                    continue
                if "text" in part:
                    added.append(str(part["text"]).lower())
                    if not self.title and message.get("role") == "user":
                        self.title = title_of(str(part["text"]))
                elif isinstance(part.get("tool_call"), dict):
                    name = str(part["tool_call"].get("tool_name"))
                    if name not in self.tools:
                        self.tools.append(name)
                        added.append(name.lower())
        self.texts.extend(added)
        return added

    def matches(self, words: Iterable[str]) -> bool:
        """Whether every word (lower-cased) is in its texts."""
        return all(any(word in text for text in self.texts) for word in words)


def title_of(text: str) -> str:
    """A text as a title: its white space made single spaces, cut to ``TITLE_CHARS``."""
    title = " ".join(text.split())
    return title[: TITLE_CHARS - 1] + "…" if len(title) > TITLE_CHARS else title


def waits_for_person(snapshot: AgentSnapshot) -> bool:
    """Whether a paused run that stands at ``snapshot`` waits for a person: a call to decide, or a question to answer."""
    if snapshot.awaited_answers():
        return True
    if not snapshot.awaited_decisions():
        return False
    calls = snapshot.pending_calls_by_key()
    return any(key in calls for key in decidable_calls(snapshot))


@dataclass(frozen=True, slots=True)
class RunSummary:
    """A run as a list shows it: its record, title and tools, and whether it waits for a person (read when paused)."""

    info: RunInfo
    title: str
    tools: tuple[str, ...]
    waits: bool
    #: How it ended (``RunInfo.exit_reason``, else its newest snapshot's).
    exit_reason: str | None

    @property
    def status(self) -> str:
        """Its status as a list names it (``named_status``)."""
        return named_status(self.info.status, self.waits)


def named_status(status: RunStatus, waits: bool) -> str:
    """A run's status as a list names it: ``running``, ``waiting for approval``, ``paused``, ``done`` or ``failed``.

    ``waits``: its newest snapshot waits for a person (``waits_for_person``), read for a paused run only.
    """
    if status is RunStatus.ACTIVE:
        return "running"
    if status is RunStatus.PAUSED and waits:
        return "waiting for approval"
    return status.value


@dataclass(frozen=True, slots=True)
class Finding:
    """Which runs a list asks for: each word in the run's id, tools or texts, last changed within the dates."""

    #: Lower-cased words, each of which must be found.
    words: tuple[str, ...] = ()
    #: ``YYYY-MM-DD``: the first and last days of the runs' last change (``""``: no bound).
    since: str = ""
    until: str = ""

    def dated(self, updated_at: str) -> bool:
        """Whether a run last changed at ``updated_at`` (ISO) is within the dates."""
        day = updated_at[:10]
        return not ((self.since and day < self.since) or (self.until and day > self.until))


@runtime_checkable
class SummaryStore(Protocol):
    """A store that keeps a summary of each run beside its snapshots, and answers lists from them."""

    def summaries(
        self, finding: Finding, *, status: str = "", sort: str = "updated", offset: int = 0, limit: int | None = None
    ) -> list[RunSummary]:
        """The summaries of the runs ``finding`` asks for (in ``status``, as ``named_status`` names it, if given).

        Ordered by ``sort``: ``updated`` (last change, newest first), ``oldest``, ``steps`` (most first) or
        ``title`` (lower-cased, untitled last, then by run id), ties newest first; ``limit`` of them from ``offset``.
        """
        ...

    def counts(self, finding: Finding) -> dict[str, int]:
        """How many of the runs ``finding`` asks for are in each status (``named_status``; those with none left out)."""
        ...

    def run_info(self, run_id: str) -> RunInfo | None:
        """The run's record (``None``: the store does not hold it), read without listing every run."""
        ...


#: How many runs' summaries ``Summarised`` keeps between lists.
KEPT = 50_000


class Summarised:
    """Summaries of any store's runs, from their newest snapshots: each kept while its run does not change.

    For stores that keep no summaries (``SummaryStore``): the first list reads every run's newest
    snapshot, the next ones only those of runs that moved since.
    """

    def __init__(self, latest: Callable[[str], AgentSnapshot | None]) -> None:
        self.latest = latest
        self._kept: OrderedDict[tuple[str, str, int, str], tuple[Summary, bool, str | None]] = OrderedDict()

    def find(self, runs: Iterable[RunInfo], finding: Finding) -> list[RunSummary]:
        """The summaries of ``runs`` that ``finding`` asks for, in their order."""
        found = []
        for info in runs:
            if not finding.dated(info.updated_at):
                continue
            summary, waits, exit_reason = self._summary(info)
            run_id = info.run_id.lower()
            if all(word in run_id or summary.matches([word]) for word in finding.words):
                found.append(RunSummary(info, summary.title, tuple(summary.tools), waits, exit_reason))
        return found

    def _summary(self, info: RunInfo) -> tuple[Summary, bool, str | None]:
        key = (info.run_id, info.updated_at, info.snapshots, info.status.value)
        kept = self._kept.get(key)
        if kept is None:
            snapshot = self.latest(info.run_id)
            if snapshot is None:
                kept = Summary(), False, info.exit_reason
            else:
                summary, waits = Summary.of(snapshot.messages), waits_for_person(snapshot)
                kept = summary, waits, info.exit_reason or snapshot.exit_reason
            self._kept[key] = kept
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return kept
