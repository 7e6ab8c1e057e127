// Grammar engine cost at DeepSeek vocabulary sizes: time to fill one token mask (median and p99
// per generated token, cache warm) for five JSON schemas of growing complexity, at 32k and
// 129,280 tokens, against the naive mask (every token's bytes run through the automaton) in the
// same run, as a ratio; plus compile time and the cold cost of the first walk (the per-state
// classification the cache then keeps).
//   bench_grammar [tokenizer.json] [walks=4] [steps=60]
// Without a tokenizer.json the vocabulary is synthetic: the 256 bytes, then random words,
// space-prefixed words, digit runs, JSON punctuation clusters and multi-byte characters.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace {

using pagoda::grammar::GrammarCompiler;
using pagoda::grammar::GrammarMatcher;
using pagoda::grammar::Vocabulary;
using Clock = std::chrono::steady_clock;

constexpr size_t kDeepSeekVocab = 129280;

std::vector<std::string> synthetic_tokens(size_t n) {
  std::mt19937 rng(5);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ";
  const char* const punct[] = {"\"",  "\":",  "\":\"", "\",\"", "{\"", "\"}", "},",
                               "],",  "[{",   ",\"",   ": ",    ", ",  "\n",  "  ",
                               "\\n", "\\\"", "()",    "->",    "::",  "//"};
  const char* const multibyte[] = {"é", "ü", "中", "文", "の", "ы", "—", "€", "😀"};
  while (tokens.size() < n) {
    std::string t;
    switch (rng() % 8) {
      case 0:
        t = punct[rng() % std::size(punct)];
        t += punct[rng() % std::size(punct)];
        break;
      case 1:
        for (int i = 0, len = 1 + rng() % 5; i < len; ++i) t += static_cast<char>('0' + rng() % 10);
        break;
      case 2:
        for (int i = 0, len = 1 + rng() % 3; i < len; ++i)
          t += multibyte[rng() % std::size(multibyte)];
        break;
      default: {
        if (rng() % 2) t.push_back(' ');
        for (int i = 0, len = 2 + rng() % 9; i < len; ++i)
          t += letters[rng() % (i == 0 ? letters.size() : 26)];
        if (rng() % 6 == 0) t += punct[rng() % std::size(punct)];
      }
    }
    tokens.push_back(std::move(t));
  }
  return tokens;
}

std::vector<std::string> tokenizer_tokens(const char* path) {
  std::ifstream in(path);
  const auto json = nlohmann::json::parse(in);
  std::vector<std::string> tokens(kDeepSeekVocab);
  for (const auto& [piece, id] : json["model"]["vocab"].items()) {
    std::string bytes;
    size_t pos = 0;
    while (pos < piece.size()) {
      const int b = pagoda::byte_level_byte(pagoda::next_code_point(piece, pos));
      bytes += static_cast<char>(b < 0 ? '?' : b);
    }
    if (id.get<size_t>() < tokens.size()) tokens[id.get<size_t>()] = bytes;
  }
  return tokens;  // added (special) tokens keep empty bytes: never allowed
}

const char* const kSchemas[] = {
    // 1. a flat object
    R"({"type":"object","properties":{"answer":{"type":"string"},"confidence":{"type":"number"}},"required":["answer","confidence"],"additionalProperties":false})",
    // 2. a tool call with enums and bounds
    R"({"type":"object","properties":{"location":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14},"hourly":{"type":"boolean"}},"required":["location","unit","days","hourly"],"additionalProperties":false})",
    // 3. nested objects and arrays, optional members
    R"({"type":"object","properties":{"user":{"type":"object","properties":{"name":{"type":"string","maxLength":40},"email":{"type":"string","format":"email"},"age":{"type":"integer","minimum":0}},"required":["name","email"]},"tags":{"type":"array","items":{"type":"string"},"maxItems":8},"created":{"type":"string","format":"date-time"}},"required":["user","tags","created"]})",
    // 4. a pydantic model: $defs, anyOf with null, enums, lists of sub-models
    R"({"$defs":{"Item":{"properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-\\d{4}$"},"qty":{"type":"integer","minimum":1,"maximum":999},"price":{"type":"number","minimum":0}},"required":["sku","qty","price"],"type":"object"},"Status":{"enum":["new","paid","shipped","cancelled"],"type":"string"}},"properties":{"id":{"type":"string","format":"uuid"},"status":{"$ref":"#/$defs/Status"},"items":{"items":{"$ref":"#/$defs/Item"},"type":"array","minItems":1},"note":{"anyOf":[{"type":"string"},{"type":"null"}]},"shipping":{"anyOf":[{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string","pattern":"^\\d{5}$"}},"required":["street","city","zip"]},{"type":"null"}]}},"required":["id","status","items","note","shipping"],"type":"object"})",
    // 5. recursive: a tree of any-JSON payloads
    R"({"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"attrs":{"type":"object","additionalProperties":{"type":["string","number","boolean","null"]}},"payload":{},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name","children"]}},"$ref":"#/$defs/node"})",
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void run(const std::vector<std::string>& all_tokens, size_t vocab_size, int walks, int steps) {
  std::vector<std::string> tokens(all_tokens.begin(),
                                  all_tokens.begin() + static_cast<long>(vocab_size));
  tokens.emplace_back();  // the stop token
  const auto stop = static_cast<int32_t>(tokens.size() - 1);
  auto vocab = std::make_shared<const Vocabulary>(std::move(tokens), std::vector<int32_t>{stop});
  std::printf("\nvocabulary %zu tokens\n", vocab->size());
  std::printf("%-8s %10s %12s %10s %10s %12s %8s %14s\n", "schema", "compile_ms", "cold_walk_ms",
              "mask_p50_us", "mask_p99_us", "naive_p50_us", "ratio", "cached_states");
  for (size_t s = 0; s < std::size(kSchemas); ++s) {
    GrammarCompiler compiler(vocab);
    const auto t0 = Clock::now();
    const auto grammar = compiler.json_schema(kSchemas[s]);
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

    // The token walks, drawn once (the first pass also warms the mask cache).
    std::mt19937 rng(static_cast<unsigned>(s));
    std::vector<std::vector<int32_t>> paths;
    std::vector<uint32_t> mask(vocab->mask_words());
    const auto t1 = Clock::now();
    for (int w = 0; w < walks; ++w) {
      GrammarMatcher matcher(grammar);
      std::vector<int32_t> path;
      for (int step = 0; step < steps && !matcher.is_terminated(); ++step) {
        matcher.fill_next_token_bitmask(mask);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < static_cast<int32_t>(vocab->size()); ++id) {
          if ((mask[id >> 5] >> (id & 31)) & 1) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        const bool can_stop = std::find(allowed.begin(), allowed.end(), stop) != allowed.end();
        const int32_t next = can_stop && rng() % 2 ? stop : allowed[rng() % allowed.size()];
        matcher.accept_token(next);
        path.push_back(next);
      }
      paths.push_back(std::move(path));
    }
    const double cold_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();

    std::vector<double> mask_us;
    std::vector<double> naive_us;
    for (const auto& path : paths) {
      GrammarMatcher matcher(grammar);
      for (size_t i = 0; i < path.size(); ++i) {
        const auto a = Clock::now();
        matcher.fill_next_token_bitmask(mask);
        mask_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
        if (i % 8 == 0) {  // the naive mask is slow; sample it
          const auto b = Clock::now();
          for (int32_t id = 0; id < static_cast<int32_t>(vocab->size()); ++id) {
            if (matcher.accept_token(id)) matcher.rollback(1);
          }
          naive_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - b).count());
        }
        matcher.accept_token(path[i]);
      }
    }
    const double p50 = percentile(mask_us, 0.5);
    std::printf("%-8zu %10.2f %12.1f %10.1f %10.1f %12.0f %8.0fx %14zu\n", s + 1, compile_ms,
                cold_ms, p50, percentile(mask_us, 0.99), percentile(naive_us, 0.5),
                percentile(naive_us, 0.5) / p50, grammar->num_cached_states());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int walks = argc > 2 ? std::atoi(argv[2]) : 4;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 60;
  const std::vector<std::string> tokens =
      argc > 1 ? tokenizer_tokens(argv[1]) : synthetic_tokens(kDeepSeekVocab);
  std::printf("bench_grammar: %s vocabulary, %d walks of up to %d tokens per schema\n",
              argc > 1 ? argv[1] : "synthetic", walks, steps);
  run(tokens, 32000, walks, steps);
  run(tokens, kDeepSeekVocab, walks, steps);
  return 0;
}
