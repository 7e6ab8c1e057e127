// CORS answers as Starlette's CORSMiddleware gives them (vLLM's), without a server.
#include "server/cors.h"

#include <gtest/gtest.h>

#include "util/error.h"

namespace pagoda::server {
namespace {

HttpRequest preflight(const std::string& origin, const std::string& method,
                      const std::string& headers = {}) {
  HttpRequest r;
  r.method = "OPTIONS";
  r.headers = {{"Origin", origin}, {"Access-Control-Request-Method", method}};
  if (!headers.empty()) r.headers.emplace_back("Access-Control-Request-Headers", headers);
  return r;
}

std::string header(const HttpHeaders& headers, const std::string& name) {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return {};
}

TEST(Cors, NothingIsAllowedByDefault) {
  const CorsPolicy policy;
  EXPECT_FALSE(policy.enabled());
  EXPECT_TRUE(cors_response_headers(policy, "https://a.example").empty());
  EXPECT_EQ(answer_cors_preflight(policy, preflight("https://a.example", "POST")).status, 400);
}

TEST(Cors, AnyOriginWithoutCredentialsIsAStar) {
  CorsPolicy policy;
  policy.allowed_origins = {"*"};
  const HttpResponse r = answer_cors_preflight(
      policy, preflight("https://a.example", "POST", "Authorization, Content-Type"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(header(r.headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(r.headers, "Access-Control-Allow-Headers"), "Authorization, Content-Type");
  EXPECT_EQ(header(r.headers, "Access-Control-Allow-Methods"),
            "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  EXPECT_EQ(
      header(cors_response_headers(policy, "https://a.example"), "Access-Control-Allow-Origin"),
      "*");
  // With credentials a star is not allowed by browsers: the origin is echoed instead.
  policy.allow_credentials = true;
  const HttpHeaders h = cors_response_headers(policy, "https://a.example");
  EXPECT_EQ(header(h, "Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(header(h, "Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(header(h, "Vary"), "Origin");
}

TEST(Cors, ListedOriginsMethodsAndHeaders) {
  CorsPolicy policy;
  policy.allowed_origins = {"https://a.example"};
  policy.allowed_methods = {"get", "POST"};
  policy.allowed_headers = {"Authorization"};
  EXPECT_EQ(
      answer_cors_preflight(policy, preflight("https://a.example", "POST", "authorization")).status,
      200);
  EXPECT_EQ(
      answer_cors_preflight(policy, preflight("https://a.example", "GET", "content-type")).status,
      200)
      << "safelisted headers are always allowed";
  const HttpResponse bad =
      answer_cors_preflight(policy, preflight("https://b.example", "DELETE", "x-custom"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body, "Disallowed CORS origin, method, headers");
  EXPECT_TRUE(cors_response_headers(policy, "https://b.example").empty());
}

TEST(Cors, ListsAsVllmTakesThem) {
  EXPECT_EQ(parse_cors_list({R"(["https://a", "https://b"])"}),
            (std::vector<std::string>{"https://a", "https://b"}));
  EXPECT_EQ(parse_cors_list({"https://a, https://b", "https://c"}),
            (std::vector<std::string>{"https://a", "https://b", "https://c"}));
  // What CLI11 leaves of '["*", "https://a"]' after taking its brackets apart.
  EXPECT_EQ(parse_cors_list({R"("*")", R"("https://a")"}),
            (std::vector<std::string>{"*", "https://a"}));
  EXPECT_THROW(parse_cors_list({R"(["a", 5])"}), Error);
  EXPECT_THROW(parse_cors_list({"[not json"}), Error);
}

}  // namespace
}  // namespace pagoda::server
