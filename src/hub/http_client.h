// HTTP(S) GETs over libcurl for the hub room: a small document read whole (the repo's file
// list), or a file streamed to a sink from a byte offset (a Range request, for resuming).
// Redirects are followed (the Hub sends LFS files to a CDN); the token goes out as
// `Authorization: Bearer`, which curl does not forward to another host on a redirect.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace pagoda::hub {

// What went wrong below HTTP, in the terms a caller decides on.
enum class TransportError {
  kNone,
  kConnect,      // no name resolution, no connection, TLS failed: the endpoint is unreachable
  kInterrupted,  // the connection broke or stalled mid-transfer: worth resuming
  kWrite,        // the sink refused the bytes (a full disk)
  kAborted,      // cancelled by the caller
};

struct HttpResult {
  TransportError error = TransportError::kNone;
  std::string error_text;                      // curl's message when error != kNone
  long status = 0;                             // of the last response (after redirects)
  std::map<std::string, std::string> headers;  // of the last response, names in lower case
  // The whole body of get(); for stream(), the start of the body of a response that was not
  // streamed (an error page).
  std::string body;
  std::string header(const std::string& lower_case_name) const;
};

class HttpClient {
 public:
  // `token`: sent as a bearer token when not empty. `cancel` (optional): set to stop every
  // transfer of this client early (kAborted).
  explicit HttpClient(std::string token, const std::atomic<bool>* cancel = nullptr);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpResult get(const std::string& url);

  // GETs `url` from byte `offset` (a Range request when > 0). Bodies of 200 and 206 responses
  // go to `sink` with the status (a server that ignores the range answers 200 with the whole
  // file); `sink` returns false to stop (then kWrite).
  using Sink = std::function<bool(std::string_view bytes, long status)>;
  HttpResult stream(const std::string& url, uint64_t offset, const Sink& sink);

 private:
  struct Transfer;
  HttpResult perform(const std::string& url, uint64_t offset, const Sink* sink);

  void* curl_;  // CURL*, reused so that connections stay open between requests
  std::string token_;
  const std::atomic<bool>* cancel_;
};

// `text` with every byte but unreserved ones (and '/' when `keep_slash`) %-escaped, for paths
// and revisions in URLs ("refs/pr/1" is one path segment in the Hub's API).
std::string url_escape(std::string_view text, bool keep_slash);

}  // namespace pagoda::hub
