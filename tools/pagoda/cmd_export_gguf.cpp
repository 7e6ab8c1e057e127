// `pagoda export-gguf`: turn a Hugging Face Llama / Qwen2 / DeepSeek-V2/V3 directory into a GGUF
// v3 file that llama.cpp loads (llama-cli, llama-bench, llama-server), so both engines can be
// measured on the same weights. The architecture's metadata, its tensor names and whether q/k
// rows are permuted come from the model family (model/model_family.h), the same tables GGUF
// import reads, and so do tensors a family stores differently from HF (DeepSeek's stacked
// experts and split kv_b_proj). This file owns the rest: per-tensor types, file order, and the
// tokenizer metadata taken from tokenizer.json / tokenizer_config.json. Names and conventions
// follow llama.cpp's convert_hf_to_gguf.py and gguf-py (read, not copied); see docs/gguf.md.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loader/gguf_writer.h"
#include "loader/safetensors.h"
#include "loader/tensor_rows.h"
#include "model/model_config.h"
#include "model/model_family.h"
#include "tools/pagoda/commands.h"
#include "util/error.h"
#include "util/half.h"
#include "util/units.h"

namespace pagoda::cli {
namespace {

using nlohmann::json;

struct ExportOptions {
  std::string model;
  std::string out;
  std::string type = "f16";
  std::string tokenizer_pre;  // "" = detect from tokenizer.json
  std::string name;           // general.name; "" = the directory's name
};

// llama.cpp's LLAMA_FTYPE values (general.file_type) for the types we write.
struct ExportType {
  GgmlType matrix_type;
  uint32_t file_type;
};

ExportType parse_export_type(const std::string& text) {
  if (text == "f32") return {GgmlType::kF32, 0};
  if (text == "f16") return {GgmlType::kF16, 1};
  if (text == "q4_0") return {GgmlType::kQ4_0, 2};
  if (text == "q8_0") return {GgmlType::kQ8_0, 7};
  if (text == "bf16") return {GgmlType::kBF16, 32};
  fail("export-gguf: --type '{}' is not one of f32, f16, bf16, q8_0, q4_0", text);
}

// gguf-py's TokenType.
enum TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

// ---- tokenizer ---------------------------------------------------------------------------

// A pre-tokenizer's Split regexes in order (empty for a bare ByteLevel with use_regex).
std::vector<std::string> split_patterns(const json& pre) {
  std::vector<std::string> out;
  if (!pre.is_object()) return out;
  const std::string type = pre.value("type", "");
  if (type == "Sequence" && pre.contains("pretokenizers")) {
    for (const json& p : pre["pretokenizers"]) {
      auto inner = split_patterns(p);
      out.insert(out.end(), inner.begin(), inner.end());
    }
  } else if (type == "Split" && pre.contains("pattern") && pre["pattern"].contains("Regex")) {
    out.push_back(pre["pattern"]["Regex"].get<std::string>());
  }
  return out;
}

// llama.cpp picks its pre-tokenizer regexes by the name in tokenizer.ggml.pre
// (llama-vocab.cpp); convert_hf_to_gguf.py finds the name by hashing a test encoding. We
// recognise the regexes of the DeepSeek-family tokenizers directly instead.
std::string detect_pre(const json& tokenizer, const std::string& path) {
  const json& pre = tokenizer.contains("pre_tokenizer") ? tokenizer["pre_tokenizer"] : json();
  const std::vector<std::string> p = split_patterns(pre);
  auto has = [&](const std::string& needle) {
    return std::any_of(p.begin(), p.end(),
                       [&](const std::string& s) { return s.find(needle) != std::string::npos; });
  };
  if (p.empty() && pre.is_object() && pre.value("type", "") == "ByteLevel" &&
      pre.value("use_regex", true))
    return "gpt-2";
  if (!p.empty() && p[0] == "[\r\n]" && has("\\s?\\p{L}+")) return "deepseek-coder";
  if (!p.empty() && p[0] == "[\r\n]" && has("\\s?[A-Za-z")) return "deepseek-llm";
  if (!p.empty() && p[0] == "\\p{N}{1,3}" && has("[\\p{L}\\p{M}]+")) return "deepseek-v3";
  if (p.size() == 1 && has("(?i:'s|'t|'re|'ve|'m|'ll|'d)")) {
    if (has("\\p{N}{1,3}")) return "llama-bpe";
    if (has("\\p{N}|")) return "qwen2";
  }
  fail(
      "{}: cannot tell which llama.cpp pre-tokenizer matches this pre_tokenizer; pass "
      "--tokenizer-pre (e.g. gpt-2, llama-bpe, qwen2, deepseek-llm, deepseek-coder, deepseek-v3)",
      path);
}

// "<｜User｜>"-style names that convert_hf_to_gguf.py also treats as control tokens although
// tokenizer.json does not mark them special.
bool looks_special(const std::string& s) {
  auto wraps = [&](const std::string& a, const std::string& b) {
    return s.size() >= a.size() + b.size() && s.compare(0, a.size(), a) == 0 &&
           s.compare(s.size() - b.size(), b.size(), b) == 0;
  };
  return s == "<pad>" || wraps("<|", "|>") || wraps("<｜", "｜>");
}

// tokenizer_config.json names special tokens by text, either as a string or as an AddedToken
// object; returns the id, or nothing if the token is absent.
std::optional<int64_t> special_id(const json& config, const std::string& key,
                                  const std::map<std::string, int64_t>& ids) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config[key];
  std::string text;
  if (v.is_string())
    text = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string())
    text = v["content"].get<std::string>();
  else
    return std::nullopt;
  auto it = ids.find(text);
  return it == ids.end() ? std::nullopt : std::optional<int64_t>(it->second);
}

void add_tokenizer(GgufWriter& w, const ModelConfig& config, const ExportOptions& o) {
  const std::string tok_path = config.dir + "/tokenizer.json";
  const std::string cfg_path = config.dir + "/tokenizer_config.json";
  const json tokenizer = read_json_file(tok_path);
  const json tok_config =
      std::filesystem::exists(cfg_path) ? read_json_file(cfg_path) : json::object();
  if (!tokenizer.contains("model") || tokenizer["model"].value("type", "") != "BPE")
    fail("{}: model.type is not BPE; export-gguf writes BPE tokenizers only", tok_path);
  const json& model = tokenizer["model"];
  if (!model.contains("vocab") || !model["vocab"].is_object())
    fail("{}: model.vocab is missing or not an object", tok_path);

  // SentencePiece-style BPE (byte fallback, "▁" for spaces) is llama.cpp's "llama" model,
  // which merges by token score; byte-level BPE is its "gpt2" model, which takes merges.
  const bool spm = model.value("byte_fallback", false);

  std::map<std::string, int64_t> ids;
  for (const auto& [text, id] : model["vocab"].items()) ids[text] = id.get<int64_t>();
  struct Added {
    std::string text;
    bool special;
  };
  std::map<int64_t, Added> added;
  if (tokenizer.contains("added_tokens")) {
    for (const json& t : tokenizer["added_tokens"]) {
      const int64_t id = t.at("id").get<int64_t>();
      added[id] = Added{t.at("content").get<std::string>(), t.value("special", false)};
      ids[added[id].text] = id;
    }
  }
  int64_t num_tokens = config.vocab_size;
  for (const auto& [text, id] : ids) num_tokens = std::max(num_tokens, id + 1);

  std::vector<std::string> tokens(static_cast<size_t>(num_tokens));
  std::vector<int32_t> types(static_cast<size_t>(num_tokens), kUnused);
  std::vector<bool> filled(static_cast<size_t>(num_tokens), false);
  for (const auto& [text, id] : model["vocab"].items()) {
    const auto i = static_cast<size_t>(id.get<int64_t>());
    tokens[i] = text;
    filled[i] = true;
    const bool byte_token = spm && text.size() == 6 && text.rfind("<0x", 0) == 0 && text[5] == '>';
    types[i] = byte_token ? kByte : kNormal;
  }
  for (const auto& [id, a] : added) {
    const auto i = static_cast<size_t>(id);
    tokens[i] = a.text;
    filled[i] = true;
    types[i] = a.special || looks_special(a.text) ? kControl : kUserDefined;
  }
  // Ids the tokenizer never produces (config.json's vocab_size is often padded): llama.cpp
  // needs one entry per embedding row, as convert_hf_to_gguf.py writes them.
  for (int64_t i = 0; i < num_tokens; ++i) {
    if (!filled[static_cast<size_t>(i)]) tokens[static_cast<size_t>(i)] = fmt::format("[PAD{}]", i);
  }
  if (spm && model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = ids.find(model["unk_token"].get<std::string>());
    if (it != ids.end()) types[static_cast<size_t>(it->second)] = kUnknown;
  }

  std::vector<std::string> merges;
  if (model.contains("merges")) {
    for (const json& m : model["merges"]) {
      if (m.is_string())
        merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2)
        merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else
        fail("{}: model.merges holds an entry that is neither \"a b\" nor [a, b]", tok_path);
    }
  }

  w.set_string("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  if (!spm)
    w.set_string("tokenizer.ggml.pre",
                 o.tokenizer_pre.empty() ? detect_pre(tokenizer, tok_path) : o.tokenizer_pre);
  else
    w.set_string("tokenizer.ggml.pre", "default");
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  if (spm) {
    // The "llama" tokenizer merges the adjacent pair whose joined piece scores highest; scoring
    // each piece by minus the rank of the merge that makes it gives HF's merge order.
    std::vector<float> scores(static_cast<size_t>(num_tokens), 0.0f);
    const auto num_merges = static_cast<float>(merges.size());
    for (int64_t i = 0; i < num_tokens; ++i)
      scores[static_cast<size_t>(i)] = -(num_merges + static_cast<float>(i));
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string& m = merges[rank];
      const size_t space = m.find(' ');
      auto it = ids.find(m.substr(0, space) + m.substr(space + 1));
      if (it != ids.end() && scores[static_cast<size_t>(it->second)] < -static_cast<float>(rank))
        scores[static_cast<size_t>(it->second)] = -static_cast<float>(rank);
    }
    w.set_array_f32("tokenizer.ggml.scores", scores);
  }
  w.set_array_i32("tokenizer.ggml.token_type", types);
  if (!spm) w.set_array_string("tokenizer.ggml.merges", merges);

  // Special ids: tokenizer_config.json first, config.json's ids as the fallback.
  std::optional<int64_t> bos = special_id(tok_config, "bos_token", ids);
  if (!bos) bos = config.bos_token_id;
  std::optional<int64_t> eos = special_id(tok_config, "eos_token", ids);
  if (!eos && !config.eos_token_ids.empty()) eos = config.eos_token_ids.front();
  if (bos) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*bos));
  if (eos) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*eos));
  if (auto unk = special_id(tok_config, "unk_token", ids))
    w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(*unk));
  if (auto pad = special_id(tok_config, "pad_token", ids))
    w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(*pad));

  // add_bos_token: tokenizer_config.json says so, or the post-processor's template adds it.
  bool add_bos = false;
  if (tok_config.contains("add_bos_token") && tok_config["add_bos_token"].is_boolean()) {
    add_bos = tok_config["add_bos_token"].get<bool>();
  } else if (bos && tokenizer.contains("post_processor") &&
             tokenizer["post_processor"].is_object()) {
    add_bos = tokenizer["post_processor"].dump().find(tokens[static_cast<size_t>(*bos)]) !=
              std::string::npos;
  }
  w.set_bool("tokenizer.ggml.add_bos_token", add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", tok_config.value("add_eos_token", false));

  if (tok_config.contains("chat_template")) {
    const json& t = tok_config["chat_template"];
    if (t.is_string()) {
      w.set_string("tokenizer.chat_template", t.get<std::string>());
    } else if (t.is_array()) {  // [{name, template}, ...]: the default one
      for (const json& e : t) {
        if (e.value("name", "") == "default")
          w.set_string("tokenizer.chat_template", e.value("template", ""));
      }
    }
  }
}

// ---- architecture and tensors ------------------------------------------------------------

// HF tensor name → GGUF name ("" to skip), from the family's table (model/tensor_names.h).
// Throws on a name we do not know. Tensors the family's export plan builds itself (deepseek2's
// stacked experts and split kv_b_proj) are not named here.
std::string gguf_tensor_name(const std::string& hf, const std::string& path,
                             const FamilyTensorNames& names) {
  // Precomputed rope frequencies some checkpoints carry: the model computes its own.
  if (hf.ends_with(".self_attn.rotary_emb.inv_freq")) return "";
  std::string name = pagoda::gguf_tensor_name(names, hf);
  if (name.empty()) fail("{}: tensor {} has no GGUF name in export-gguf", path, hf);
  return name;
}

// llama.cpp's "llama" graph applies RoPE to adjacent pairs (x[2i], x[2i+1]); HF Llama
// checkpoints rotate halves (x[i], x[i + d/2]). convert_hf_to_gguf.py reorders the rows of
// q_proj/k_proj per head so the two agree: GGUF row h*d + 2i + j holds HF row h*d + j*d/2 + i.
int64_t permuted_source_row(int64_t row, int64_t head_dim) {
  const int64_t head = row / head_dim, r = row % head_dim;
  return head * head_dim + (r % 2) * (head_dim / 2) + r / 2;
}

// One GGUF tensor: its shape (HF order) and each of its rows as fp32 (rows: every dim but the
// last folded), from one HF tensor or from the family's plan (several, or part of one).
struct TensorPlan {
  int64_t layer;  // file order: token_embd (-1), blocks, then the output tensors
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(int64_t row, float* dst)> row;
  bool keep_f32 = false;  // norms, biases and the MoE router stay f32, as llama.cpp keeps them
};

GgufWriter::Producer make_producer(const TensorPlan& plan, GgmlType type) {
  return [row = plan.row, shape = plan.shape, type](uint8_t* dst, int64_t) {
    const int64_t cols = shape.back();
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
    const int64_t row_bytes = ggml_nbytes(type, cols);
#pragma omp parallel
    {
      std::vector<float> buf(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        row(r, buf.data());
        encode_f32(type, buf.data(), cols, dst + r * row_bytes);
      }
    }
  };
}

int64_t layer_of(const std::string& gguf_name) {
  if (gguf_name == "token_embd.weight") return -1;
  if (gguf_name.rfind("blk.", 0) == 0) return std::stoll(gguf_name.substr(4));
  return INT64_MAX;
}

int run_export_gguf(const ExportOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const ExportType export_type = parse_export_type(o.type);
  const ModelConfig config = ModelConfig::from_dir(o.model);
  const ModelFamily& family = model_family_of(config);
  const GgufArchitecture& gguf = gguf_architecture_of(config);
  const std::string arch = gguf.gguf_name;
  const TensorStore store = TensorStore::open(o.model);

  GgufWriter w;
  w.set_string("general.architecture", arch);
  w.set_string("general.name",
               o.name.empty()
                   ? std::filesystem::path(o.model).lexically_normal().filename().string()
                   : o.name);
  w.set_u32("general.file_type", export_type.file_type);
  w.set_u32("general.quantization_version", 2);  // ggml's GGML_QNT_VERSION
  gguf.add_hparams(w, config);
  add_tokenizer(w, config, o);

  std::vector<TensorPlan> plans;
  GgufExportPlan family_plan;
  if (gguf.plan_export != nullptr) family_plan = gguf.plan_export(store, config);
  for (GgufExportTensor& t : family_plan.tensors) {
    TensorPlan p{layer_of(t.name), t.name, t.shape, std::move(t.row)};
    p.keep_f32 = t.shape.size() == 1 || t.name.find(".ffn_gate_inp.") != std::string::npos;
    plans.push_back(std::move(p));
  }
  for (const auto& [hf_name, tensor] : store.tensors()) {
    if (family_plan.handled.contains(hf_name)) continue;
    std::string name = gguf_tensor_name(hf_name, tensor.path, family.tensor_names);
    if (name.empty()) continue;
    require_float_tensor(tensor, "export-gguf");
    TensorPlan p{layer_of(name), name, tensor.shape, nullptr};
    p.keep_f32 = tensor.shape.size() == 1 || name.find(".ffn_gate_inp.") != std::string::npos;
    const int64_t cols = tensor.shape.back();
    const bool permuted = gguf.permuted_qk && (name.find(".attn_q.") != std::string::npos ||
                                               name.find(".attn_k.") != std::string::npos);
    const int64_t head_dim = config.head_dim;
    if (!permuted) {
      p.row = [&tensor, cols](int64_t r, float* dst) { read_row_f32(tensor, r, cols, dst); };
    } else if (tensor.shape.size() == 1) {  // a q/k bias: its elements move as rows do
      p.row = [&tensor, cols, head_dim](int64_t, float* dst) {
        for (int64_t i = 0; i < cols; ++i)
          read_row_f32(tensor, permuted_source_row(i, head_dim), 1, dst + i);
      };
    } else {
      p.row = [&tensor, cols, head_dim](int64_t r, float* dst) {
        read_row_f32(tensor, permuted_source_row(r, head_dim), cols, dst);
      };
    }
    plans.push_back(std::move(p));
  }
  // File order as llama.cpp's converter writes it: token_embd, blk.0 ... blk.N, then the
  // output tensors (the store's own order is by name, which puts layer 10 before layer 2).
  std::sort(plans.begin(), plans.end(), [](const TensorPlan& a, const TensorPlan& b) {
    return std::tie(a.layer, a.name) < std::tie(b.layer, b.name);
  });

  int num_fallback = 0;
  for (const TensorPlan& p : plans) {
    // A matrix whose rows are not whole blocks falls back to f16.
    GgmlType type = p.keep_f32 ? GgmlType::kF32 : export_type.matrix_type;
    if (p.shape.back() % ggml_block_size(type) != 0) {
      type = GgmlType::kF16;
      ++num_fallback;
    }
    w.add_tensor(p.name, p.shape, type, make_producer(p, type));
  }
  if (num_fallback > 0)
    fmt::print(stderr, "export-gguf: {} matrices kept as F16 (rows not a multiple of 32)\n",
               num_fallback);

  w.write(o.out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("wrote {}: {} tensors, {} metadata keys, {} ({}), {:.1f} s\n", o.out, w.num_tensors(),
             w.num_metadata(), format_bytes(static_cast<uint64_t>(w.file_bytes())), o.type,
             seconds);
  return 0;
}

}  // namespace

Command register_export_gguf(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* sub = app.add_subcommand(
      "export-gguf",
      "Write a Llama/Qwen2/DeepSeek-V2/V3 Hugging Face directory as a GGUF file for llama.cpp");
  sub->add_option("--model", o->model, "Hugging Face model directory")->required();
  sub->add_option("--out", o->out, "GGUF file to write")->required();
  sub->add_option("--type", o->type, "Matrix type: f32, f16, bf16, q8_0, q4_0 (norms stay f32)")
      ->capture_default_str();
  sub->add_option("--tokenizer-pre", o->tokenizer_pre,
                  "llama.cpp pre-tokenizer name (default: detected from tokenizer.json)");
  sub->add_option("--name", o->name, "general.name (default: the directory's name)");
  return [o] { return run_export_gguf(*o); };
}

}  // namespace pagoda::cli
