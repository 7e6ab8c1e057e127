// The HTTP transport over loopback with a small handler of its own: framing, limits, deadlines,
// the connection cap, keep-alive and pipelining, streams to slow readers, TLS, CORS, the root
// path, and the attacks a front door must survive (slowloris, oversized chunked and compressed
// bodies, request smuggling). Every wait is bounded; nothing asserts a duration.
#include "server/http_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "server_test_util.h"
#include "util/error.h"

namespace pagoda::server::testing {
namespace {

// Routes of the test handler:
//   GET  /health         "ok" at once
//   POST /echo           the body back
//   GET  /hold           kept until release() (or the client leaves: counted in `gone`)
//   GET  /stream?N       N chunks of 64 KiB, written as fast as the transport takes them
struct TestTransport {
  explicit TestTransport(TransportOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    transport = std::make_unique<HttpTransport>(
        o, [this](HttpRequest req, ReplyPtr reply) { handle(std::move(req), std::move(reply)); });
    port = transport->bind();
    thread = std::thread([this] { transport->run(); });
  }
  ~TestTransport() {
    release();
    transport->stop();
    thread.join();
  }

  void handle(HttpRequest req, ReplyPtr reply) {
    HttpResponse r;
    r.content_type = "text/plain";
    if (req.path == "/health") {
      r.body = "ok";
      return reply->send(r);
    }
    if (req.path == "/echo") {
      r.body = req.body;
      return reply->send(r);
    }
    if (req.path == "/hold") {
      reply->on_close([this] { ++gone; });
      std::lock_guard lock(mutex);
      held.push_back(reply);
      return;
    }
    if (req.path == "/stream") {
      const int n = std::stoi(req.query);
      reply->on_close([this] { ++gone; });
      reply->begin_stream(200, "text/plain", {});
      std::thread([reply, n] {
        for (int i = 0; i < n; ++i) {
          if (!reply->write(std::string(64 << 10, static_cast<char>('a' + i % 26)))) return;
        }
        reply->end_stream();
      }).detach();
      return;
    }
    r.status = 404;
    r.body = "no";
    reply->send(r);
  }

  void release() {
    std::lock_guard lock(mutex);
    for (auto& reply : held) {
      HttpResponse r;
      r.body = "released";
      reply->send(r);
    }
    held.clear();
  }

  std::unique_ptr<HttpTransport> transport;
  int port = 0;
  std::thread thread;
  std::mutex mutex;
  std::vector<ReplyPtr> held;
  std::atomic<int> gone{0};
};

// True once the server has closed the connection (a read sees end of file) within 5 s;
// whatever else arrives first is skipped.
bool closed_by_server(RawSocket& sock) {
  return sock.wait_for_close(std::chrono::seconds(5));
}

// Sends the default logger's info lines into `out` until end() or the end of the scope.
class LogCapture {
 public:
  explicit LogCapture(std::ostringstream& out) : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>(
        "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { end(); }
  void end() {
    if (previous_) spdlog::set_default_logger(std::move(previous_));
    previous_.reset();
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
};

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

std::string get(const std::string& path, const std::string& extra = {}) {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
}

TEST(HttpTransport, PipelinedRequestsAreAnsweredInOrder) {
  TestTransport t;
  RawSocket sock(t.port);
  const std::string post = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nsecond";
  ASSERT_TRUE(sock.send_all(get("/health") + post + get("/nothing") +
                            get("/health", "Connection: close\r\n")));
  std::string all;
  for (std::string part; !(part = sock.read_until("\x01never")).empty();) all += part;
  const size_t first = all.find("\r\n\r\nok");
  const size_t second = all.find("\r\n\r\nsecon");
  const size_t third = all.find("HTTP/1.1 404");
  const size_t fourth = all.rfind("\r\n\r\nok");
  ASSERT_NE(first, std::string::npos) << all;
  ASSERT_NE(second, std::string::npos) << all;
  ASSERT_NE(third, std::string::npos) << all;
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
  EXPECT_LT(third, fourth);
  EXPECT_NE(all.find("Connection: close"), std::string::npos);
}

TEST(HttpTransport, AmbiguousFramingIsRefusedAndTheConnectionClosed) {
  TestTransport t;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Content-Length and Transfer-Encoding",
       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
       "0\r\n\r\n"},
      {"Transfer-Encoding then Content-Length",
       "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
       "0\r\n\r\n"},
      {"two different Content-Lengths",
       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"},
      {"a negative Content-Length", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"},
      {"a transfer coding other than chunked",
       "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nxxxx"},
      {"a garbage request line", "HELLO\r\n\r\n"},
  };
  for (const auto& [why, request] : cases) {
    RawSocket sock(t.port);
    ASSERT_TRUE(sock.send_all(request)) << why;
    const std::string response = sock.read_until("\r\n\r\n");
    EXPECT_EQ(status_of(response), 400) << why << ": " << response;
    EXPECT_NE(response.find("Connection: close"), std::string::npos) << why;
    EXPECT_TRUE(closed_by_server(sock)) << why;
  }
}

TEST(HttpTransport, BodyLimitHoldsForEveryFraming) {
  TransportOptions o;
  o.max_body_bytes = 64 << 10;
  TestTransport t(o);
  {  // Declared too large: refused before a byte of the body is sent.
    RawSocket sock(t.port);
    sock.send_all("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 200000000\r\n\r\n");
    EXPECT_EQ(status_of(sock.read_until("\r\n\r\n")), 413);
  }
  {  // Chunked, growing past the limit: refused once it does, not after 200 MB.
    RawSocket sock(t.port);
    sock.send_all("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = fmt::format("{:x}\r\n{}\r\n", 16 << 10, std::string(16 << 10, 'x'));
    for (int i = 0; i < 200; ++i) {
      if (!sock.send_all(chunk)) break;  // the server answered and closed
    }
    const std::string response = sock.read_until("\r\n\r\n");
    EXPECT_EQ(status_of(response), 413) << response;
  }
  {  // Chunked within the limit: the whole body arrives.
    auto c = client(t.port);
    const std::string body(40 << 10, 'y');
    auto r = c->Post(
        "/echo", body.size(),
        [&](size_t offset, size_t length, httplib::DataSink& sink) {
          sink.write(body.data() + offset, std::min<size_t>(length, 1000));
          return true;
        },
        "text/plain");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, body);
  }
  {  // Compressed: refused, whatever it would inflate to.
    RawSocket sock(t.port);
    sock.send_all(
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n"
        "\x1f\x8b\x08\x00");
    const std::string response = sock.read_until("}}");
    EXPECT_EQ(status_of(response), 415) << response;
    EXPECT_NE(response.find("\"code\":\"unsupported_content_encoding\""), std::string::npos)
        << response;
  }
  {  // Headers past their limit.
    RawSocket sock(t.port);
    sock.send_all("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(100 << 10, 'h') +
                  "\r\n\r\n");
    EXPECT_EQ(status_of(sock.read_until("\r\n\r\n")), 431);
  }
}

TEST(HttpTransport, TheKeyIsCheckedBeforeTheBodyIsRead) {
  TransportOptions o;
  o.api_key = "sesame";
  TestTransport t(o);
  RawSocket sock(t.port);
  // A body that never comes: the 401 must not wait for it.
  sock.send_all("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
  EXPECT_EQ(status_of(sock.read_until("\r\n\r\n")), 401);
  auto c = client(t.port, "sesame");
  auto r = c->Post("/echo", "hi", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "hi");
  auto open = client(t.port)->Get("/health");
  ASSERT_TRUE(open);
  EXPECT_EQ(open->status, 200) << "/health needs no key";
}

TEST(HttpTransport, SlowHeadersAndIdleConnectionsAreClosed) {
  TransportOptions o;
  o.header_timeout = std::chrono::milliseconds(300);
  o.keep_alive_timeout = std::chrono::milliseconds(300);
  TestTransport t(o);
  RawSocket slow(t.port);
  slow.send_all("GET /health HTTP/1.1\r\nHost: x\r\n");  // …and nothing more
  EXPECT_TRUE(closed_by_server(slow));
  RawSocket idle(t.port);
  idle.send_all(get("/health"));
  EXPECT_NE(idle.read_until("ok").find("ok"), std::string::npos);
  EXPECT_TRUE(closed_by_server(idle)) << "an idle keep-alive connection stays open";
  EXPECT_TRUE(
      eventually([&] { return t.transport->num_connections() == 0; }, std::chrono::seconds(5)));
}

// Hundreds of connections that send their headers a byte at a time hold no thread: /health
// is answered on every probe while they trickle.
TEST(HttpTransport, HealthAnswersDuringASlowloris) {
  TestTransport t;
  std::vector<std::unique_ptr<RawSocket>> attackers;
  for (int i = 0; i < 300; ++i) {
    attackers.push_back(std::make_unique<RawSocket>(t.port));
    ASSERT_TRUE(attackers.back()->ok());
    attackers.back()->send_all("GET /health HTTP/1.1\r\n");
  }
  int answered = 0;
  for (int probe = 0; probe < 10; ++probe) {
    for (auto& a : attackers) a->send_all("X");  // keep trickling
    auto c = client(t.port);
    c->set_read_timeout(5);
    auto r = c->Get("/health");
    if (r && r->status == 200) ++answered;
  }
  EXPECT_EQ(answered, 10);
  EXPECT_GE(t.transport->num_connections(), 300u);
}

TEST(HttpTransport, AtTheCapTheLongestIdleGoesAndBusyConnectionsRefuseNewOnes) {
  TransportOptions o;
  o.max_connections = 8;
  TestTransport t(o);
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(std::make_unique<RawSocket>(t.port));
  EXPECT_TRUE(
      eventually([&] { return t.transport->num_connections() == 8; }, std::chrono::seconds(5)));
  // A new client is served: an idle connection makes room.
  auto r = client(t.port)->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(closed_by_server(*idle.front())) << "the oldest idle connection was closed";
  idle.clear();
  EXPECT_TRUE(
      eventually([&] { return t.transport->num_connections() == 0; }, std::chrono::seconds(5)));

  // Every connection busy with a request: a new one is refused at once with 503.
  std::vector<std::unique_ptr<RawSocket>> busy;
  for (int i = 0; i < 8; ++i) {
    busy.push_back(std::make_unique<RawSocket>(t.port));
    busy.back()->send_all(get("/hold"));
  }
  EXPECT_TRUE(eventually(
      [&] {
        std::lock_guard lock(t.mutex);
        return t.held.size() == 8;
      },
      std::chrono::seconds(5)));
  RawSocket refused(t.port);
  EXPECT_EQ(status_of(refused.read_until("\r\n\r\n")), 503);
  t.release();
  for (auto& b : busy) EXPECT_NE(b->read_until("released").find("released"), std::string::npos);
}

// --allowed-clients: a client outside the list is answered 403 before anything it sends is read
// (/health too), and one inside it is served as usual.
TEST(HttpTransport, ClientsOutsideTheAllowListGet403BeforeAnythingIsRead) {
  {
    TransportOptions o;
    o.allowed_clients = ClientAllowList::parse({"10.0.0.0/8,::1"});
    TestTransport t(o);
    std::ostringstream log;
    LogCapture capture(log);
    RawSocket silent(t.port);  // sends nothing: the answer needs no request
    const std::string response = silent.read_until("}");
    EXPECT_EQ(status_of(response), 403) << response;
    const size_t body = response.find("\r\n\r\n");
    ASSERT_NE(body, std::string::npos) << response;
    const json error = json::parse(response.substr(body + 4))["error"];
    EXPECT_EQ(error["code"], "client_not_allowed");
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_TRUE(closed_by_server(silent));
    RawSocket eager(t.port);  // a request already sent does not change the answer
    eager.send_all(get("/health"));
    EXPECT_EQ(status_of(eager.read_until("\r\n\r\n")), 403);
    auto r = client(t.port)->Get("/health");
    EXPECT_TRUE(!r || r->status == 403) << r->status;
    EXPECT_EQ(t.transport->num_connections(), 0u);
    capture.end();
    EXPECT_NE(log.str().find("connection from 127.0.0.1 refused"), std::string::npos) << log.str();
  }
  TransportOptions o;
  o.allowed_clients = ClientAllowList::parse({"::1", "127.0.0.0/8"});
  TestTransport t(o);
  auto r = client(t.port)->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
}

TEST(HttpTransport, AClientThatHangsUpIsNoticedWhileItsRequestWaits) {
  TestTransport t;
  {
    RawSocket sock(t.port);
    sock.send_all(get("/hold"));
    EXPECT_TRUE(eventually(
        [&] {
          std::lock_guard lock(t.mutex);
          return t.held.size() == 1;
        },
        std::chrono::seconds(5)));
  }
  EXPECT_TRUE(eventually([&] { return t.gone == 1; }, std::chrono::seconds(5)));
  std::lock_guard lock(t.mutex);
  EXPECT_TRUE(t.held.front()->closed());
  EXPECT_FALSE(t.held.front()->write("late")) << "writes after the close are refused";
}

// A reader that does not read holds memory up to the bound, then loses its connection; the
// writer never blocks and other clients are served meanwhile.
TEST(HttpTransport, ASlowStreamReaderNeitherBlocksTheWriterNorOtherClients) {
  TransportOptions o;
  o.max_pending_stream_bytes = 4 << 20;
  TestTransport t(o);
  RawSocket stalled(t.port);
  stalled.send_all(get("/stream?1000"));  // 64 MB, never read
  auto c = client(t.port);
  for (int i = 0; i < 5; ++i) {
    auto r = c->Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_TRUE(eventually([&] { return t.gone == 1; }, std::chrono::seconds(10)))
      << "the stalled stream is closed once its unsent output passes the bound";

  // A reader that keeps up gets every chunk, in order, decoded from chunked framing.
  auto r = client(t.port)->Get("/stream?40");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->body.size(), size_t{40} * (64 << 10));
  for (int i = 0; i < 40; ++i) ASSERT_EQ(r->body[size_t(i) * (64 << 10)], 'a' + i % 26) << i;
}

// Beast's parser bounds the head and the body but not a chunk-size line: the input buffer is
// bounded instead, so an endless one is refused, not buffered.
TEST(HttpTransport, AnEndlessChunkSizeLineIsRefused) {
  TestTransport t;
  RawSocket sock(t.port);
  sock.send_all("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;");
  const std::string filler(64 << 10, 'a');
  for (int i = 0; i < 64; ++i) {
    if (!sock.send_all(filler)) break;  // refused and closed
  }
  const std::string response = sock.read_until("\r\n\r\n");
  EXPECT_EQ(status_of(response), 400) << response;
}

// A connection still sending its body can be evicted at the cap: slow bodies cannot hold it.
TEST(HttpTransport, SlowBodiesDoNotHoldTheCap) {
  TransportOptions o;
  o.max_connections = 4;
  TestTransport t(o);
  std::vector<std::unique_ptr<RawSocket>> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(std::make_unique<RawSocket>(t.port));
    slow.back()->send_all("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nab");
  }
  EXPECT_TRUE(
      eventually([&] { return t.transport->num_connections() == 4; }, std::chrono::seconds(5)));
  auto r = client(t.port)->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// Bytes already buffered (a stray CRLF after the request) do not blind the server to a hang-up.
TEST(HttpTransport, AHangUpIsNoticedWithBytesAlreadyBuffered) {
  TestTransport t;
  {
    RawSocket sock(t.port);
    sock.send_all(get("/hold") + "\r\n");
    EXPECT_TRUE(eventually(
        [&] {
          std::lock_guard lock(t.mutex);
          return t.held.size() == 1;
        },
        std::chrono::seconds(5)));
  }
  EXPECT_TRUE(eventually([&] { return t.gone == 1; }, std::chrono::seconds(5)));
}

TEST(HttpTransport, CorsPreflightAndResponses) {
  TransportOptions o;
  o.cors.allowed_origins = {"https://app.example"};
  o.api_key = "k";
  TestTransport t(o);
  {  // A preflight needs no key (browsers send none) and names what is allowed.
    RawSocket sock(t.port);
    sock.send_all(
        "OPTIONS /echo HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\n"
        "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization\r\n"
        "\r\n");
    const std::string response = sock.read_until("\r\n\r\n");
    EXPECT_EQ(status_of(response), 200) << response;
    EXPECT_NE(response.find("Access-Control-Allow-Origin: https://app.example"), std::string::npos);
    EXPECT_NE(response.find("Access-Control-Allow-Headers: authorization"), std::string::npos);
  }
  {
    RawSocket sock(t.port);
    sock.send_all(
        "OPTIONS /echo HTTP/1.1\r\nHost: x\r\nOrigin: https://evil.example\r\n"
        "Access-Control-Request-Method: POST\r\n\r\n");
    const std::string response = sock.read_until("origin");
    EXPECT_EQ(status_of(response), 400) << response;
    EXPECT_EQ(response.find("Access-Control-Allow-Origin"), std::string::npos);
  }
  auto c = client(t.port, "k");
  auto r = c->Post("/echo", {{"Origin", "https://app.example"}}, "x", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  r = c->Post("/echo", {{"Origin", "https://evil.example"}}, "x", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST(HttpTransport, RootPathRequestIdAndHttp10) {
  TransportOptions o;
  o.root_path = "/pagoda";
  TestTransport t(o);
  auto c = client(t.port);
  auto r = c->Get("/pagoda/health", {{"X-Request-Id", "abc-123"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("X-Request-Id"), "abc-123");
  r = c->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << "a proxy that strips the prefix still works";
  r = c->Get("/pagodax/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = c->Get("/health", {{"X-Request-Id", "bad id with spaces"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("X-Request-Id").size(), 16u) << "replaced by a fresh id";

  RawSocket old(t.port);
  old.send_all("GET /health HTTP/1.0\r\n\r\n");
  const std::string response = old.read_until("ok");
  EXPECT_EQ(status_of(response), 200);
  EXPECT_TRUE(closed_by_server(old)) << "HTTP/1.0 without keep-alive closes";
}

TEST(HttpTransport, ExpectContinueIsAnswered) {
  TestTransport t;
  RawSocket sock(t.port);
  sock.send_all(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_NE(sock.read_until("\r\n\r\n").find("100 Continue"), std::string::npos);
  sock.send_all("abc");
  EXPECT_NE(sock.read_until("abc").find("abc"), std::string::npos);
}

TEST(HttpTransport, ErrorsAreLoggedWithTheRequestIdAndNothingElseOfTheRequest) {
  std::ostringstream log;
  LogCapture capture(log);
  {
    TransportOptions o;
    o.api_key = "the-real-key";
    TestTransport t(o);
    auto c = client(t.port, "a-wrong-key");
    auto r = c->Post("/echo", {{"X-Request-Id", "req-77"}}, "secret prompt", "text/plain");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
  }
  capture.end();
  const std::string text = log.str();
  EXPECT_NE(text.find("req-77"), std::string::npos) << text;
  EXPECT_NE(text.find("401"), std::string::npos) << text;
  EXPECT_EQ(text.find("secret prompt"), std::string::npos) << text;
  EXPECT_EQ(text.find("a-wrong-key"), std::string::npos) << text;
  EXPECT_EQ(text.find("the-real-key"), std::string::npos) << text;
}

// A burst of bad requests cannot flood the log: lines past the budget are counted, not written.
TEST(HttpTransport, ErrorLinesHaveABudget) {
  std::ostringstream log;
  LogCapture capture(log);
  {
    TestTransport t;
    auto c = client(t.port);
    for (int i = 0; i < 400; ++i) {
      auto r = c->Get("/nothing");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 404);
    }
  }
  capture.end();
  const std::string text = log.str();
  const auto lines = std::count(text.begin(), text.end(), '\n');
  EXPECT_GE(lines, 50);
  EXPECT_LT(lines, 400) << "every one of 400 errors was logged";
}

TEST(HttpTransport, Https) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("pagoda_tls_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-keyout " +
      key + " -out " + cert + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "the openssl command is not available to make a certificate";
  }
  TransportOptions o;
  o.ssl_certfile = cert;
  o.ssl_keyfile = key;
  {
    TestTransport t(o);
    httplib::SSLClient c("127.0.0.1", t.port);
    c.enable_server_certificate_verification(false);
    auto r = c.Post("/echo", "over tls", "text/plain");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->body, "over tls");
    // Plain HTTP to the HTTPS port gets nowhere (and does not hurt the server).
    auto plain = client(t.port);
    plain->set_read_timeout(2);
    auto p = plain->Get("/health");
    EXPECT_TRUE(!p || p->status != 200);
    auto again = c.Get("/health");
    ASSERT_TRUE(again);
    EXPECT_EQ(again->status, 200);
  }
  o.ssl_certfile = (dir / "missing.pem").string();
  HttpTransport broken(o, [](HttpRequest, ReplyPtr) {});
  try {
    broken.bind();
    FAIL() << "a missing certificate must fail the start";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.pem"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::server::testing
