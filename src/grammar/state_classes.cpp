// Partition refinement for token-equivalent PDA states.
#include "grammar/state_classes.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <unordered_map>

namespace pagoda::grammar {
namespace {

struct ByteSetHash {
  size_t operator()(const ByteSet& s) const {
    uint64_t h = 0;
    for (int i = 0; i < 4; ++i) h = h * 0x9E3779B97F4A7C15ull ^ s.word(i);
    return static_cast<size_t>(h);
  }
};

struct SignatureHash {
  size_t operator()(const std::vector<int64_t>& v) const {
    uint64_t h = v.size();
    for (const int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 0x100000001B3ull;
    return static_cast<size_t>(h);
  }
};

}  // namespace

std::vector<int32_t> token_equivalent_states(const Pda& pda, size_t max_depth, int max_states) {
  const int n = pda.num_states();
  std::vector<int32_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  if (n > max_states) return identity;

  // Byte sets by id, so signatures are integers.
  std::unordered_map<ByteSet, int64_t, ByteSetHash> set_ids;
  std::vector<std::vector<std::pair<int64_t, int32_t>>> byte_edges(n);
  for (int32_t s = 0; s < n; ++s) {
    for (const auto& e : pda.byte_edges(s)) {
      const auto id = set_ids.emplace(e.bytes, static_cast<int64_t>(set_ids.size())).first->second;
      byte_edges[s].emplace_back(id, e.target);
    }
  }

  // One refinement pass: new classes from (class, byte edges into `shallower`, rule edges into
  // `current`). Returns the number of classes.
  std::vector<int64_t> signature;
  std::unordered_map<std::vector<int64_t>, int32_t, SignatureHash> ids;
  std::vector<std::pair<int64_t, int64_t>> edges;
  auto refine = [&](const std::vector<int32_t>* shallower, std::vector<int32_t>& current) {
    ids.clear();
    std::vector<int32_t> next(n);
    for (int32_t s = 0; s < n; ++s) {
      signature.assign({current[s], pda.is_final(s) ? 1 : 0});
      if (shallower) {
        edges.clear();
        for (const auto& [set, target] : byte_edges[s])
          edges.emplace_back(set, (*shallower)[target]);
        std::sort(edges.begin(), edges.end());
        edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
        signature.push_back(-1);
        for (const auto& [a, b] : edges) signature.insert(signature.end(), {a, b});
      }
      edges.clear();
      for (const auto& e : pda.rule_edges(s)) edges.emplace_back(e.rule_id, current[e.target]);
      std::sort(edges.begin(), edges.end());
      edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
      signature.push_back(-2);
      for (const auto& [a, b] : edges) signature.insert(signature.end(), {a, b});
      next[s] = ids.emplace(signature, static_cast<int32_t>(ids.size())).first->second;
    }
    current = std::move(next);
    return ids.size();
  };
  // Refines until the rule-edge (same-depth) condition holds.
  auto settle = [&](const std::vector<int32_t>* shallower, std::vector<int32_t>& current) {
    size_t count = 0;
    for (;;) {
      const size_t next_count = refine(shallower, current);
      if (next_count == count) return count;
      count = next_count;
    }
  };

  std::vector<int32_t> classes(n, 0);
  size_t count = settle(nullptr, classes);
  for (size_t depth = 1; depth <= max_depth; ++depth) {
    const std::vector<int32_t> shallower = classes;
    const size_t next_count = settle(&shallower, classes);
    if (next_count == count) break;  // stable: equal at every depth from here on
    count = next_count;
  }
  return classes;
}

}  // namespace pagoda::grammar
