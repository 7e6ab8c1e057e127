// Progress reporting: lines rate-limited by an injected clock, silence for quick tasks, and a bar
// that is redrawn in place and ended with a newline.
#include "util/progress.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace pagoda {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

struct Recorder {
  double now = 0;
  std::vector<std::string> lines;
  std::vector<std::string> bars;

  ProgressOptions options(bool terminal) {
    ProgressOptions o;
    o.terminal = terminal;
    o.clock = [this] { return now; };
    o.write_line = [this](std::string_view text) { lines.emplace_back(text); };
    o.write_bar = [this](std::string_view text) { bars.emplace_back(text); };
    return o;
  }
};

TEST(Progress, LinesAtMostOncePerInterval) {
  Recorder r;
  Progress p("loading weights", 10 * kGiB, r.options(false));
  r.now = 0.5;
  p.advance(kGiB);  // before first_report_s: nothing
  EXPECT_TRUE(r.lines.empty());
  r.now = 1.5;
  p.advance(3 * kGiB + kGiB / 2);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_EQ(r.lines[0], "loading weights: 45% (4.5/10.0 GiB)");
  r.now = 6.0;  // 4.5 s after the last line: still quiet
  p.advance(kGiB);
  EXPECT_EQ(r.lines.size(), 1u);
  r.now = 6.6;
  p.advance(kGiB);
  ASSERT_EQ(r.lines.size(), 2u);
  EXPECT_EQ(r.lines[1], "loading weights: 65% (6.5/10.0 GiB)");
  p.finish();
  EXPECT_EQ(r.lines.size(), 2u);  // lines need no closing
  EXPECT_TRUE(r.bars.empty());
}

TEST(Progress, QuickTaskPrintsNothing) {
  Recorder r;
  {
    Progress p("reserving KV cache", 100 << 20, r.options(true));
    r.now = 0.2;
    p.advance(100 << 20);
  }
  EXPECT_TRUE(r.lines.empty());
  EXPECT_TRUE(r.bars.empty());
}

TEST(Progress, NoTotalNoReport) {
  Recorder r;
  Progress p("reading", 0, r.options(false));
  r.now = 10;
  p.advance(5);
  EXPECT_TRUE(r.lines.empty());
  p.set_total(10);
  r.now = 20;
  p.advance(0);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_EQ(r.lines[0], "reading: 50% (5.0/10.0 B)");
}

TEST(Progress, BarRedrawsInPlaceAndEndsWithNewline) {
  Recorder r;
  Progress p("reserving KV cache", 4 * (1ull << 20), r.options(true));
  r.now = 1.0;
  p.advance(1 << 20);
  r.now = 1.05;  // within bar_interval_s: skipped
  p.advance(1 << 20);
  r.now = 1.2;
  p.advance(1 << 20);
  ASSERT_EQ(r.bars.size(), 2u);
  EXPECT_EQ(r.bars[0].front(), '\r');
  EXPECT_NE(r.bars[0].find(" 25% (1.0/4.0 MiB)"), std::string::npos) << r.bars[0];
  EXPECT_NE(r.bars[1].find("[######################        ]  75%"), std::string::npos)
      << r.bars[1];
  p.advance(1 << 20);
  p.finish();
  p.finish();  // idempotent
  ASSERT_EQ(r.bars.size(), 3u);
  EXPECT_NE(r.bars[2].find("100% (4.0/4.0 MiB)"), std::string::npos) << r.bars[2];
  EXPECT_EQ(r.bars[2].back(), '\n');
  EXPECT_TRUE(r.lines.empty());
}

TEST(Progress, CountsFromManyThreads) {
  Recorder r;
  Progress p("x", 8000, r.options(false));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) p.advance(1);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(p.done_bytes(), 8000u);
}

}  // namespace
}  // namespace pagoda
