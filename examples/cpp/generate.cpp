// A program embedding Pagoda through its installed C++ API (include/pagoda/, libpagoda.so):
// it loads a model, generates greedily for each prompt and prints the text and token ids.
//
//   pagoda_example_generate MODEL [PROMPT...]
//
// MODEL is what `pagoda generate --model` takes (a Hugging Face directory, a GGUF file, a Hub
// repo id). Errors the library reports arrive as pagoda::Error and end the program with exit
// code 1 and the message on stderr.
#include <cstdio>
#include <string>
#include <vector>

#include <pagoda/engine.h>
#include <pagoda/error.h>
#include <pagoda/logging.h>
#include <pagoda/version.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [PROMPT...]\n", argv[0]);
    return 2;
  }
  std::vector<std::string> prompts(argv + 2, argv + argc);
  if (prompts.empty()) prompts.push_back("The capital of France is");

  try {
    pagoda::log_to_stderr("warning");
    pagoda::EngineArgs args;
    args.model = argv[1];
    args.max_num_seqs = 8;
    pagoda::Engine engine(args);

    pagoda::SamplingParams params;
    params.temperature = 0.0f;  // greedy: the same tokens on every run
    params.max_tokens = 16;
    const std::vector<pagoda::RequestOutput> outputs = engine.generate(prompts, {params});

    std::printf("pagoda %s, model %s\n", pagoda::version(), engine.model_name().c_str());
    for (const pagoda::RequestOutput& output : outputs) {
      const pagoda::CompletionOutput& completion = output.outputs.front();
      std::printf("text: %s\ntoken_ids:", completion.text.c_str());
      for (int32_t id : completion.token_ids) std::printf(" %d", id);
      std::printf("\nfinish_reason: %s\n", completion.finish_reason.c_str());
    }
  } catch (const pagoda::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
