"""LLM: vLLM's offline inference class (vllm.LLM) over Pagoda's engine.

    from pagoda import LLM, SamplingParams
    llm = LLM(model="/models/deepseek-coder-1.3b-instruct")
    outputs = llm.generate(["def fib(n):"], SamplingParams(temperature=0, max_tokens=64))
    print(outputs[0].outputs[0].text)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _pagoda
from .outputs import DeltaStream, RequestOutput, request_output
from .sampling_params import SamplingParams
from .tokenizer import Conversation, Tokenizer, render_chat

PromptType = Union[str, Dict[str, Any]]

# vLLM's dtype names. Pagoda computes in fp32 on the weights as stored, so they change nothing;
# the names are accepted so that vLLM programs run.
_DTYPES = {"auto", "float32", "float", "bfloat16", "float16", "half"}
# Weight quantization at load (int8, int4); vLLM's names of checkpoints that are quantized
# already, which Pagoda loads as stored.
_QUANTIZATIONS = {"int8": "int8", "int4": "int4", "awq": "", "gptq": "", "gguf": ""}
# Engine settings vLLM passes through LLM(**kwargs) that Pagoda has, under the same name.
_ENGINE_KWARGS = {
    "revision", "tokenizer_revision", "download_dir", "served_model_name", "chat_template",
    "chat_template_content_format", "generation_config", "max_logprobs",
    "max_num_batched_tokens", "block_size", "kv_cache_dtype", "enable_prefix_caching",
    "enable_chunked_prefill", "gguf_file", "num_threads", "cpu_bind", "weights_memory",
    "quantization_group_size",
}
# vLLM settings for GPUs or other machinery that have no meaning on Pagoda's CPU engine.
_IGNORED_KWARGS = {
    "tokenizer_mode", "trust_remote_code", "gpu_memory_utilization", "swap_space",
    "cpu_offload_gb", "enforce_eager", "disable_custom_all_reduce", "disable_log_stats",
    "max_seq_len_to_capture", "compilation_config", "hf_token",
}

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4,
          "tb": 1000**4, "tib": 1024**4}


def _parse_bytes(text: str) -> int:
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError(f"kv_cache_space: expected a size like 4GiB or 512MiB, got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _kv_cache_args(kv_cache_space: Union[None, int, float, str]) -> Dict[str, Any]:
    """How the offline LLM sizes its KV pool: the one place that decides it.

    The pool is sized by need (EngineArgs.kv_cache_by_need, as `pagoda generate` does): nothing
    is reserved at load, and the pool grows to what the submitted requests can use, so a few
    prompts take megabytes rather than a quarter of the machine. kv_cache_space caps it: a
    number is GiB (as vLLM's VLLM_CPU_KVCACHE_SPACE, which counts when it is not given), a
    string carries its unit ("8GiB"); unset, the cap is the engine's serving rule (a quarter of
    the available memory, at most what max_num_seqs full-length sequences need).
    """
    return {"kv_cache_by_need": True,
            "kv_cache_space_bytes": _kv_cache_space_bytes(kv_cache_space)}


def _kv_cache_space_bytes(kv_cache_space: Union[None, int, float, str]) -> int:
    if kv_cache_space is None:
        gib = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
        if not gib or float(gib) == 0:
            return 0
        kv_cache_space = float(gib)
    if isinstance(kv_cache_space, str):
        return _parse_bytes(kv_cache_space)
    if kv_cache_space < 0:
        raise ValueError(f"kv_cache_space must not be negative, got {kv_cache_space}")
    return int(kv_cache_space * 1024**3)


def _start_followers(args: Dict[str, Any], tensor_size: int,
                     pipeline_size: int) -> List[subprocess.Popen]:
    """For tensor_parallel_size x pipeline_parallel_size > 1: adds rank 0's group to args and
    starts ranks 1..T*P-1, each `python -m pagoda._follower` with the same arguments (as
    `pagoda generate -tp T -pp P` starts copies of itself; rank g is tensor rank g mod T of
    stage g // T). They leave when rank 0's engine shuts down, or die with this process."""
    size = tensor_size * pipeline_size
    if size == 1:
        return []
    args["tensor_parallel_size"] = tensor_size
    args["pipeline_parallel_size"] = pipeline_size
    args["tensor_parallel_job_id"] = f"pagoda-py-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    followers = []
    for rank in range(1, size):
        rank_args = dict(args, tensor_parallel_rank=rank)
        followers.append(subprocess.Popen(
            [sys.executable, "-m", "pagoda._follower", str(os.getpid()), json.dumps(rank_args)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
    return followers


def _stop_followers(followers: List[subprocess.Popen]) -> None:
    for p in followers:
        p.terminate()
    for p in followers:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class LLM:
    """A model loaded for offline batch generation, as vLLM's LLM.

    Generation releases the GIL: other Python threads run while a batch is computed. One LLM
    serves one generate/chat/stream at a time; a second one meanwhile (from another thread, or
    inside a stream's loop) raises RuntimeError.

    tensor_parallel_size=T and pipeline_parallel_size=P start ranks 1..T*P-1 as processes of
    their own (`python -m pagoda._follower`) on this machine, as `pagoda generate -tp T -pp P`
    does; this process is rank 0 (the first stage) and its OpenMP threads become its share of
    the CPUs.
    """

    def __init__(
        self,
        model: str,
        tokenizer: Optional[str] = None,
        dtype: str = "auto",
        quantization: Optional[str] = None,
        max_model_len: Optional[int] = None,
        max_num_seqs: Optional[int] = None,
        kv_cache_space: Union[None, int, float, str] = None,
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        seed: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        for name, size in (("tensor_parallel_size", tensor_parallel_size),
                           ("pipeline_parallel_size", pipeline_parallel_size)):
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(f"{name} must be a positive int, got {size!r}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        if dtype != "auto":
            warnings.warn(f"dtype={dtype!r} has no effect: Pagoda computes in fp32 with the "
                          "weights as stored (quantization='int8' or 'int4' shrinks them)",
                          stacklevel=2)
        if quantization is not None and quantization not in _QUANTIZATIONS:
            raise ValueError(
                f"quantization must be one of {sorted(_QUANTIZATIONS)}, got {quantization!r}")

        args: Dict[str, Any] = {"model": model}
        if tokenizer is not None:
            args["tokenizer"] = tokenizer
        if quantization is not None:
            args["quantization"] = _QUANTIZATIONS[quantization]
        if max_model_len is not None:
            args["max_model_len"] = max_model_len
        if max_num_seqs is not None:
            args["max_num_seqs"] = max_num_seqs
        args.update(_kv_cache_args(kv_cache_space))
        if seed is not None:
            args["seed"] = seed
        # vLLM takes a dict (or its JSON); the engine parses the JSON and names a bad key.
        speculative_config = kwargs.pop("speculative_config", None)
        if speculative_config is not None:
            args["speculative_config"] = (speculative_config if isinstance(speculative_config, str)
                                          else json.dumps(speculative_config))
        for name, value in kwargs.items():
            if name in _ENGINE_KWARGS:
                if value is not None:
                    args[name] = value
            elif name not in _IGNORED_KWARGS:
                raise TypeError(f"LLM() got an unexpected keyword argument {name!r}")

        level = os.environ.get("PAGODA_LOG_LEVEL") or os.environ.get("VLLM_LOGGING_LEVEL")
        _pagoda.log_to_stderr(level or "info")
        # Ranks 1..T*P-1 first: every rank loads its shard, then they join rank 0's engine.
        self._followers = _start_followers(args, tensor_parallel_size, pipeline_parallel_size)
        try:
            self._engine = _pagoda.Engine(args)
        except BaseException:
            _stop_followers(self._followers)
            raise
        self._request_counter = itertools.count()
        # The engine runs one batch at a time, stepped by whoever holds this.
        self._busy = threading.Lock()

    # --- vLLM's offline API ---------------------------------------------------------------

    def get_tokenizer(self) -> Tokenizer:
        return Tokenizer(self._engine)

    def get_default_sampling_params(self) -> SamplingParams:
        """The model's generation_config.json over vLLM's defaults."""
        return SamplingParams(**self._engine.default_sampling_params())

    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
        use_tqdm: bool = True,
        lora_request: Any = None,
    ) -> List[RequestOutput]:
        """Generates for every prompt; the outputs come back in the prompts' order.

        A prompt is a str, {"prompt": str} or {"prompt_token_ids": [int, ...]}. use_tqdm is
        accepted for vLLM's programs; Pagoda shows no progress bar.
        """
        _no_lora(lora_request)
        requests = [_parse_prompt(p) for p in _as_list(prompts)]
        return self._run(requests, self._params_for(len(requests), sampling_params))

    def chat(
        self,
        messages: Union[Conversation, Sequence[Conversation]],
        sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
        use_tqdm: bool = True,
        lora_request: Any = None,
        chat_template: Optional[str] = None,
        chat_template_content_format: str = "auto",
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Optional[List[Dict[str, Any]]] = None,
        chat_template_kwargs: Optional[Dict[str, Any]] = None,
    ) -> List[RequestOutput]:
        """Generates replies to one conversation (a list of {"role", "content"} messages) or to
        a list of them, rendered with the model's chat template."""
        _no_lora(lora_request)
        if continue_final_message:
            raise ValueError("continue_final_message is not supported by Pagoda's chat template "
                             "renderer; render the prompt and call generate() instead")
        if chat_template_content_format != "auto":
            raise ValueError("chat_template_content_format per call is not supported: pass it "
                             "to LLM(chat_template_content_format=...) instead")
        conversations = messages
        if len(messages) > 0 and isinstance(messages[0], dict):
            conversations = [messages]
        template_kwargs = dict(chat_template_kwargs or {})
        if tools is not None:
            template_kwargs["tools"] = tools
        requests = []
        for conversation in conversations:
            text = render_chat(self._engine, conversation, chat_template, add_generation_prompt,
                               template_kwargs)
            # The template wrote BOS and the special tokens itself.
            ids = self._engine.encode(text, False)
            requests.append((text, ids))
        return self._run(requests, self._params_for(len(requests), sampling_params))

    def stream(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
        delta: bool = False,
    ) -> Iterator[RequestOutput]:
        """Yields a RequestOutput each time a request makes progress (one step of the engine),
        the last with finished=True. With delta=True its text, token_ids and logprobs hold only
        what the step added (vLLM's RequestOutputKind.DELTA): the engine sends only that, so a
        stream costs O(length), not O(length^2). Leaving the loop early aborts the requests not
        yet finished."""
        requests = [_parse_prompt(p) for p in _as_list(prompts)]
        params = self._params_for(len(requests), sampling_params)
        with self._exclusive():
            try:
                added = self._add_requests(requests, params, "delta" if delta else "cumulative")
                streams = {request_id: DeltaStream(prompt, p)
                           for request_id, (prompt, p) in added.items()} if delta else {}
                while self._engine.has_unfinished_requests():
                    for native in self._engine.step():
                        if delta:
                            yield streams[native.request_id].output(native)
                        else:
                            prompt, request_params = added[native.request_id]
                            yield request_output(native, prompt, request_params)
            finally:
                self._engine.abort_all()

    # --- the rest --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _exclusive(self):
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("this LLM is busy with another generate, chat or stream call; "
                               "finish it first (or use one LLM per thread)")
        try:
            yield
        finally:
            self._busy.release()

    def _params_for(self, num_requests: int, sampling_params) -> List[SamplingParams]:
        if sampling_params is None:
            return [self.get_default_sampling_params()] * num_requests
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * num_requests
        params = list(sampling_params)
        if len(params) != num_requests:
            raise ValueError("The lengths of prompts and sampling_params must be the same "
                             f"({num_requests} prompts, {len(params)} sampling_params)")
        return params

    def _add_requests(
        self, requests: List[Tuple[Optional[str], Union[str, List[int]]]],
        params: List[SamplingParams], output_kind: str
    ) -> Dict[str, Tuple[Optional[str], SamplingParams]]:
        """Adds every request to the engine, all or none."""
        added: Dict[str, Tuple[Optional[str], SamplingParams]] = {}
        try:
            for (prompt, engine_prompt), p in zip(requests, params):
                if p.max_tokens is None:
                    # vLLM: up to the context length, i.e. what the prompt leaves of it.
                    if isinstance(engine_prompt, str):
                        engine_prompt = self._engine.encode(engine_prompt, True)
                    p = p.clone()
                    p.max_tokens = max(1, self._engine.max_model_len() - len(engine_prompt))
                request_id = str(next(self._request_counter))
                self._engine.add_request(request_id, engine_prompt, p, output_kind)
                added[request_id] = (prompt, p)
        except BaseException:
            self._engine.abort_all()
            raise
        return added

    def _run(self, requests, params: List[SamplingParams]) -> List[RequestOutput]:
        with self._exclusive():
            # One output per request, when it finishes: no per-step copies of the text so far.
            added = self._add_requests(requests, params, "final_only")
            finished = {out.request_id: out for out in self._engine.run_to_completion()}
        return [request_output(finished[request_id], prompt, p)
                for request_id, (prompt, p) in added.items()]


def _no_lora(lora_request: Any) -> None:
    if lora_request is not None:
        raise ValueError("LoRA adapters are not supported by Pagoda")


def _as_list(prompts) -> list:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    return list(prompts)


def _parse_prompt(prompt: PromptType) -> Tuple[Optional[str], Union[str, List[int]]]:
    """(the prompt text for RequestOutput.prompt, what the engine gets)."""
    if isinstance(prompt, str):
        return prompt, prompt
    if isinstance(prompt, dict):
        if "multi_modal_data" in prompt:
            raise ValueError("multi-modal prompts are not supported by Pagoda")
        if "prompt_token_ids" in prompt:
            return prompt.get("prompt"), [int(t) for t in prompt["prompt_token_ids"]]
        if "prompt" in prompt:
            return prompt["prompt"], prompt["prompt"]
    raise TypeError("a prompt is a str, {'prompt': str} or {'prompt_token_ids': [int, ...]}, "
                    f"got {type(prompt).__name__}")
