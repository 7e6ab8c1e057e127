// BPE merging with a priority queue over a linked list of symbols, exactly as HF's
// Word::merge_all: lowest merge rank first, leftmost position among equal ranks.
#include "tokenizer/bpe_model.h"

#include <mutex>
#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace pagoda {

namespace {

std::string optional_string(const nlohmann::json& spec, const char* key) {
  if (!spec.contains(key) || spec[key].is_null()) return {};
  return spec[key].get<std::string>();
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& spec, std::string_view file) {
  try {
    if (spec.value("dropout", nlohmann::json()).is_number() && spec["dropout"].get<double>() > 0) {
      fail("{}: model: BPE dropout is not supported for inference", file);
    }
    const auto& vocab = spec.at("vocab");
    if (!vocab.is_object()) fail("{}: model.vocab must be an object", file);
    vocab_.reserve(vocab.size());
    for (const auto& [token, id_json] : vocab.items()) {
      const auto id = id_json.get<TokenId>();
      if (id < 0) fail("{}: model.vocab['{}'] has negative id {}", file, token, id);
      vocab_.emplace(token, id);
      if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(id + 1);
      tokens_[id] = token;
    }
    continuing_subword_prefix_ = optional_string(spec, "continuing_subword_prefix");
    end_of_word_suffix_ = optional_string(spec, "end_of_word_suffix");
    fuse_unk_ = spec.value("fuse_unk", false);
    byte_fallback_ = spec.value("byte_fallback", false);
    ignore_merges_ = spec.value("ignore_merges", false);
    const std::string unk = optional_string(spec, "unk_token");
    if (!unk.empty()) {
      auto it = vocab_.find(unk);
      if (it == vocab_.end()) fail("{}: model.unk_token '{}' is not in the vocab", file, unk);
      unk_id_ = it->second;
    }
    byte_fallback_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      if (auto id = token_to_id(fmt::format("<0x{:02X}>", b))) byte_fallback_ids_[b] = *id;
    }

    const auto& merges = spec.contains("merges") ? spec["merges"] : nlohmann::json::array();
    merges_.reserve(merges.size() * 2);
    const size_t prefix_len = continuing_subword_prefix_.size();
    uint32_t rank = 0;
    for (const auto& merge : merges) {
      std::string left, right;
      if (merge.is_string()) {  // "a b" (tokenizers < 0.20)
        const auto line = merge.get<std::string>();
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
          fail("{}: model.merges[{}] '{}' is not two space-separated tokens", file, rank, line);
        }
        left = line.substr(0, space);
        right = line.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2) {  // ["a", "b"]
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      } else {
        fail("{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"]", file, rank);
      }
      auto a = vocab_.find(left);
      auto b = vocab_.find(right);
      if (a == vocab_.end() || b == vocab_.end()) {
        fail("{}: model.merges[{}]: '{}' or '{}' is not in the vocab", file, rank, left, right);
      }
      const std::string merged =
          left + (right.size() >= prefix_len ? right.substr(prefix_len) : std::string());
      auto m = vocab_.find(merged);
      if (m == vocab_.end()) {
        fail("{}: model.merges[{}]: merged token '{}' is not in the vocab", file, rank, merged);
      }
      // HF collects merges into a map, so a repeated pair keeps its last rank.
      merges_[pair_key(a->second, b->second)] = MergeInfo{rank, m->second};
      ++rank;
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: model: {}", file, e.what());
  }
}

std::optional<TokenId> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::string_view BpeModel::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return {};
  return tokens_[id];
}

void BpeModel::tokenize(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(piece)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = piece.size() < kMaxCachedBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(piece, out);
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(piece), std::vector<TokenId>(out.begin() + first, out.end()));
    }
  }
}

void BpeModel::merge_word(std::string_view piece, std::vector<TokenId>& out) const {
  struct Symbol {
    TokenId id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  auto add = [&](TokenId id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };

  // 1. Initial symbols: one per character, else its <0xXX> bytes, else unk (fused if asked).
  TokenId pending_unk = -1;  // an unk not yet emitted (fuse_unk grows it)
  std::string scratch;
  size_t pos = 0;
  while (pos < piece.size()) {
    const size_t begin = pos;
    next_code_point(piece, pos);
    std::string_view ch = piece.substr(begin, pos - begin);
    const bool has_prefix = begin > 0 && !continuing_subword_prefix_.empty();
    const bool has_suffix = pos == piece.size() && !end_of_word_suffix_.empty();
    if (has_prefix || has_suffix) {
      scratch.clear();
      if (has_prefix) scratch += continuing_subword_prefix_;
      scratch += ch;
      if (has_suffix) scratch += end_of_word_suffix_;
      ch = scratch;
    }
    if (auto id = token_to_id(ch)) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : ch) all &= byte_fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        // HF does not flush a pending unk here; it stays pending until the next known char.
        for (const char c : ch) add(byte_fallback_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
    // Without an unk token HF silently drops the character; so do we.
  }
  if (pending_unk >= 0) add(pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // 2. Merge by rank with a min-heap of (rank, position); stale entries are skipped on pop.
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    TokenId new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    const int32_t right_pos = left.next;
    auto it = merges_.find(pair_key(left.id, symbols[right_pos].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    symbols[right_pos].alive = false;
    left.next = symbols[right_pos].next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace pagoda
