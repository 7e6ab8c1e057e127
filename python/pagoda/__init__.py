"""Pagoda's Python API: vLLM's offline inference (LLM, SamplingParams, RequestOutput) on
Pagoda's CPU engine. A program written for vLLM runs with `from pagoda import LLM,
SamplingParams` in place of `from vllm import ...`; docs/python.md lists the differences."""

from ._pagoda import Error, version
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer

__version__ = version()
__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "Tokenizer",
           "Error", "__version__"]
