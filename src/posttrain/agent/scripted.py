"""`ScriptedAgent`: a scripted model that plays a fixed list of tool calls, for testing your own envs and tools.

Covers: an `Engine` (a `MockEngine`, so it has token ids and a tokenizer like a real engine) that
answers each acting turn with the next action of its script, written in the built-in text call
format (`format.py`), and each compaction request with a fixed summary; when the script runs out it
submits. `call(name, **arguments)` builds an action; a plain string is sent as it is (to script
malformed calls, or an episode's opening answer, `spec.Opening`: with `eos_id`, a reply that ends on its own ends
with that id, as a model's does). `oracle_agent` runs a task's solution script and submits; `noop_agent` submits at once.
One `ScriptedAgent` per episode: its position in the script is its own.
Does not cover: sampling (every logprob is 0.0), anything a real model decides.

>>> agent = ScriptedAgent([call("write_file", path="hello.txt", content="hi\\n"), call("submit")])
>>> episode = asyncio.run(run_agent_task(agent, task, sandbox=sandbox))   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence

from posttrain.agent import format as fmt
from posttrain.agent.episode import ToolCall
from posttrain.engine.base import Prompt, TextTokenizer
from posttrain.engine.mock import MockEngine


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name, dict(arguments))


class ScriptedAgent(MockEngine):
    """Plays `actions` in order (then submits), in the text call format, with the char tokenizer by default."""

    def __init__(self, actions: Sequence[ToolCall | str], *, tokenizer: TextTokenizer | None = None,
                 summary: str = "Summary: the task is in progress; earlier steps ran their commands.",
                 thought: str = "", eos_id: int | None = None) -> None:
        from posttrain.models.tokenizer import char_tokenizer

        self.actions = [a if isinstance(a, str) else thought + fmt.render_call(a) for a in actions]
        self.summary = summary
        self.position = 0
        super().__init__(self.respond, tokenizer=tokenizer or char_tokenizer(), max_concurrency=1, eos_id=eos_id)

    def respond(self, prompt: Prompt) -> str:
        tok = self.tokenizer
        assert tok is not None
        tail = tok.decode(prompt[-24:]) if isinstance(prompt, list) else prompt[-64:]
        if tail.rstrip().endswith("</note>"):  # the runtime asks for a summary (compaction)
            return self.summary
        if self.position >= len(self.actions):
            return fmt.render_call(call("submit"))
        self.position += 1
        return self.actions[self.position - 1]


def oracle_agent(solution: str, tokenizer: TextTokenizer | None = None) -> ScriptedAgent:
    """Runs `solution` (a shell script) in one bash call, then submits: the task's proof that it can be solved."""
    script = ("cat > /tmp/solve.sh <<'POSTTRAIN_SOLUTION_EOF'\n" + solution.rstrip("\n")
              + "\nPOSTTRAIN_SOLUTION_EOF\nbash /tmp/solve.sh")
    return ScriptedAgent([call("bash", command=script), call("submit")], tokenizer=tokenizer)


def noop_agent(tokenizer: TextTokenizer | None = None) -> ScriptedAgent:
    """Submits without doing anything: every task must fail it."""
    return ScriptedAgent([call("submit")], tokenizer=tokenizer)
