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


def _completion(native, wants_logprobs: bool, delta: bool) -> CompletionOutput:
    logprobs = None
    cumulative = None
    if wants_logprobs:
        positions = list(native.logprobs)
        cumulative = sum(p.chosen.logprob for p in positions)
        if delta:
            positions = positions[len(positions) - len(native.delta_token_ids):]
        logprobs = [_position(p) for p in positions]
    return CompletionOutput(
        index=native.index,
        text=native.delta_text if delta else native.text,
        token_ids=list(native.delta_token_ids if delta else native.token_ids),
        cumulative_logprob=cumulative,
        logprobs=logprobs,
        finish_reason=native.finish_reason or None,
        stop_reason=native.stop_reason,
    )


def request_output(native, prompt: Optional[str], params, delta: bool = False) -> RequestOutput:
    """Converts one engine RequestOutput; `params` is the request's SamplingParams."""
    prompt_logprobs = None
    if params.prompt_logprobs is not None:
        prompt_logprobs = [None if p is None else _position(p) for p in native.prompt_logprobs]
    outputs = [_completion(o, params.logprobs is not None, delta) for o in native.outputs]
    outputs.sort(key=lambda o: o.index)
    return RequestOutput(
        request_id=native.request_id,
        prompt=prompt,
        prompt_token_ids=list(native.prompt_token_ids),
        prompt_logprobs=prompt_logprobs,
        outputs=outputs,
        finished=native.finished,
        num_cached_tokens=native.num_cached_tokens,
        metrics=native.metrics,
    )
