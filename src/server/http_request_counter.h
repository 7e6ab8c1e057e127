// `http_requests_total{handler, method, status}`: every HTTP answer the server gives, counted in
// the shape that vLLM's /metrics has it (vLLM counts through prometheus-fastapi-instrumentator):
// the route as `handler` ("none" for paths that match no route), the method, and the status
// grouped by its first digit ("2xx", "4xx", "5xx"). So an existing vLLM alert or panel on error
// rates works unchanged, and the label values stay few whatever clients send. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace pagoda::server {

class HttpRequestCounter {
 public:
  // `routes`: the exact paths that are their own handler label; a route written "/prefix/{name}"
  // stands for every path under /prefix/.
  explicit HttpRequestCounter(std::vector<std::string> routes);

  void record(std::string_view method, std::string_view path, int status);
  // The counter in the Prometheus text format, HELP and TYPE lines first; every series seen so
  // far, in a fixed order.
  std::string render() const;

  // The label values a request gets; public for the tests.
  std::string handler_of(std::string_view path) const;
  static std::string method_of(std::string_view method);
  static std::string status_class_of(int status);

 private:
  std::vector<std::string> exact_, prefixes_, prefix_labels_;
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> counts_;
};

}  // namespace pagoda::server
