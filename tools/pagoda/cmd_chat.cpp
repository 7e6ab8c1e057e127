// `pagoda chat`: an interactive multi-turn chat in the terminal, streaming tokens as they
// are produced. Type /reset to start over, /exit (or end of input, or Ctrl-C at the prompt) to
// leave. Ctrl-C during an answer stops that answer and keeps the session. Each answer may use
// the context that the conversation leaves (at most --max-tokens); when the conversation no
// longer leaves room, the oldest turns are dropped (chat_history.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/pagoda/chat_history.h"
#include "tools/pagoda/commands.h"
#include "tools/pagoda/engine_options.h"
#include "tools/pagoda/tensor_parallel_launch.h"
#include "util/error.h"

namespace pagoda::cli {
namespace {

struct ChatFlags {
  EngineFlags engine;
  SamplingFlags sampling;
  std::string system_prompt;
};

// Ctrl-C: the handler only records it and wakes the prompt's poll() through a pipe (the
// self-pipe trick), so a signal that lands on a kernel worker thread still reaches the reader.
std::atomic<bool> g_interrupted{false};
int g_wake_pipe[2] = {-1, -1};

extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  const char byte = 0;
  [[maybe_unused]] const ssize_t n = ::write(g_wake_pipe[1], &byte, 1);
}

void install_sigint_handler() {
  if (::pipe(g_wake_pipe) != 0) fail("chat: cannot create a pipe: {}", std::strerror(errno));
  for (const int fd : g_wake_pipe) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  struct sigaction action = {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocked read returns, the prompt sees the flag
  ::sigaction(SIGINT, &action, nullptr);
}

// Forgets a Ctrl-C that has been acted on (or came between two prompts). The flag is cleared
// before the pipe is drained: the handler sets it before writing, so a Ctrl-C racing with this
// leaves the flag set rather than being lost.
void clear_interrupt() {
  g_interrupted.store(false);
  char buffer[64];
  while (::read(g_wake_pipe[0], buffer, sizeof(buffer)) > 0) {
  }
}

// Lines from standard input, read with poll() beside the wake pipe so Ctrl-C ends the wait.
class PromptReader {
 public:
  enum class Result { kLine, kEnd, kInterrupted };

  Result next(std::string& line) {
    while (true) {
      if (const size_t newline = buffer_.find('\n'); newline != std::string::npos) {
        line = buffer_.substr(0, newline);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        buffer_.erase(0, newline + 1);
        return Result::kLine;
      }
      if (end_of_input_) {
        if (buffer_.empty()) return Result::kEnd;
        line = std::move(buffer_);  // a last line without a newline
        buffer_.clear();
        return Result::kLine;
      }
      if (g_interrupted.load()) return Result::kInterrupted;
      pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {g_wake_pipe[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        fail("chat: poll on standard input failed: {}", std::strerror(errno));
      }
      // A byte in the pipe is a Ctrl-C even if the flag was cleared in between: reading it
      // (rather than polling on) keeps a late byte from spinning this loop.
      if (fds[1].revents != 0) {
        clear_interrupt();
        return Result::kInterrupted;
      }
      if (fds[0].revents == 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        end_of_input_ = true;
      } else {
        buffer_.append(chunk, static_cast<size_t>(n));
      }
    }
  }

 private:
  std::string buffer_;
  bool end_of_input_ = false;
};

// Streams one answer to stdout; Ctrl-C aborts the request. Returns the answer's text.
std::string stream_answer(Engine& engine, const std::string& request_id,
                          std::vector<int32_t> prompt_ids, const SamplingParams& params) {
  clear_interrupt();
  engine.add_request_tokens(request_id, std::move(prompt_ids), params);
  std::string answer;
  std::string finish_reason;
  bool aborted = false;
  while (engine.has_unfinished_requests()) {
    if (!aborted && g_interrupted.load()) {
      engine.abort_request(request_id);
      aborted = true;
    }
    for (const RequestOutput& out : engine.step()) {
      const CompletionOutput& o = out.outputs.front();
      std::fwrite(o.delta_text.data(), 1, o.delta_text.size(), stdout);
      std::fflush(stdout);
      if (out.finished) {
        answer = o.text;
        finish_reason = o.finish_reason;
      }
    }
  }
  std::printf("\n");
  std::fflush(stdout);
  if (aborted) {
    std::fprintf(stderr, "[answer stopped]\n");
  } else if (finish_reason == "length") {
    std::fprintf(stderr, "[answer cut at %d tokens]\n", params.max_tokens);
  }
  clear_interrupt();
  return answer;
}

int run_chat(const ChatFlags& f) {
  init_runtime(f.engine);
  EngineArgs args = f.engine.to_engine_args();
  args.kv_cache_by_need = true;  // grows with the conversation
  adopt_mpi_rank(args);          // under mpirun: this process is one rank of its world
  if (args.tensor_parallel_rank > 0) return run_follower_rank(args);
  const FollowerRanks followers(args);  // -tp N: ranks 1..N-1, waited for after the engine
  Engine engine(args);
  SamplingParams params = f.sampling.apply(engine.default_sampling_params());
  params.n = 1;
  const int64_t max_model_len = engine.max_model_len();
  std::optional<int64_t> max_tokens_cap;
  if (f.sampling.max_tokens) {
    if (*f.sampling.max_tokens < 1) fail("--max-tokens must be at least 1");
    max_tokens_cap = *f.sampling.max_tokens;
  }
  const int64_t reserve = answer_reserve(max_model_len, max_tokens_cap);
  const RenderPrompt render = [&engine](const nlohmann::json& messages) {
    // The template holds BOS and the special tokens: encode without adding more.
    return engine.encode(engine.apply_chat_template(messages.dump(), true), false);
  };

  install_sigint_handler();
  ChatHistory history(f.system_prompt);
  PromptReader reader;
  std::fprintf(stderr,
               "Chatting with %s (context %lld tokens). /reset starts over; /exit, Ctrl-D or "
               "Ctrl-C leaves; Ctrl-C during an answer stops it.\n",
               engine.model_name().c_str(), static_cast<long long>(max_model_len));
  int turn = 0;
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    std::fflush(stderr);
    const PromptReader::Result read = reader.next(line);
    if (read != PromptReader::Result::kLine) {
      std::fprintf(stderr, "\n");
      break;
    }
    if (line == "/exit") break;
    if (line == "/reset") {
      history.clear();
      continue;
    }
    if (line.empty()) continue;

    history.add_user(line);
    ChatFit fit = fit_history(history, render, max_model_len, reserve, max_tokens_cap);
    if (fit.num_dropped_turns > 0) {
      std::fprintf(stderr,
                   "[context full: dropped the %d oldest turn(s); %zu kept, prompt %zu of %lld "
                   "tokens]\n",
                   fit.num_dropped_turns, history.num_turns(), fit.prompt_ids.size(),
                   static_cast<long long>(max_model_len));
    }
    if (!fit.fits) {
      std::fprintf(stderr,
                   "[this message is %zu tokens with the chat template; the context holds %lld: "
                   "send a shorter one]\n",
                   fit.prompt_ids.size(), static_cast<long long>(max_model_len));
      history.drop_newest();
      continue;
    }
    params.max_tokens = static_cast<int32_t>(fit.max_tokens);
    std::string answer =
        stream_answer(engine, std::to_string(turn++), std::move(fit.prompt_ids), params);
    // A question without an answer (stopped at once) would leave two user messages in a row,
    // which many chat templates refuse.
    if (answer.empty()) {
      history.drop_newest();
    } else {
      history.set_answer(std::move(answer));
    }
  }
  return 0;
}

}  // namespace

Command register_chat(CLI::App& app) {
  auto flags = std::make_shared<ChatFlags>();
  CLI::App* sub = app.add_subcommand(
      "chat",
      "Interactive chat in the terminal (answers use the context left, at most --max-tokens; "
      "the oldest turns are dropped when it is full)");
  add_engine_options(sub, flags->engine);
  add_tensor_parallel_options(sub, flags->engine.args);
  add_sampling_options(sub, flags->sampling);
  sub->add_option("--system", flags->system_prompt, "System prompt");
  return [flags] { return run_chat(*flags); };
}

}  // namespace pagoda::cli
