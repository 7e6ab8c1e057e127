// libcurl GETs; see http_client.h.
#include "hub/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include <fmt/format.h>

#include "util/ascii.h"
#include "util/error.h"

namespace pagoda::hub {
namespace {

constexpr size_t kErrorBodyBytes = 4096;  // enough of an error page for a message
constexpr long kConnectTimeoutS = 20;
constexpr long kStallSeconds = 60;  // under 1 byte/s for this long: the transfer is cut

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

TransportError classify(CURLcode code) {
  switch (code) {
    case CURLE_OK:
      return TransportError::kNone;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
      return TransportError::kConnect;
    case CURLE_WRITE_ERROR:
      return TransportError::kWrite;
    case CURLE_ABORTED_BY_CALLBACK:
      return TransportError::kAborted;
    default:
      return TransportError::kInterrupted;
  }
}

}  // namespace

std::string HttpResult::header(const std::string& lower_case_name) const {
  const auto it = headers.find(lower_case_name);
  return it == headers.end() ? "" : it->second;
}

// State the curl callbacks share during one perform().
struct HttpClient::Transfer {
  CURL* curl = nullptr;
  const Sink* sink = nullptr;
  const std::atomic<bool>* cancel = nullptr;
  HttpResult* result = nullptr;

  static size_t on_header(char* data, size_t size, size_t count, void* self) {
    auto* t = static_cast<Transfer*>(self);
    const std::string line(data, size * count);
    if (line.rfind("HTTP/", 0) == 0) {
      t->result->headers.clear();  // a new response (after a redirect): its headers only
    } else if (const size_t colon = line.find(':'); colon != std::string::npos) {
      std::string value = line.substr(colon + 1);
      const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
      value.erase(value.begin(), std::find_if_not(value.begin(), value.end(), space));
      value.erase(std::find_if_not(value.rbegin(), value.rend(), space).base(), value.end());
      t->result->headers[ascii_lower(line.substr(0, colon))] = value;
    }
    return size * count;
  }

  static size_t on_body(char* data, size_t size, size_t count, void* self) {
    auto* t = static_cast<Transfer*>(self);
    const size_t n = size * count;
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    if (t->sink != nullptr && (status == 200 || status == 206)) {
      return (*t->sink)(std::string_view(data, n), status) ? n : 0;
    }
    std::string& body = t->result->body;
    if (t->sink == nullptr) {
      body.append(data, n);
    } else if (body.size() < kErrorBodyBytes) {
      body.append(data, std::min(n, kErrorBodyBytes - body.size()));
    }
    return n;
  }

  static int on_progress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(self);
    return t->cancel != nullptr && t->cancel->load() ? 1 : 0;
  }
};

HttpClient::HttpClient(std::string token, const std::atomic<bool>* cancel)
    : token_(std::move(token)), cancel_(cancel) {
  global_init();
  curl_ = curl_easy_init();
  if (curl_ == nullptr) fail("libcurl could not start a transfer (curl_easy_init failed)");
}

HttpClient::~HttpClient() {
  curl_easy_cleanup(static_cast<CURL*>(curl_));
}

HttpResult HttpClient::get(const std::string& url) {
  return perform(url, 0, nullptr);
}

HttpResult HttpClient::stream(const std::string& url, uint64_t offset, const Sink& sink) {
  return perform(url, offset, &sink);
}

HttpResult HttpClient::perform(const std::string& url, uint64_t offset, const Sink* sink) {
  CURL* curl = static_cast<CURL*>(curl_);
  curl_easy_reset(curl);  // keeps the open connections, forgets the last request's options
  HttpResult result;
  Transfer transfer{curl, sink, cancel_, &result};
  char error_buffer[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  const std::string authorization = "Authorization: Bearer " + token_;
  if (!token_.empty()) headers = curl_slist_append(headers, authorization.c_str());
  const std::string range = fmt::format("{}-", offset);

  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "pagoda (libcurl; huggingface_hub-compatible)");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, kConnectTimeoutS);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, kStallSeconds);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // worker threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Transfer::on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &Transfer::on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &transfer);
  if (offset > 0) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());

  const CURLcode code = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.status);
  result.error = classify(code);
  if (result.error != TransportError::kNone) {
    result.error_text = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
  }
  return result;
}

std::string url_escape(std::string_view text, bool keep_slash) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += c;
    } else {
      out += fmt::format("%{:02X}", u);
    }
  }
  return out;
}

}  // namespace pagoda::hub
