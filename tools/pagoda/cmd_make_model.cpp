// `pagoda make-model`: write a Hugging Face model directory with random weights at any
// shape (a preset, then per-flag overrides), for tests, benchmarks and trying Pagoda.
#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/model_generator.h"
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
};

DType parse_dtype_flag(const std::string& text) {
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  if (text == "f16" || text == "float16") return DType::kF16;
  if (text == "f32" || text == "float32") return DType::kF32;
  fail("make-model: --dtype '{}' is not bf16, f16 or f32", text);
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
  if (o.dtype) spec.dtype = parse_dtype_flag(*o.dtype);
  spec.num_shards = o.shards;
  spec.seed = o.seed;
  spec.tokenizer_from = o.tokenizer_from;

  const auto start = std::chrono::steady_clock::now();
  const GeneratedModel model = generate_model(spec, o.out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stderr,
             "wrote {}: {} ({}), {:.3f}B parameters, {} of {} weights in {} file(s), vocab {} "
             "(tokenizer {}), {:.1f} s\n",
             model.dir, spec.architecture, spec.preset, model.num_parameters / 1e9,
             format_bytes(static_cast<uint64_t>(model.weight_bytes)), dtype_name(spec.dtype),
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
  sub->add_option("--arch", o->arch, "LlamaForCausalLM or Qwen2ForCausalLM")
      ->check(CLI::IsMember({"LlamaForCausalLM", "Qwen2ForCausalLM"}));
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
  sub->add_option("--dtype", o->dtype, "bf16, f16 or f32");
  sub->add_option("--shards", o->shards, "Number of safetensors files (an index when > 1)")
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Random seed (same seed, same weights)")
      ->capture_default_str();
  sub->add_option("--tokenizer-from", o->tokenizer_from,
                  "Copy tokenizer.json/tokenizer_config.json from this directory instead of "
                  "building Pagoda's own");
  return [o] { return run_make_model(*o); };
}

}  // namespace pagoda::cli
