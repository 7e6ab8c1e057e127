// Routes, error mapping and the event-driven generation calls of the API; see http_server.h.
#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <type_traits>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include "server/generation_job.h"
#include "server/http_request_counter.h"
#include "util/error.h"

namespace pagoda::server {
namespace {

namespace net = boost::asio;
using Strand = net::strand<net::thread_pool::executor_type>;

HttpResponse json_response(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

HttpResponse error_response(const ApiError& error) {
  HttpResponse r = json_response(error.status, error_json(error));
  r.error_kind = error.code.empty() ? error.type : error.type + "/" + error.code;
  return r;
}

ApiError api_error(int status, std::string message, std::string type, std::string code = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

// Field names a client sent, fit for one log line: printable ASCII only, each cut at 64 bytes, at
// most 16 of them (a client chooses them, so they could forge lines or flood the log).
std::string loggable_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 16; ++i) {
    if (i > 0) out += ", ";
    const std::string& name = names[i];
    for (size_t j = 0; j < name.size() && j < 64; ++j) {
      const unsigned char c = static_cast<unsigned char>(name[j]);
      out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
    }
    if (name.size() > 64) out += "...";
  }
  if (names.size() > 16) out += fmt::format(" and {} more", names.size() - 16);
  return out;
}

// Runs `work`, answering any exception it throws as an OpenAI error: nothing a request does can
// escape, and every request gets an answer.
template <typename Work>
void guarded(const HttpRequest& req, const ReplyPtr& reply, Work&& work) {
  try {
    work();
  } catch (const RequestError& e) {
    reply->send(error_response(e.error()));
  } catch (const Error& e) {
    // pagoda::Error from tokenizing or templating a request is about the request's content.
    reply->send(error_response(api_error(400, e.what(), "invalid_request_error")));
  } catch (const std::exception& e) {
    spdlog::error("request {}: {} {}: {}", req.request_id, req.method, req.path, e.what());
    reply->send(error_response(
        api_error(500, std::string("Internal server error: ") + e.what(), "InternalServerError")));
  }
}

// Whether the request threads may still be given work: engine pushes and client hang-ups can
// come after the server is gone (the engine outlives it), and must not post to a dead pool.
struct Lifeline {
  std::mutex mutex;
  bool alive = true;

  template <typename F>
  void post(const Strand& strand, F&& f) {
    std::lock_guard lock(mutex);
    if (alive) net::post(strand, std::forward<F>(f));
  }
  void end() {
    std::lock_guard lock(mutex);
    alive = false;
  }
};

// One generation request from submission to its last byte. Every step runs on the request's
// strand: the engine's pushes only schedule a poll there, and a client that hangs up only
// schedules the abort, so the job is never touched by two threads at once.
class GenerationCall : public std::enable_shared_from_this<GenerationCall> {
 public:
  GenerationCall(std::unique_ptr<GenerationJob> job, ReplyPtr reply, Strand strand,
                 std::shared_ptr<Lifeline> lifeline)
      : job_(std::move(job)),
        reply_(std::move(reply)),
        strand_(std::move(strand)),
        lifeline_(std::move(lifeline)) {}

  // On the strand. Throws RequestError when the engine refuses at once.
  void start(std::vector<std::vector<int32_t>> prompts, const std::vector<SamplingParams>& params) {
    auto self = shared_from_this();
    job_->queue().set_listener([self] { self->schedule_poll(); });
    reply_->on_close(
        [self] { self->lifeline_->post(self->strand_, [self] { self->client_gone(); }); });
    try {
      job_->submit(std::move(prompts), params);
    } catch (...) {
      finish();
      throw;
    }
    schedule_poll();
  }

 private:
  void schedule_poll() {
    if (poll_scheduled_.exchange(true)) return;
    lifeline_->post(strand_, [self = shared_from_this()] {
      self->poll_scheduled_ = false;
      try {
        self->poll();
      } catch (const std::exception& e) {
        self->fail(e.what());
      }
    });
  }

  void poll() {
    if (finished_) return;
    GenerationJob::Progress p = job_->poll();
    if (p.refused) {
      reply_->send(error_response(*p.refused));
      return finish();
    }
    if (!p.accepted) return;
    if (!stream_begun_ && streamed()) {
      reply_->begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
      stream_begun_ = true;
    }
    if (streamed()) {
      if (!p.sse.empty()) reply_->write(std::move(p.sse));
      if (p.done) {
        reply_->end_stream();
        finish();
      }
      return;
    }
    if (!p.done) return;
    try {
      reply_->send(json_response(200, job_->response()));
    } catch (const RequestError& e) {
      reply_->send(error_response(e.error()));
    }
    finish();
  }

  // Nothing may escape onto a pool thread: the request ends with a 500 (or an error event, once
  // its stream has begun) and its engine requests are aborted.
  void fail(const char* what) {
    spdlog::error("generation failed: {}", what);
    if (finished_) return;
    job_->abort_unfinished();
    if (stream_begun_) {
      reply_->write(
          sse_event(error_json(api_error(500, "Internal server error", "InternalServerError"))) +
          std::string(kSseDone));
      reply_->end_stream();
    } else {
      reply_->send(error_response(api_error(500, "Internal server error", "InternalServerError")));
    }
    finish();
  }

  // The client went away: its engine requests are aborted at once (their KV blocks freed); the
  // engine's final outputs still come and end the job.
  void client_gone() {
    if (finished_) return;
    job_->abort_unfinished();
  }

  bool streamed() const { return job_->streamed(); }

  // Lets go of the engine's side (the listener holds this call).
  void finish() {
    finished_ = true;
    job_->queue().set_listener({});
  }

  std::unique_ptr<GenerationJob> job_;
  ReplyPtr reply_;
  Strand strand_;
  std::shared_ptr<Lifeline> lifeline_;
  std::atomic<bool> poll_scheduled_{false};
  bool finished_ = false;
  bool stream_begun_ = false;
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(AsyncEngine& engine, ServerOptions options)
      : engine_(engine),
        options_(std::move(options)),
        workers_(static_cast<size_t>(std::max(options_.num_http_threads, 1))),
        transport_(transport_options(options_, http_requests_),
                   [this](HttpRequest req, ReplyPtr reply) { route(std::move(req), reply); }) {}

  ~Impl() {
    transport_.stop();
    lifeline_->end();
    workers_.join();
  }

  int bind() { return transport_.bind(); }
  void listen() { transport_.run(); }
  void stop() { transport_.stop(); }
  size_t num_connections() const { return transport_.num_connections(); }

 private:
  static TransportOptions transport_options(const ServerOptions& o, HttpRequestCounter& counter) {
    TransportOptions t = o.transport;
    t.on_response = [&counter](const std::string& method, const std::string& path, int status) {
      counter.record(method, path, status);
    };
    t.host = o.host;
    t.port = o.port;
    t.api_key = o.api_key;
    t.max_body_bytes = o.max_request_bytes;
    return t;
  }

  // The routes below, as http_requests_total's handler label names them.
  static std::vector<std::string> route_names() {
    return {"/health",    "/version",        "/v1/models",           "/v1/models/{model}",
            "/metrics",   "/v1/completions", "/v1/chat/completions", "/tokenize",
            "/detokenize"};
  }

  // On the transport's thread: cheap routes answer here, the rest go to the request threads.
  void route(HttpRequest req, const ReplyPtr& reply) {
    const std::string& path = req.path;
    const bool get = req.method == "GET" || req.method == "HEAD";
    const bool post = req.method == "POST";
    if (path == "/health" && get) return reply->send(health());
    if (path == "/version" && get)
      return reply->send(json_response(200, {{"version", options_.version}}));
    if ((path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) && get) {
      return guarded(req, reply, [&] { reply->send(models(path)); });
    }
    if (path == "/metrics" && get) return on_worker(std::move(req), reply, &Impl::metrics);
    if (path == "/v1/completions" && post) return start_call(std::move(req), reply, false);
    if (path == "/v1/chat/completions" && post) return start_call(std::move(req), reply, true);
    if (path == "/tokenize" && post) return on_worker(std::move(req), reply, &Impl::tokenize);
    if (path == "/detokenize" && post) return on_worker(std::move(req), reply, &Impl::detokenize);
    reply->send(error_response(not_found_error(fmt::format("Not found: {} {}", req.method, path))));
  }

  using WorkerRoute = HttpResponse (Impl::*)(const HttpRequest&);
  void on_worker(HttpRequest req, const ReplyPtr& reply, WorkerRoute work) {
    net::post(workers_, [this, req = std::move(req), reply, work] {
      guarded(req, reply, [&] { reply->send((this->*work)(req)); });
    });
  }

  void start_call(HttpRequest req, const ReplyPtr& reply, bool chat) {
    Strand strand = net::make_strand(workers_);
    net::post(strand, [this, req = std::move(req), reply, strand, chat] {
      guarded(req, reply, [&] { start_generation(req, reply, strand, chat); });
    });
  }

  HttpResponse health() const {
    switch (engine_.state()) {
      case AsyncEngine::State::kReady: {
        HttpResponse r;
        r.content_type.clear();
        return r;
      }
      case AsyncEngine::State::kLoading:
        return error_response(service_unavailable_error("The model is still loading"));
      case AsyncEngine::State::kDead:
        return error_response(
            service_unavailable_error("The engine has failed: " + engine_.failure()));
      default:
        return error_response(service_unavailable_error("The server is shutting down"));
    }
  }

  // The full set once loaded (also after the engine died); the process_* series before.
  HttpResponse metrics(const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = (options_.metrics ? options_.metrics->render(engine_)
                               : render_process_metrics(read_process_stats())) +
             http_requests_.render();
    return r;
  }

  HttpResponse models(const std::string& path) const {
    const EngineBackend& be = ready_backend();
    if (path == "/v1/models") {
      json cards = json::array({model_card(be, served_name(be))});
      for (const std::string& alias : options_.model_aliases)
        cards.push_back(model_card(be, alias));
      return json_response(200, {{"object", "list"}, {"data", cards}});
    }
    const std::string name = path.substr(std::string("/v1/models/").size());
    if (name.empty()) throw RequestError(not_found_error("Not found: GET " + path));
    check_model(be, name);
    return json_response(200, model_card(be, name));
  }

  HttpResponse tokenize(const HttpRequest& req) {
    const EngineBackend& be = ready_backend();
    const TokenizeRequest tr = parse_request(req, [&](UnknownFields* unknown) {
      return parse_tokenize_request(parse_json_body(req.body), unknown);
    });
    check_model(be, tr.model);
    const std::string text =
        tr.prompt ? *tr.prompt
                  : be.apply_chat_template(
                        dump_json(tr.messages), tr.add_generation_prompt,
                        dump_json(tr.tools.is_null() ? json::object() : json{{"tools", tr.tools}}));
    const std::vector<int32_t> ids = be.encode(text, tr.add_special_tokens);
    return json_response(200, tokenize_response(tr, ids, be.max_model_len(), [&be](int32_t id) {
                           return be.decode({id}, false);
                         }));
  }

  HttpResponse detokenize(const HttpRequest& req) {
    const EngineBackend& be = ready_backend();
    std::string model;
    const std::vector<int32_t> ids = parse_request(req, [&](UnknownFields* unknown) {
      return parse_detokenize_request(parse_json_body(req.body), &model, unknown);
    });
    check_model(be, model);
    return json_response(200, {{"prompt", be.decode(ids, false)}});
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

  // Runs one of the parse_*_request functions under the server's unknown-field policy. Fields
  // it ignored are logged as vLLM does: the request goes on, and the log says what it sent that
  // nothing reads (names only, never values).
  template <typename Parse>
  std::invoke_result_t<Parse, UnknownFields*> parse_request(const HttpRequest& req,
                                                            Parse parse) const {
    UnknownFields unknown;
    unknown.strict = options_.strict_request_fields;
    auto parsed = parse(&unknown);
    if (!unknown.ignored.empty()) {
      spdlog::warn("request {}: {}: ignoring fields the server does not know: {}", req.request_id,
                   req.path, loggable_names(unknown.ignored));
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

  // Parses, templates and tokenizes a generation request and submits it; runs on the request's
  // strand, where its outputs will be handled too.
  void start_generation(const HttpRequest& req, const ReplyPtr& reply, const Strand& strand,
                        bool chat) {
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
      spec.stream = cr.stream;
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
      // A forced tool call is constrained from the first token (the grammar does not wait for
      // </think> yet), so the whole output is the call: nothing to split off as reasoning.
      spec.reasoning = options_.reasoning_parser == "deepseek_r1" && !cr.tool_choice.forced();
      spec.stream = cr.stream;
      spec.tool_choice = cr.tool_choice;
      spec.tool_call_parser = options_.protocol.tool_call_parser;
      spec.parallel_tool_calls = cr.parallel_tool_calls;
      // The template shows the tools to the model (as HF's apply_chat_template(tools=...));
      // chat_template_kwargs may still override them, as in vLLM.
      json template_kwargs = cr.chat_template_kwargs;
      if (!cr.tools.is_null() && !template_kwargs.contains("tools"))
        template_kwargs["tools"] = cr.tools;
      const std::string prompt = be.apply_chat_template(
          dump_json(cr.messages), cr.add_generation_prompt, dump_json(template_kwargs));
      std::vector<int32_t> ids = be.encode(prompt, cr.add_special_tokens);
      if (ids.empty()) throw_invalid("The chat template produced an empty prompt", "messages");
      SamplingParams sp = cr.params;
      sp.max_tokens =
          resolve_max_tokens(cr.max_tokens, 0, static_cast<int>(ids.size()), max_model_len);
      check_sampling_params(sp);
      prompts.push_back(std::move(ids));
      params.push_back(sp);
    }

    auto call = std::make_shared<GenerationCall>(
        std::make_unique<GenerationJob>(engine_, std::move(spec)), reply, strand, lifeline_);
    call->start(std::move(prompts), params);
  }

  AsyncEngine& engine_;
  ServerOptions options_;
  std::shared_ptr<Lifeline> lifeline_ = std::make_shared<Lifeline>();
  HttpRequestCounter http_requests_{route_names()};  // before transport_, which reports to it
  net::thread_pool workers_;
  HttpTransport transport_;
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
size_t HttpServer::num_connections() const {
  return impl_->num_connections();
}

}  // namespace pagoda::server
