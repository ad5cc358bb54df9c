"""Stretches of runs met before: what a run does from a start depends on that start and the answers it gets.

The world is deterministic: from the same start (a fresh run paused at the same point, a store
left the same way by a kill), a run asks the same first question; given the same answer, the
same next one; and so on. A ``Stretch`` is what a run did from a start: the questions it was asked
with their answers, what it recorded, and where it stood at the end. ``Stretches`` finds one again
for a path whose answers agree with every answer the stretch was given, and the explorer then
adds it to the path's world instead of running it again (``Stretch.continue_in``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentfsm.checking.record import AnswerRead, Decision, HookFiring, ModelInput, Segment, ToolExecution
from agentfsm.checking.world import Asked, Key, World

if TYPE_CHECKING:
    from agentfsm.agent import RunRequest


@dataclass(frozen=True, slots=True)
class Mark:
    """How far a world's record and questions went when a stretch started."""

    asked: int
    model_inputs: int
    tool_executions: int
    hook_firings: int
    decisions: int
    answers_read: int
    segments: int

    @classmethod
    def of(cls, world: World) -> Mark:
        """Where ``world`` stands now."""
        record = world.record
        return cls(
            len(world.asked),
            len(record.model_inputs),
            len(record.tool_executions),
            len(record.hook_firings),
            len(record.decisions),
            len(record.answers_read),
            len(record.segments),
        )


@dataclass(frozen=True, slots=True)
class Stretch:
    """What a run did from one start: its questions and answers, its records, and where it stopped.

    A stretch either goes on (``then``: the request the next segment starts with, how it starts,
    and the store's committed database) or reaches the run's end (``ending`` and the rest of the
    record's last fields).
    """

    asked: tuple[tuple[Asked, Any], ...]
    model_inputs: tuple[ModelInput, ...]
    tool_executions: tuple[ToolExecution, ...]
    hook_firings: tuple[HookFiring, ...]
    decisions: tuple[Decision, ...]
    answers_read: tuple[AnswerRead, ...]
    segments: tuple[Segment, ...]
    #: The world's segment count at the stretch's end.
    segment: int
    #: What the tools' own functions returned, by (step, call key), at the stretch's end (``World.results``).
    results: tuple[tuple[tuple[int, str], Any], ...]
    then: tuple[RunRequest, str, bytes] | None = None
    ending: str = ""
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    result: dict[str, Any] | None = None
    comparable: dict[str, Any] | None = None
    error: BaseException | None = None

    @classmethod
    def since(cls, mark: Mark, world: World, then: tuple[RunRequest, str, bytes] | None = None) -> Stretch:
        """What ``world`` did since ``mark``: up to ``then``, or to the run's end."""
        record = world.record
        stretch = cls(
            tuple(world.asked[mark.asked :]),
            tuple(record.model_inputs[mark.model_inputs :]),
            tuple(record.tool_executions[mark.tool_executions :]),
            tuple(record.hook_firings[mark.hook_firings :]),
            tuple(record.decisions[mark.decisions :]),
            tuple(record.answers_read[mark.answers_read :]),
            tuple(record.segments[mark.segments :]),
            world.segment,
            tuple(world.results.items()),
            then,
        )
        if then is not None:
            return stretch
        return dataclasses.replace(
            stretch,
            ending=record.ending,
            state=record.state,
            result=record.result,
            comparable=record.comparable,
            error=record.error,
        )

    def agrees(self, answers: Mapping[Key, Any]) -> bool:
        """Whether a run given ``answers`` gets the stretch's answer at each of its questions (a question it does not name: its first option)."""
        return all(answers.get(asked.key, asked.options[0]) == answer for asked, answer in self.asked)

    def continue_in(self, world: World) -> None:
        """Add the stretch to ``world`` (whose answers agree with it), as if the run had done it there.

        The records are the stretch's own (nothing changes them once their segment is over); a
        question is fixed as it would be in ``world``, by the path's answers.
        """
        record = world.record
        world.asked += [(dataclasses.replace(a, fixed=a.key in world.answers), answer) for a, answer in self.asked]
        world.answers.update((asked.key, answer) for asked, answer in self.asked)
        record.model_inputs += self.model_inputs
        record.tool_executions += self.tool_executions
        record.hook_firings += self.hook_firings
        record.decisions += self.decisions
        record.answers_read += self.answers_read
        record.segments += self.segments
        world.segment = self.segment
        world.results.update(self.results)
        if self.then is None:
            record.ending, record.state, record.result = self.ending, self.state, self.result
            record.comparable, record.error = self.comparable, self.error


class Stretches:
    """Stretches by start: found again for a run whose answers agree with the ones a stretch was given."""

    def __init__(self) -> None:
        self._by_start: dict[Hashable, list[Stretch]] = {}

    def find(self, start: Hashable, answers: Mapping[Key, Any]) -> Stretch | None:
        """A stretch from ``start`` that a run given ``answers`` would do, if one is known."""
        for stretch in self._by_start.get(start, ()):
            if stretch.agrees(answers):
                return stretch
        return None

    def add(self, start: Hashable, stretch: Stretch) -> None:
        """Keep ``stretch``, done from ``start``."""
        self._by_start.setdefault(start, []).append(stretch)
