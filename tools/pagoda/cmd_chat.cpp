// `pagoda chat`: an interactive multi-turn chat in the terminal, streaming tokens as they
// are produced. Type /reset to start over, /exit (or end of input) to leave.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/pagoda/commands.h"
#include "tools/pagoda/engine_options.h"

namespace pagoda::cli {
namespace {

struct ChatFlags {
  EngineFlags engine;
  SamplingFlags sampling;
  std::string system_prompt;
};

int run_chat(const ChatFlags& f) {
  init_runtime(f.engine);
  Engine engine(f.engine.to_engine_args());
  SamplingParams params = engine.default_sampling_params();
  params.max_tokens = 1024;
  params = f.sampling.apply(params);
  params.n = 1;

  nlohmann::json messages = nlohmann::json::array();
  if (!f.system_prompt.empty())
    messages.push_back({{"role", "system"}, {"content", f.system_prompt}});
  std::fprintf(stderr, "Chatting with %s. /reset starts over, /exit leaves.\n",
               engine.model_name().c_str());
  int turn = 0;
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      messages = nlohmann::json::array();
      if (!f.system_prompt.empty())
        messages.push_back({{"role", "system"}, {"content", f.system_prompt}});
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    const std::string prompt = engine.apply_chat_template(messages.dump(), true);
    engine.add_request_tokens(std::to_string(turn++), engine.encode(prompt, false), params);
    std::string reply;
    while (engine.has_unfinished_requests()) {
      for (const RequestOutput& out : engine.step()) {
        const CompletionOutput& o = out.outputs.front();
        std::fwrite(o.delta_text.data(), 1, o.delta_text.size(), stdout);
        std::fflush(stdout);
        if (out.finished) reply = o.text;
      }
    }
    std::printf("\n");
    messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
  return 0;
}

}  // namespace

Command register_chat(CLI::App& app) {
  auto flags = std::make_shared<ChatFlags>();
  CLI::App* sub = app.add_subcommand("chat", "Interactive chat in the terminal");
  add_engine_options(sub, flags->engine);
  add_sampling_options(sub, flags->sampling);
  sub->add_option("--system", flags->system_prompt, "System prompt");
  return [flags] { return run_chat(*flags); };
}

}  // namespace pagoda::cli
