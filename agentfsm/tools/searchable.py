"""SearchableToolset: let the model find tools in a large catalog (BM25) instead of seeing them all.

Needs the ``search`` extra (``pip install 'agentfsm[search]'``, which brings ``bm25s``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from agentfsm._extras import extra_needed
from agentfsm.errors import ConfigurationError, UnsupportedOperationError
from agentfsm.messages import ChatMessage
from agentfsm.serialization import object_path
from agentfsm.tools.tool import Tool
from agentfsm.tools.toolset import (
    Toolset,
    check_unique_names,
    flatten_tools,
    tools_from_dict,
    tools_to_dict,
)

DEFAULT_SEARCH_DESCRIPTION = (
    "Search the tool catalog by keywords. The tools found become available to call in your next steps."
)
DEFAULT_PARAMETER_DESCRIPTIONS = {
    "tool_keywords": "Keywords describing what the tool should do, e.g. 'weather forecast city'.",
    "k": "How many tools to return at most.",
}


def _words(text: str) -> str:
    # Tool names are snake_case: search their words.
    return re.sub(r"[_\-.]", " ", text)


class SearchableToolset(Toolset):
    """A catalog of tools discovered through a ``search_tools`` tool (BM25 over names and descriptions).

    Catalogs smaller than ``search_threshold`` are passed through: all their tools are visible. As
    in Haystack, tools found by search stay available on this instance until ``clear()``; a run
    resumed from a snapshot finds again the tools its earlier searches found.
    """

    dynamic = True

    def __init__(
        self,
        catalog: Sequence[Tool | Toolset] | Toolset,
        *,
        top_k: int = 3,
        search_threshold: int = 8,
        search_tool_name: str = "search_tools",
        search_tool_description: str | None = None,
        search_tool_parameters_description: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(top_k, int) or top_k < 1:
            raise ConfigurationError(f"top_k must be an int >= 1, got {top_k!r}.")
        unknown = set(search_tool_parameters_description or {}) - set(DEFAULT_PARAMETER_DESCRIPTIONS)
        if unknown:
            raise ConfigurationError(
                f"search_tool_parameters_description keys must be a subset of {{'tool_keywords', 'k'}}, got {sorted(unknown)}."
            )
        # Toolset.__init__ is not called: the visible tools are computed from the catalog (see ``tools``).
        self.catalog = catalog
        self.top_k = top_k
        self.search_threshold = search_threshold
        self.search_tool_name = search_tool_name
        self.search_tool_description = search_tool_description
        self.search_tool_parameters_description = search_tool_parameters_description
        self._catalog: list[Tool] = []
        self._discovered: dict[str, Tool] = {}
        self._search_tool: Tool | None = None
        self._index: Any = None
        self._warmed = False

    # -- lifecycle ----------------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Warm child toolsets, flatten and index the catalog, and build the search tool."""
        if self._warmed:
            return
        if isinstance(self.catalog, Toolset):
            self.catalog.warm_up()
        items = list(self.catalog)
        for item in items:
            if isinstance(item, Toolset):
                item.warm_up()
        self._catalog = flatten_tools(items)
        check_unique_names([*self._catalog, *([] if self.passthrough else [self._make_search_tool()])])
        if self.passthrough:
            for t in self._catalog:
                t.warm_up()
        else:
            self._search_tool = self._make_search_tool()
            self._index = self._build_index()
        self._warmed = True

    @property
    def passthrough(self) -> bool:
        """Whether the catalog is small enough to show every tool directly."""
        catalog = self._catalog or flatten_tools(list(self.catalog))
        return len(catalog) < self.search_threshold

    def _make_search_tool(self) -> Tool:
        descriptions = {**DEFAULT_PARAMETER_DESCRIPTIONS, **(self.search_tool_parameters_description or {})}
        return Tool(
            name=self.search_tool_name,
            description=self.search_tool_description or DEFAULT_SEARCH_DESCRIPTION,
            parameters={
                "type": "object",
                "properties": {
                    "tool_keywords": {"type": "string", "description": descriptions["tool_keywords"]},
                    "k": {"type": "integer", "minimum": 1, "description": descriptions["k"]},
                },
                "required": ["tool_keywords"],
            },
            function=self._search_and_load,
        )

    def _build_index(self) -> Any:
        with extra_needed("SearchableToolset (a catalog of search_threshold tools or more)", "search"):
            import bm25s
        corpus = [
            f"{_words(t.name)} {t.description} {' '.join(t.parameters.get('properties', {}))}" for t in self._catalog
        ]
        index = bm25s.BM25()
        index.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
        return index

    # -- search -----------------------------------------------------------------------------------

    def search(self, tool_keywords: str, k: int | None = None) -> list[Tool]:
        """The catalog tools that best match ``tool_keywords`` (at most ``k``, default ``top_k``)."""
        self.warm_up()
        if self.passthrough:
            return list(self._catalog)
        import bm25s

        query = bm25s.tokenize([_words(tool_keywords)], stopwords="en", show_progress=False)
        if not query.vocab:
            return []
        limit = min(k or self.top_k, len(self._catalog))
        documents, scores = self._index.retrieve(query, k=limit, show_progress=False)
        return [self._catalog[int(d)] for d, s in zip(documents[0], scores[0], strict=True) if s > 0]

    def _search_and_load(self, tool_keywords: str, k: int | None = None) -> str:
        found = self.search(tool_keywords, k)
        for t in found:
            t.warm_up()
            self._discovered[t.name] = t
        if not found:
            return f"No tools match {tool_keywords!r}. Try other keywords."
        listing = "; ".join(f"{t.name}: {t.description}" for t in found)
        return f"Found {len(found)} tool(s), now available to call: {listing}"

    def restore(self, messages: Iterable[ChatMessage]) -> None:
        """Find again the tools that successful searches in ``messages`` found (used when a run resumes)."""
        if self.passthrough:
            return
        self.warm_up()
        failed = {r.origin.id for m in messages for r in m.tool_call_results if r.error}
        for message in messages:
            for call in message.tool_calls:
                if (
                    call.tool_name == self.search_tool_name
                    and call.id not in failed
                    and "tool_keywords" in call.arguments
                ):
                    self._search_and_load(call.arguments["tool_keywords"], call.arguments.get("k"))

    def clear(self) -> None:
        """Forget every discovered tool (to reuse this toolset for a fresh run)."""
        self._discovered.clear()

    # -- the collection: what the model sees now ----------------------------------------------------

    @property
    def tools(self) -> list[Tool]:  # type: ignore[override]  # computed here, a plain attribute in Toolset
        """The tools visible now: the whole catalog (passthrough) or the search tool and the discovered tools."""
        self.warm_up()
        if self.passthrough:
            return list(self._catalog)
        assert self._search_tool is not None
        return [self._search_tool, *self._discovered.values()]

    def catalog_tools(self) -> list[Tool]:
        """Every tool that can become visible (for validation of names and exit conditions)."""
        self.warm_up()
        return [*([] if self.passthrough or self._search_tool is None else [self._search_tool]), *self._catalog]

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def add(self, tool: Tool | Toolset) -> None:
        """Not supported: the catalog is fixed at initialization."""
        raise UnsupportedOperationError("Adding new tools after initialization is not supported for SearchableToolset.")

    # -- serialization ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Serialize the catalog and the settings (not the discovered tools)."""
        return {
            "type": object_path(type(self)),
            "data": {
                "catalog": tools_to_dict(self.catalog),
                "top_k": self.top_k,
                "search_threshold": self.search_threshold,
                "search_tool_name": self.search_tool_name,
                "search_tool_description": self.search_tool_description,
                "search_tool_parameters_description": self.search_tool_parameters_description,
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], allowed_modules: Iterable[str] | None = None) -> SearchableToolset:
        """Deserialize; the catalog's tools are resolved through the allow-list."""
        body = dict(data["data"])
        catalog = tools_from_dict(body.pop("catalog"), allowed_modules)
        return cls(catalog, **body)
