"""Runs one of examples/python/ (a vLLM program with only its import changed) on a test model
and checks what it generated against the `pagoda` CLI.

    run_vllm_example.py EXAMPLE --model DIR --pagoda BIN

The example names a real model; the harness loads DIR in its place. It records every
llm.generate() and llm.chat() the example makes and then checks:
  * generate: the token ids (and logprobs, when asked for) equal `pagoda generate --json
    --prompts-file` for the same prompts and sampling settings. Requests without a seed draw
    their seed from the engine's in the order they were added, so a call with unseeded sampling
    is compared only when it is the LLM's first;
  * chat: each prompt equals the model's template rendered by jinja2 (the reference renderer, as
    transformers uses it), its prompt_token_ids equal `pagoda tokenize` of that text, and a
    one-message chat with the same settings generates what `pagoda generate --chat` does.
"""

import argparse
import json
import os
import runpy
import subprocess
import sys
import tempfile

import pagoda

parser = argparse.ArgumentParser()
parser.add_argument("example")
parser.add_argument("--model", required=True)
parser.add_argument("--pagoda", required=True)
args = parser.parse_args()

calls = []  # (kind, llm, inputs, params list, outputs, first call of that llm)
llm_settings = {}  # id(llm) -> the LLM's keyword arguments (engine seed, ...)

original_init = pagoda.LLM.__init__
original_generate = pagoda.LLM.generate
original_chat = pagoda.LLM.chat


def init(self, model, **kwargs):
    llm_settings[id(self)] = kwargs
    original_init(self, args.model, **kwargs)


def params_list(llm, n, sampling_params):
    if sampling_params is None:
        return [llm.get_default_sampling_params()] * n
    if isinstance(sampling_params, pagoda.SamplingParams):
        return [sampling_params] * n
    return list(sampling_params)


def is_first_call(llm):
    return not any(c[1] is llm for c in calls)


def generate(self, prompts, sampling_params=None, *rest, **kwargs):
    first = is_first_call(self)
    outputs = original_generate(self, prompts, sampling_params, *rest, **kwargs)
    prompts = [prompts] if isinstance(prompts, (str, dict)) else list(prompts)
    calls.append(("generate", self, prompts, params_list(self, len(prompts), sampling_params),
                  outputs, first))
    return outputs


def chat(self, messages, sampling_params=None, *rest, **kwargs):
    first = is_first_call(self)
    outputs = original_chat(self, messages, sampling_params, *rest, **kwargs)
    conversations = [messages] if isinstance(messages[0], dict) else list(messages)
    calls.append(("chat", self, conversations,
                  params_list(self, len(conversations), sampling_params), outputs, first))
    return outputs


pagoda.LLM.__init__ = init
pagoda.LLM.generate = generate
pagoda.LLM.chat = chat

sys.argv = [args.example]
runpy.run_path(args.example, run_name="__main__")

work = tempfile.mkdtemp(prefix="pagoda-example-")


def cli(*cli_args):
    result = subprocess.run([args.pagoda, *cli_args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"pagoda {' '.join(cli_args)} failed:\n{result.stderr}")
    return result.stdout


def engine_flags(llm):
    settings = llm_settings[id(llm)]
    flags = ["--model", args.model]
    if settings.get("seed") is not None:
        flags += ["--engine-seed", str(settings["seed"])]
    return flags


def params_json(p):
    j = {"max_tokens": p.max_tokens, "min_tokens": p.min_tokens, "n": p.n,
         "temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k, "min_p": p.min_p,
         "presence_penalty": p.presence_penalty, "frequency_penalty": p.frequency_penalty,
         "repetition_penalty": p.repetition_penalty, "stop": p.stop,
         "stop_token_ids": p.stop_token_ids, "ignore_eos": p.ignore_eos}
    if p.seed is not None:
        j["seed"] = p.seed
    if p.logprobs is not None:
        j["logprobs"] = p.logprobs
    return j


def sampling_flags(p):
    flags = ["--max-tokens", str(p.max_tokens), "--temperature", repr(p.temperature),
             "--top-p", repr(p.top_p), "--top-k", str(p.top_k), "--min-p", repr(p.min_p)]
    if p.seed is not None:
        flags += ["--seed", str(p.seed)]
    return flags


def compare_completion(where, completion, reference):
    if completion.token_ids != reference["token_ids"]:
        sys.exit(f"{where}: token ids differ\n  python: {completion.token_ids}\n"
                 f"  pagoda generate: {reference['token_ids']}")
    if completion.logprobs is not None:
        for position, (mine, theirs) in enumerate(zip(completion.logprobs,
                                                      reference["logprobs"])):
            chosen = mine[theirs["token_id"]]
            if abs(chosen.logprob - theirs["logprob"]) > 1e-5:
                sys.exit(f"{where}: logprob of token {position} is {chosen.logprob}, "
                         f"pagoda generate gives {theirs['logprob']}")
            for top in theirs["top_logprobs"]:
                if abs(mine[top["token_id"]].logprob - top["logprob"]) > 1e-5:
                    sys.exit(f"{where}: top logprob of token {top['token_id']} at {position} "
                             "differs from pagoda generate's")


def check_generate(index, llm, prompts, params, outputs, first):
    if not first and any(p.seed is None and p.temperature > 0 for p in params):
        print(f"call {index}: unseeded sampling after the LLM's first call, not compared")
        return 0
    lines = []
    for prompt, p in zip(prompts, params):
        if not isinstance(prompt, str):
            prompt = prompt["prompt"]
        lines.append(json.dumps({"prompt": prompt, **params_json(p)}))
    path = os.path.join(work, f"prompts-{index}.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    references = [json.loads(line) for line in
                  cli("generate", *engine_flags(llm), "--prompts-file", path, "--json")
                  .splitlines()]
    completions = [c for output in outputs for c in output.outputs]
    if len(completions) != len(references):
        sys.exit(f"call {index}: {len(completions)} completions, pagoda generate printed "
                 f"{len(references)}")
    for i, (completion, reference) in enumerate(zip(completions, references)):
        compare_completion(f"call {index}, completion {i}", completion, reference)
    print(f"call {index}: {len(completions)} completions equal pagoda generate's")
    return 1


def check_chat(index, llm, conversations, params, outputs, first):
    import jinja2  # the reference renderer; python3-jinja2 (install_deps.sh --tests)

    with open(os.path.join(args.model, "tokenizer_config.json")) as f:
        config = json.load(f)
    token = lambda t: t["content"] if isinstance(t, dict) else (t or "")  # noqa: E731
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = environment.from_string(config["chat_template"])
    for conversation, output in zip(conversations, outputs):
        expected = template.render(messages=conversation, add_generation_prompt=True,
                                   bos_token=token(config.get("bos_token")),
                                   eos_token=token(config.get("eos_token")))
        if output.prompt != expected:
            sys.exit(f"call {index}: chat prompt {output.prompt!r}, jinja2 renders {expected!r}")
        path = os.path.join(work, f"chat-{index}.txt")
        with open(path, "w") as f:
            f.write(expected)
        ids = [int(t) for t in cli("tokenize", "--model", args.model, "--file", path).split()]
        if output.prompt_token_ids != ids:
            sys.exit(f"call {index}: chat prompt ids {output.prompt_token_ids}, pagoda "
                     f"tokenize gives {ids}")
    # Generation from a chat prompt, against the CLI's --chat (one user message, the LLM's
    # next request; unseeded sampling would draw a different engine seed than the CLI's).
    if params[0].seed is None and params[0].temperature > 0:
        print(f"call {index}: chat prompts equal jinja2's rendering; unseeded, not generated")
        return 1
    message = next(m["content"] for m in reversed(conversations[0]) if m["role"] == "user")
    mine = original_chat(llm, [{"role": "user", "content": message}], params[0])[0].outputs[0]
    reference = json.loads(cli("generate", *engine_flags(llm), "--chat", message,
                               *sampling_flags(params[0]), "--json").splitlines()[0])
    compare_completion(f"call {index}, one-message chat", mine, reference)
    print(f"call {index}: {len(outputs)} chat prompts equal jinja2's rendering, and a "
          "one-message chat equals pagoda generate --chat")
    return 1


checked = 0
for index, (kind, llm, inputs, params, outputs, first) in enumerate(calls):
    check = check_generate if kind == "generate" else check_chat
    checked += check(index, llm, inputs, params, outputs, first)
if checked == 0:
    sys.exit(f"{args.example} made no call that could be compared with the CLI")
print(f"{os.path.basename(args.example)}: {checked} of {len(calls)} calls checked")
