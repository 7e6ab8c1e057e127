# Chat with the model's chat template, as vLLM's offline chat example does it: one conversation,
# then a batch of them. Only the import differs from a vLLM program.
from pagoda import LLM, SamplingParams


def print_outputs(outputs):
    print("\nGenerated Outputs:\n" + "-" * 80)
    for output in outputs:
        print(f"Prompt: {output.prompt!r}\n")
        print(f"Generated text: {output.outputs[0].text!r}")
        print("-" * 80)


def main():
    llm = LLM(model="deepseek-ai/deepseek-llm-7b-chat")
    sampling_params = SamplingParams(temperature=0.5, max_tokens=32, seed=7)

    conversation = [
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hello! How can I assist you today?"},
        {"role": "user", "content": "Write an essay about the importance of higher education."},
    ]
    outputs = llm.chat(conversation, sampling_params, use_tqdm=False)
    print_outputs(outputs)

    # A batch: a list of conversations.
    conversations = [conversation for _ in range(4)]
    outputs = llm.chat(conversations, sampling_params, use_tqdm=True)
    print_outputs(outputs)


if __name__ == "__main__":
    main()
