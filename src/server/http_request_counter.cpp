// Per-route, per-method, per-status-class request counts for /metrics; see
// http_request_counter.h.
#include "server/http_request_counter.h"

#include <array>

#include <fmt/format.h>

namespace pagoda::server {

HttpRequestCounter::HttpRequestCounter(std::vector<std::string> routes) {
  for (std::string& route : routes) {
    const size_t brace = route.find("/{");
    if (brace == std::string::npos) {
      exact_.push_back(std::move(route));
    } else {
      prefixes_.push_back(route.substr(0, brace + 1));
      prefix_labels_.push_back(std::move(route));
    }
  }
}

std::string HttpRequestCounter::handler_of(std::string_view path) const {
  for (const std::string& route : exact_) {
    if (path == route) return route;
  }
  for (size_t i = 0; i < prefixes_.size(); ++i) {
    if (path.size() > prefixes_[i].size() && path.substr(0, prefixes_[i].size()) == prefixes_[i])
      return prefix_labels_[i];
  }
  // Unknown paths share one label, so that a scanner trying thousands of paths cannot create
  // thousands of series.
  return "none";
}

std::string HttpRequestCounter::method_of(std::string_view method) {
  static constexpr std::array<std::string_view, 7> kKnown = {"GET",    "HEAD",    "POST", "PUT",
                                                             "DELETE", "OPTIONS", "PATCH"};
  for (std::string_view known : kKnown) {
    if (method == known) return std::string(known);
  }
  return "other";
}

std::string HttpRequestCounter::status_class_of(int status) {
  if (status < 100 || status > 599) return "other";
  return fmt::format("{}xx", status / 100);
}

void HttpRequestCounter::record(std::string_view method, std::string_view path, int status) {
  auto key = std::make_tuple(handler_of(path), method_of(method), status_class_of(status));
  std::lock_guard lock(mutex_);
  ++counts_[std::move(key)];
}

std::string HttpRequestCounter::render() const {
  std::string out =
      "# HELP http_requests_total HTTP requests answered, by route, method and status class.\n"
      "# TYPE http_requests_total counter\n";
  std::lock_guard lock(mutex_);
  for (const auto& [key, count] : counts_) {
    const auto& [handler, method, status] = key;
    // The labels are route names, method names and status classes: nothing to escape.
    out += fmt::format("http_requests_total{{handler=\"{}\",method=\"{}\",status=\"{}\"}} {}\n",
                       handler, method, status, count);
  }
  return out;
}

}  // namespace pagoda::server
