// What the HTTP transport (http_transport.h) hands the routes and takes back: a whole request
// (headers and a body already read within the limits), and a Reply through which the routes
// answer — at once, later from another thread, or as a stream of chunks. The routes never see a
// socket, and nothing they do can block the threads that do the network.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", …
  std::string path;    // without the query and without --root-path
  std::string query;   // after '?', undecoded
  HttpHeaders headers;
  std::string body;
  // The client's X-Request-Id when it sent a usable one, else a fresh one; echoed in the
  // response and named in the log line of every 4xx/5xx.
  std::string request_id;
  std::string remote;  // "address:port", for logs

  // The value of the first header called `name` (any case), or "".
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;
  // For the log line of an error response: what kind of error, never the request's content.
  std::string error_kind;
};

// One request's answer. Every method may be called from any thread; calls after the connection
// closed are ignored. A reply is either sent whole (send) or streamed (begin_stream, write…,
// end_stream); a reply dropped without either gets a 500.
class Reply {
 public:
  virtual ~Reply() = default;
  virtual void send(HttpResponse response) = 0;
  virtual void begin_stream(int status, std::string content_type, HttpHeaders headers) = 0;
  // Queues bytes for the client and returns at once: a slow reader holds memory (up to a bound,
  // past which the connection is closed), never the caller. False once the connection closed.
  virtual bool write(std::string bytes) = 0;
  virtual void end_stream() = 0;
  // `callback` runs once, on a transport thread, if the connection closes (the client hung up,
  // a write failed, the server stops) before the reply completed; at once if it already has.
  virtual void on_close(std::function<void()> callback) = 0;
  virtual bool closed() const = 0;
};

using ReplyPtr = std::shared_ptr<Reply>;
// Called on a transport thread for each complete request: it must return quickly, so work that
// takes time (parsing a large body, tokenizing, waiting for the engine) goes elsewhere.
using HttpHandler = std::function<void(HttpRequest request, ReplyPtr reply)>;

}  // namespace pagoda::server
