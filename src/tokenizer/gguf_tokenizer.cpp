// Building HF tokenizer.json / tokenizer_config.json from GGUF tokenizer metadata; see
// gguf_tokenizer.h. The pre-tokenizer regexes are the ones the HF tokenizers use (and
// llama.cpp's llama-vocab.cpp repeats for each tokenizer.ggml.pre name).
#include "tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

// Split regexes (each Isolated) applied before the byte-level mapping.
const char* const kDeepseekLlm[] = {
    R"([\r\n])",
    R"(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)",
    R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)",
    R"(\s+$)",
    R"([一-龥ࠀ-一가-퟿]+)",
    R"(\p{N}+)",
};
const char* const kDeepseekCoder[] = {
    R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([一-龥ࠀ-一가-퟿]+)", R"(\p{N})",
};
const char* const kDeepseekV3[] = {
    R"(\p{N}{1,3})",
    R"([一-龥぀-ゟ゠-ヿ]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
const char* const kQwen2[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
const char* const kLlama3[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

struct PreTokenizerSpec {
  const char* const* regexes = nullptr;
  size_t num_regexes = 0;
  bool nfc = false;            // Qwen2's tokenizer.json normalizes to NFC
  bool ignore_merges = false;  // Llama 3: whole words in the vocab skip merging
  bool add_bos = false;        // llama.cpp's default when add_bos_token is absent
};

template <size_t N>
PreTokenizerSpec spec(const char* const (&regexes)[N], bool nfc = false, bool llama3 = false) {
  return {regexes, N, nfc, llama3, llama3};
}

// tokenizer.ggml.pre names, as llama.cpp's converter writes them. Empty regexes: GPT-2's.
bool find_pre_tokenizer(const std::string& pre, PreTokenizerSpec& out) {
  if (pre.empty() || pre == "default" || pre == "gpt2" || pre == "gpt-2") {
    out = {};
  } else if (pre == "deepseek-llm") {
    out = spec(kDeepseekLlm);
  } else if (pre == "deepseek-coder") {
    out = spec(kDeepseekCoder);
  } else if (pre == "deepseek-v3") {
    out = spec(kDeepseekV3);
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    out = spec(kQwen2, /*nfc=*/true);
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    out = spec(kLlama3, /*nfc=*/false, /*llama3=*/true);
  } else {
    return false;
  }
  return true;
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

GgufTokenType type_of(const GgufVocab& v, size_t id) {
  return v.token_types.empty() ? GgufTokenType::kNormal
                               : static_cast<GgufTokenType>(v.token_types[id]);
}

// Control/unknown tokens are special added tokens; user-defined ones plain added tokens.
json added_tokens(const GgufVocab& v) {
  json added = json::array();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const GgufTokenType type = type_of(v, id);
    const bool special = type == GgufTokenType::kControl || type == GgufTokenType::kUnknown;
    if (!special && type != GgufTokenType::kUserDefined) continue;
    if (v.tokens[id].empty()) continue;  // an added token must have content
    added.push_back({{"id", id},
                     {"content", std::string(v.tokens[id])},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", !special},
                     {"special", special}});
  }
  return added;
}

// token -> id, keeping the first id of a text that occurs twice.
json vocab_object(const GgufVocab& v) {
  json vocab = json::object();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string token(v.tokens[id]);
    if (!vocab.contains(token)) vocab[token] = id;
  }
  return vocab;
}

std::optional<std::string> token_text(const GgufVocab& v, const std::optional<int64_t>& id,
                                      const char* key) {
  if (!id) return std::nullopt;
  if (*id < 0 || static_cast<size_t>(*id) >= v.tokens.size()) {
    fail("{}: tokenizer.ggml.{} = {} is not a token id (the vocab has {} tokens)", v.origin, key,
         *id, v.tokens.size());
  }
  return std::string(v.tokens[static_cast<size_t>(*id)]);
}

// SentencePiece merges: every split of a piece into two vocab pieces, ranked by the merged
// piece's score (highest first; equal scores by id), which is the order llama.cpp's SPM
// tokenizer (and sentencepiece's BPE) merges in.
json spm_merges(const GgufVocab& v) {
  std::unordered_map<std::string_view, size_t> ids;
  ids.reserve(v.tokens.size());
  for (size_t id = 0; id < v.tokens.size(); ++id) ids.emplace(v.tokens[id], id);
  std::vector<size_t> order(v.tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return v.scores[a] > v.scores[b]; });
  json merges = json::array();
  for (size_t id : order) {
    const GgufTokenType type = type_of(v, id);
    if (type == GgufTokenType::kControl || type == GgufTokenType::kUnknown ||
        type == GgufTokenType::kByte) {
      continue;
    }
    const std::string_view piece = v.tokens[id];
    if (piece.empty()) continue;
    for (size_t split = utf8_sequence_length(static_cast<unsigned char>(piece[0]));
         split < piece.size();
         split += utf8_sequence_length(static_cast<unsigned char>(piece[split]))) {
      const std::string_view left = piece.substr(0, split), right = piece.substr(split);
      if (ids.count(left) && ids.count(right)) {
        merges.push_back(json::array({std::string(left), std::string(right)}));
      }
    }
  }
  return merges;
}

}  // namespace

GgufTokenizerJson gguf_tokenizer_json(const GgufVocab& v) {
  if (v.tokens.empty()) fail("{}: tokenizer.ggml.tokens is missing or empty", v.origin);
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size()) {
    fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", v.origin,
         v.token_types.size(), v.tokens.size());
  }
  GgufTokenizerJson out;
  json& t = out.tokenizer;
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["added_tokens"] = added_tokens(v);
  t["post_processor"] = nullptr;  // BOS/EOS come from the config (add_bos_token)

  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}};
  const bool spm = v.model == "llama";
  bool default_add_bos = spm;
  if (v.model == "gpt2") {
    PreTokenizerSpec pre;
    if (!find_pre_tokenizer(v.pre, pre)) {
      fail(
          "{}: tokenizer.ggml.pre '{}' is not supported (supported: default, gpt2, "
          "deepseek-llm, deepseek-coder, deepseek-v3, qwen2, deepseek-r1-qwen, llama-bpe)",
          v.origin, v.pre);
    }
    json pre_tokenizer;
    if (pre.num_regexes == 0) {
      pre_tokenizer = byte_level(/*use_regex=*/true);
    } else {
      json steps = json::array();
      for (size_t i = 0; i < pre.num_regexes; ++i) {
        steps.push_back({{"type", "Split"},
                         {"pattern", {{"Regex", pre.regexes[i]}}},
                         {"behavior", "Isolated"},
                         {"invert", false}});
      }
      steps.push_back(byte_level(/*use_regex=*/false));
      pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", steps}};
    }
    t["normalizer"] = pre.nfc ? json{{"type", "NFC"}} : json(nullptr);
    t["pre_tokenizer"] = pre_tokenizer;
    t["decoder"] = byte_level(/*use_regex=*/true);
    model["unk_token"] = nullptr;
    model["fuse_unk"] = false;
    model["byte_fallback"] = false;
    model["ignore_merges"] = pre.ignore_merges;
    default_add_bos = pre.add_bos;
    model["vocab"] = vocab_object(v);
    json merges = json::array();
    for (std::string_view m : v.merges) merges.push_back(std::string(m));
    if (merges.empty()) fail("{}: tokenizer.ggml.merges is missing for a BPE vocab", v.origin);
    model["merges"] = std::move(merges);
  } else if (spm) {
    if (v.scores.size() != v.tokens.size()) {
      fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", v.origin, v.scores.size(),
           v.tokens.size());
    }
    const bool add_space_prefix = v.add_space_prefix.value_or(true);
    json normalizers = json::array();
    if (add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}});
    normalizers.push_back(
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}});
    t["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    t["pre_tokenizer"] = nullptr;
    json decoders = json::array(
        {{{"type", "Replace"}, {"pattern", {{"String", "\xe2\x96\x81"}}}, {"content", " "}},
         {{"type", "ByteFallback"}},
         {{"type", "Fuse"}}});
    if (add_space_prefix) {
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    t["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    std::optional<int64_t> unk = v.unk_id;
    if (!unk) {
      for (size_t id = 0; id < v.tokens.size(); ++id) {
        if (type_of(v, id) == GgufTokenType::kUnknown) {
          unk = static_cast<int64_t>(id);
          break;
        }
      }
    }
    const auto unk_text = token_text(v, unk, "unknown_token_id");
    model["unk_token"] = unk_text ? json(*unk_text) : json(nullptr);
    model["fuse_unk"] = true;
    model["byte_fallback"] = true;
    model["ignore_merges"] = false;
    model["vocab"] = vocab_object(v);
    model["merges"] = spm_merges(v);
  } else {
    fail("{}: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama)", v.origin,
         v.model);
  }
  t["model"] = std::move(model);

  json& c = out.config;
  c["tokenizer_class"] = "LlamaTokenizerFast";  // so add_bos_token / add_eos_token apply
  c["add_bos_token"] = v.add_bos.value_or(default_add_bos);
  c["add_eos_token"] = v.add_eos.value_or(false);
  c["clean_up_tokenization_spaces"] = false;
  const auto bos = token_text(v, v.bos_id, "bos_token_id");
  const auto eos = token_text(v, v.eos_id, "eos_token_id");
  c["bos_token"] = bos ? json(*bos) : json(nullptr);
  c["eos_token"] = eos ? json(*eos) : json(nullptr);
  if (const auto pad = token_text(v, v.pad_id, "padding_token_id")) c["pad_token"] = *pad;
  if (!v.chat_template.empty()) c["chat_template"] = v.chat_template;
  return out;
}

Tokenizer tokenizer_from_gguf(const GgufVocab& vocab) {
  const GgufTokenizerJson j = gguf_tokenizer_json(vocab);
  return Tokenizer::from_json(j.tokenizer, &j.config, vocab.origin);
}

}  // namespace pagoda
