// HTTP/1.1 over Asio with Beast's parser; see http_transport.h for what it guarantees.
//
// Each connection is a Session on its own strand. It moves through: waiting for a request's first
// byte (keep-alive timeout) → reading its headers (header deadline) → checks that need only the
// headers (framing, encoding, CORS preflight, API key) → reading the body (body deadline) →
// handing the request to the routes, which answer through a per-request Reply. While a request is
// handled, a read stays posted on the socket so that a client that hangs up is noticed at once
// (the routes abort its engine requests). Every byte out goes through one write queue, so a
// stream to a slow reader grows that queue (bounded) and never blocks the engine or other clients.
#include "server/http_transport.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "util/ascii.h"
#include "util/error.h"

namespace pagoda::server {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 8192;

// A client's X-Request-Id is kept when it is short and plain (it lands in logs), else replaced.
std::string request_id_from(std::string_view given) {
  const bool usable =
      !given.empty() && given.size() <= 128 && std::all_of(given.begin(), given.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
               c == ':';
      });
  if (usable) return std::string(given);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}", rng());
}

// The OpenAI error shape, as the routes write it (openai_protocol's error_json).
std::string json_error_body(int status, std::string_view message, std::string_view code) {
  const nlohmann::json error = {
      {"message", message},
      {"type", status >= 500 ? "InternalServerError" : "invalid_request_error"},
      {"param", nullptr},
      {"code", code.empty() ? nlohmann::json(status) : nlohmann::json(code)}};
  return nlohmann::json{{"error", error}}.dump();
}

HttpResponse error_response(int status, std::string message, std::string code) {
  HttpResponse r;
  r.status = status;
  r.body = json_error_body(status, message, code);
  r.error_kind = code.empty() ? fmt::format("http_{}", status) : code;
  return r;
}

std::string status_line(int status) {
  const auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return fmt::format("HTTP/1.1 {} {}\r\n", status,
                     reason.empty() ? std::string_view("Unknown")
                                    : std::string_view(reason.data(), reason.size()));
}

// The head of a response; `content_length` empty means a chunked (or, for HTTP/1.0, close-
// delimited) body.
std::string response_head(int status, const std::string& content_type, const HttpHeaders& headers,
                          std::optional<size_t> content_length, bool chunked, bool keep_alive) {
  std::string head = status_line(status);
  head += "Server: pagoda\r\n";
  if (!content_type.empty()) head += "Content-Type: " + content_type + "\r\n";
  for (const auto& [name, value] : headers) head += name + ": " + value + "\r\n";
  if (content_length) head += fmt::format("Content-Length: {}\r\n", *content_length);
  if (chunked) head += "Transfer-Encoding: chunked\r\n";
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  head += "\r\n";
  return head;
}

// At most `per_second` error lines a second from the transport, so that a flood of bad requests
// or refused connections cannot flood the log (and the disk); what was left out is counted in
// the next line that goes through.
class LogBudget {
 public:
  explicit LogBudget(int per_second) : per_second_(per_second) {}
  // True if a line may be logged now; `suppressed` gets how many were dropped before it.
  bool take(int64_t* suppressed) {
    std::lock_guard lock(mutex_);
    const auto now = Clock::now();
    if (now - window_start_ >= std::chrono::seconds(1)) {
      window_start_ = now;
      used_ = 0;
    }
    if (used_ >= per_second_) {
      ++suppressed_;
      return false;
    }
    ++used_;
    *suppressed = suppressed_;
    suppressed_ = 0;
    return true;
  }

 private:
  std::mutex mutex_;
  const int per_second_;
  Clock::time_point window_start_{};
  int used_ = 0;
  int64_t suppressed_ = 0;
};

// Logs one error line within the budget, saying how many were left out before it.
template <typename... Args>
void log_error_line(LogBudget& budget, spdlog::level::level_enum level,
                    fmt::format_string<Args...> format, Args&&... args) {
  int64_t suppressed = 0;
  if (!budget.take(&suppressed)) return;
  const std::string line = fmt::format(format, std::forward<Args>(args)...);
  if (suppressed > 0) {
    spdlog::log(level, "{} ({} more error lines left out)", line, suppressed);
  } else {
    spdlog::log(level, "{}", line);
  }
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

// What the listener knows of a connection: enough to count it, evict it and close it.
class SessionBase {
 public:
  virtual ~SessionBase() = default;
  virtual void close_from_outside() = 0;
  // When it began waiting for a request (its first byte or its headers); 0 while it has one.
  std::atomic<int64_t> waiting_since_ns{0};
};

// The per-request answer the routes hold; forwards to its session's strand, tagged with the
// request's sequence number so that a late call can never touch a later request.
class SessionReplyTarget {
 public:
  virtual ~SessionReplyTarget() = default;
  virtual void reply_send(uint64_t seq, HttpResponse response) = 0;
  virtual void reply_begin(uint64_t seq, int status, std::string content_type,
                           HttpHeaders headers) = 0;
  virtual void reply_write(uint64_t seq, std::string bytes) = 0;
  virtual void reply_end(uint64_t seq) = 0;
  virtual void reply_on_close(uint64_t seq, std::function<void()> callback) = 0;
  virtual void reply_dropped(uint64_t seq) = 0;
  virtual bool reply_closed(uint64_t seq) const = 0;
};

namespace {

class SessionReply final : public Reply {
 public:
  SessionReply(std::shared_ptr<SessionReplyTarget> session, uint64_t seq)
      : session_(std::move(session)), seq_(seq) {}
  ~SessionReply() override { session_->reply_dropped(seq_); }
  void send(HttpResponse response) override { session_->reply_send(seq_, std::move(response)); }
  void begin_stream(int status, std::string content_type, HttpHeaders headers) override {
    session_->reply_begin(seq_, status, std::move(content_type), std::move(headers));
  }
  bool write(std::string bytes) override {
    if (session_->reply_closed(seq_)) return false;
    session_->reply_write(seq_, std::move(bytes));
    return true;
  }
  void end_stream() override { session_->reply_end(seq_); }
  void on_close(std::function<void()> callback) override {
    session_->reply_on_close(seq_, std::move(callback));
  }
  bool closed() const override { return session_->reply_closed(seq_); }

 private:
  std::shared_ptr<SessionReplyTarget> session_;
  uint64_t seq_;
};

}  // namespace

class HttpTransport::Impl : public std::enable_shared_from_this<HttpTransport::Impl> {
 public:
  Impl(TransportOptions options, HttpHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)), acceptor_(ioc_) {}

  int bind();
  void run();
  void stop();
  size_t num_connections() const {
    std::lock_guard lock(mutex_);
    return sessions_.size();
  }
  // After stop(): runs what the closes left queued, so that every session lets go of the
  // transport, and from then on drops what is posted to it.
  void tear_down() {
    torn_down_ = true;
    for (int round = 0; round < 1000; ++round) {
      ioc_.restart();
      if (ioc_.poll() == 0) break;
    }
  }
  bool torn_down() const { return torn_down_; }

  const TransportOptions& options() const { return options_; }
  LogBudget& log_budget() { return log_budget_; }
  const HttpHandler& handler() const { return handler_; }
  void add(SessionBase* s, std::weak_ptr<SessionBase> w) {
    std::lock_guard lock(mutex_);
    sessions_.emplace(s, std::move(w));
  }
  void remove(SessionBase* s) {
    std::lock_guard lock(mutex_);
    sessions_.erase(s);
  }

 private:
  void accept();
  void on_accept(tcp::socket socket);
  void refuse_connection(tcp::socket& socket, int status, const std::string& message,
                         const std::string& code, const HttpHeaders& headers);
  // At the cap: closes the connection that has waited longest for a request; false if every
  // connection is busy with one.
  bool evict_one();

  TransportOptions options_;
  HttpHandler handler_;
  net::io_context ioc_;
  std::optional<ssl::context> ssl_;
  tcp::acceptor acceptor_;
  net::steady_timer accept_backoff_{ioc_};
  LogBudget log_budget_{50};
  std::atomic<bool> stop_requested_{false}, run_started_{false}, run_done_{false};
  std::atomic<bool> torn_down_{false};
  mutable std::mutex mutex_;  // guards sessions_
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions_;
};

namespace {

template <class Stream>
class Session final : public SessionBase,
                      public SessionReplyTarget,
                      public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <class... Args>
  Session(std::shared_ptr<HttpTransport::Impl> owner, tcp::socket socket, Args&&... args)
      : owner_(std::move(owner)),
        options_(owner_->options()),
        stream_(std::move(socket), std::forward<Args>(args)...),
        read_deadline_(stream_.get_executor()),
        write_deadline_(stream_.get_executor()),
        // Unparsed input: a head, or a chunk-size line or trailer (which Beast's parser does not
        // bound itself), or pipelined requests read ahead. Past this the parser fails with
        // buffer_overflow (400) and no more is read ahead.
        buffer_(options_.max_header_bytes + 4 * kReadChunk) {
    beast::error_code ec;
    const auto remote = socket_().remote_endpoint(ec);
    if (!ec) remote_ = fmt::format("{}:{}", remote.address().to_string(), remote.port());
  }

  ~Session() override { owner_->remove(this); }

  void start() {
    owner_->add(this, this->shared_from_this());
    mark_waiting();
    net::dispatch(executor(), [self = this->shared_from_this()] { self->handshake(); });
  }

  void close_from_outside() override {
    net::post(executor(), [self = this->shared_from_this()] { self->close(); });
  }

  // --- the Reply, on the strand -----------------------------------------------------------

  void reply_send(uint64_t seq, HttpResponse response) override {
    post([self = this->shared_from_this(), seq, r = std::move(response)]() mutable {
      if (self->accepts_reply(seq)) self->send_whole(std::move(r));
    });
  }
  void reply_begin(uint64_t seq, int status, std::string content_type,
                   HttpHeaders headers) override {
    post([self = this->shared_from_this(), seq, status, ct = std::move(content_type),
          h = std::move(headers)]() mutable {
      if (self->accepts_reply(seq)) self->begin_stream(status, ct, std::move(h));
    });
  }
  void reply_write(uint64_t seq, std::string bytes) override {
    post([self = this->shared_from_this(), seq, b = std::move(bytes)]() mutable {
      if (seq == self->seq_ && self->streaming_ && !self->closed_) self->stream_chunk(b);
    });
  }
  void reply_end(uint64_t seq) override {
    post([self = this->shared_from_this(), seq] {
      if (seq == self->seq_ && self->streaming_ && !self->closed_) self->end_stream();
    });
  }
  void reply_on_close(uint64_t seq, std::function<void()> callback) override {
    post([self = this->shared_from_this(), seq, cb = std::move(callback)]() mutable {
      if (seq <= self->last_completed_seq_) return;  // that reply completed: nothing to tell
      if (self->closed_) return cb();
      self->close_callbacks_.push_back(std::move(cb));
    });
  }
  void reply_dropped(uint64_t seq) override {
    post([self = this->shared_from_this(), seq] {
      if (seq == self->seq_ && self->streaming_ && !self->closed_) {
        spdlog::error("request {}: the route left its stream unfinished", self->request_id_);
        return self->close();
      }
      if (self->accepts_reply(seq)) {
        spdlog::error("request {}: the route gave no answer", self->request_id_);
        self->send_whole(error_response(500, "Internal server error: no response", ""));
      }
    });
  }
  bool reply_closed(uint64_t seq) const override {
    return closed_flag_.load() || seq != seq_atomic_.load();
  }

 private:
  net::any_io_executor executor() { return socket_().get_executor(); }
  // Onto the strand; nothing once the transport is torn down (the call is dropped, so that a
  // reply released late cannot keep the session and the io_context alive).
  template <class F>
  void post(F&& f) {
    if (!owner_->torn_down()) net::post(executor(), std::forward<F>(f));
  }
  tcp::socket& socket_() {
    if constexpr (std::is_same_v<Stream, tcp::socket>) {
      return stream_;
    } else {
      return stream_.next_layer();
    }
  }
  bool accepts_reply(uint64_t seq) const {
    return seq == seq_ && handling_ && !replied_ && !closed_;
  }
  void mark_waiting() {
    waiting_since_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
  }

  // --- deadlines ---------------------------------------------------------------------------

  void arm(net::steady_timer& timer, std::chrono::milliseconds after) {
    // A wait armed after the close would hold the session (and the transport) until it fired.
    if (closed_) return;
    timer.expires_after(after);
    timer.async_wait([self = this->shared_from_this(), &timer](beast::error_code ec) {
      if (!ec && timer.expiry() <= Clock::now()) self->close();
    });
  }
  // Never at all (not just cancel(): a wait already completed and queued would still see a
  // passed expiry and close a healthy connection).
  void disarm(net::steady_timer& timer) { timer.expires_at(net::steady_timer::time_point::max()); }

  // Room for one more read into the input buffer (0 when it is full).
  size_t read_room() const { return std::min(kReadChunk, buffer_.max_size() - buffer_.size()); }

  // --- reading a request -------------------------------------------------------------------

  void handshake() {
    if constexpr (std::is_same_v<Stream, tcp::socket>) {
      wait_for_request();
    } else {
      arm(read_deadline_, options_.header_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return self->close();
                                self->wait_for_request();
                              });
    }
  }

  void wait_for_request() {
    if (closed_) return;
    mark_waiting();
    skip_empty_lines();
    if (buffer_.size() > 0) return read_header();  // pipelined
    arm(read_deadline_, num_requests_ == 0 ? options_.header_timeout : options_.keep_alive_timeout);
    reading_ = true;
    stream_.async_read_some(buffer_.prepare(read_room()),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->reading_ = false;
                              if (ec) return self->close();
                              self->buffer_.commit(n);
                              self->read_header();
                            });
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
    parser_->body_limit(options_.max_body_bytes);
    arm(read_deadline_, options_.header_timeout);
    reading_ = true;
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, size_t) {
                              self->reading_ = false;
                              self->on_header(ec);
                            });
  }

  void on_header(beast::error_code ec) {
    if (closed_) return;
    if (ec) return refuse_unreadable(ec);
    ++num_requests_;
    const auto& req = parser_->get();
    request_ = HttpRequest{};
    request_.method = std::string(req.method_string());
    const std::string_view target(req.target().data(), req.target().size());
    const size_t question = target.find('?');
    request_.path = std::string(target.substr(0, question));
    if (question != std::string_view::npos)
      request_.query = std::string(target.substr(question + 1));
    const std::string& root = options_.root_path;
    if (!root.empty() && request_.path.rfind(root, 0) == 0 &&
        (request_.path.size() == root.size() || request_.path[root.size()] == '/')) {
      request_.path.erase(0, root.size());
      if (request_.path.empty()) request_.path = "/";
    }
    for (const auto& field : req) {
      request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    request_.remote = remote_;
    request_.request_id = request_id_from(request_.header("X-Request-Id"));
    request_id_ = request_.request_id;
    method_ = request_.method;
    path_ = request_.path;
    keep_alive_ = req.keep_alive();
    http10_ = req.version() < 11;
    origin_ = request_.header("Origin");

    // Checks that need only the headers; each refusal closes the connection, because the body
    // (if any) is left unread.
    const std::string te = ascii_lower(trim_ascii_space(request_.header("Transfer-Encoding")));
    if (!te.empty() && te != "chunked") {
      return refuse(error_response(400, "Unsupported Transfer-Encoding (only chunked)",
                                   "bad_transfer_encoding"));
    }
    const std::string ce = ascii_lower(trim_ascii_space(request_.header("Content-Encoding")));
    if (!ce.empty() && ce != "identity") {
      return refuse(error_response(
          415, fmt::format("Compressed request bodies are not accepted (Content-Encoding: {})", ce),
          "unsupported_content_encoding"));
    }
    if (options_.cors.enabled() && is_cors_preflight(request_)) {
      HttpResponse r = answer_cors_preflight(options_.cors, request_);
      if (!parser_->is_done()) keep_alive_ = false;
      return respond_without_handler(std::move(r));
    }
    if (!authorized()) {
      return refuse(error_response(401,
                                   "Missing or invalid API key; send 'Authorization: Bearer <key>'",
                                   "invalid_api_key"));
    }
    if (parser_->is_done()) return dispatch();
    if (!http10_ && ascii_lower(trim_ascii_space(request_.header("Expect"))) == "100-continue") {
      queue_bytes("HTTP/1.1 100 Continue\r\n\r\n");
    }
    arm(read_deadline_, options_.body_timeout);
    reading_ = true;
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->reading_ = false;
                       self->on_body(ec);
                     });
  }

  bool authorized() const {
    if (options_.api_key.empty()) return true;
    const auto& open = options_.open_paths;
    if (std::find(open.begin(), open.end(), request_.path) != open.end()) return true;
    const std::string auth = request_.header("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    return auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0 &&
           constant_time_equals(auth.substr(kBearer.size()), options_.api_key);
  }

  void on_body(beast::error_code ec) {
    if (closed_) return;
    if (ec) return refuse_unreadable(ec);
    dispatch();
  }

  // A request that could not be read whole: answered when that helps the client, then closed.
  void refuse_unreadable(beast::error_code ec) {
    if (parser_) {  // whatever of the request line was read, for the log
      method_ = std::string(parser_->get().method_string());
      const auto target = parser_->get().target();
      path_ = std::string(target.substr(0, target.find('?')));
      const auto id = parser_->get()["X-Request-Id"];
      request_id_ = request_id_from(std::string_view(id.data(), id.size()));
    }
    if (ec == http::error::body_limit) {
      return refuse(error_response(
          413,
          fmt::format("The request body is larger than --max-request-bytes ({} bytes)",
                      options_.max_body_bytes),
          "request_too_large"));
    }
    if (ec == http::error::header_limit) {
      return refuse(error_response(431, "The request headers are too large", "headers_too_large"));
    }
    const bool malformed =
        ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::partial_message && ec != http::error::end_of_stream;
    if (!malformed || closed_) return close();
    // Bad framing, conflicting lengths, garbage: say so, then close.
    refuse(error_response(400, fmt::format("Malformed HTTP request: {}", ec.message()),
                          "bad_request"));
  }

  void refuse(HttpResponse response) {
    keep_alive_ = false;
    respond_without_handler(std::move(response));
  }

  void respond_without_handler(HttpResponse response) {
    handling_ = true;
    replied_ = false;
    ++seq_;
    seq_atomic_ = seq_;
    disarm(read_deadline_);
    send_whole(std::move(response));
  }

  // --- handing a request to the routes -----------------------------------------------------

  void dispatch() {
    // From here the connection has a whole request: no longer the one to evict at the cap (one
    // still sending its body may be, so that slow bodies cannot hold the cap).
    waiting_since_ns = 0;
    disarm(read_deadline_);
    request_.body = std::move(parser_->get().body());
    handling_ = true;
    replied_ = false;
    streaming_ = false;
    ++seq_;
    seq_atomic_ = seq_;
    watch_peer();
    auto reply = std::make_shared<SessionReply>(this->shared_from_this(), seq_);
    try {
      owner_->handler()(std::move(request_), std::move(reply));
    } catch (const std::exception& e) {
      spdlog::error("request {}: {}", request_id_, e.what());
      if (!replied_) send_whole(error_response(500, "Internal server error", ""));
    }
  }

  // While a request is handled, a read stays posted: it ends with an error when the client hangs
  // up (the routes are told, and abort the request), or brings the next pipelined request.
  void watch_peer() {
    skip_empty_lines();
    // With a pipelined request waiting, the client is there; reading on would also leave a read
    // posted when the next request could be parsed from the buffer at once.
    if (reading_ || closed_ || buffer_.size() > 0) return;
    reading_ = true;
    stream_.async_read_some(buffer_.prepare(read_room()),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->reading_ = false;
                              if (ec) return self->close();
                              if (self->lingering_) return self->drain_after_close();
                              self->buffer_.commit(n);
                              if (self->handling_)
                                return self->watch_peer();  // keep noticing a hang-up
                              self->wait_for_request();
                            });
  }

  // Empty lines before a request line are ignored (RFC 9112 §2.2): a client that ends a body
  // with an extra CRLF must not look like the start of another request.
  void skip_empty_lines() {
    const auto* data = static_cast<const char*>(buffer_.data().data());
    size_t n = 0;
    while (n < buffer_.size() && (data[n] == '\r' || data[n] == '\n')) ++n;
    buffer_.consume(n);
  }

  // --- writing a response ------------------------------------------------------------------

  HttpHeaders common_headers(HttpHeaders headers) const {
    headers.emplace_back("X-Request-Id", request_id_);
    for (auto& h : cors_response_headers(options_.cors, origin_)) headers.push_back(std::move(h));
    return headers;
  }

  // Every response's status goes to on_response (metrics), and an error's to the log.
  void report_status(int status, const std::string& error_kind) const {
    if (options_.on_response) options_.on_response(method_, path_, status);
    if (status < 400) return;
    const auto level = status >= 500 ? spdlog::level::warn : spdlog::level::info;
    log_error_line(owner_->log_budget(), level, "request {}: {} {} from {} -> {} {}", request_id_,
                   method_, path_, remote_, status, error_kind);
  }

  void send_whole(HttpResponse r) {
    replied_ = true;
    complete_ = true;
    last_completed_seq_ = seq_;
    close_callbacks_.clear();
    // The head of an HTTP/1.0 request, and a refused request's unread body, end the connection.
    if (http10_) keep_alive_ = false;
    report_status(r.status, r.error_kind);
    std::string bytes =
        response_head(r.status, r.content_type, common_headers(std::move(r.headers)), r.body.size(),
                      false, keep_alive_);
    if (method_ != "HEAD") bytes += r.body;  // HEAD: the head of what GET would answer
    queue_bytes(std::move(bytes));
  }

  void begin_stream(int status, const std::string& content_type, HttpHeaders headers) {
    replied_ = true;
    streaming_ = true;
    if (http10_) keep_alive_ = false;
    report_status(status, "stream");
    queue_bytes(response_head(status, content_type, common_headers(std::move(headers)),
                              std::nullopt, !http10_, keep_alive_));
  }

  void stream_chunk(const std::string& data) {
    if (data.empty()) return;
    if (pending_.size() + writing_.size() + data.size() > options_.max_pending_stream_bytes) {
      spdlog::warn("request {}: the client reads too slowly ({} bytes unsent); closing",
                   request_id_, pending_.size() + writing_.size());
      return close();
    }
    if (http10_) return queue_bytes(data);
    queue_bytes(fmt::format("{:x}\r\n", data.size()) + data + "\r\n");
  }

  void end_stream() {
    streaming_ = false;
    complete_ = true;
    last_completed_seq_ = seq_;
    close_callbacks_.clear();
    if (http10_) return queue_bytes({});
    queue_bytes("0\r\n\r\n");
  }

  void queue_bytes(std::string bytes) {
    pending_ += bytes;
    if (!writing_now_) start_write();
  }

  void start_write() {
    if (closed_) return;
    if (pending_.empty()) return after_write();
    writing_.swap(pending_);
    pending_.clear();
    writing_now_ = true;
    arm(write_deadline_, options_.write_timeout);
    net::async_write(stream_, net::buffer(writing_),
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_now_ = false;
                       self->writing_.clear();
                       if (ec) return self->close();
                       if (!self->pending_.empty()) return self->start_write();
                       self->disarm(self->write_deadline_);
                       self->after_write();
                     });
  }

  // Everything queued is written: if the response is complete, the next request may come.
  void after_write() {
    if (!complete_ || writing_now_) return;
    complete_ = false;
    handling_ = false;
    if (!keep_alive_) return linger();
    if (reading_) {
      // The peer watch is still posted; it brings the next request's first bytes (or an error).
      mark_waiting();
      arm(read_deadline_, options_.keep_alive_timeout);
      return;
    }
    wait_for_request();
  }

  // Ends a connection after its last response without losing that response: closing a socket
  // whose client is still sending (a refused body) makes the kernel send a reset, which can
  // destroy the response before the client reads it. So the sending side is shut, and what the
  // client still sends is read and dropped until it closes too, for a second at most.
  void linger() {
    if (closed_) return;
    lingering_ = true;
    beast::error_code ignored;
    socket_().shutdown(tcp::socket::shutdown_send, ignored);
    arm(read_deadline_, std::chrono::milliseconds(1000));
    if (reading_) return;  // the posted read drains (see watch_peer)
    drain_after_close();
  }
  void drain_after_close() {
    reading_ = true;
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(kReadChunk),
                            [self = this->shared_from_this()](beast::error_code ec, size_t) {
                              self->reading_ = false;
                              if (ec || self->closed_) return self->close();
                              self->drain_after_close();
                            });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    closed_flag_ = true;
    read_deadline_.cancel();
    write_deadline_.cancel();
    beast::error_code ignored;
    socket_().shutdown(tcp::socket::shutdown_both, ignored);
    socket_().close(ignored);
    auto callbacks = std::move(close_callbacks_);
    close_callbacks_.clear();
    for (auto& cb : callbacks) cb();
    owner_->remove(this);
  }

  std::shared_ptr<HttpTransport::Impl> owner_;
  const TransportOptions& options_;
  Stream stream_;
  net::steady_timer read_deadline_, write_deadline_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string remote_;

  HttpRequest request_;
  std::string request_id_, origin_;
  uint64_t num_requests_ = 0;
  uint64_t seq_ = 0;
  uint64_t last_completed_seq_ = 0;
  std::string method_, path_;  // of the request being answered, for the log
  std::atomic<uint64_t> seq_atomic_{0};
  bool keep_alive_ = true, http10_ = false;
  bool reading_ = false;    // a read is posted on the socket
  bool handling_ = false;   // a request is with the routes (or being refused)
  bool replied_ = false;    // its response has begun
  bool streaming_ = false;  // …as a stream not yet ended
  bool complete_ = false;   // …and is all queued
  bool writing_now_ = false;
  bool lingering_ = false;  // the last response is out; reading only to drop what comes
  bool closed_ = false;
  std::atomic<bool> closed_flag_{false};
  std::string pending_, writing_;
  std::vector<std::function<void()>> close_callbacks_;
};

}  // namespace

int HttpTransport::Impl::bind() {
  // Every connection holds a descriptor: take the hard limit, and keep the cap under it.
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur > 128 &&
      options_.max_connections > limit.rlim_cur - 128) {
    spdlog::warn("--max-connections {} lowered to {}: the process may open {} files",
                 options_.max_connections, limit.rlim_cur - 128, limit.rlim_cur);
    options_.max_connections = limit.rlim_cur - 128;
  }

  const bool tls = !options_.ssl_certfile.empty() || !options_.ssl_keyfile.empty();
  if (tls) {
    if (options_.ssl_certfile.empty() || options_.ssl_keyfile.empty())
      fail("HTTPS needs both --ssl-certfile and --ssl-keyfile");
    ssl_.emplace(ssl::context::tls_server);
    ssl_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                      ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                      ssl::context::single_dh_use);
    beast::error_code ec;
    ssl_->use_certificate_chain_file(options_.ssl_certfile, ec);
    if (ec) fail("--ssl-certfile {}: {}", options_.ssl_certfile, ec.message());
    ssl_->use_private_key_file(options_.ssl_keyfile, ssl::context::pem, ec);
    if (ec) fail("--ssl-keyfile {}: {}", options_.ssl_keyfile, ec.message());
    if (options_.ssl_cert_reqs > 0) {
      if (options_.ssl_ca_certs.empty())
        fail("--ssl-cert-reqs {} needs --ssl-ca-certs", options_.ssl_cert_reqs);
      ssl_->load_verify_file(options_.ssl_ca_certs, ec);
      if (ec) fail("--ssl-ca-certs {}: {}", options_.ssl_ca_certs, ec.message());
      auto mode = ssl::verify_peer;
      if (options_.ssl_cert_reqs >= 2) mode |= ssl::verify_fail_if_no_peer_cert;
      ssl_->set_verify_mode(mode);
    }
  }

  beast::error_code ec;
  tcp::resolver resolver(ioc_);
  const auto endpoints =
      resolver.resolve(options_.host, std::to_string(options_.port),
                       tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty())
    fail("cannot listen on {}:{}: {}", options_.host, options_.port, ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  // SO_REUSEADDR only, never SO_REUSEPORT: a second server must not share a taken port.
  if (!ec) acceptor_.bind(endpoint, ec);
  if (ec) {
    fail("cannot listen on {}:{}: {}", options_.host, options_.port,
         ec == net::error::address_in_use ? "the address is in use (is another server running?)"
                                          : ec.message());
  }
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", options_.host, options_.port, ec.message());
  return acceptor_.local_endpoint().port();
}

void HttpTransport::Impl::accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [self = shared_from_this()](beast::error_code ec,
                                                                             tcp::socket socket) {
    if (ec == net::error::operation_aborted || !self->acceptor_.is_open()) return;
    if (!ec) {
      self->on_accept(std::move(socket));
      return self->accept();
    }
    // Out of descriptors (or another transient failure): accepting
    // again at once would spin; give closing connections a moment.
    spdlog::warn("accept failed: {}", ec.message());
    self->accept_backoff_.expires_after(std::chrono::milliseconds(100));
    self->accept_backoff_.async_wait([self](beast::error_code) { self->accept(); });
  });
}

bool HttpTransport::Impl::evict_one() {
  // Looked at outside the lock: a session released here may be the last reference, and its
  // destructor takes the lock to leave the registry.
  std::vector<std::weak_ptr<SessionBase>> open;
  {
    std::lock_guard lock(mutex_);
    open.reserve(sessions_.size());
    for (const auto& entry : sessions_) open.push_back(entry.second);
  }
  std::shared_ptr<SessionBase> oldest;
  int64_t oldest_since = 0;
  for (const auto& weak : open) {
    auto s = weak.lock();
    if (!s) continue;
    const int64_t since = s->waiting_since_ns.load();
    if (since == 0 || (oldest && since >= oldest_since)) continue;
    oldest = std::move(s);
    oldest_since = since;
  }
  if (!oldest) return false;
  oldest->waiting_since_ns = 0;  // not chosen twice
  oldest->close_from_outside();
  return true;
}

// Answers a connection the server will not serve, without reading it: the response is written
// straight to the socket (it fits the socket's send buffer) and the connection closed. Over TLS
// nothing can be said before a handshake, so the connection is only closed.
void HttpTransport::Impl::refuse_connection(tcp::socket& socket, int status,
                                            const std::string& message, const std::string& code,
                                            const HttpHeaders& headers) {
  beast::error_code ignored;
  if (!ssl_) {
    const std::string body = json_error_body(status, message, code);
    const std::string r =
        response_head(status, "application/json", headers, body.size(), false, false) + body;
    ::send(socket.native_handle(), r.data(), r.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    // What the client already sent is discarded first: closing a socket with unread input makes
    // the kernel answer with a reset, which may destroy the response before the client reads it.
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    char discard[4096];
    while (::recv(socket.native_handle(), discard, sizeof(discard), MSG_DONTWAIT) > 0) {
    }
  }
  socket.close(ignored);
}

void HttpTransport::Impl::on_accept(tcp::socket socket) {
  if (stop_requested_) return;
  beast::error_code ignored;
  if (!options_.allowed_clients.allows_everyone()) {
    const auto remote = socket.remote_endpoint(ignored);
    if (ignored || !options_.allowed_clients.allows(remote.address())) {
      log_error_line(log_budget_, spdlog::level::warn,
                     "connection from {} refused: not in --allowed-clients",
                     ignored ? std::string("an unknown address") : remote.address().to_string());
      return refuse_connection(socket, 403, "Client address not allowed", "client_not_allowed", {});
    }
  }
  socket.set_option(tcp::no_delay(true), ignored);
  if (num_connections() >= options_.max_connections && !evict_one()) {
    // Every connection is busy with a request: refuse this one at once, without reading it.
    log_error_line(log_budget_, spdlog::level::warn,
                   "connection refused: {} connections open (--max-connections)",
                   options_.max_connections);
    return refuse_connection(socket, 503, "Too many connections; try again later",
                             "too_many_connections", {{"Retry-After", "1"}});
  }
  if (ssl_) {
    std::make_shared<Session<ssl::stream<tcp::socket>>>(shared_from_this(), std::move(socket),
                                                        *ssl_)
        ->start();
  } else {
    std::make_shared<Session<tcp::socket>>(shared_from_this(), std::move(socket))->start();
  }
}

void HttpTransport::Impl::run() {
  run_started_ = true;
  if (stop_requested_) {
    run_done_ = true;
    return;
  }
  accept();
  std::vector<std::thread> extra;
  for (int i = 1; i < options_.num_io_threads; ++i) extra.emplace_back([this] { ioc_.run(); });
  ioc_.run();
  for (auto& t : extra) t.join();
  run_done_ = true;
}

void HttpTransport::Impl::stop() {
  stop_requested_ = true;
  net::post(ioc_, [self = shared_from_this()] {
    beast::error_code ignored;
    self->acceptor_.close(ignored);
    self->accept_backoff_.cancel();
    std::vector<std::shared_ptr<SessionBase>> open;
    {
      std::lock_guard lock(self->mutex_);
      for (const auto& [raw, weak] : self->sessions_) {
        if (auto s = weak.lock()) open.push_back(std::move(s));
      }
    }
    for (auto& s : open) s->close_from_outside();
    // Let the closes run, then end run() even if a route still holds a reply.
    net::post(self->ioc_, [self] { self->ioc_.stop(); });
  });
  if (!run_started_) return;
  while (!run_done_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

HttpTransport::HttpTransport(TransportOptions options, HttpHandler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(handler))) {}
HttpTransport::~HttpTransport() {
  impl_->stop();
  impl_->tear_down();
}
int HttpTransport::bind() {
  return impl_->bind();
}
void HttpTransport::run() {
  impl_->run();
}
void HttpTransport::stop() {
  impl_->stop();
}
size_t HttpTransport::num_connections() const {
  return impl_->num_connections();
}

}  // namespace pagoda::server
