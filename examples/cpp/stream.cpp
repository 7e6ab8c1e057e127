// A program streaming from Pagoda through its installed C++ API (include/pagoda/async_engine.h,
// libpagoda.so): the engine runs on its own thread, and this one submits a request per prompt
// and prints each delta as it arrives (every output holds only what its step added), then each
// request's whole text and token ids assembled from the deltas.
//
//   pagoda_example_stream MODEL [PROMPT...]
//
// MODEL is what `pagoda generate --model` takes. A model that fails to load ends the program
// with exit code 1 and the engine's message on stderr.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <pagoda/async_engine.h>
#include <pagoda/error.h>
#include <pagoda/logging.h>
#include <pagoda/version.h>

namespace {

// What the deltas of one request add up to.
struct Assembled {
  std::string text;
  std::vector<int32_t> token_ids;
  std::string finish_reason;
  int num_deltas = 0;
  bool finished = false;
};

}  // namespace

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
    pagoda::AsyncEngineOptions options;
    options.log_requests = false;
    options.log_stats = false;
    // The factory runs on the engine thread: the model loads there, while this thread waits.
    pagoda::AsyncEngine engine([args] { return pagoda::make_engine_backend(args); }, options);
    engine.start();
    while (!engine.wait_ready(std::chrono::seconds(1))) {
      if (engine.state() != pagoda::AsyncEngine::State::kLoading) break;
    }
    if (engine.state() != pagoda::AsyncEngine::State::kReady) {
      std::fprintf(stderr, "error: %s\n", engine.failure().c_str());
      return 1;
    }
    const pagoda::EngineBackend& model = *engine.backend();
    std::printf("pagoda %s, model %s\n", pagoda::version(), model.model_name().c_str());

    // One queue for all the requests; each event names its request by the tag given here.
    auto queue = std::make_shared<pagoda::OutputQueue>();
    pagoda::SamplingParams params;
    params.temperature = 0.0f;  // greedy: the same tokens on every run
    params.max_tokens = 16;
    for (size_t i = 0; i < prompts.size(); ++i) {
      engine.submit({"prompt-" + std::to_string(i), model.encode(prompts[i], true), params,
                     static_cast<int>(i), queue});
    }

    std::vector<Assembled> results(prompts.size());
    size_t num_finished = 0;
    std::vector<pagoda::EngineEvent> events;
    while (num_finished < results.size()) {
      events.clear();
      queue->pop_all(events, std::chrono::milliseconds(100));
      for (const pagoda::EngineEvent& event : events) {
        Assembled& r = results[static_cast<size_t>(event.tag)];
        if (event.kind == pagoda::EngineEvent::Kind::kError) {
          std::fprintf(stderr, "error: prompt %d: %s\n", event.tag, event.error.message.c_str());
          return 1;
        }
        if (event.kind != pagoda::EngineEvent::Kind::kOutput) continue;
        const pagoda::CompletionOutput& delta = event.output.outputs.front();
        std::printf("delta %d: +%zu tokens \"%s\"\n", event.tag, delta.token_ids.size(),
                    delta.text.c_str());
        std::fflush(stdout);
        r.text += delta.text;
        r.token_ids.insert(r.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
        if (!delta.finish_reason.empty()) r.finish_reason = delta.finish_reason;
        ++r.num_deltas;
        if (event.output.finished && !r.finished) {
          r.finished = true;
          ++num_finished;
        }
      }
      if (engine.state() == pagoda::AsyncEngine::State::kDead) {
        std::fprintf(stderr, "error: %s\n", engine.failure().c_str());
        return 1;
      }
    }
    engine.stop();

    for (const Assembled& r : results) {
      std::printf("text: %s\ntoken_ids:", r.text.c_str());
      for (int32_t id : r.token_ids) std::printf(" %d", id);
      std::printf("\nfinish_reason: %s\ndeltas: %d\n", r.finish_reason.c_str(), r.num_deltas);
    }
  } catch (const pagoda::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
