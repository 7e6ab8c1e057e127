// http_requests_total's labels and text. The expected label values are vLLM's (its /metrics
// shows e.g. http_requests_total{handler="/v1/completions",method="POST",status="2xx"}), written
// out by hand.
#include "server/http_request_counter.h"

#include <gtest/gtest.h>

namespace pagoda::server {
namespace {

HttpRequestCounter counter() {
  return HttpRequestCounter({"/health", "/v1/completions", "/v1/models", "/v1/models/{model}"});
}

TEST(HttpRequestCounter, LabelsAreRoutesMethodsAndStatusClasses) {
  const HttpRequestCounter c = counter();
  EXPECT_EQ(c.handler_of("/health"), "/health");
  EXPECT_EQ(c.handler_of("/v1/models"), "/v1/models");
  EXPECT_EQ(c.handler_of("/v1/models/deepseek"), "/v1/models/{model}");
  EXPECT_EQ(c.handler_of("/v1/models/"), "none");
  EXPECT_EQ(c.handler_of("/v1/completionsx"), "none");
  EXPECT_EQ(c.handler_of("/wp-login.php"), "none");
  EXPECT_EQ(HttpRequestCounter::method_of("POST"), "POST");
  EXPECT_EQ(HttpRequestCounter::method_of("BREW"), "other");
  EXPECT_EQ(HttpRequestCounter::status_class_of(200), "2xx");
  EXPECT_EQ(HttpRequestCounter::status_class_of(404), "4xx");
  EXPECT_EQ(HttpRequestCounter::status_class_of(503), "5xx");
  EXPECT_EQ(HttpRequestCounter::status_class_of(99), "other");
}

TEST(HttpRequestCounter, RendersEverySeriesSeen) {
  HttpRequestCounter c = counter();
  EXPECT_EQ(c.render(),
            "# HELP http_requests_total HTTP requests answered, by route, method and status "
            "class.\n# TYPE http_requests_total counter\n");
  c.record("POST", "/v1/completions", 200);
  c.record("POST", "/v1/completions", 201);
  c.record("POST", "/v1/completions", 500);
  c.record("GET", "/nothing", 404);
  c.record("GET", "/else", 404);
  const std::string text = c.render();
  EXPECT_NE(text.find("http_requests_total{handler=\"/v1/completions\",method=\"POST\","
                      "status=\"2xx\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("http_requests_total{handler=\"/v1/completions\",method=\"POST\","
                      "status=\"5xx\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("http_requests_total{handler=\"none\",method=\"GET\",status=\"4xx\"} 2\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace pagoda::server
