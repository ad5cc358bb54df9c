"""Tools the model can call, collections of them, and the invoker that runs them."""

from agentfsm.tools.component import ComponentTool, PipelineTool
from agentfsm.tools.from_function import create_tool_from_function, tool
from agentfsm.tools.invoker import ToolInvoker
from agentfsm.tools.progress import ProgressReporter
from agentfsm.tools.searchable import SearchableToolset
from agentfsm.tools.tool import Tool
from agentfsm.tools.toolset import Toolset

__all__ = [
    "ComponentTool",
    "PipelineTool",
    "ProgressReporter",
    "SearchableToolset",
    "Tool",
    "ToolInvoker",
    "Toolset",
    "create_tool_from_function",
    "tool",
]
