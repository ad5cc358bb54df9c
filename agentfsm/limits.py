"""Usage limits: ceilings on what one run may use, each ending the run through a declared edge.

``UsageLimits`` bounds a run's model calls (``requests``), tool calls, tokens, cost and running
time. The run reads one fact, ``usage_limit_reached``, before every model call (on its way out of
EXIT_CHECK), and ends through the ``usage_limit`` edge with the exit reason
``"usage_limit:<name>"`` of the first limit reached, in the order of the fields below. A tool call
that would go past ``tool_calls`` never runs: it is answered with a ``ToolCallLimitError`` result
(so every call of the conversation keeps its answer), and the run ends before the model sees it.

What the limits count lives in the run's State, so a snapshot carries it and a resumed run (in
this process or another) goes on counting from there: ``step_count`` (requests),
``tool_call_counts`` (tool calls that ran), ``token_usage`` (the replies' ``usage`` metadata) and
``run_usage`` (cost, the refused tool calls, and the running time of the wall clock).

A reply's usage is data from the model's server, counted as ``reported_counts`` reads it: a
negative count as 0 and one past ``MAX_REPLY_TOKENS`` as that many (each correction a ``warning``
event of the run), and a token count that is no integer is left out, or, when a limit reads the
tokens, fails the run with ``UsageNotCountedError``. No report can take back what was counted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from agentfsm.errors import ConfigurationError, ConfigurationTypeError, UsageNotCountedError
from agentfsm.serialization import brief

if TYPE_CHECKING:
    from agentfsm.messages import ChatMessage

#: The State key of the counts the other reserved keys do not keep (``AGENT_STATE_KEYS``).
RUN_USAGE_KEY = "run_usage"
#: The fields that are limits (the others: the price table, and what is worked out from them).
_LIMITS = ("requests", "tool_calls", "input_tokens", "output_tokens", "total_tokens", "cost", "wall_clock")
#: Input tokens, then output tokens, under OpenAI's and Anthropic's names.
_TOKEN_KEYS = ("prompt_tokens", "input_tokens", "completion_tokens", "output_tokens")
#: The counts of a reply's usage that must be integers when given (its other values may be details:
#: ``prompt_tokens_details``, ``service_tier``...).
_COUNT_KEYS = (*_TOKEN_KEYS, "total_tokens")
#: The most tokens one reply's count is taken for: past it a count is no model's (a billion tokens in
#: one call), and it is counted as this many.
MAX_REPLY_TOKENS = 10**9


class Price(NamedTuple):
    """What a model costs, in your currency, per million input and output tokens."""

    input_per_million: float
    output_per_million: float


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageLimits:
    """Ceilings on what one run may use; ``None`` leaves a count unbounded.

    >>> UsageLimits(requests=10, cost=0.50, prices={"gpt-4o-mini": (0.15, 0.60)}).cost
    0.5
    """

    #: Model calls.
    requests: int | None = None
    #: Tool calls that run; a call that would go past it is refused and the run ends.
    tool_calls: int | None = None
    #: Input (prompt) tokens over the replies' ``usage`` metadata.
    input_tokens: int | None = None
    #: Output (completion) tokens over the replies' ``usage`` metadata.
    output_tokens: int | None = None
    #: Input plus output tokens.
    total_tokens: int | None = None
    #: What the replies cost, from ``prices``.
    cost: float | None = None
    #: Seconds the run spends running, counted from its first start; time paused does not count.
    wall_clock: float | None = None
    #: The price of each model, by the name its replies give in ``meta["model"]`` (exactly: no
    #: built-in prices, which go stale).
    prices: Mapping[str, Price] = field(default_factory=dict)
    #: Whether any limit is set (prices alone count the cost without bounding it).
    bounded: bool = field(init=False, repr=False, compare=False, default=False)
    #: Whether a limit reads the replies' token usage (so every reply must report it).
    counts_tokens: bool = field(init=False, repr=False, compare=False, default=False)
    #: Whether the run works out what its replies cost (a price table is given).
    tracks_cost: bool = field(init=False, repr=False, compare=False, default=False)
    _price_table: dict[str, Price] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("requests", "tool_calls", "input_tokens", "output_tokens", "total_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"UsageLimits({name}=...) must be an int >= 1 or None, got {value!r}.")
        for name in ("cost", "wall_clock"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0
            ):
                raise ConfigurationError(f"UsageLimits({name}=...) must be a number > 0 or None, got {value!r}.")
        if not isinstance(self.prices, Mapping):
            raise ConfigurationTypeError(
                f"UsageLimits(prices=...) maps model names to (input, output) prices per million tokens, "
                f"got {type(self.prices).__name__}."
            )
        prices = {model: _price(model, price) for model, price in self.prices.items()}
        if self.cost is not None and not prices:
            raise ConfigurationError(
                "UsageLimits(cost=...) needs prices={model: (input_per_million, output_per_million)}: "
                "agentfsm has no built-in prices."
            )
        object.__setattr__(self, "prices", MappingProxyType(prices))
        object.__setattr__(self, "_price_table", prices)
        object.__setattr__(self, "bounded", any(getattr(self, name) is not None for name in _LIMITS))
        tokens = (self.input_tokens, self.output_tokens, self.total_tokens)
        object.__setattr__(self, "counts_tokens", bool(prices) or any(v is not None for v in tokens))
        object.__setattr__(self, "tracks_cost", bool(prices))

    @property
    def configured(self) -> bool:
        """Whether the run counts anything for these limits: a limit is set, or prices are given."""
        return self.bounded or self.tracks_cost

    def to_dict(self) -> dict[str, Any]:
        """Serialize (``Agent.to_dict``)."""
        data: dict[str, Any] = {name: getattr(self, name) for name in _LIMITS}
        data["prices"] = {model: list(price) for model, price in self.prices.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UsageLimits:
        """Invert ``to_dict``."""
        return cls(**data)

    def reached(self, step: int, state: Mapping[str, Any], now: float | None = None) -> str | None:
        """The first limit (its field name) that a run at ``step`` with this State data has reached, or ``None``.

        A count at its limit has reached it: the next model call would go past it. ``tool_calls`` is
        reached once a call was refused for it (the calls up to the limit ran).
        """
        if self.requests is not None and step >= self.requests:
            return "requests"
        usage = state.get(RUN_USAGE_KEY) or {}
        if self.tool_calls is not None and usage.get("refused_tool_calls"):
            return "tool_calls"
        if self.counts_tokens:
            get = (state.get("token_usage") or {}).get
            used_in = get("prompt_tokens", 0) + get("input_tokens", 0)
            used_out = get("completion_tokens", 0) + get("output_tokens", 0)
            if self.input_tokens is not None and used_in >= self.input_tokens:
                return "input_tokens"
            if self.output_tokens is not None and used_out >= self.output_tokens:
                return "output_tokens"
            if self.total_tokens is not None and used_in + used_out >= self.total_tokens:
                return "total_tokens"
        if self.cost is not None and usage.get("cost", 0.0) >= self.cost:
            return "cost"
        if self.wall_clock is not None and "started_at" in usage:
            paused = usage.get("paused_seconds", 0.0)
            if (time.time() if now is None else now) - usage["started_at"] - paused >= self.wall_clock:
                return "wall_clock"
        return None

    def replies_cost(self, replies: Iterable[ChatMessage]) -> float:
        """What replies cost, from their ``meta`` (``model`` and ``usage``); ``UsageNotCountedError`` when it cannot be known.

        Without prices it only checks that each reply reports its usage, its token counts as integers.
        """
        prices = self._price_table
        cost = 0.0
        for reply in replies:
            meta = reply.meta
            usage = meta.get("usage")
            if type(usage) is not dict and not isinstance(usage, Mapping):
                raise UsageNotCountedError(
                    "UsageLimits counts tokens or cost, and a reply reports no token usage (meta['usage']): use "
                    "a chat generator that reports it, or drop the token and cost limits."
                )
            if prices:
                model = meta.get("model")
                price = prices.get(model) if isinstance(model, str) else None
                if price is None:
                    raise UsageNotCountedError(
                        f"UsageLimits(prices=...) has no price for model {model!r} (the reply's meta['model']): "
                        f"add it, by that exact name; priced: {sorted(prices)}."
                    )
                used_in, used_out = tokens(_counts_or_refuse(usage))
                cost += (used_in * price[0] + used_out * price[1]) / 1e6
            else:
                _counts_or_refuse(usage)
        return cost


def _counts_or_refuse(usage: Mapping[str, Any]) -> dict[str, int]:
    """The reply's counts; ``UsageNotCountedError`` when a token count a limit reads is no integer."""
    counts, _ = reported_counts(usage)
    wrong = [key for key in _COUNT_KEYS if key in usage and key not in counts]
    if wrong:
        raise UsageNotCountedError(
            f"UsageLimits counts tokens, and a reply reports {wrong[0]} as {brief(usage[wrong[0]], 40)}, which is "
            "not a number of tokens: the run cannot count it, so it does not go on past its limits."
        )
    return counts


def _price(model: Any, price: Any) -> Price:
    if not isinstance(model, str):
        raise ConfigurationTypeError(f"UsageLimits(prices=...) keys are model names (str), got {model!r}.")
    try:
        checked = Price(*price)
    except TypeError:
        raise ConfigurationTypeError(
            f"The price of {model!r} must be (input_per_million, output_per_million), got {price!r}."
        ) from None
    if not all(isinstance(p, int | float) and not isinstance(p, bool) and p >= 0 for p in checked):
        raise ConfigurationError(f"The price of {model!r} must be two numbers >= 0, got {price!r}.")
    return checked


def tokens(usage: Mapping[str, Any]) -> tuple[int, int]:
    """Input and output tokens of ``usage`` metadata (OpenAI's names or Anthropic's), counted as ``reported_counts`` reads them."""
    get = reported_counts(usage)[0].get
    return get("prompt_tokens", 0) + get("input_tokens", 0), get("completion_tokens", 0) + get("output_tokens", 0)


def reported_counts(usage: Mapping[str, Any]) -> tuple[dict[str, int], list[str]]:
    """The integer counts of one reply's ``usage`` metadata as a run counts them, and what was corrected.

    A negative count is counted as 0 and one above ``MAX_REPLY_TOKENS`` as that many; a token count
    (``prompt_tokens``, ``output_tokens``, ``total_tokens``...) that is no integer is left out. The
    other values that are no integers are details (``prompt_tokens_details``...), not counts.
    """
    counts: dict[str, int] = {}
    corrected: list[str] = []
    for name, given in usage.items():
        if type(given) is int:
            count = given
        elif isinstance(given, int) and not isinstance(given, bool):
            count = int(given)  # an int subclass (a numpy integer...), as the plain number
        else:
            if name in _COUNT_KEYS:
                corrected.append(f"{name} {brief(given, 40)} is not a number of tokens: left out")
            continue
        if not 0 <= count <= MAX_REPLY_TOKENS:
            kept = 0 if count < 0 else MAX_REPLY_TOKENS
            corrected.append(f"{brief(name, 40)} {brief(count, 40)} counted as {kept}")
            count = kept
        counts[name] = count
    return counts, corrected
