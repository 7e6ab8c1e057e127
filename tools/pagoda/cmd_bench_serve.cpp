// `pagoda bench serve`: a serving benchmark client in the manner of vLLM's benchmark_serving.py.
// It sends --num-prompts streaming /v1/completions requests of about --input-len prompt tokens,
// each asking for exactly --output-len tokens (max_tokens with ignore_eos, and min_tokens for
// servers without ignore_eos), at most --max-concurrency at a time, arriving as a Poisson process
// of --request-rate per second (default: all at once), and reports request and output-token
// throughput with TTFT, TPOT, ITL and end-to-end latency (mean, median, p99). It speaks only the
// OpenAI API (plus /tokenize when the server has one), so it drives llama-server or vLLM as well.
//
// This file also owns the `pagoda bench` group that other benchmarks join (see commands.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tools/pagoda/commands.h"
#include "util/error.h"

namespace pagoda::cli {

namespace {

std::vector<std::pair<CLI::App*, Command>>& bench_runners() {
  static std::vector<std::pair<CLI::App*, Command>> runners;
  return runners;
}

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchServeFlags {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;  // default: the first model /v1/models lists
  std::string api_key;
  int num_prompts = 64;
  int max_concurrency = 0;  // 0: num_prompts
  double request_rate = std::numeric_limits<double>::infinity();
  int input_len = 128;
  int output_len = 64;
  uint64_t seed = 0;
  double timeout_s = 3600;
  bool json = false;
};

// Common English words: prompts built from them tokenize to roughly one token per word with any
// BPE vocabulary, and random choices keep prompts distinct (no accidental prefix-cache hits).
constexpr const char* kWords[] = {
    "time",   "person",  "year",     "way",        "day",       "thing",  "man",       "world",
    "life",   "hand",    "part",     "child",      "eye",       "woman",  "place",     "work",
    "week",   "case",    "point",    "government", "company",   "number", "group",     "problem",
    "fact",   "be",      "have",     "do",         "say",       "get",    "make",      "go",
    "know",   "take",    "see",      "come",       "think",     "look",   "want",      "give",
    "use",    "find",    "tell",     "ask",        "seem",      "feel",   "try",       "leave",
    "call",   "good",    "new",      "first",      "last",      "long",   "great",     "little",
    "own",    "other",   "old",      "right",      "big",       "high",   "different", "small",
    "large",  "next",    "early",    "young",      "important", "few",    "public",    "bad",
    "same",   "able",    "to",       "of",         "in",        "for",    "on",        "with",
    "at",     "by",      "from",     "up",         "about",     "into",   "over",      "after",
    "the",    "and",     "a",        "that",       "I",         "it",     "not",       "he",
    "as",     "you",     "this",     "but",        "his",       "they",   "her",       "she",
    "or",     "an",      "will",     "my",         "one",       "all",    "would",     "there",
    "their",  "river",   "music",    "garden",     "window",    "story",  "market",    "silver",
    "winter", "summer",  "mountain", "ocean",      "forest",    "engine", "letter",    "question",
    "answer", "history", "science",  "paper",      "water",     "light",  "stone",     "bridge",
    "city",   "road",    "table"};

struct Endpoint {
  std::string scheme_host_port;  // for httplib::Client
  std::string prefix;            // path before /v1
};

Endpoint parse_base_url(std::string url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos)
    fail("--base-url must look like http://HOST:PORT, got '{}'", url);
  const size_t path_start = url.find('/', scheme_end + 3);
  Endpoint e;
  e.scheme_host_port = url.substr(0, path_start);
  std::string path = path_start == std::string::npos ? "" : url.substr(path_start);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0)
    path.resize(path.size() - 3);
  e.prefix = path;
  return e;
}

// Benchmark requests use a fresh connection each: llama-server closes the socket after a stream,
// and a request sent on a reused socket before its FIN arrives fails. A localhost connect costs
// microseconds, well below anything measured here.
std::unique_ptr<httplib::Client> make_client(const Endpoint& e, const std::string& api_key,
                                             double timeout_s, bool keep_alive) {
  auto c = std::make_unique<httplib::Client>(e.scheme_host_port);
  c->set_connection_timeout(10);
  c->set_read_timeout(static_cast<time_t>(timeout_s));
  c->set_write_timeout(60);
  c->set_keep_alive(keep_alive);
  if (!api_key.empty()) c->set_bearer_token_auth(api_key);
  return c;
}

// Token count of `text` via the server: vLLM/pagoda {"prompt"} → {"count"}, llama-server
// {"content"} → {"tokens"}. nullopt when the server has no tokenizer endpoint. llama-server
// answers the vLLM form with 200 and no tokens (it ignores the unknown field), so an empty token
// list for a non-empty text means "not understood", not zero tokens.
std::optional<int> server_token_count(httplib::Client& c, const Endpoint& e,
                                      const std::string& model, const std::string& text) {
  auto count_in = [&](const json& body) -> std::optional<int> {
    auto r = c.Post(e.prefix + "/tokenize", body.dump(), "application/json");
    if (!r || r->status != 200) return std::nullopt;
    const json j = json::parse(r->body, nullptr, false);
    if (!j.is_object()) return std::nullopt;
    if (j.contains("count") && j["count"].is_number_integer()) return j["count"].get<int>();
    if (j.contains("tokens") && j["tokens"].is_array() && (!j["tokens"].empty() || text.empty()))
      return static_cast<int>(j["tokens"].size());
    return std::nullopt;
  };
  json vllm_form = {{"prompt", text}};
  if (!model.empty()) vllm_form["model"] = model;
  if (std::optional<int> n = count_in(vllm_form)) return n;
  return count_in(json{{"content", text}});
}

struct PromptSet {
  std::vector<std::string> prompts;
  std::vector<int> num_tokens;  // measured with /tokenize, else estimated
  bool measured = false;
};

PromptSet make_prompts(httplib::Client& c, const Endpoint& e, const BenchServeFlags& f) {
  std::mt19937_64 rng(f.seed);
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  auto words = [&](int count) {
    std::string s;
    for (int i = 0; i < count; ++i) {
      if (i) s += ' ';
      s += kWords[pick(rng)];
    }
    return s;
  };
  PromptSet set;
  // Tokens per word, measured on a long sample when the server can tokenize.
  double tokens_per_word = 1.0;
  const int sample_words = 512;
  if (auto n = server_token_count(c, e, f.model, words(sample_words))) {
    tokens_per_word = std::max(0.1, static_cast<double>(*n) / sample_words);
    set.measured = true;
  }
  for (int i = 0; i < f.num_prompts; ++i) {
    int num_words = std::max(1, static_cast<int>(std::lround(f.input_len / tokens_per_word)));
    std::string prompt = words(num_words);
    int count = static_cast<int>(std::lround(num_words * tokens_per_word));
    // Nudge towards exactly input_len tokens; a few rounds suffice since each word is ~1 token.
    for (int round = 0; set.measured && round < 8; ++round) {
      const std::optional<int> n = server_token_count(c, e, f.model, prompt);
      if (!n) break;
      count = *n;
      const int diff = f.input_len - count;
      if (diff == 0) break;
      if (diff > 0) {
        prompt += ' ' + words(std::max(1, static_cast<int>(diff / tokens_per_word)));
      } else {
        const int drop = std::max(1, static_cast<int>(-diff / tokens_per_word));
        for (int k = 0; k < drop; ++k) {
          const size_t space = prompt.rfind(' ');
          if (space == std::string::npos) break;
          prompt.resize(space);
        }
      }
    }
    set.prompts.push_back(std::move(prompt));
    set.num_tokens.push_back(count);
  }
  return set;
}

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft_s = 0;
  double e2e_s = 0;
  int64_t output_tokens = 0;
  std::vector<double> itl_s;
  Clock::time_point start, end;
};

RequestResult send_one(httplib::Client& c, const Endpoint& e, const BenchServeFlags& f,
                       const std::string& prompt) {
  RequestResult r;
  json body = {{"prompt", prompt},
               {"max_tokens", f.output_len},
               {"min_tokens", f.output_len},
               {"ignore_eos", true},
               {"temperature", 0.0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!f.model.empty()) body["model"] = f.model;
  httplib::Request req;
  req.method = "POST";
  req.path = e.prefix + "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  std::string buffer, raw;
  int64_t num_chunks = 0;
  std::optional<int64_t> usage_tokens;
  Clock::time_point last;
  bool got_done = false;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    const auto now = Clock::now();
    buffer.append(data, len);
    if (raw.size() < 4096) raw.append(data, std::min(len, 4096 - raw.size()));
    size_t line_end;
    while ((line_end = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, line_end);
      buffer.erase(0, line_end + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) != 0) continue;  // blank lines, ": comments", event names
      std::string payload = line.substr(5);
      if (!payload.empty() && payload.front() == ' ') payload.erase(0, 1);
      if (payload == "[DONE]") {
        got_done = true;
        continue;
      }
      const json j = json::parse(payload, nullptr, false);
      if (!j.is_object()) continue;
      if (j.contains("error")) {
        r.error = j["error"].dump();
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object() &&
          j["usage"].contains("completion_tokens")) {
        usage_tokens = j["usage"]["completion_tokens"].get<int64_t>();
      }
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
      // Every chunk with a choice is a token event, even with empty text (a special token or a
      // partial character), as in vLLM's benchmark client.
      if (num_chunks == 0) {
        r.ttft_s = std::chrono::duration<double>(now - r.start).count();
      } else {
        r.itl_s.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
      ++num_chunks;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  r.start = Clock::now();
  const bool sent = c.send(req, res, err);
  r.end = Clock::now();
  r.e2e_s = std::chrono::duration<double>(r.end - r.start).count();
  if (!sent) {
    r.error = "connection failed: " + httplib::to_string(err);
  } else if (res.status != 200) {
    r.error = fmt::format("HTTP {}: {}", res.status, raw);
  } else if (num_chunks == 0 && r.error.empty()) {
    r.error = "no tokens in the stream";
  }
  r.output_tokens = usage_tokens.value_or(num_chunks);
  r.ok = r.error.empty() && (got_done || num_chunks > 0);
  return r;
}

// numpy.percentile's default (linear interpolation between closest ranks).
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

json summary(const std::vector<double>& seconds) {
  return {{"mean_ms", mean(seconds) * 1e3},
          {"median_ms", percentile(seconds, 50) * 1e3},
          {"p99_ms", percentile(seconds, 99) * 1e3}};
}

int run_bench_serve(BenchServeFlags f) {
  if (f.num_prompts < 1) fail("--num-prompts must be at least 1, got {}", f.num_prompts);
  if (f.input_len < 1 || f.output_len < 1) fail("--input-len and --output-len must be at least 1");
  if (!(f.request_rate > 0)) fail("--request-rate must be positive, got {}", f.request_rate);
  const int concurrency =
      f.max_concurrency > 0 ? std::min(f.max_concurrency, f.num_prompts) : f.num_prompts;
  const Endpoint endpoint = parse_base_url(f.base_url);

  auto probe = make_client(endpoint, f.api_key, 60, /*keep_alive=*/true);
  if (f.model.empty()) {
    auto r = probe->Get(endpoint.prefix + "/v1/models");
    if (!r) fail("{}: cannot connect: {}", f.base_url, httplib::to_string(r.error()));
    const json j = json::parse(r->body, nullptr, false);
    if (r->status == 200 && j.is_object() && j.contains("data") && j["data"].is_array() &&
        !j["data"].empty()) {
      f.model = j["data"][0].value("id", "");
    }
  }
  const PromptSet prompts = make_prompts(*probe, endpoint, f);
  fmt::print(
      stderr,
      "bench serve: {} prompts of ~{} tokens ({}), {} output tokens, concurrency {}, rate {}\n",
      f.num_prompts, f.input_len,
      prompts.measured ? "measured with /tokenize" : "estimated from words", f.output_len,
      concurrency, f.request_rate);

  // Arrival times: a Poisson process of request_rate per second (all at 0 when infinite).
  std::vector<double> arrival_s(f.num_prompts, 0.0);
  if (std::isfinite(f.request_rate)) {
    std::mt19937_64 rng(f.seed + 1);
    std::exponential_distribution<double> gap(f.request_rate);
    double t = 0;
    for (double& a : arrival_s) a = (t += gap(rng));
  }

  std::vector<RequestResult> results(f.num_prompts);
  std::atomic<int> next{0};
  const Clock::time_point bench_start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&] {
      auto client = make_client(endpoint, f.api_key, f.timeout_s, /*keep_alive=*/false);
      for (int i = next++; i < f.num_prompts; i = next++) {
        std::this_thread::sleep_until(bench_start +
                                      std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(arrival_s[i])));
        results[i] = send_one(*client, endpoint, f, prompts.prompts[i]);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  const double duration_s = std::chrono::duration<double>(Clock::now() - bench_start).count();

  std::vector<double> ttft, tpot, itl, e2e;
  int64_t completed = 0, total_input = 0, total_output = 0;
  std::vector<std::string> errors;
  for (int i = 0; i < f.num_prompts; ++i) {
    const RequestResult& r = results[i];
    if (!r.ok) {
      if (errors.size() < 5) errors.push_back(r.error);
      continue;
    }
    ++completed;
    total_input += prompts.num_tokens[i];
    total_output += r.output_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    if (r.output_tokens > 1)
      tpot.push_back((r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
  }
  for (const std::string& e : errors) fmt::print(stderr, "request failed: {}\n", e);

  json out = {{"base_url", f.base_url},
              {"model", f.model},
              {"num_prompts", f.num_prompts},
              {"max_concurrency", concurrency},
              {"request_rate", std::isfinite(f.request_rate) ? json(f.request_rate) : json("inf")},
              {"input_len", f.input_len},
              {"output_len", f.output_len},
              {"completed", completed},
              {"failed", f.num_prompts - completed},
              {"duration_s", duration_s},
              {"total_input_tokens", total_input},
              {"total_output_tokens", total_output},
              {"request_throughput", completed / duration_s},
              {"output_throughput", total_output / duration_s},
              {"total_token_throughput", (total_input + total_output) / duration_s},
              {"ttft", summary(ttft)},
              {"tpot", summary(tpot)},
              {"itl", summary(itl)},
              {"e2e_latency", summary(e2e)}};
  if (f.json) {
    fmt::print("{}\n", out.dump(2));
  } else {
    auto line = [](const char* name, const std::string& value) {
      fmt::print("{:<40} {:>10}\n", name, value);
    };
    fmt::print("{:=^51}\n", " Serving Benchmark Result ");
    line("Successful requests:", std::to_string(completed));
    line("Failed requests:", std::to_string(f.num_prompts - completed));
    line("Maximum request concurrency:", std::to_string(concurrency));
    line("Benchmark duration (s):", fmt::format("{:.2f}", duration_s));
    line("Total input tokens:", std::to_string(total_input));
    line("Total generated tokens:", std::to_string(total_output));
    line("Request throughput (req/s):", fmt::format("{:.2f}", completed / duration_s));
    line("Output token throughput (tok/s):", fmt::format("{:.2f}", total_output / duration_s));
    line("Total token throughput (tok/s):",
         fmt::format("{:.2f}", (total_input + total_output) / duration_s));
    for (const auto& [key, title] : std::vector<std::pair<std::string, std::string>>{
             {"ttft", "TTFT"}, {"tpot", "TPOT"}, {"itl", "ITL"}, {"e2e_latency", "E2E Latency"}}) {
      fmt::print("{:-^51}\n", fmt::format("{}", title));
      line(fmt::format("Mean {} (ms):", title).c_str(),
           fmt::format("{:.2f}", out[key]["mean_ms"].get<double>()));
      line(fmt::format("Median {} (ms):", title).c_str(),
           fmt::format("{:.2f}", out[key]["median_ms"].get<double>()));
      line(fmt::format("P99 {} (ms):", title).c_str(),
           fmt::format("{:.2f}", out[key]["p99_ms"].get<double>()));
    }
    fmt::print("{:=^51}\n", "");
  }
  return completed == f.num_prompts ? 0 : 1;
}

}  // namespace

CLI::App* bench_command(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == "bench") return sub;
  }
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: serve (an HTTP server under load)");
  bench->require_subcommand(1);
  return bench;
}

void add_bench_runner(CLI::App* child, Command run) {
  bench_runners().emplace_back(child, std::move(run));
}

Command register_bench(CLI::App& app) {
  auto f = std::make_shared<BenchServeFlags>();
  CLI::App* serve = bench_command(app)->add_subcommand(
      "serve", "Load an OpenAI-compatible server like vLLM's benchmark_serving");
  serve->add_option("--base-url", f->base_url, "Server URL, e.g. http://127.0.0.1:8000")
      ->capture_default_str();
  serve->add_option("--model", f->model,
                    "Model name to request (default: the server's first model)");
  serve->add_option("--api-key", f->api_key, "Bearer token")->envname("OPENAI_API_KEY");
  serve->add_option("--num-prompts", f->num_prompts, "Requests to send")->capture_default_str();
  serve->add_option("--max-concurrency", f->max_concurrency,
                    "Most requests in flight (default: all)");
  serve->add_option("--request-rate", f->request_rate,
                    "Poisson arrival rate per second (default: inf)");
  serve->add_option("--input-len", f->input_len, "Prompt tokens per request")
      ->capture_default_str();
  serve->add_option("--output-len", f->output_len, "Generated tokens per request")
      ->capture_default_str();
  serve->add_option("--seed", f->seed, "Seed for prompts and arrivals")->capture_default_str();
  serve->add_option("--timeout", f->timeout_s, "Seconds one request may take")
      ->capture_default_str();
  serve->add_flag("--json", f->json, "Print the results as JSON on stdout");
  add_bench_runner(serve, [f] { return run_bench_serve(*f); });
  return [] {
    for (auto& [child, run] : bench_runners()) {
      if (child->parsed()) return run();
    }
    return 1;
  };
}

}  // namespace pagoda::cli
