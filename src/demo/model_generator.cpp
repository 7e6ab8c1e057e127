// Random-weight model directories: the tiny and demo presets (the published shapes are the
// families'), config.json from the family's writer, fast parallel filling straight into the
// mapped output files of the family's tensor table, tokenizer files and the cached demo model.
#include "demo/model_generator.h"

#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "demo/builtin_tokenizer.h"
#include "loader/safetensors.h"
#include "model/model_config.h"
#include "model/model_family.h"
#include "model/model_registry.h"
#include "util/error.h"
#include "util/half.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a counter-based generator, so any element
// can be produced independently and the fill parallelises without changing the result.
inline uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t hash_name(const std::string& name, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ mix64(seed + kGolden);  // FNV-1a, seeded
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return mix64(h);
}

// Fills `count` elements with center + half_width * U(-1, 1), converted to `dtype`.
void fill_uniform(uint8_t* dst, DType dtype, int64_t count, uint64_t seed, float center,
                  float half_width) {
  constexpr int64_t kChunk = 1 << 16;  // even, so each 64-bit draw feeds two elements of a chunk
  const int64_t num_chunks = (count + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
    const int64_t begin = chunk * kChunk;
    const int64_t end = std::min(count, begin + kChunk);
    for (int64_t i = begin; i < end; i += 2) {
      const uint64_t bits = mix64(seed + static_cast<uint64_t>(i / 2) * kGolden);
      for (int64_t k = 0; k < 2 && i + k < end; ++k) {
        const uint32_t r = static_cast<uint32_t>(bits >> (32 * k));
        const float u = static_cast<float>(r >> 8) * (1.0f / 16777216.0f);  // [0, 1)
        const float v = center + half_width * (2.0f * u - 1.0f);
        const int64_t j = i + k;
        switch (dtype) {
          case DType::kF32:
            reinterpret_cast<float*>(dst)[j] = v;
            break;
          case DType::kBF16:
            reinterpret_cast<bf16_t*>(dst)[j] = f32_to_bf16(v);
            break;
          case DType::kF16:
            reinterpret_cast<f16_t*>(dst)[j] = f32_to_f16(v);
            break;
          case DType::kI8:
          case DType::kI4:
            break;  // rejected before generation starts (generate_model checks spec.dtype)
        }
      }
    }
  }
}

// The float type of a layout entry ("F32", "BF16", "F16").
DType layout_dtype(const TensorLayout& t) {
  if (t.dtype == "F32") return DType::kF32;
  if (t.dtype == "F16") return DType::kF16;
  return DType::kBF16;
}

// Scales that keep activations near unit size through many layers: weights uniform with
// std 1/sqrt(fan_in) (half-width sqrt(3/fan_in)), norms 1 +- 0.05, biases +- 0.02 (DeepSeek-V3's
// router e_score_correction_bias included).
void fill_tensor(const TensorLayout& t, uint8_t* dst, uint64_t seed) {
  const DType dtype = layout_dtype(t);
  int64_t count = 1;
  for (int64_t d : t.shape) count *= d;
  const uint64_t tensor_seed = hash_name(t.name, seed);
  const bool is_bias = t.name.ends_with(".bias") || t.name.ends_with("_bias");
  const bool is_norm = t.name.ends_with("norm.weight");
  if (is_norm) {
    fill_uniform(dst, dtype, count, tensor_seed, 1.0f, 0.05f);
  } else if (is_bias) {
    fill_uniform(dst, dtype, count, tensor_seed, 0.0f, 0.02f);
  } else {
    const double fan_in = static_cast<double>(t.shape.back());
    fill_uniform(dst, dtype, count, tensor_seed, 0.0f, static_cast<float>(std::sqrt(3.0 / fan_in)));
  }
}

void write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("{}: cannot create", path.string());
  out << text;
  out.close();
  if (!out) fail("{}: write failed", path.string());
}

// The registry's entry for the spec's architecture: its config.json writer and its family.
const FamilyArchitecture& generated_architecture(const ModelSpec& s) {
  if (const FamilyArchitecture* a = find_family_architecture(s.architecture)) return *a;
  fail("make-model: architecture '{}' is not one the generator writes ({})", s.architecture,
       fmt::join(generator_architectures(), ", "));
}

// The checks every family shares; the family's own follow (FamilyGenerator::check).
void validate(const ModelSpec& s) {
  if (is_quantized(s.dtype)) {
    fail(
        "make-model: weights are generated in a float type; quantize them with `pagoda "
        "quantize` or --quantization");
  }
  generated_architecture(s);
  const std::pair<const char*, int64_t> sizes[] = {
      {"hidden-size", s.hidden_size},
      {"intermediate-size", s.intermediate_size},
      {"num-layers", s.num_layers},
      {"num-heads", s.num_heads},
      {"vocab-size", s.vocab_size},
      {"max-position-embeddings", s.max_position_embeddings}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0) fail("make-model: --{} must be positive, got {}", name, value);
  }
  if (s.num_shards < 1) fail("make-model: --shards must be at least 1, got {}", s.num_shards);
  if (!s.rope_scaling.is_null() && !s.rope_scaling.is_object()) {
    fail("make-model: --rope-scaling must be a JSON object or null, got {}", s.rope_scaling.dump());
  }
}

// A tokenizer_config token entry: a string or {"content": ...}.
std::string token_content(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return "";
}

// Copies a file, leaving the copy writable by its owner even when the source is read-only
// (a shared test-data tree), so the directory can be regenerated later.
void copy_writable(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) fail("{}: cannot copy to {}: {}", from.string(), to.string(), ec.message());
  fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add, ec);
}

struct CopiedTokenizer {
  int64_t vocab_size = 0;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
};

// Copies tokenizer.json (and tokenizer_config.json if present) from `src` and works out the
// ids the config needs: vocab size from the largest id, bos/eos from the source model's
// generation_config.json or config.json, else by looking the config's tokens up.
CopiedTokenizer copy_tokenizer(const fs::path& src, const fs::path& out) {
  const fs::path tokenizer_path = src / "tokenizer.json";
  const json tokenizer = read_json_file(tokenizer_path.string());
  CopiedTokenizer result;
  std::map<std::string, int64_t> ids;
  if (tokenizer.contains("model") && tokenizer["model"].contains("vocab") &&
      tokenizer["model"]["vocab"].is_object()) {
    for (const auto& [token, id] : tokenizer["model"]["vocab"].items()) {
      if (id.is_number_integer()) ids[token] = id.get<int64_t>();
    }
  } else {
    fail(
        "{}: key 'model.vocab' is missing or not an object (the generator copies BPE "
        "tokenizers only)",
        tokenizer_path.string());
  }
  if (tokenizer.contains("added_tokens") && tokenizer["added_tokens"].is_array()) {
    for (const json& t : tokenizer["added_tokens"]) {
      if (t.contains("id") && t["id"].is_number_integer() && t.contains("content")) {
        ids[t["content"].get<std::string>()] = t["id"].get<int64_t>();
      }
    }
  }
  for (const auto& [token, id] : ids) result.vocab_size = std::max(result.vocab_size, id + 1);
  copy_writable(tokenizer_path, out / "tokenizer.json");

  const fs::path config_path = src / "tokenizer_config.json";
  json tokenizer_config = json::object();
  if (fs::exists(config_path)) {
    tokenizer_config = read_json_file(config_path.string());
    copy_writable(config_path, out / "tokenizer_config.json");
  }
  for (const char* name : {"generation_config.json", "config.json"}) {
    const fs::path p = src / name;
    if (!fs::exists(p)) continue;
    const json j = read_json_file(p.string());
    const std::vector<int64_t> bos = parse_token_id_list(j, "bos_token_id", p.string());
    if (!result.bos_token_id && !bos.empty()) result.bos_token_id = bos.front();
    if (result.eos_token_ids.empty()) {
      result.eos_token_ids = parse_token_id_list(j, "eos_token_id", p.string());
    }
  }
  auto lookup = [&](const char* key) -> std::optional<int64_t> {
    if (!tokenizer_config.contains(key)) return std::nullopt;
    const auto it = ids.find(token_content(tokenizer_config[key]));
    if (it == ids.end()) return std::nullopt;
    return it->second;
  };
  if (!result.bos_token_id) result.bos_token_id = lookup("bos_token");
  if (result.eos_token_ids.empty()) {
    if (const auto eos = lookup("eos_token")) result.eos_token_ids.push_back(*eos);
  }
  return result;
}

json make_config(const ModelSpec& s, int64_t vocab_size, const std::optional<int64_t>& bos,
                 const std::vector<int64_t>& eos) {
  json c = generated_architecture(s).generator_config(s, vocab_size);
  c["bos_token_id"] = bos ? json(*bos) : json(nullptr);
  c["eos_token_id"] = eos.empty() ? json(nullptr) : eos.size() == 1 ? json(eos[0]) : json(eos);
  if (s.demo) c["pagoda_demo"] = "random weights, for trying Pagoda only";
  return c;
}

}  // namespace

std::vector<std::string> generator_architectures() {
  return supported_architectures();
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names = {"tiny", "demo"};
  for (const ModelFamily* family : model_families()) {
    for (const ModelPreset& preset : family->generator.presets) names.push_back(preset.name);
  }
  return names;
}

ModelSpec model_preset(const std::string& name) {
  ModelSpec s;
  if (name == "tiny") {
    s.hidden_size = 64;
    s.intermediate_size = 172;
    s.num_layers = 2;
    s.num_heads = 4;
    s.num_kv_heads = 2;
    s.vocab_size = 512;
    s.max_position_embeddings = 512;
    s.dtype = DType::kF32;
  } else if (name == "demo") {
    s.hidden_size = 256;
    s.intermediate_size = 688;
    s.num_layers = 4;
    s.num_heads = 8;
    s.num_kv_heads = 4;
    s.vocab_size = 1024;
    s.max_position_embeddings = 2048;
    s.dtype = DType::kBF16;
    s.demo = true;
  } else {
    const ModelPreset* found = nullptr;
    for (const ModelFamily* family : model_families()) {
      for (const ModelPreset& preset : family->generator.presets) {
        if (name == preset.name) found = &preset;
      }
    }
    if (found == nullptr) {
      fail("make-model: unknown preset '{}' (known: {})", name,
           fmt::join(model_preset_names(), ", "));
    }
    s = found->spec();
  }
  s.preset = name;
  return s;
}

// The family's own table (model/model_family.h) for the config.json this spec writes: the
// generator writes exactly the tensors the loader and GGUF export expect.
std::vector<TensorLayout> model_tensor_layout(const ModelSpec& s) {
  const ModelConfig config =
      ModelConfig::from_json(make_config(s, s.vocab_size, std::nullopt, {}), "config.json");
  return model_family_of(config).tensor_layout(config, safetensors_dtype_name(s.dtype));
}

GeneratedModel generate_model(const ModelSpec& spec_in, const std::string& out_dir) {
  ModelSpec spec = spec_in;
  validate(spec);
  const fs::path out(out_dir);
  // The family completes the spec and checks its own constraints before anything is written.
  find_model_family(spec.architecture)->generator.check(spec, (out / "config.json").string());
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) fail("{}: cannot create directory: {}", out_dir, ec.message());
  // Old weights left beside new ones would be loaded with them (or conflict with the index).
  for (const fs::directory_entry& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".safetensors" || name == "model.safetensors.index.json") {
      fs::remove(entry.path());
    }
  }

  GeneratedModel result;
  result.dir = out_dir;
  std::optional<int64_t> bos;
  std::vector<int64_t> eos;
  if (spec.tokenizer_from.empty()) {
    const BuiltinTokenizer tok =
        build_builtin_tokenizer(spec.vocab_size, spec.max_position_embeddings);
    write_text_file(out / "tokenizer.json", tok.tokenizer_json.dump(2));
    write_text_file(out / "tokenizer_config.json", tok.tokenizer_config_json.dump(2));
    result.tokenizer_vocab_size = tok.vocab_size;
    bos = tok.bos_token_id;
    eos = {tok.eos_token_id};
  } else {
    const CopiedTokenizer tok = copy_tokenizer(spec.tokenizer_from, out);
    result.tokenizer_vocab_size = tok.vocab_size;
    // The embedding must have a row for every id the tokenizer can produce.
    spec.vocab_size = std::max(spec.vocab_size, tok.vocab_size);
    bos = tok.bos_token_id;
    eos = tok.eos_token_ids;
  }
  result.vocab_size = spec.vocab_size;

  const json config = make_config(spec, spec.vocab_size, bos, eos);
  write_text_file(out / "config.json", config.dump(2));
  json generation = {{"_from_model_config", true}};
  generation["bos_token_id"] = bos ? json(*bos) : json(nullptr);
  generation["eos_token_id"] = eos.empty()       ? json(nullptr)
                               : eos.size() == 1 ? json(eos[0])
                                                 : json(eos);
  write_text_file(out / "generation_config.json", generation.dump(2));

  // Shards are consecutive runs of the tensor table, cut where the running size crosses each
  // 1/num_shards of the total.
  const std::vector<TensorLayout> layout = model_tensor_layout(spec);
  std::vector<int64_t> bytes(layout.size());
  int64_t total_bytes = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    int64_t count = 1;
    for (int64_t d : layout[i].shape) count *= d;
    bytes[i] = count * safetensors_dtype_size(layout[i].dtype);
    total_bytes += bytes[i];
    result.num_parameters += count;
  }
  result.weight_bytes = total_bytes;
  const int num_shards = spec.num_shards;
  if (static_cast<size_t>(num_shards) > layout.size()) {
    fail("make-model: --shards {} exceeds the number of tensors ({})", num_shards, layout.size());
  }
  std::vector<std::vector<size_t>> shards(static_cast<size_t>(num_shards));
  int64_t running = 0;
  size_t shard = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const int64_t remaining = static_cast<int64_t>(layout.size() - i);  // including this one
    const int64_t later_shards = num_shards - 1 - static_cast<int64_t>(shard);
    const bool past_share = running * num_shards >= static_cast<int64_t>(shard + 1) * total_bytes;
    // Move on once this shard has its share, or when every later shard needs one of the rest.
    if (!shards[shard].empty() && later_shards > 0 && (past_share || remaining <= later_shards)) {
      ++shard;
    }
    shards[shard].push_back(i);
    running += bytes[i];
  }

  json weight_map = json::object();
  for (int s = 0; s < num_shards; ++s) {
    const std::string file_name =
        num_shards == 1 ? "model.safetensors"
                        : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, num_shards);
    std::vector<TensorLayout> shard_layout;
    for (size_t i : shards[static_cast<size_t>(s)]) {
      shard_layout.push_back(layout[i]);
      weight_map[layout[i].name] = file_name;
    }
    const fs::path file_path = out / file_name;
    SafetensorsWriter writer(file_path.string(), shard_layout);
    for (size_t k = 0; k < writer.num_tensors(); ++k) {
      fill_tensor(writer.layout(k), writer.data(k), spec.seed);
    }
    writer.finish();
    result.weight_files.push_back(file_path.string());
  }
  if (num_shards > 1) {
    const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_text_file(out / "model.safetensors.index.json", index.dump(2));
  }
  return result;
}

std::string ensure_demo_model(const std::string& cache_root) {
  fs::path root = cache_root;
  if (root.empty()) {
    // The environment is read here, at the CLI's edge, and nowhere deeper.
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
      root = xdg;
    } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
      root = fs::path(home) / ".cache";
    } else {
      fail("cannot place the demo model: neither XDG_CACHE_HOME nor HOME is set");
    }
  }
  const fs::path parent = root / "pagoda";
  const fs::path dir = parent / "demo";
  if (fs::exists(dir / "config.json")) return dir.string();

  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail("{}: cannot create directory: {}", parent.string(), ec.message());
  // Build beside the final place and rename: readers never see a half-written model, and of
  // two processes racing, one rename wins and the other discards its copy.
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  const fs::path tmp = parent / fmt::format(".demo.tmp-{}-{}", ::getpid(), stamp);
  try {
    generate_model(model_preset("demo"), tmp.string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (fs::exists(dir) && !fs::exists(dir / "config.json")) fs::remove_all(dir, ec);  // debris
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    fs::remove_all(tmp, ec);
    if (!fs::exists(dir / "config.json")) {
      fail("{}: cannot move the demo model into place: {}", dir.string(), std::strerror(err));
    }
  }
  return dir.string();
}

}  // namespace pagoda
