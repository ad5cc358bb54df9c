"""The decision type lives below the core and ``agentfsm.hitl``, and every path it was reached by still works."""

from __future__ import annotations

import pytest

from agentfsm import decisions, hitl
from agentfsm.errors import DecisionError
from agentfsm.hitl import types as hitl_types
from agentfsm.serialization import TAG, deserialize_value, serialize_value


def test_hitl_exports_the_same_decision_type_and_fingerprint() -> None:
    assert hitl.ToolExecutionDecision is hitl_types.ToolExecutionDecision is decisions.ToolExecutionDecision
    assert hitl.call_fingerprint is decisions.call_fingerprint
    assert hitl_types.as_decision is decisions.as_decision and hitl_types.as_decisions is decisions.as_decisions


def test_a_decision_stored_under_its_old_module_loads_as_the_same_value() -> None:
    decision = decisions.ToolExecutionDecision("add", True, "c1", final_tool_params={"a": 1})
    stored = serialize_value(decision)
    assert stored[TAG] == "object" and stored["type"] == "agentfsm.decisions.ToolExecutionDecision"
    before = {**stored, "type": "agentfsm.hitl.types.ToolExecutionDecision"}  # as agentfsm 0.1 wrote it
    assert deserialize_value(stored) == deserialize_value(before) == decision


def test_a_decision_read_from_data_is_checked_here() -> None:
    with pytest.raises(DecisionError, match="execute must be bool"):
        decisions.as_decision({"tool_name": "add", "execute": "false"})
    with pytest.raises(DecisionError, match="list of ToolExecutionDecision"):
        decisions.as_decisions({"tool_name": "add", "execute": True})
