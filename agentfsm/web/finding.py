"""Finding runs: what the runs list shows of each run, and the query a list page answers.

Each run is listed with a title (its first user message), its status as the page names it, its
exit reason, the tools its conversation called, and the text its search matches (the run id, the
tool names, every message's text). A ``Query`` (``?q=&status=&since=&until=&sort=&page=``) picks
and orders them; the counts per status are of the runs the search and dates match, whatever the
status filter, so each status link says how many it shows. What a run lists as is kept per run
while the run does not change (its ``updated_at`` and number of snapshots), so a list page reads
only the snapshots of runs that moved since the last one.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from agentfsm.snapshot import AgentSnapshot
    from agentfsm.stores.base import RunInfo

#: The statuses the page names, in the order the list shows them.
STATUSES = ("running", "waiting for approval", "paused", "done", "failed")
#: How the list can be ordered, each with its label.
SORTS = {
    "updated": "last change, newest first",
    "oldest": "last change, oldest first",
    "steps": "most steps first",
    "title": "title",
}
#: Runs per list page.
PER_PAGE = 50
#: How many runs' listings are kept between list pages.
KEPT = 50_000
#: How long a title is shown.
TITLE_CHARS = 100


@dataclass(frozen=True, slots=True)
class Listed:
    """A run as the list shows it, and what its search matches."""

    info: RunInfo
    status: str
    title: str
    exit_reason: str | None
    tools: tuple[str, ...]
    #: The run id, its tool names and its messages' texts, lower-cased.
    haystack: str


@dataclass(frozen=True, slots=True)
class Query:
    """What a list page asks for: a search, a status, a date range (``YYYY-MM-DD``, by last change), an order and a page."""

    text: str = ""
    status: str = ""
    since: str = ""
    until: str = ""
    sort: str = "updated"
    page: int = 1

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> Query:
        """The query of a request's parameters; a value the page does not offer is left out, not refused."""
        page = params.get("page", "1")
        return cls(
            text=params.get("q", "").strip()[:200],
            status=params.get("status", "") if params.get("status", "") in STATUSES else "",
            since=_date(params.get("since", "")),
            until=_date(params.get("until", "")),
            sort=params.get("sort", "updated") if params.get("sort") in SORTS else "updated",
            page=int(page) if page.isascii() and page.isdigit() and 0 < len(page) < 7 and int(page) > 0 else 1,
        )

    def params(self, **changed: Any) -> dict[str, str]:
        """The query's parameters (those not at their default), with ``changed`` ones, for a link."""
        values = {
            "q": self.text,
            "status": self.status,
            "since": self.since,
            "until": self.until,
            "sort": self.sort,
            "page": str(self.page),
        }
        values.update({k: str(v) for k, v in changed.items()})
        defaults = {"sort": "updated", "page": "1"}
        return {k: v for k, v in values.items() if v and v != defaults.get(k)}


@dataclass(frozen=True, slots=True)
class Found:
    """A list page's runs, how many matched in all, and how many the search and dates match in each status."""

    runs: list[Listed]
    matched: int
    counts: dict[str, int]
    pages: int


def _date(value: str) -> str:
    """``value`` when it is a ``YYYY-MM-DD`` date, else ``""``."""
    parts = value.split("-")
    ok = len(value) == 10 and len(parts) == 3 and all(p.isascii() and p.isdigit() for p in parts)
    return value if ok else ""


def listed(info: RunInfo, snapshot: AgentSnapshot | None, status: str) -> Listed:
    """What the list shows of a run whose newest snapshot is ``snapshot`` (``None``: it has none yet)."""
    title, texts, tools = "", [info.run_id.lower()], []
    for message in snapshot.messages if snapshot is not None else []:
        for part in message.get("content") or []:
            if not isinstance(part, dict):
                continue
            if "text" in part:
                texts.append(str(part["text"]).lower())
                if not title and message.get("role") == "user":
                    title = " ".join(str(part["text"]).split())
            elif isinstance(part.get("tool_call"), dict):
                name = str(part["tool_call"].get("tool_name"))
                if name not in tools:
                    tools.append(name)
    if len(title) > TITLE_CHARS:
        title = title[: TITLE_CHARS - 1] + "…"
    texts.extend(t.lower() for t in tools)
    exit_reason = info.exit_reason or (snapshot.exit_reason if snapshot is not None else None)
    return Listed(info, status, title, exit_reason, tuple(tools), "\n".join(texts))


class Finder:
    """Lists a store's runs for the list page, keeping each run's listing while the run does not change."""

    def __init__(
        self, latest: Callable[[str], AgentSnapshot | None], status: Callable[[RunInfo, AgentSnapshot | None], str]
    ) -> None:
        self.latest = latest
        self.status = status
        self._kept: OrderedDict[tuple[str, str, int, str], Listed] = OrderedDict()

    def listing(self, info: RunInfo) -> Listed:
        """The run's listing (its newest snapshot read only when the run changed since it was last listed)."""
        key = (info.run_id, info.updated_at, info.snapshots, info.status.value)
        found = self._kept.get(key)
        if found is None:
            snapshot = self.latest(info.run_id)
            found = listed(info, snapshot, self.status(info, snapshot))
            self._kept[key] = found
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return found

    def find(self, runs: list[RunInfo], query: Query) -> Found:
        """The page of runs ``query`` asks for, in its order, with the counts per status."""
        words = query.text.lower().split()
        matching = []
        for info in runs:
            day = info.updated_at[:10]
            if (query.since and day < query.since) or (query.until and day > query.until):
                continue
            item = self.listing(info)
            if all(word in item.haystack for word in words):
                matching.append(item)
        counts = dict.fromkeys(STATUSES, 0)
        for item in matching:
            counts[item.status] = counts.get(item.status, 0) + 1
        shown = [item for item in matching if not query.status or item.status == query.status]
        if query.sort == "oldest":
            shown.sort(key=lambda item: item.info.updated_at)
        elif query.sort == "steps":
            shown.sort(key=lambda item: -item.info.step)
        elif query.sort == "title":
            shown.sort(key=lambda item: (item.title.lower() or "\uffff", item.info.run_id))
        else:
            shown.sort(key=lambda item: item.info.updated_at, reverse=True)
        pages = max(1, -(-len(shown) // PER_PAGE))
        start = (min(query.page, pages) - 1) * PER_PAGE
        return Found(shown[start : start + PER_PAGE], len(shown), counts, pages)
