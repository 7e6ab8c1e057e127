// CORS answers; see cors.h. The rules follow Starlette's CORSMiddleware, which vLLM uses.
#include "server/cors.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/ascii.h"
#include "util/error.h"

namespace pagoda::server {
namespace {

constexpr const char* kAllMethods[] = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
// Headers a browser may always send (the CORS safelist); allowed whatever the policy says.
constexpr const char* kSafelistedHeaders[] = {"accept", "accept-language", "content-language",
                                              "content-type"};

bool contains(const std::vector<std::string>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

bool any_origin(const CorsPolicy& p) {
  return contains(p.allowed_origins, "*");
}

bool origin_allowed(const CorsPolicy& p, std::string_view origin) {
  return any_origin(p) || contains(p.allowed_origins, origin);
}

std::vector<std::string> methods(const CorsPolicy& p) {
  if (contains(p.allowed_methods, "*")) return {std::begin(kAllMethods), std::end(kAllMethods)};
  std::vector<std::string> out;
  for (const std::string& m : p.allowed_methods) {
    std::string upper = m;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    out.push_back(upper);
  }
  return out;
}

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    std::string item = trim_ascii_space(s.substr(start, comma - start));
    if (!item.empty()) out.push_back(std::move(item));
    start = comma + 1;
  }
  return out;
}

}  // namespace

bool is_cors_preflight(const HttpRequest& request) {
  return request.method == "OPTIONS" && !request.header("Origin").empty() &&
         !request.header("Access-Control-Request-Method").empty();
}

HttpResponse answer_cors_preflight(const CorsPolicy& policy, const HttpRequest& request) {
  const std::string origin = request.header("Origin");
  const std::string method = request.header("Access-Control-Request-Method");
  const std::vector<std::string> allowed_methods = methods(policy);
  const bool any_header = contains(policy.allowed_headers, "*");

  std::vector<std::string> failures;
  if (!policy.enabled() || !origin_allowed(policy, origin)) failures.push_back("origin");
  if (!contains(allowed_methods, method)) failures.push_back("method");
  if (!any_header) {
    std::vector<std::string> allowed;
    for (const std::string& h : policy.allowed_headers) allowed.push_back(ascii_lower(h));
    for (const std::string& h : split_commas(request.header("Access-Control-Request-Headers"))) {
      const std::string name = ascii_lower(h);
      if (!contains(allowed, name) &&
          std::find(std::begin(kSafelistedHeaders), std::end(kSafelistedHeaders), name) ==
              std::end(kSafelistedHeaders)) {
        failures.push_back("headers");
        break;
      }
    }
  }

  HttpResponse response;
  response.content_type = "text/plain; charset=utf-8";
  if (!failures.empty()) {
    response.status = 400;
    response.body = fmt::format("Disallowed CORS {}", fmt::join(failures, ", "));
    response.error_kind = "cors_preflight_refused";
    return response;
  }
  response.status = 200;
  response.body = "OK";
  if (any_origin(policy) && !policy.allow_credentials) {
    response.headers.emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    response.headers.emplace_back("Access-Control-Allow-Origin", origin);
    response.headers.emplace_back("Vary", "Origin");
  }
  response.headers.emplace_back("Access-Control-Allow-Methods",
                                fmt::format("{}", fmt::join(allowed_methods, ", ")));
  if (any_header) {
    const std::string requested = request.header("Access-Control-Request-Headers");
    if (!requested.empty())
      response.headers.emplace_back("Access-Control-Allow-Headers", requested);
  } else {
    std::vector<std::string> names(std::begin(kSafelistedHeaders), std::end(kSafelistedHeaders));
    for (const std::string& h : policy.allowed_headers) {
      if (!contains(names, ascii_lower(h))) names.push_back(ascii_lower(h));
    }
    std::sort(names.begin(), names.end());
    response.headers.emplace_back("Access-Control-Allow-Headers",
                                  fmt::format("{}", fmt::join(names, ", ")));
  }
  if (policy.allow_credentials)
    response.headers.emplace_back("Access-Control-Allow-Credentials", "true");
  response.headers.emplace_back("Access-Control-Max-Age", "600");
  return response;
}

HttpHeaders cors_response_headers(const CorsPolicy& policy, std::string_view origin) {
  HttpHeaders headers;
  if (origin.empty() || !policy.enabled() || !origin_allowed(policy, origin)) return headers;
  if (any_origin(policy) && !policy.allow_credentials) {
    headers.emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    headers.emplace_back("Vary", "Origin");
  }
  if (policy.allow_credentials) headers.emplace_back("Access-Control-Allow-Credentials", "true");
  return headers;
}

std::vector<std::string> parse_cors_list(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& value : values) {
    const std::string v = trim_ascii_space(value);
    if (!v.empty() && v.front() == '[') {
      const nlohmann::json list = nlohmann::json::parse(v, nullptr, false);
      if (!list.is_array()) fail("not a JSON list of strings: {}", v);
      for (const nlohmann::json& item : list) {
        if (!item.is_string()) fail("not a JSON list of strings: {}", v);
        out.push_back(item.get<std::string>());
      }
    } else {
      // CLI11 takes '["a", "b"]' apart itself (its own list syntax) and leaves the JSON quotes.
      for (std::string& item : split_commas(v)) {
        if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') &&
            item.back() == item.front()) {
          item = item.substr(1, item.size() - 2);
        }
        if (!item.empty()) out.push_back(std::move(item));
      }
    }
  }
  return out;
}

}  // namespace pagoda::server
