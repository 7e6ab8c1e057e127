// Decode speed with and without speculative method "mtp" on a DeepSeek MoE shape, at forced
// acceptance rates, measured in one run:
//  - writes (once) a V2-Lite-shaped model (hidden 2048, 64 routed experts top-6 + 2 shared,
//    vocab 102400, bf16) of LAYERS decoder layers plus one MTP layer;
//  - rewrites it in place with make_mtp_layer_predict_the_model(dir, a) for each forced
//    acceptance rate a (0, 0.5, 0.9, 1): the model's outputs and costs stay the same, only
//    which of the MTP layer's drafts are right changes;
//  - loads it with -q int8 and decodes OUTPUT_LEN greedy tokens after a 64-token prompt at
//    batch BATCH, plain and with num_speculative_tokens 1, 2, 3;
//  - prints per run the rate of first drafts accepted (what the forced rate sets), vLLM's
//    acceptance rate (accepted / drafted), the mean tokens per step, decode tokens/s, the speedup
//    over plain decoding, and the distinct routed experts a MoE layer ran per step (the union
//    over the step's tokens: 1 + k per request when verifying).
// Acceptance 0 shows what drafting and verifying cost (the MTP layer and head, the extra rows,
// the union of the experts they route to); 1 the most it gains; break-even lies where the
// speedup crosses 1. bench/spec_decode_moe.sh takes the same figures through `pagoda bench
// latency`.
// Threads: every core (EngineArgs default).
// Usage: bench_mtp [DIR (default /tmp/pagoda-bench-mtp)] [LAYERS (4)] [OUTPUT_LEN (64)] [BATCH (1)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "demo/model_generator.h"
#include "demo/mtp_predicting_model.h"
#include "pagoda/engine.h"

namespace {

using namespace pagoda;

ModelSpec bench_spec(int64_t layers) {
  ModelSpec spec = model_preset("deepseek-v2-lite");
  spec.num_layers = layers;
  spec.deepseek.num_nextn_predict_layers = 1;
  spec.seed = 7;
  return spec;
}

void ensure_model(const std::string& dir, int64_t layers) {
  if (std::filesystem::exists(dir + "/model.safetensors")) return;
  std::printf("writing %s ...\n", dir.c_str());
  std::fflush(stdout);
  generate_model(bench_spec(layers), dir);
}

struct Result {
  double decode_tokens_per_s = 0;
  double acceptance = 0;         // accepted / drafted tokens
  double first_draft = 0;        // first drafts accepted / drafts (what the forced rate sets)
  double tokens_per_step = 1;    // 1 + accepted / drafts
  double experts_per_layer = 0;  // distinct routed experts per MoE layer and decode step
};

Result measure(const std::string& dir, int k, int output_len, int batch) {
  EngineArgs args;
  args.model = dir;
  args.quantization = "int8";
  args.max_model_len = 64 + output_len + 8;
  args.max_num_seqs = batch;
  if (k > 0) {
    args.speculative_config =
        R"({"method": "mtp", "num_speculative_tokens": )" + std::to_string(k) + "}";
  }
  Engine engine(args);
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = output_len;
  params.ignore_eos = true;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(100, 50000);
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> prompt(64);
    for (int32_t& t : prompt) t = token(rng);
    engine.add_request_tokens(std::to_string(b), prompt, params);
  }
  // Prefill until every request has its first token; the rest is decode.
  size_t first_tokens = 0;
  std::vector<bool> started(static_cast<size_t>(batch), false);
  while (first_tokens < static_cast<size_t>(batch)) {
    for (const RequestOutput& out : engine.step()) {
      const auto i = static_cast<size_t>(std::stoi(out.request_id));
      if (!started[i] && !out.outputs.front().token_ids.empty()) {
        started[i] = true;
        ++first_tokens;
      }
    }
  }
  const auto start = std::chrono::steady_clock::now();
  while (engine.has_unfinished_requests()) engine.step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const EngineStats st = engine.stats();
  Result r;
  r.experts_per_layer = (k > 0 ? st.verify_experts : st.decode_experts).experts_per_layer();
  r.decode_tokens_per_s = batch * (output_len - 1) / seconds;
  if (st.spec_num_draft_tokens > 0) {
    r.acceptance = static_cast<double>(st.spec_num_accepted_tokens) /
                   static_cast<double>(st.spec_num_draft_tokens);
    r.tokens_per_step = 1.0 + static_cast<double>(st.spec_num_accepted_tokens) /
                                  static_cast<double>(st.spec_num_drafts);
    if (!st.spec_num_accepted_tokens_per_pos.empty()) {
      r.first_draft = static_cast<double>(st.spec_num_accepted_tokens_per_pos[0]) /
                      static_cast<double>(st.spec_num_drafts);
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string root = argc > 1 ? argv[1] : "/tmp/pagoda-bench-mtp";
  const int64_t layers = argc > 2 ? std::atoll(argv[2]) : 4;
  const int output_len = argc > 3 ? std::atoi(argv[3]) : 64;
  const int batch = argc > 4 ? std::atoi(argv[4]) : 1;
  try {
    std::printf("V2-Lite shape, %lld decoder layers + 1 MTP layer, int8, batch %d, %d tokens\n",
                static_cast<long long>(layers), batch, output_len);
    std::printf("%6s %2s %6s %11s %12s %13s %8s %14s\n", "forced", "k", "first", "acceptance",
                "tokens/step", "decode tok/s", "speedup", "experts/layer");
    const std::string dir = root + "/model";
    ensure_model(dir, layers);
    double plain = 0;
    for (const double forced : {0.0, 0.5, 0.9, 1.0}) {
      make_mtp_layer_predict_the_model(dir, forced, /*seed=*/1);
      for (int k : {0, 1, 2, 3}) {
        if (k == 0 && forced > 0.0) continue;  // plain decoding does not read the MTP layer
        const Result r = measure(dir, k, output_len, batch);
        if (k == 0) plain = r.decode_tokens_per_s;
        std::printf("%6.2f %2d %6.3f %11.3f %12.2f %13.2f %7.2fx %14.1f\n", forced, k,
                    r.first_draft, r.acceptance, r.tokens_per_step, r.decode_tokens_per_s,
                    r.decode_tokens_per_s / plain, r.experts_per_layer);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
