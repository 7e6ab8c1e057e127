# Reproducible sampling with per-request seeds, as in vLLM: the same seed and prompt give the
# same text, in any batch. Only the import differs from a vLLM program.
from pagoda import LLM, SamplingParams

prompts = ["Once upon a time", "Once upon a time", "The best way to learn is"]


def main():
    llm = LLM(model="deepseek-ai/deepseek-coder-1.3b-instruct", seed=0)
    sampling_params = [
        SamplingParams(temperature=1.0, top_k=50, max_tokens=24, seed=42),
        SamplingParams(temperature=1.0, top_k=50, max_tokens=24, seed=42),
        SamplingParams(temperature=0.7, top_p=0.9, min_p=0.05, max_tokens=24, seed=1234),
    ]
    outputs = llm.generate(prompts, sampling_params)
    for output in outputs:
        print(f"{output.prompt!r} -> {output.outputs[0].text!r}")
    assert outputs[0].outputs[0].token_ids == outputs[1].outputs[0].token_ids


if __name__ == "__main__":
    main()
