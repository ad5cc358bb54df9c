"""Finding runs: the query a list page answers, over the summaries a store keeps of its runs.

Each run is listed with a title (its first user message), its status as the page names it, its
exit reason, the tools its conversation called; its search matches the run id, the tool names and
every message's text (``agentfsm.stores.summaries``). A ``Query`` (``?q=&status=&since=&until=&sort=&page=``)
picks and orders them; the counts per status are of the runs the search and dates match, whatever
the status filter, so each status link says how many it shows. A store that keeps summaries
(``SummaryStore``: SQLite, durable runs) answers the search and dates itself; any other is
summarised from its runs' newest snapshots, each kept while its run does not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentfsm.stores.summaries import Finding, RunSummary, Summarised, SummaryStore

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from agentfsm.snapshot import AgentSnapshot
    from agentfsm.web.review import Runs

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

    runs: list[RunSummary]
    matched: int
    counts: dict[str, int]
    pages: int


def _date(value: str) -> str:
    """``value`` when it is a ``YYYY-MM-DD`` date, else ``""``."""
    parts = value.split("-")
    ok = len(value) == 10 and len(parts) == 3 and all(p.isascii() and p.isdigit() for p in parts)
    return value if ok else ""


class Finder:
    """Answers list pages from a store's summaries, or from its runs' newest snapshots when it keeps none."""

    def __init__(self, store: Runs, latest: Callable[[str], AgentSnapshot | None]) -> None:
        self.store = store
        self.summarised = Summarised(latest)

    def find(self, query: Query) -> Found:
        """The page of runs ``query`` asks for, in its order, with the counts per status."""
        finding = Finding(tuple(query.text.lower().split()), query.since, query.until)
        counts = dict.fromkeys(STATUSES, 0)
        store = self.store
        if isinstance(store, SummaryStore):
            counts.update(store.counts(finding))
            matched = counts.get(query.status, 0) if query.status else sum(counts.values())
            pages = max(1, -(-matched // PER_PAGE))
            start = (min(query.page, pages) - 1) * PER_PAGE
            shown = store.summaries(finding, status=query.status, sort=query.sort, offset=start, limit=PER_PAGE)
            return Found(shown, matched, counts, pages)
        matching = self.summarised.find(store.runs(), finding)
        for item in matching:
            counts[item.status] = counts.get(item.status, 0) + 1
        chosen = [item for item in matching if not query.status or item.status == query.status]
        if query.sort == "oldest":
            chosen.sort(key=lambda item: item.info.updated_at)
        elif query.sort == "steps":
            chosen.sort(key=lambda item: -item.info.step)
        elif query.sort == "title":
            chosen.sort(key=lambda item: (item.title.lower() or "\uffff", item.info.run_id))
        else:
            chosen.sort(key=lambda item: item.info.updated_at, reverse=True)
        pages = max(1, -(-len(chosen) // PER_PAGE))
        start = (min(query.page, pages) - 1) * PER_PAGE
        return Found(chosen[start : start + PER_PAGE], len(chosen), counts, pages)
