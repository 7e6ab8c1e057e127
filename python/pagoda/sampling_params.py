"""SamplingParams with vLLM's names and defaults (vllm.SamplingParams)."""

from __future__ import annotations

from typing import Dict, List, Optional, Union


class SamplingParams:
    """How one request samples. Keyword arguments and defaults are vLLM's.

    The engine checks the values when a request is added and raises pagoda.Error (a
    ValueError) naming the bad one.
    """

    def __init__(
        self,
        n: int = 1,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: Optional[int] = None,
        stop: Optional[Union[str, List[str]]] = None,
        stop_token_ids: Optional[List[int]] = None,
        ignore_eos: bool = False,
        max_tokens: Optional[int] = 16,
        min_tokens: int = 0,
        logprobs: Optional[int] = None,
        prompt_logprobs: Optional[int] = None,
        skip_special_tokens: bool = True,
        include_stop_str_in_output: bool = False,
        logit_bias: Optional[Dict[int, float]] = None,
        allowed_token_ids: Optional[List[int]] = None,
        bad_words: Optional[List[str]] = None,
    ) -> None:
        self.n = n
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.repetition_penalty = repetition_penalty
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.seed = seed
        if stop is None:
            self.stop = []
        elif isinstance(stop, str):
            self.stop = [stop]
        else:
            self.stop = list(stop)
        self.stop_token_ids = list(stop_token_ids or [])
        self.ignore_eos = ignore_eos
        # None: up to the context length (LLM fills in what the prompt leaves of it).
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs
        self.skip_special_tokens = skip_special_tokens
        self.include_stop_str_in_output = include_stop_str_in_output
        # Keys may come as strings (JSON objects), as vLLM accepts them; the engine checks the
        # ids against the vocabulary and the biases against [-100, 100].
        self.logit_bias = (None if logit_bias is None
                           else {int(k): float(v) for k, v in logit_bias.items()})
        self.allowed_token_ids = None if allowed_token_ids is None else list(allowed_token_ids)
        self.bad_words = None if bad_words is None else list(bad_words)

    @classmethod
    def from_optional(cls, **kwargs) -> "SamplingParams":
        """vLLM's constructor that treats None as "the default"."""
        return cls(**{k: v for k, v in kwargs.items() if v is not None})

    def clone(self) -> "SamplingParams":
        copy = SamplingParams()
        copy.__dict__.update({k: (list(v) if isinstance(v, list)
                                  else dict(v) if isinstance(v, dict) else v)
                              for k, v in self.__dict__.items()})
        return copy

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SamplingParams) and self.__dict__ == other.__dict__

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"SamplingParams({fields})"
