// `pagoda make-model`: write a Hugging Face model directory with random weights at any
// shape (a preset, then per-flag overrides), for tests, benchmarks and trying Pagoda.
#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "demo/model_generator.h"
#include "model/fp8_model_writer.h"
#include "tools/pagoda/commands.h"
#include "util/error.h"
#include "util/units.h"

namespace pagoda::cli {
namespace {

struct MakeModelOptions {
  std::string out;
  std::string preset = "tiny";
  std::optional<std::string> arch;
  std::optional<int64_t> hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads,
      head_dim, vocab_size, max_position_embeddings;
  std::optional<double> rope_theta;
  std::optional<std::string> rope_scaling;
  bool tie = false;
  bool untie = false;
  std::optional<std::string> dtype;
  int shards = 1;
  uint64_t seed = 0;
  std::string tokenizer_from;
  // DeepSeek-V2/V3 (config.json's key names).
  std::optional<int64_t> q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
      n_routed_experts, n_shared_experts, num_experts_per_tok, moe_intermediate_size,
      first_k_dense_replace, moe_layer_freq, n_group, topk_group, mtp_layers;
  std::optional<std::string> topk_method, scoring_func;
  std::optional<double> routed_scaling_factor;
  std::optional<bool> norm_topk_prob;
};

DType parse_dtype_flag(const std::string& text) {
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  if (text == "f16" || text == "float16") return DType::kF16;
  if (text == "f32" || text == "float32") return DType::kF32;
  fail("make-model: --dtype '{}' is not bf16, f16, f32 or fp8", text);
}

int run_make_model(const MakeModelOptions& o) {
  ModelSpec spec = model_preset(o.preset);
  if (o.arch) spec.architecture = *o.arch;
  if (o.hidden_size) spec.hidden_size = *o.hidden_size;
  if (o.intermediate_size) spec.intermediate_size = *o.intermediate_size;
  if (o.num_layers) spec.num_layers = *o.num_layers;
  if (o.num_heads) spec.num_heads = *o.num_heads;
  if (o.num_kv_heads) spec.num_kv_heads = *o.num_kv_heads;
  if (o.head_dim) spec.head_dim = *o.head_dim;
  if (o.vocab_size) spec.vocab_size = *o.vocab_size;
  if (o.max_position_embeddings) spec.max_position_embeddings = *o.max_position_embeddings;
  if (o.rope_theta) spec.rope_theta = *o.rope_theta;
  if (o.rope_scaling) {
    try {
      spec.rope_scaling = nlohmann::json::parse(*o.rope_scaling);
    } catch (const nlohmann::json::parse_error&) {
      fail("make-model: --rope-scaling '{}' is not valid JSON", *o.rope_scaling);
    }
  }
  if (o.tie) spec.tie_word_embeddings = true;
  if (o.untie) spec.tie_word_embeddings = false;
  // fp8: DeepSeek-V3's layout, projections in block-scaled e4m3 and the rest in bf16.
  const bool fp8 = o.dtype && (*o.dtype == "fp8" || *o.dtype == "float8_e4m3fn");
  if (o.dtype && !fp8) spec.dtype = parse_dtype_flag(*o.dtype);
  if (fp8) spec.dtype = DType::kBF16;
  DeepseekSpec& d = spec.deepseek;
  const std::pair<const std::optional<int64_t>&, int64_t&> deepseek_sizes[] = {
      {o.q_lora_rank, d.q_lora_rank},
      {o.kv_lora_rank, d.kv_lora_rank},
      {o.qk_nope_head_dim, d.qk_nope_head_dim},
      {o.qk_rope_head_dim, d.qk_rope_head_dim},
      {o.v_head_dim, d.v_head_dim},
      {o.n_routed_experts, d.n_routed_experts},
      {o.n_shared_experts, d.n_shared_experts},
      {o.num_experts_per_tok, d.num_experts_per_tok},
      {o.moe_intermediate_size, d.moe_intermediate_size},
      {o.first_k_dense_replace, d.first_k_dense_replace},
      {o.moe_layer_freq, d.moe_layer_freq},
      {o.n_group, d.n_group},
      {o.topk_group, d.topk_group},
      {o.mtp_layers, d.num_nextn_predict_layers}};
  bool deepseek_flag = false;
  for (const auto& [flag, value] : deepseek_sizes) {
    if (!flag) continue;
    if (*flag < 0) fail("make-model: DeepSeek sizes must not be negative, got {}", *flag);
    value = *flag;
    deepseek_flag = true;
  }
  if (o.topk_method) d.topk_method = *o.topk_method;
  if (o.scoring_func) d.scoring_func = *o.scoring_func;
  if (o.routed_scaling_factor) d.routed_scaling_factor = *o.routed_scaling_factor;
  if (o.norm_topk_prob) d.norm_topk_prob = *o.norm_topk_prob;
  deepseek_flag |= o.topk_method || o.scoring_func || o.routed_scaling_factor || o.norm_topk_prob;
  if (deepseek_flag && !spec.is_deepseek()) {
    fail(
        "make-model: the MLA / MoE flags apply to DeepSeek models only (a deepseek-* preset or "
        "--arch DeepseekV2ForCausalLM / DeepseekV3ForCausalLM)");
  }
  spec.num_shards = o.shards;
  spec.seed = o.seed;
  spec.tokenizer_from = o.tokenizer_from;

  const auto start = std::chrono::steady_clock::now();
  GeneratedModel model = generate_model(spec, o.out);
  if (fp8) model.weight_bytes = write_fp8_model(o.out).weight_bytes;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr,
             "wrote {}: {} ({}{}), {:.3f}B parameters, {} of {} weights in {} file(s), vocab {} "
             "(tokenizer {}), {:.1f} s\n",
             model.dir, spec.architecture, spec.preset,
             spec.is_deepseek() && spec.deepseek.num_nextn_predict_layers > 0
                 ? fmt::format(", +{} MTP layer(s)", spec.deepseek.num_nextn_predict_layers)
                 : "",
             model.num_parameters / 1e9, format_bytes(static_cast<uint64_t>(model.weight_bytes)),
             fp8 ? "fp8 (e4m3, 128 x 128 blocks)" : dtype_name(spec.dtype),
             model.weight_files.size(), model.vocab_size, model.tokenizer_vocab_size, seconds);
  return 0;
}

}  // namespace

Command register_make_model(CLI::App& app) {
  auto o = std::make_shared<MakeModelOptions>();
  CLI::App* sub = app.add_subcommand(
      "make-model", "Write a Hugging Face model directory with random weights (tests, benchmarks)");
  sub->add_option("--out", o->out, "Output directory")->required();
  sub->add_option("--preset", o->preset, "Starting shape; flags below override it")
      ->check(CLI::IsMember(model_preset_names()))
      ->capture_default_str();
  sub->add_option("--arch", o->arch, "Architecture (the preset's by default)")
      ->check(CLI::IsMember(generator_architectures()));
  sub->add_option("--hidden-size", o->hidden_size);
  sub->add_option("--intermediate-size", o->intermediate_size);
  sub->add_option("--num-layers", o->num_layers);
  sub->add_option("--num-heads", o->num_heads);
  sub->add_option("--num-kv-heads", o->num_kv_heads);
  sub->add_option("--head-dim", o->head_dim);
  sub->add_option("--vocab-size", o->vocab_size);
  sub->add_option("--max-position-embeddings", o->max_position_embeddings);
  sub->add_option("--rope-theta", o->rope_theta);
  sub->add_option("--rope-scaling", o->rope_scaling,
                  R"(JSON, e.g. '{"type":"linear","factor":4.0}' or 'null')");
  auto* tie = sub->add_flag("--tie-word-embeddings", o->tie, "Share embedding and lm_head");
  sub->add_flag("--no-tie-word-embeddings", o->untie, "Separate lm_head.weight")->excludes(tie);
  sub->add_option(
      "--dtype", o->dtype,
      "bf16, f16, f32, or fp8 (DeepSeek-V3's block-scaled e4m3 projections, bf16 rest)");
  sub->add_option("--shards", o->shards, "Number of safetensors files (an index when > 1)")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Random seed (same seed, same weights)")
      ->capture_default_str();
  sub->add_option("--tokenizer-from", o->tokenizer_from,
                  "Copy tokenizer.json/tokenizer_config.json from this directory instead of "
                  "building Pagoda's own");
  const char* ds = "DeepSeek (MLA + MoE)";
  sub->add_option("--q-lora-rank", o->q_lora_rank, "Query compression rank; 0: q_proj (V2-Lite)")
      ->group(ds);
  sub->add_option("--kv-lora-rank", o->kv_lora_rank, "Rank of the cached latent")->group(ds);
  sub->add_option("--qk-nope-head-dim", o->qk_nope_head_dim)->group(ds);
  sub->add_option("--qk-rope-head-dim", o->qk_rope_head_dim)->group(ds);
  sub->add_option("--v-head-dim", o->v_head_dim)->group(ds);
  sub->add_option("--n-routed-experts,--num-experts", o->n_routed_experts,
                  "Routed experts per MoE layer; 0: every layer dense")
      ->group(ds);
  sub->add_option("--n-shared-experts", o->n_shared_experts)->group(ds);
  sub->add_option("--num-experts-per-tok", o->num_experts_per_tok, "Experts each token uses")
      ->group(ds);
  sub->add_option("--moe-intermediate-size", o->moe_intermediate_size)->group(ds);
  sub->add_option("--first-k-dense-replace", o->first_k_dense_replace,
                  "Leading layers with a dense MLP")
      ->group(ds);
  sub->add_option("--moe-layer-freq", o->moe_layer_freq)->group(ds);
  sub->add_option("--n-group", o->n_group, "Expert groups for group-limited routing")->group(ds);
  sub->add_option("--topk-group", o->topk_group, "Groups each token may use")->group(ds);
  sub->add_option("--topk-method", o->topk_method)
      ->check(CLI::IsMember({"greedy", "group_limited_greedy", "noaux_tc"}))
      ->group(ds);
  sub->add_option("--scoring-func", o->scoring_func)
      ->check(CLI::IsMember({"softmax", "sigmoid"}))
      ->group(ds);
  sub->add_option("--routed-scaling-factor", o->routed_scaling_factor)->group(ds);
  sub->add_option("--norm-topk-prob", o->norm_topk_prob, "true or false")->group(ds);
  sub->add_option("--mtp-layers,--num-nextn-predict-layers", o->mtp_layers,
                  "Multi-token-prediction layers after the last (V3 has 1; speculative method "
                  "mtp drafts with the first)")
      ->group(ds);
  return [o] { return run_make_model(*o); };
}

}  // namespace pagoda::cli
