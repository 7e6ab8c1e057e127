// The BPE model of HF tokenizer.json ("model": {"type": "BPE"}): vocab, ranked merges, byte
// fallback (<0xXX> pieces), unk with fuse_unk, ignore_merges, continuing_subword_prefix and
// end_of_word_suffix. Used for both byte-level BPE (GPT-2/DeepSeek/Qwen/Llama-3) and
// SentencePiece-style BPE (Llama-2, stories260K). Mirrors tokenizers/src/models/bpe/*.rs.
#pragma once

#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pagoda {

using TokenId = int32_t;

// Transparent string hashing so lookups by string_view do not allocate.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using VocabMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Parses `spec` (the "model" object). Throws pagoda::Error naming `file` on malformed data or
  // a merge whose parts or result are not in the vocab.
  BpeModel(const nlohmann::json& spec, std::string_view file);

  // Appends the ids of one pre-tokenized piece to `out`. Thread-safe.
  void tokenize(std::string_view piece, std::vector<TokenId>& out) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  // Empty view when `id` is not in the vocab.
  std::string_view id_to_token(TokenId id) const;
  // One past the largest id in the vocab.
  size_t id_limit() const { return tokens_.size(); }
  size_t num_merges() const { return merges_.size(); }

 private:
  struct MergeInfo {
    uint32_t rank;
    TokenId new_id;
  };
  struct PairHash {
    size_t operator()(uint64_t key) const { return key * 0x9E3779B97F4A7C15ull >> 17; }
  };
  static uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Splits the piece into initial symbols (chars, byte fallback, unk) and merges them.
  void merge_word(std::string_view piece, std::vector<TokenId>& out) const;

  VocabMap vocab_;
  std::vector<std::string> tokens_;  // id -> token, empty for holes
  std::unordered_map<uint64_t, MergeInfo, PairHash> merges_;
  std::optional<TokenId> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::vector<TokenId> byte_fallback_ids_;  // <0xXX> ids, -1 when absent

  // Word cache (HF keeps one too): piece -> ids, for pieces shorter than kMaxCachedBytes.
  static constexpr size_t kMaxCachedBytes = 256;
  static constexpr size_t kCacheCapacity = 1 << 17;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> cache_;
};

}  // namespace pagoda
