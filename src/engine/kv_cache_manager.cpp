// KvCacheManager: prefix lookup, slot allocation, block caching, n > 1 forks, freeing.
#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <cassert>

#include "util/error.h"

namespace pagoda {

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config), pool_(config.num_blocks, config.enable_prefix_caching) {
  if (config.block_size <= 0)
    fail("KvCacheManager: block_size must be positive, got {}", config.block_size);
}

ComputedBlocks KvCacheManager::get_computed_blocks(const Request& request) {
  ComputedBlocks result;
  if (!config_.enable_prefix_caching || request.num_tokens() == 0) return result;
  // A cached prefix has no logits, so a request asking for prompt logprobs computes its whole
  // prompt (vLLM's KVCacheManager skips the lookup the same way). Its blocks are still cached.
  if (request.sampling_params.prompt_logprobs.has_value()) return result;
  RequestBlocks& entry = requests_[request.request_id];
  extend_block_hashes(request.all_token_ids(), config_.block_size, entry.block_hashes);
  // Leave at least the last token to compute: its logits start the generation.
  const size_t max_blocks = static_cast<size_t>((request.num_tokens() - 1) / config_.block_size);
  for (size_t i = 0; i < max_blocks && i < entry.block_hashes.size(); ++i) {
    const auto block_id = pool_.get_cached_block(entry.block_hashes[i]);
    if (!block_id) break;
    result.block_ids.push_back(*block_id);
  }
  result.num_tokens = static_cast<int32_t>(result.block_ids.size()) * config_.block_size;
  return result;
}

bool KvCacheManager::allocate_slots(const Request& request, int32_t num_new_tokens,
                                    const ComputedBlocks* new_computed,
                                    int32_t num_lookahead_tokens) {
  assert(num_new_tokens >= 0 && num_lookahead_tokens >= 0);
  RequestBlocks& entry = requests_[request.request_id];
  const std::span<const int32_t> computed = new_computed != nullptr
                                                ? std::span<const int32_t>(new_computed->block_ids)
                                                : std::span<const int32_t>();
  // A cached prefix is only taken by a request that holds nothing yet.
  assert(computed.empty() || (entry.block_ids.empty() && request.num_computed_tokens == 0));

  const int32_t num_computed_tokens =
      request.num_computed_tokens + (new_computed != nullptr ? new_computed->num_tokens : 0);
  const int32_t num_total_tokens = num_computed_tokens + num_new_tokens + num_lookahead_tokens;
  const int32_t num_required_blocks =
      (num_total_tokens + config_.block_size - 1) / config_.block_size;
  const int32_t num_held = static_cast<int32_t>(entry.block_ids.size() + computed.size());
  const int32_t num_new_blocks = std::max(0, num_required_blocks - num_held);

  // Cached blocks that are free now would leave the free queue when we take them.
  const auto num_evictable_computed = static_cast<int32_t>(std::count_if(
      computed.begin(), computed.end(), [&](int32_t id) { return pool_.ref_count(id) == 0; }));
  if (num_new_blocks > pool_.num_free_blocks() - num_evictable_computed) return false;

  pool_.touch(computed);
  entry.block_ids.insert(entry.block_ids.end(), computed.begin(), computed.end());
  if (new_computed != nullptr) {
    entry.num_cached_blocks = static_cast<int32_t>(computed.size());
    if (config_.enable_prefix_caching) {
      stats_.num_query_tokens += request.num_prompt_tokens();
      stats_.num_hit_tokens += std::min(new_computed->num_tokens, request.num_prompt_tokens());
    }
  }
  const bool ok = pool_.get_new_blocks(num_new_blocks, entry.block_ids);
  assert(ok);
  (void)ok;
  return true;
}

void KvCacheManager::cache_computed_blocks(const Request& request) {
  if (!config_.enable_prefix_caching) return;
  auto it = requests_.find(request.request_id);
  if (it == requests_.end()) return;
  RequestBlocks& entry = it->second;
  const auto num_full = std::min<int32_t>(request.num_computed_tokens / config_.block_size,
                                          static_cast<int32_t>(entry.block_ids.size()));
  if (num_full <= entry.num_cached_blocks) return;
  const auto computed_tokens = std::span<const int32_t>(request.all_token_ids())
                                   .first(static_cast<size_t>(num_full * config_.block_size));
  extend_block_hashes(computed_tokens, config_.block_size, entry.block_hashes);
  for (int32_t i = entry.num_cached_blocks; i < num_full; ++i) {
    pool_.cache_full_block(entry.block_ids[static_cast<size_t>(i)],
                           entry.block_hashes[static_cast<size_t>(i)]);
  }
  entry.num_cached_blocks = num_full;
}

bool KvCacheManager::fork(const Request& leader, const Request& sample, BlockCopy& copy) {
  const int32_t num_prompt = leader.num_prompt_tokens();
  assert(num_prompt > 0 && sample.num_prompt_tokens() == num_prompt);
  if (leader.num_computed_tokens < num_prompt) return false;
  auto leader_it = requests_.find(leader.request_id);
  if (leader_it == requests_.end()) return false;
  const RequestBlocks& source = leader_it->second;
  // The block holding the last prompt token is the one the sample writes into.
  const auto last_block = static_cast<size_t>((num_prompt - 1) / config_.block_size);
  if (source.block_ids.size() <= last_block) return false;
  if (pool_.num_free_blocks() < 1) return false;

  RequestBlocks& entry = requests_[sample.request_id];
  assert(entry.block_ids.empty());
  const auto shared = std::span<const int32_t>(source.block_ids).first(last_block);
  pool_.touch(shared);
  entry.block_ids.assign(shared.begin(), shared.end());
  pool_.get_new_blocks(1, entry.block_ids);
  entry.num_cached_blocks = std::min(static_cast<int32_t>(last_block), source.num_cached_blocks);
  copy = BlockCopy{source.block_ids[last_block], entry.block_ids.back()};
  return true;
}

void KvCacheManager::free(const Request& request) {
  auto it = requests_.find(request.request_id);
  if (it == requests_.end()) return;
  std::vector<int32_t>& ids = it->second.block_ids;
  std::reverse(ids.begin(), ids.end());
  pool_.free_blocks(ids);
  requests_.erase(it);
}

std::span<const int32_t> KvCacheManager::block_table(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return {};
  return it->second.block_ids;
}

KvSlotUsage KvCacheManager::slot_usage(std::span<const Request* const> requests) const {
  std::unordered_map<int32_t, int32_t> filled;  // block id -> filled slots
  for (const Request* r : requests) {
    const auto table = block_table(r->request_id);
    for (size_t i = 0; i < table.size(); ++i) {
      const int32_t start = static_cast<int32_t>(i) * config_.block_size;
      const int32_t f = std::clamp(r->num_computed_tokens - start, 0, config_.block_size);
      int32_t& slot = filled[table[i]];
      slot = std::max(slot, f);
    }
  }
  KvSlotUsage usage;
  usage.num_allocated_slots = static_cast<int64_t>(filled.size()) * config_.block_size;
  for (const auto& [id, f] : filled) usage.num_used_slots += f;
  return usage;
}

}  // namespace pagoda
