"""Agents that act: tools over a sandbox session, envs, `run_agent_task`, context policies, a scripted model.

Layout: `episode.py` the records (`Episode`, `AgentTurn`, `ToolCall`, `ToolResult`, `EpisodeStatus`);
`tools.py` the `Tool` record, `@tool` and the built-ins; `format.py` the built-in text call format
(implemented in `engine/tool_format.py`, which `posttrain serve` shares);
`context.py` the `ContextPolicy` and the per-episode `ContextWindow`; `recall.py` full-text memory;
`models.py` engines as agent models (token in, token out); `openai_chat.py` OpenAI-compatible
endpoints with native tools; `env.py` the `Env` protocol, `AgentTask`, `ToolEnv`; `terminal.py`
Harbor terminal tasks; `runtime.py` `run_agent_task`; `rollouter.py` the `AgentRollouter` for
training; `scripted.py` the scripted model; `demo.py` the demo suite.
"""

from __future__ import annotations

from posttrain.agent.context import ContextPolicy
from posttrain.agent.env import AgentTask, Env, ToolEnv
from posttrain.agent.episode import AgentTurn, Episode, EpisodeStatus, ToolCall, ToolResult
from posttrain.agent.runtime import make_env, run_agent_task
from posttrain.agent.scripted import ScriptedAgent, call
from posttrain.agent.tools import Tool, ToolContext, ToolOutput, default_tools, tool

__all__ = ["AgentTask", "AgentTurn", "ContextPolicy", "Env", "Episode", "EpisodeStatus", "ScriptedAgent", "Tool",
           "ToolCall", "ToolContext", "ToolEnv", "ToolOutput", "ToolResult", "call", "default_tools", "make_env",
           "run_agent_task", "tool"]
