"""What one sampled token does to its sequence: appended, finish decided, stream delta made.

Covers: finishing on a stop token id, a stop string (only the text the token added is searched, with
the tail a stop may straddle) or the token budget; the completion's final text (decoded once, cut at
the stop string); a streamed sample's delta (the text this token made visible: everything once
finished, before that the incremental text less what may yet become a stop string); the
`generated_tokens` counter.
Does not cover: choosing the token (engine/local/sampler.py), freeing its row (engine/local/scheduler.py).
"""

from __future__ import annotations

from torch import Tensor

from posttrain.engine.base import CompletionDelta
from posttrain.engine.detokenize import IncrementalText, find_stop
from posttrain.engine.local.counters import EngineCounters
from posttrain.engine.local.sequence import Sequence
from posttrain.models.tokenizer import Tokenizer
from posttrain.types import Completion, FinishReason


class Emitter:
    """Appends tokens to sequences; completions are tagged with `policy_version`."""

    def __init__(self, tokenizer: Tokenizer, counters: EngineCounters) -> None:
        self.tokenizer, self.counters = tokenizer, counters
        self.policy_version = 0

    def emit_rows(self, seqs: list[Sequence], toks: Tensor, lps: Tensor, deltas: list[CompletionDelta]) -> list[Sequence]:
        """One token per row -> the sequences it finished."""
        return [s for s, t, lp in zip(seqs, toks.tolist(), lps.tolist()) if self.emit(s, t, lp, deltas)]

    def emit(self, s: Sequence, tok: int, lp: float, deltas: list[CompletionDelta]) -> bool:
        """Append one token; decide whether the sequence is finished; queue a stream delta."""
        s.all.append(tok)
        s.out.append(tok)
        s.logprobs.append(lp)
        self.counters.generated_tokens += 1
        req, params = s.request, s.request.params
        new = s.text.push(tok) if s.text is not None else ""
        if tok in req.stop_ids:
            s.finish = FinishReason.STOP
        elif new and params.stop and self._hit_stop(s, s.text, new, params.stop):
            s.finish = FinishReason.STOP
        elif len(s.out) >= req.max_tokens:
            s.finish = FinishReason.LENGTH
        if s.finish is not None:
            text = self.tokenizer.decode(s.out)  # once per completion: the text `generate` returns
            if s.stop_at >= 0:
                at = find_stop(text, params.stop)
                text = text[:at] if at >= 0 else text
            s.completion = Completion(s.out, text, s.logprobs, s.finish, self.policy_version)
        if req.stream:
            deltas.append(self._delta(s, tok, lp))
        return s.finish is not None

    def _hit_stop(self, s: Sequence, text: IncrementalText, new: str, stops: tuple[str, ...]) -> bool:
        """Whether a stop string ends in the text `new` just added to `text` (only its tail is searched)."""
        tail = text.tail(len(new) + max(len(x) for x in stops) - 1)
        at = find_stop(tail, stops)
        if at >= 0:
            s.stop_at = text.length - len(tail) + at
        return at >= 0

    def _delta(self, s: Sequence, tok: int, lp: float) -> CompletionDelta:
        """The text this token made visible: final text once finished; before, the incremental text less
        what may yet become a stop string."""
        if s.completion is not None:
            text = s.completion.text[s.sent_text :]
        else:
            so_far = s.text
            assert so_far is not None  # a streamed sequence keeps its text
            stops = s.request.params.stop
            upto = so_far.length - (max(len(x) for x in stops) - 1 if stops else 0)
            text = so_far.tail(so_far.length - s.sent_text)[: upto - s.sent_text] if upto > s.sent_text else ""
        s.sent_text += len(text)
        return CompletionDelta(s.request.index, s.index, s.request.id, [tok], [lp], text, s.finish, s.completion)
