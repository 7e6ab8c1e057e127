#include "model/kv_cache.h"

#include <cstring>

namespace pagoda {

int64_t KvCache::bytes_needed(const KvCacheSpec& spec, int32_t num_blocks, int32_t block_size) {
  return spec.bytes_per_token() * num_blocks * block_size;
}

KvCache::KvCache(const KvCacheSpec& spec, int32_t num_blocks, int32_t block_size, void* memory)
    : spec_(spec), num_blocks_(num_blocks), block_size_(block_size) {
  float* p = static_cast<float*>(memory);
  const int64_t slots = static_cast<int64_t>(num_blocks) * block_size;
  for (int32_t i = 0; i < spec.num_layers; ++i) {
    PagedKvLayer layer{};
    layer.block_size = block_size;
    layer.num_kv_heads = spec.num_kv_heads;
    layer.k_head_dim = spec.k_head_dim;
    layer.v_head_dim = spec.v_head_dim;
    layer.k = p;
    p += slots * spec.num_kv_heads * spec.k_head_dim;
    layer.v = p;
    p += slots * spec.num_kv_heads * spec.v_head_dim;
    layers_.push_back(layer);
  }
}

void KvCache::copy_block(int32_t src_block, int32_t dst_block) {
  for (const PagedKvLayer& layer : layers_) {
    const int64_t k_block =
        static_cast<int64_t>(block_size_) * layer.num_kv_heads * layer.k_head_dim;
    const int64_t v_block =
        static_cast<int64_t>(block_size_) * layer.num_kv_heads * layer.v_head_dim;
    std::memcpy(layer.k + dst_block * k_block, layer.k + src_block * k_block,
                k_block * sizeof(float));
    if (v_block > 0) {
      std::memcpy(layer.v + dst_block * v_block, layer.v + src_block * v_block,
                  v_block * sizeof(float));
    }
  }
}

}  // namespace pagoda
