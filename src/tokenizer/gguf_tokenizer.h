// A GGUF file's tokenizer (its tokenizer.ggml.* metadata) as a pagoda::Tokenizer. We build the
// Hugging Face tokenizer.json / tokenizer_config.json the vocab came from, in memory, and load
// that, so GGUF models tokenize exactly like the HF tokenizers they were converted from:
//   model "gpt2"  byte-level BPE; vocab and merges as stored; the pre-tokenizer regexes that
//                 tokenizer.ggml.pre names (deepseek-llm, deepseek-coder, deepseek-v3, qwen2,
//                 llama-bpe, ... as in llama.cpp's llama-vocab.cpp; none/"default"/"gpt2":
//                 GPT-2's).
//   model "llama" SentencePiece with scores: BPE with byte fallback whose merges are every
//                 split of a piece into two pieces, ranked by the merged piece's score -- the
//                 pair llama.cpp's SPM tokenizer merges first is the one ranked first here --
//                 with Llama's "▁" prefix/space normalizer.
// Control (type 3) and unknown (2) tokens become special added tokens, user-defined (4) ones
// non-special added tokens; BOS/EOS and add_bos/add_eos go into the config (without
// tokenizer.ggml.add_bos_token, BOS is added for SPM and Llama 3 vocabs, as llama.cpp does).
//
// The tokenizer room does not read GGUF files itself (it is a leaf); the model room fills a
// GgufVocab from a GgufFile (model/gguf_model.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace pagoda {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The tokenizer.ggml.* keys. Views point into the GGUF file's map, which must outlive the call.
struct GgufVocab {
  std::string origin;  // the .gguf path, for errors
  std::string model;   // tokenizer.ggml.model
  std::string pre;     // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string_view> tokens;
  std::vector<int64_t> token_types;  // empty: all normal
  std::vector<float> scores;         // SPM only
  std::vector<std::string_view> merges;
  std::optional<int64_t> bos_id, eos_id, unk_id, pad_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;  // tokenizer.chat_template
};

struct GgufTokenizerJson {
  nlohmann::json tokenizer;  // tokenizer.json
  nlohmann::json config;     // tokenizer_config.json
};

// Throws pagoda::Error "FILE: tokenizer.ggml.KEY ..." (one line) for an unsupported model or
// pre-tokenizer, or inconsistent arrays / ids.
GgufTokenizerJson gguf_tokenizer_json(const GgufVocab& vocab);
Tokenizer tokenizer_from_gguf(const GgufVocab& vocab);

}  // namespace pagoda
