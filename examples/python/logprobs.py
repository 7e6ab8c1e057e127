# Log probabilities of the generated tokens (and of the prompt), as vLLM returns them: per
# position a dict from token id to Logprob. Only the import differs from a vLLM program.
from pagoda import LLM, SamplingParams


def main():
    llm = LLM(model="deepseek-ai/deepseek-coder-1.3b-instruct")
    sampling_params = SamplingParams(temperature=0, max_tokens=8, logprobs=3, prompt_logprobs=1)
    outputs = llm.generate(["The quick brown fox"], sampling_params)
    for output in outputs:
        completion = output.outputs[0]
        print(f"Prompt: {output.prompt!r}, generated: {completion.text!r}")
        print(f"cumulative logprob: {completion.cumulative_logprob:.4f}")
        for token_id, position in zip(completion.token_ids, completion.logprobs):
            chosen = position[token_id]
            top = sorted(position.items(), key=lambda item: -item[1].logprob)
            alternatives = ", ".join(f"{lp.decoded_token!r}: {lp.logprob:.3f}" for _, lp in top)
            print(f"  {chosen.decoded_token!r} {chosen.logprob:.3f} [{alternatives}]")
        print(f"prompt logprobs: {len(output.prompt_logprobs)} positions, the first None")


if __name__ == "__main__":
    main()
