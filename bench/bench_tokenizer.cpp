// Tokenizer throughput: encode MB/s for the DeepSeek-V3 tokenizer on a mixed Chinese / English /
// code text built here, the pre-tokenizer alone (added tokens + normalizer + regex splits +
// ByteLevel), cold vs warm BPE word cache, and decode. All figures come from one run, so their
// ratios are comparable.
//
//   bench_tokenizer [TOKENIZER_DIR] [TEXT_MB]
// TOKENIZER_DIR defaults to ../shared/testdata/tokenizers/deepseek-v3 beside this checkout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Deterministic mixed text: Chinese prose, English prose, code, numbers, chat special tokens.
std::string build_text(size_t target_bytes) {
  const std::vector<std::string> chinese = {
      "深度求索是一家专注于通用人工智能的公司。", "我们在中文和英文的数据上训练了大规模语言模型，",
      "模型在数学、代码和推理任务上表现出色。",   "今天天气很好，我们去公园散步吧！",
      "请用三句话总结这篇文章的主要观点：",       "量子计算与经典计算的区别在于叠加和纠缠。",
  };
  const std::vector<std::string> english = {
      "The quick brown fox jumps over the lazy dog. ",
      "Large language models are trained on ",
      "It's important to measure throughput, latency and memory together. ",
      "We'll compare the results against the reference implementation; ",
      "DeepSeek-V3 uses multi-head latent attention and a mixture of experts. ",
  };
  const std::vector<std::string> code = {
      "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return "
      "a\n",
      "for (size_t i = 0; i < n; ++i) {\n  out[i] = std::max(0.0f, in[i]) * scale;\n}\n",
      "SELECT user_id, COUNT(*) AS n FROM events WHERE ts >= '2024-01-01' GROUP BY user_id;\n",
      "const res = await fetch(`/v1/chat/completions`, {method: 'POST', body: "
      "JSON.stringify(req)});\n",
  };
  std::mt19937 rng(42);
  std::string text;
  text.reserve(target_bytes + 256);
  while (text.size() < target_bytes) {
    switch (rng() % 7) {
      case 0:
      case 1:
        text += chinese[rng() % chinese.size()];
        break;
      case 2:
      case 3:
        text += english[rng() % english.size()];
        break;
      case 4:
        text += code[rng() % code.size()];
        break;
      case 5:
        text += ' ';
        text += std::to_string(rng() % 1000000);
        text += '.';
        text += std::to_string(rng() % 100);
        break;
      default:
        text += (rng() % 4 == 0) ? "<｜User｜>" : "\n\n";
        break;
    }
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path default_dir =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() /
      "shared/testdata/tokenizers/deepseek-v3";
  const std::filesystem::path dir = argc > 1 ? std::filesystem::path(argv[1]) : default_dir;
  const double text_mb = argc > 2 ? std::atof(argv[2]) : 4.0;

  auto start = Clock::now();
  const pagoda::Tokenizer tok = pagoda::Tokenizer::from_directory(dir);
  const double load_s = seconds_since(start);

  const std::string text = build_text(static_cast<size_t>(text_mb * 1e6));
  const double mb = text.size() / 1e6;

  // The first encode fills the BPE word cache; later ones mostly hit it.
  start = Clock::now();
  const std::vector<pagoda::TokenId> ids = tok.encode(text, true);
  const double cold_s = seconds_since(start);

  size_t num_pieces = 0;
  double pre_s = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    start = Clock::now();
    num_pieces = tok.pre_tokenize(text).size();
    pre_s = std::min(pre_s, seconds_since(start));
  }

  double warm_s = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    start = Clock::now();
    const auto again = tok.encode(text, true);
    warm_s = std::min(warm_s, seconds_since(start));
    if (again != ids) {
      std::fprintf(stderr, "encode is not deterministic\n");
      return 1;
    }
  }

  start = Clock::now();
  const std::string decoded = tok.decode(ids, true);
  const double decode_s = seconds_since(start);
  if (decoded != text) std::fprintf(stderr, "warning: decode(encode(text)) != text\n");

  std::printf("tokenizer: %s (load %.2f s)\n", dir.string().c_str(), load_s);
  std::printf(
      "text: %.2f MB mixed Chinese/English/code, %zu pieces, %zu tokens (%.2f bytes/token)\n", mb,
      num_pieces, ids.size(), text.size() / static_cast<double>(ids.size()));
  std::printf("pre-tokenize only     : %8.2f MB/s\n", mb / pre_s);
  std::printf("encode, cold BPE cache: %8.2f MB/s\n", mb / cold_s);
  std::printf("encode, warm BPE cache: %8.2f MB/s  (%.2f M tokens/s)\n", mb / warm_s,
              ids.size() / warm_s / 1e6);
  std::printf("decode                : %8.2f MB/s\n", mb / decode_s);
  std::printf("pre-tokenizer share of warm encode time: %.0f%%\n", 100.0 * pre_s / warm_s);
  return 0;
}
