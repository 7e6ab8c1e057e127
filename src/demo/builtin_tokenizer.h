// Pagoda's own small tokenizer, so generated models (and the `demo` model) work on a machine
// with nothing downloaded. It is a byte-level BPE in the standard Hugging Face tokenizer.json
// format (GPT-2 byte-to-unicode alphabet, ByteLevel pre-tokenizer with the GPT-2 regex),
// with merges learned by a tiny deterministic trainer from a built-in English text and
// DeepSeek-style special tokens, plus a tokenizer_config.json with a DeepSeek-V3-style chat
// template.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda {

inline constexpr const char* kBuiltinBosToken = "<｜begin▁of▁sentence｜>";
inline constexpr const char* kBuiltinEosToken = "<｜end▁of▁sentence｜>";
inline constexpr const char* kBuiltinUserToken = "<｜User｜>";
inline constexpr const char* kBuiltinAssistantToken = "<｜Assistant｜>";
// Ids: the four special tokens first (bos 0, eos 1, User 2, Assistant 3), then the 256 bytes,
// then one id per learned merge.
inline constexpr int64_t kBuiltinNumSpecialTokens = 4;
inline constexpr int64_t kBuiltinMinVocabSize = kBuiltinNumSpecialTokens + 256;

struct BuiltinTokenizer {
  nlohmann::json tokenizer_json;         // tokenizer.json
  nlohmann::json tokenizer_config_json;  // tokenizer_config.json
  int64_t vocab_size = 0;                // ids are 0 .. vocab_size-1
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
};

// GPT-2's reversible map from a byte to a printable unicode character, UTF-8 encoded
// (printable ASCII and Latin-1 map to themselves, the rest to U+0100 upwards).
std::string byte_to_unicode(uint8_t byte);

// Splits text the way GPT-2's pre-tokenizer regex does for ASCII text (contractions, words
// with their leading space, numbers, punctuation runs, whitespace). Bytes >= 0x80 count as
// letters. Used for training only.
std::vector<std::string> pretokenize_gpt2(const std::string& text);

// Learns up to `max_merges` BPE merges from `text`: the most frequent adjacent pair first,
// ties broken by the lexicographically smallest pair, so the result is deterministic.
// Symbols are byte-level unicode strings.
std::vector<std::pair<std::string, std::string>> train_bpe(const std::string& text,
                                                           int64_t max_merges);

// The built-in tokenizer with at most `max_vocab_size` ids (at least kBuiltinMinVocabSize;
// the built-in text supports a few thousand). `model_max_length` goes into the config.
BuiltinTokenizer build_builtin_tokenizer(int64_t max_vocab_size, int64_t model_max_length);

// The English text the merges are learned from.
const std::string& builtin_training_text();

}  // namespace pagoda
