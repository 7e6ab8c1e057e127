// Helpers shared by the server tests: an SSE-reading client, a raw socket for requests httplib
// would not send (and for hanging up mid-stream), a /metrics sample reader, and the corpus of
// broken requests with the status each must get.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::server::testing {

using nlohmann::json;

struct StreamResult {
  int status = 0;
  std::string text;  // concatenated choices[0].text / delta.content
  std::string raw;   // the body as received
  int num_chunks = 0;
  bool done = false;  // saw data: [DONE]
  json usage;         // from the include_usage chunk
  json last_finish_reason;
};

inline std::unique_ptr<httplib::Client> client(int port, const std::string& api_key = {}) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_read_timeout(60);
  c->set_connection_timeout(5);
  if (!api_key.empty()) c->set_bearer_token_auth(api_key);
  return c;
}

inline StreamResult stream_request(int port, const std::string& path, const json& body,
                                   const std::string& api_key = {}) {
  StreamResult r;
  auto c = client(port, api_key);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buffer;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    r.raw.append(data, len);
    buffer.append(data, len);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        r.done = true;
        continue;
      }
      const json j = json::parse(payload, nullptr, false);
      if (!j.is_object()) continue;
      ++r.num_chunks;
      if (j.contains("usage") && j["usage"].is_object()) r.usage = j["usage"];
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const json& ch = j["choices"][0];
      if (ch.contains("text")) r.text += ch["text"].get<std::string>();
      if (ch.contains("delta") && ch["delta"].contains("content") &&
          ch["delta"]["content"].is_string()) {
        r.text += ch["delta"]["content"].get<std::string>();
      }
      if (!ch["finish_reason"].is_null()) r.last_finish_reason = ch["finish_reason"];
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  if (c->send(req, res, err)) r.status = res.status;
  return r;
}

// Value of a /metrics sample whose line starts with `prefix` (name and labels), or NaN.
inline double metric(int port, const std::string& prefix, const std::string& api_key = {}) {
  auto c = client(port, api_key);
  auto res = c->Get("/metrics");
  if (!res || res->status != 200) return std::nan("");
  std::istringstream in(res->body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      const size_t space = line.rfind(' ');
      return std::stod(line.substr(space + 1));
    }
  }
  return std::nan("");
}

// Polls `pred` every 50 ms for up to `timeout`; true once it holds.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

// Runs `promtool check metrics` on `text`; returns "" when it parses and lints clean, else the
// report. vLLM's names contain ':' (recording-rule style), which promtool's linter flags; those
// names are the compatibility contract, so that one lint message is allowed and nothing else.
inline std::string promtool_problems(const std::string& text, const std::string& scratch_path) {
  { std::ofstream(scratch_path) << text; }
  const std::string report_path = scratch_path + ".report";
  const std::string cmd =
      "promtool check metrics < " + scratch_path + " > " + report_path + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(report_path);
  const std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc != 0 && rc != 3)
    return "promtool exit " + std::to_string(rc) + ":\n" + report;  // 1: parse error
  std::istringstream lines(report);
  std::string line, problems;
  const std::string allowed = "metric names should not contain ':'";
  // vLLM names a histogram vllm:iteration_tokens_total; the linter wants no _total on it.
  const std::string allowed_line =
      "vllm:iteration_tokens_total non-counter metrics should not have \"_total\" suffix";
  while (std::getline(lines, line)) {
    const bool ok = line.empty() || line == allowed_line ||
                    (line.rfind("vllm:", 0) == 0 && line.size() >= allowed.size() &&
                     line.compare(line.size() - allowed.size(), allowed.size(), allowed) == 0);
    if (!ok) problems += line + "\n";
  }
  return problems;
}

// A raw TCP connection to 127.0.0.1:port.
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) close();
    timeval tv{10, 0};
    if (fd_ >= 0) setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~RawSocket() { close(); }
  bool ok() const { return fd_ >= 0; }
  bool send_all(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `needle` appears (or timeout / EOF); returns what was read.
  std::string read_until(const std::string& needle) {
    std::string out;
    char buf[4096];
    while (out.find(needle) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // True once the peer closed the connection (end of file or reset) within `timeout`; bytes
  // that arrive first are skipped.
  bool wait_for_close(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
    }
    return false;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

inline std::string http_post(const std::string& path, const std::string& body,
                             const std::string& api_key = {}) {
  std::string req =
      "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  if (!api_key.empty()) req += "Authorization: Bearer " + api_key + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  return req;
}

struct BrokenRequest {
  std::string path;
  std::string body;
  int status;
  std::string why;
};

// At least 200 malformed requests and the status each must get. `max_request_bytes` is the
// server's limit; `vocab_limit` a token id the model cannot have.
inline std::vector<BrokenRequest> broken_corpus(size_t max_request_bytes) {
  std::vector<BrokenRequest> c;
  const std::string cmpl = "/v1/completions", chat = "/v1/chat/completions";
  // Bad JSON: every proper prefix of a valid body, and assorted garbage.
  const std::string valid = R"({"prompt": "hello there", "max_tokens": 4, "stop": ["a"]})";
  for (size_t n = 0; n < valid.size(); ++n)
    c.push_back({cmpl, valid.substr(0, n), 400, "truncated JSON"});
  for (const char* g :
       {"null", "[]", "\"str\"", "42", "true", "{,}", "{\"prompt\": \"x\",}", "{'prompt': 'x'}",
        "{\"prompt\": \"x\"} trailing", "\x00\x01\x02", "{\"prompt\": \"x\" \"max_tokens\": 1}"}) {
    c.push_back({cmpl, g, 400, "not a JSON object"});
    c.push_back({chat, g, 400, "not a JSON object"});
  }
  // NaN / Infinity are not JSON.
  for (const char* v : {"NaN", "Infinity", "-Infinity", "nan", "inf"}) {
    for (const char* field : {"temperature", "top_p", "max_tokens"}) {
      c.push_back({cmpl, std::string(R"({"prompt": "x", ")") + field + "\": " + v + "}", 400,
                   "NaN literal"});
    }
  }
  // Wrong types and out-of-range values, field by field.
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad_values = {
      {"max_tokens",
       {"\"5\"", "1.5", "-1", "0", "true", "[]", "{}", "1e20", "99999999999999999999999", "1e999"}},
      {"temperature", {"\"hot\"", "-0.5", "[]", "true", "1e308", "-1e308"}},
      {"top_p", {"0", "1.5", "-1", "\"x\"", "{}"}},
      {"top_k", {"-2", "1.5", "\"x\"", "99999999999999"}},
      {"min_p", {"-0.1", "1.5", "\"x\""}},
      {"n", {"0", "-1", "1.5", "\"2\"", "2147483648", "100000"}},
      {"presence_penalty", {"3", "-2.5", "\"x\""}},
      {"frequency_penalty", {"2.1", "-3", "[]"}},
      {"repetition_penalty", {"0", "-1", "\"x\""}},
      {"seed", {"1.5", "\"x\"", "1e30", "[]"}},
      {"stream", {"\"yes\"", "1", "[]"}},
      {"echo", {"\"no\"", "0"}},
      {"logprobs", {"21", "-1", "true", "\"x\"", "1.5"}},
      {"stop", {"5", "[5]", "[\"\"]", "{}", "[[\"a\"]]"}},
      {"stop_token_ids", {"5", "[-1]", "[\"a\"]", "[1.5]"}},
      {"min_tokens", {"-1", "\"x\"", "1.5"}},
      {"ignore_eos", {"\"x\"", "1"}},
      {"skip_special_tokens", {"\"x\""}},
      {"stream_options", {"{\"include_usage\": true}", "5"}},
      {"logit_bias",
       {"{\"5\": 101}", "{\"5\": -100.5}", "{\"x\": 1}", "{\"-1\": 1}", "{\"5\": \"a\"}", "[]"}},
      {"allowed_token_ids", {"[]", "[-1]", "5", "[\"a\"]"}},
      {"bad_words", {"\"x\"", "[\"\"]", "[1]", "{}"}},
      {"model", {"5", "[]", "true"}},
      {"suffix", {"\"tail\"", "5"}},
      {"max_token", {"5"}},
      {"temprature", {"0.5"}},
      {"best_of", {"3", "0"}},
      {"use_beam_search", {"true"}},
  };
  for (const auto& [field, values] : bad_values) {
    for (const std::string& v : values) {
      c.push_back({cmpl, R"({"prompt": "x", ")" + field + "\": " + v + "}", 400, "bad " + field});
    }
  }
  // Prompts.
  for (const char* p : {"5", "[]", "[[]]", "[\"a\", 1]", "[1, \"a\"]", "[-1]", "[1.5]", "{}",
                        "true", "[[1], \"a\"]", "[4294967296]", "[2147483648]"}) {
    c.push_back({cmpl, std::string(R"({"prompt": )") + p + "}", 400, "bad prompt"});
  }
  c.push_back({cmpl, R"({"max_tokens": 5})", 400, "missing prompt"});
  // Chat messages.
  for (const char* m : {"[]", "\"hi\"", "[5]", "[{}]", R"([{"role": "wizard", "content": "x"}])",
                        R"([{"role": "user"}])", R"([{"role": "user", "content": 5}])",
                        R"([{"role": "user", "content": [{"type": "image_url"}]}])",
                        R"([{"role": "user", "content": [{"type": "text"}]}])",
                        R"([{"role": "user", "content": [5]}])",
                        R"([{"role": "user", "content": "x", "extra": 1}])",
                        R"({"role": "user", "content": "x"})"}) {
    c.push_back({chat, std::string(R"({"messages": )") + m + "}", 400, "bad messages"});
  }
  const std::string user = R"("messages": [{"role": "user", "content": "hi"}])";
  for (const char* extra :
       {R"("top_logprobs": 2)", R"("logprobs": 1)", R"("logprobs": true, "top_logprobs": 50)",
        R"("max_completion_tokens": -5)", R"("tools": [{"type": "function"}])",
        R"("response_format": {"type": "xml"})", R"("chat_template_kwargs": 5)", R"("n": "many")",
        R"("prompt": "x")"}) {
    c.push_back({chat, "{" + user + ", " + extra + "}", 400, std::string("chat ") + extra});
  }
  c.push_back({chat, "{}", 400, "missing messages"});
  // Deep nesting.
  for (int depth : {33, 100, 10000, 200000}) {
    c.push_back(
        {cmpl,
         R"({"prompt": "x", "stop": )" + std::string(depth, '[') + std::string(depth, ']') + "}",
         400, "deep nesting"});
  }
  for (int depth : {1000, 100000})
    c.push_back({chat, std::string(depth, '{'), 400, "deep unterminated"});
  // Invalid UTF-8 and escapes.
  for (const char* s :
       {"\xff", "\xc0\x80", "\xed\xa0\x80", "abc\xe2\x82", "\xf8\x88\x80\x80\x80", "\x80"}) {
    c.push_back({cmpl, std::string(R"({"prompt": ")") + s + "\"}", 400, "invalid UTF-8"});
    c.push_back({chat, std::string(R"({"messages": [{"role": "user", "content": ")") + s + "\"}]}",
                 400, "invalid UTF-8 in chat"});
  }
  for (const char* e : {"\\ud800", "\\udc00x", "\\u12", "\\x41", "\\"}) {
    c.push_back({cmpl, std::string(R"({"prompt": ")") + e + "\"}", 400, "bad escape"});
  }
  // Enormous prompts: over the context (400) and over the body limit (413).
  std::string words;
  for (int i = 0; i < 20000; ++i) words += "word ";
  c.push_back({cmpl, R"({"prompt": ")" + words + "\"}", 400, "prompt over the context"});
  c.push_back({chat, R"({"messages": [{"role": "user", "content": ")" + words + "\"}]}", 400,
               "chat over context"});
  c.push_back(
      {cmpl, R"({"prompt": "x", "max_tokens": 1000000})", 400, "max_tokens over the context"});
  c.push_back({cmpl, R"({"prompt": ")" + std::string(max_request_bytes + 1000, 'a') + "\"}", 413,
               "body too big"});
  // Unknown model and routes.
  c.push_back({cmpl, R"({"prompt": "x", "model": "no-such-model"})", 404, "unknown model"});
  c.push_back({chat, R"({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"})", 404,
               "unknown model"});
  c.push_back({"/v1/nothing", "{}", 404, "unknown route"});
  c.push_back({"/v2/completions", R"({"prompt": "x"})", 404, "unknown route"});
  // /tokenize and /detokenize.
  c.push_back({"/tokenize", "{}", 400, "tokenize without prompt"});
  c.push_back({"/tokenize", R"({"prompt": 5})", 400, "tokenize bad prompt"});
  c.push_back({"/detokenize", R"({"tokens": "x"})", 400, "detokenize bad tokens"});
  c.push_back({"/detokenize", R"({"tokens": [-5]})", 400, "detokenize negative"});
  return c;
}

}  // namespace pagoda::server::testing
