// Routes, authentication, limits and error mapping of the HTTP server; see http_server.h.
#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <type_traits>

#include <spdlog/spdlog.h>

#include "server/connection_probe.h"
#include "server/generation_job.h"
#include "util/error.h"

namespace pagoda::server {
namespace {

// How often a streaming handler wakes to check for output, and how long a stream may be silent
// before it sends an SSE comment: writing is the only way to notice a client that went away
// while its request waits in the queue or prefills (SSE clients ignore ':' lines).
constexpr std::chrono::milliseconds kStreamPoll{250};
constexpr std::chrono::milliseconds kKeepAliveAfter{1000};

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
  send_json(res, error.status, error_json(error));
}

ApiError api_error(int status, std::string message, std::string type, std::string code = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

}  // namespace

bool constant_time_equals(const std::string& a, const std::string& b) {
  // Every byte of the longer string is visited whatever the contents.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

class HttpServer::Impl {
 public:
  Impl(AsyncEngine& engine, ServerOptions options) : engine_(engine), options_(std::move(options)) {
    const int num_threads = std::max(options_.num_http_threads, 4);
    server_.new_task_queue = [num_threads] {
      return new httplib::ThreadPool(static_cast<size_t>(num_threads));
    };
    server_.set_payload_max_length(options_.max_request_bytes);
    server_.set_keep_alive_max_count(1000);
    // cpp-httplib 0.11 listens with a backlog of 5, so a burst of concurrent connects (64 clients
    // starting at once) overflows the accept queue and some connections fail. Remember the
    // listening socket so bind() can listen again with the system's maximum backlog.
    //
    // SO_REUSEADDR only: httplib's default, SO_REUSEPORT, lets a second server bind a port that
    // is taken and take half its connections (one without --api-key beside one with it would
    // serve the model to anyone). A taken port must fail the start instead.
    server_.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd_ = sock;
    });
    install_handlers();
  }

  int bind() {
    int port = options_.port;
    if (port == 0) {
      port = server_.bind_to_any_port(options_.host);
      if (port <= 0) fail("cannot listen on {}: no free port", options_.host);
    } else if (!server_.bind_to_port(options_.host, port)) {
      fail("cannot listen on {}:{}: the address is in use or not available", options_.host, port);
    }
    // listen() on a listening socket only changes its backlog (Linux, BSD).
    if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
    return port;
  }
  // httplib's stop() does nothing until listen_after_bind() is running, so a stop() that comes
  // first (a load that fails at once, a SIGTERM at startup) would be lost and listen() would
  // never return. Each side checks the other's flag (both seq_cst), and a stop() after listen()
  // began repeats until listen() has returned.
  void listen() {
    listen_started_ = true;
    if (!stop_requested_) server_.listen_after_bind();
    listen_done_ = true;
  }
  void stop() {
    stop_requested_ = true;
    if (!listen_started_) return;
    while (!listen_done_) {
      server_.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  // Every handler runs inside this: nothing a request does can escape as an exception.
  Handler guarded(Handler handler) {
    return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
      try {
        handler(req, res);
      } catch (const RequestError& e) {
        send_error(res, e.error());
      } catch (const Error& e) {
        // pagoda::Error from tokenizing or templating a request is about the request's content.
        send_error(res, api_error(400, e.what(), "invalid_request_error"));
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", req.method, req.path, e.what());
        send_error(res, api_error(500, std::string("Internal server error: ") + e.what(),
                                  "InternalServerError"));
      }
    };
  }

  const EngineBackend& ready_backend() const {
    const EngineBackend* be = engine_.backend();
    if (be == nullptr || engine_.state() != AsyncEngine::State::kReady) {
      switch (engine_.state()) {
        case AsyncEngine::State::kLoading:
          throw RequestError(service_unavailable_error("The model is still loading"));
        case AsyncEngine::State::kDead:
          throw RequestError(
              service_unavailable_error("The engine has failed: " + engine_.failure()));
        default:
          throw RequestError(service_unavailable_error("The server is shutting down"));
      }
    }
    return *be;
  }

  std::string served_name(const EngineBackend& be) const {
    return options_.served_model_name.empty() ? be.model_name() : options_.served_model_name;
  }

  void check_model(const EngineBackend& be, const std::string& model) const {
    const auto& aliases = options_.model_aliases;
    if (!model.empty() && model != served_name(be) &&
        std::find(aliases.begin(), aliases.end(), model) == aliases.end()) {
      ApiError e = not_found_error(fmt::format("The model `{}` does not exist.", model));
      e.param = "model";
      e.code = "model_not_found";
      throw RequestError(e);
    }
  }

  void install_handlers() {
    server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options_.api_key.empty() || req.path == "/health")
        return httplib::Server::HandlerResponse::Unhandled;
      const std::string auth = req.get_header_value("Authorization");
      constexpr std::string_view kBearer = "Bearer ";
      if (auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0 &&
          constant_time_equals(auth.substr(kBearer.size()), options_.api_key)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      send_error(res,
                 api_error(401, "Missing or invalid API key; send 'Authorization: Bearer <key>'",
                           "invalid_request_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    // Responses httplib produces itself (unknown route, oversized body, bad HTTP) get a JSON body.
    server_.set_error_handler(httplib::Server::HandlerWithResponse([this](
                                                                       const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      switch (res.status) {
        case 404:
          send_error(res, not_found_error(fmt::format("Not found: {} {}", req.method, req.path)));
          break;
        case 413:
          send_error(
              res, api_error(
                       413,
                       fmt::format("The request body is larger than --max-request-bytes ({} bytes)",
                                   options_.max_request_bytes),
                       "invalid_request_error", "request_too_large"));
          break;
        default:
          send_error(res, api_error(res.status, fmt::format("HTTP error {}", res.status),
                                    "invalid_request_error"));
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
    server_.set_exception_handler(
        [](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
          send_error(res, api_error(500, "Internal server error", "InternalServerError"));
        });

    server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      switch (engine_.state()) {
        case AsyncEngine::State::kReady:
          res.status = 200;
          return;
        case AsyncEngine::State::kLoading:
          send_error(res, service_unavailable_error("The model is still loading"));
          return;
        case AsyncEngine::State::kDead:
          send_error(res, service_unavailable_error("The engine has failed: " + engine_.failure()));
          return;
        default:
          send_error(res, service_unavailable_error("The server is shutting down"));
      }
    });
    server_.Get("/version", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"version", options_.version}});
    });
    server_.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
                  Metrics* metrics = engine_.metrics();
                  if (metrics == nullptr || engine_.backend() == nullptr) {
                    throw RequestError(service_unavailable_error("The model is still loading"));
                  }
                  res.set_content(metrics->render(engine_.stats(), read_process_stats()),
                                  "text/plain; version=0.0.4; charset=utf-8");
                }));
    server_.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
                  const EngineBackend& be = ready_backend();
                  json cards = json::array({model_card(be, served_name(be))});
                  for (const std::string& alias : options_.model_aliases)
                    cards.push_back(model_card(be, alias));
                  send_json(res, 200, {{"object", "list"}, {"data", cards}});
                }));
    server_.Get(R"(/v1/models/(.+))",
                guarded([this](const httplib::Request& req, httplib::Response& res) {
                  const EngineBackend& be = ready_backend();
                  const std::string name = req.matches[1].str();
                  check_model(be, name);
                  send_json(res, 200, model_card(be, name));
                }));
    server_.Post("/v1/completions",
                 guarded([this](const httplib::Request& req, httplib::Response& res) {
                   handle_generation(req, res, false);
                 }));
    server_.Post("/v1/chat/completions",
                 guarded([this](const httplib::Request& req, httplib::Response& res) {
                   handle_generation(req, res, true);
                 }));
    server_.Post(
        "/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
          const EngineBackend& be = ready_backend();
          const TokenizeRequest tr = parse_request(req, [&](UnknownFields* unknown) {
            return parse_tokenize_request(parse_json_body(req.body), unknown);
          });
          check_model(be, tr.model);
          const std::string text =
              tr.prompt
                  ? *tr.prompt
                  : be.apply_chat_template(dump_json(tr.messages), tr.add_generation_prompt, "{}");
          const std::vector<int32_t> ids = be.encode(text, tr.add_special_tokens);
          send_json(res, 200, tokenize_response(tr, ids, be.max_model_len(), [&be](int32_t id) {
                      return be.decode({id}, false);
                    }));
        }));
    server_.Post("/detokenize",
                 guarded([this](const httplib::Request& req, httplib::Response& res) {
                   const EngineBackend& be = ready_backend();
                   std::string model;
                   const std::vector<int32_t> ids = parse_request(req, [&](UnknownFields* unknown) {
                     return parse_detokenize_request(parse_json_body(req.body), &model, unknown);
                   });
                   check_model(be, model);
                   send_json(res, 200, {{"prompt", be.decode(ids, false)}});
                 }));
  }

  // Runs one of the parse_*_request functions under the server's unknown-field policy. Fields
  // it ignored are logged as vLLM does: the request goes on, and the log says what it sent that
  // nothing reads (names only, never values).
  template <typename Parse>
  std::invoke_result_t<Parse, UnknownFields*> parse_request(const httplib::Request& req,
                                                            Parse parse) const {
    UnknownFields unknown;
    unknown.strict = options_.strict_request_fields;
    auto parsed = parse(&unknown);
    if (!unknown.ignored.empty()) {
      spdlog::warn("{}: ignoring fields the server does not know: {}", req.path,
                   fmt::join(unknown.ignored, ", "));
    }
    return parsed;
  }

  json model_card(const EngineBackend& be, const std::string& name) const {
    return {{"id", name},
            {"object", "model"},
            {"created", unix_time_s()},
            {"owned_by", "pagoda"},
            {"root", served_name(be)},
            {"parent", nullptr},
            {"max_model_len", be.max_model_len()}};
  }

  void handle_generation(const httplib::Request& req, httplib::Response& res, bool chat) {
    const EngineBackend& be = ready_backend();
    const json body = parse_json_body(req.body);
    const SamplingParams defaults = be.default_sampling_params();
    const int max_model_len = be.max_model_len();

    JobSpec spec;
    spec.chat = chat;
    spec.created = unix_time_s();
    spec.model = served_name(be);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<SamplingParams> params;
    bool stream = false;
    if (!chat) {
      const CompletionRequest cr = parse_request(req, [&](UnknownFields* unknown) {
        return parse_completion_request(body, defaults, unknown, options_.protocol);
      });
      check_model(be, cr.model);
      spec.id = random_request_id("cmpl");
      spec.n = cr.params.n;
      spec.echo = cr.echo;
      spec.echo_only = cr.echo && cr.max_tokens == 0;
      spec.logprobs = cr.params.logprobs;
      spec.prompt_logprobs = cr.params.prompt_logprobs.has_value();
      spec.include_usage = cr.include_usage;
      spec.continuous_usage = cr.continuous_usage;
      spec.tokens_as_ids = options_.protocol.return_tokens_as_token_ids;
      stream = cr.stream;
      for (const Prompt& p : cr.prompts) {
        std::vector<int32_t> ids = p.text ? be.encode(*p.text, cr.add_special_tokens) : p.token_ids;
        if (ids.empty()) throw_invalid("The prompt is empty", "prompt");
        SamplingParams sp = cr.params;
        sp.max_tokens = resolve_max_tokens(spec.echo_only ? std::optional<int>(1) : cr.max_tokens,
                                           16, static_cast<int>(ids.size()), max_model_len);
        check_sampling_params(sp);
        if (spec.echo) spec.prompt_texts.push_back(p.text ? *p.text : be.decode(ids, false));
        if (spec.echo && spec.logprobs)
          spec.first_prompt_tokens.push_back(be.decode({ids[0]}, false));
        prompts.push_back(std::move(ids));
        params.push_back(sp);
      }
    } else {
      const ChatRequest cr = parse_request(req, [&](UnknownFields* unknown) {
        return parse_chat_request(body, defaults, unknown, options_.protocol);
      });
      check_model(be, cr.model);
      spec.id = random_request_id("chatcmpl");
      spec.n = cr.params.n;
      if (cr.logprobs) spec.logprobs = cr.params.logprobs.value_or(0);
      spec.include_usage = cr.include_usage;
      spec.continuous_usage = cr.continuous_usage;
      spec.tokens_as_ids = options_.protocol.return_tokens_as_token_ids;
      spec.response_role = chat_response_role(cr, options_.protocol);
      spec.reasoning = options_.reasoning_parser == "deepseek_r1";
      stream = cr.stream;
      const std::string prompt = be.apply_chat_template(
          dump_json(cr.messages), cr.add_generation_prompt, dump_json(cr.chat_template_kwargs));
      std::vector<int32_t> ids = be.encode(prompt, cr.add_special_tokens);
      if (ids.empty()) throw_invalid("The chat template produced an empty prompt", "messages");
      SamplingParams sp = cr.params;
      sp.max_tokens =
          resolve_max_tokens(cr.max_tokens, 0, static_cast<int>(ids.size()), max_model_len);
      check_sampling_params(sp);
      prompts.push_back(std::move(ids));
      params.push_back(sp);
    }

    auto job = std::make_shared<GenerationJob>(engine_, std::move(spec));
    job->start(std::move(prompts), params);
    if (!stream) {
      // Nothing is written while a non-streamed request runs, so the only way to notice a client
      // that hung up is to look at its socket; then the engine requests are aborted at once.
      const ConnectionProbe probe =
          ConnectionProbe::find(req.remote_addr, req.remote_port, req.local_addr, req.local_port);
      std::function<bool()> client_gone;
      if (probe.active()) {
        client_gone = [probe] { return probe.closed(); };
      } else {
        spdlog::debug("no socket found for {}:{}; a disconnect will not abort this request",
                      req.remote_addr, req.remote_port);
      }
      send_json(res, 200, job->wait_response(client_gone));
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    auto last_write =
        std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, last_write](size_t, httplib::DataSink& sink) {
          std::string sse;
          try {
            sse = job->next_sse(kStreamPoll);
          } catch (const std::exception& e) {
            spdlog::error("stream failed: {}", e.what());
            return false;
          }
          const auto now = std::chrono::steady_clock::now();
          if (sse.empty()) {
            if (now - *last_write < kKeepAliveAfter) return true;
            sse = ": keep-alive\n\n";
          }
          // A failed write means the client is gone: returning false ends the response, and the
          // releaser below aborts the engine requests so their KV blocks are freed.
          if (!sink.write(sse.data(), sse.size())) return false;
          *last_write = now;
          if (job->done()) sink.done();
          return true;
        },
        [job](bool) {
          if (!job->done()) job->abort_unfinished();
        });
  }

  AsyncEngine& engine_;
  ServerOptions options_;
  httplib::Server server_;
  socket_t listen_fd_ = -1;
  std::atomic<bool> listen_started_{false}, listen_done_{false}, stop_requested_{false};
};

HttpServer::HttpServer(AsyncEngine& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}
HttpServer::~HttpServer() = default;
int HttpServer::bind() {
  return impl_->bind();
}
void HttpServer::listen() {
  impl_->listen();
}
void HttpServer::stop() {
  impl_->stop();
}

}  // namespace pagoda::server
