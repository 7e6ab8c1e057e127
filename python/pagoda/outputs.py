"""RequestOutput, CompletionOutput and Logprob with vLLM's attributes, made from the engine's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Union

# One position's logprobs as vLLM gives them: token id -> Logprob, holding the chosen token and
# the top alternatives.
PositionLogprobs = Dict[int, "Logprob"]


@dataclass
class Logprob:
    logprob: float
    rank: Optional[int] = None  # 1 for the most likely token
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[PositionLogprobs]]
    finish_reason: Optional[str] = None  # "stop", "length", "abort"; None while running
    stop_reason: Union[int, str, None] = None  # the stop string matched, if any

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]  # None when the prompt was given as token ids
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[PositionLogprobs]]]
    outputs: List[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    metrics: object = None


def _position(native) -> PositionLogprobs:
    """The engine's GeneratedTokenLogprobs as vLLM's {token_id: Logprob}. The top list is best
    first, so its ranks are its order; the chosen token's rank is known when it is among them
    (or when the engine computed it, as for prompt tokens)."""
    position: PositionLogprobs = {}
    for rank, t in enumerate(native.top, start=1):
        position[t.token_id] = Logprob(t.logprob, rank, t.token)
    chosen = native.chosen
    if chosen.token_id not in position:
        position[chosen.token_id] = Logprob(chosen.logprob, chosen.rank or None, chosen.token)
    return position


def _completion(native, wants_logprobs: bool, logprob_before: float = 0.0) -> CompletionOutput:
    """`native` is cumulative or a delta, as the request asked the engine; `logprob_before` is
    the sum of the chosen logprobs a delta stream has already delivered."""
    logprobs = None
    cumulative = None
    if wants_logprobs:
        positions = list(native.logprobs)
        cumulative = logprob_before + sum(p.chosen.logprob for p in positions)
        logprobs = [_position(p) for p in positions]
    return CompletionOutput(
        index=native.index,
        text=native.text,
        token_ids=list(native.token_ids),
        cumulative_logprob=cumulative,
        logprobs=logprobs,
        finish_reason=native.finish_reason or None,
        stop_reason=native.stop_reason,
    )


def _prompt_logprobs(native, params) -> Optional[List[Optional[PositionLogprobs]]]:
    if params.prompt_logprobs is None:
        return None
    return [None if p is None else _position(p) for p in native.prompt_logprobs]


def request_output(native, prompt: Optional[str], params) -> RequestOutput:
    """Converts one cumulative (or final) engine RequestOutput; `params` is the request's
    SamplingParams."""
    outputs = [_completion(o, params.logprobs is not None) for o in native.outputs]
    outputs.sort(key=lambda o: o.index)
    return RequestOutput(
        request_id=native.request_id,
        prompt=prompt,
        prompt_token_ids=list(native.prompt_token_ids),
        prompt_logprobs=_prompt_logprobs(native, params),
        outputs=outputs,
        finished=native.finished,
        num_cached_tokens=native.num_cached_tokens,
        metrics=native.metrics,
    )


class DeltaStream:
    """One request streamed as deltas (RequestOutputKind.kDelta): each engine output holds only
    what its step added, so a stream costs O(length). The engine sends the prompt's ids and
    logprobs in the first output only, and a sample's finish once; this keeps them (the same
    objects, not copies) so that every RequestOutput still shows them, and sums each sample's
    logprobs so that cumulative_logprob stays cumulative."""

    def __init__(self, prompt: Optional[str], params) -> None:
        self.prompt = prompt
        self.params = params
        self.prompt_token_ids: List[int] = []
        self.prompt_logprobs: Optional[List[Optional[PositionLogprobs]]] = None
        self.cumulative_logprobs: Dict[int, float] = {}
        self.finishes: Dict[int, tuple] = {}  # index -> (finish_reason, stop_reason)

    def output(self, native) -> RequestOutput:
        if native.prompt_token_ids:
            self.prompt_token_ids = list(native.prompt_token_ids)
            self.prompt_logprobs = _prompt_logprobs(native, self.params)
        wants_logprobs = self.params.logprobs is not None
        outputs = []
        for o in native.outputs:
            c = _completion(o, wants_logprobs, self.cumulative_logprobs.get(o.index, 0.0))
            if wants_logprobs:
                self.cumulative_logprobs[c.index] = c.cumulative_logprob
            if c.finish_reason is not None:
                self.finishes[c.index] = (c.finish_reason, c.stop_reason)
            elif c.index in self.finishes:
                c.finish_reason, c.stop_reason = self.finishes[c.index]
            outputs.append(c)
        outputs.sort(key=lambda o: o.index)
        return RequestOutput(
            request_id=native.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            prompt_logprobs=self.prompt_logprobs,
            outputs=outputs,
            finished=native.finished,
            num_cached_tokens=native.num_cached_tokens,
            metrics=native.metrics,
        )
