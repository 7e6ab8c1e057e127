// The paged KV cache tensors: for each layer, K and V as
// [num_blocks, block_size, num_kv_heads, head_dim] in the cache dtype (fp32, or fp16 / bf16 with
// --kv-cache-dtype), carved out of one allocation.
// Which request owns which block is the KV cache manager's business, not this file's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "util/dtype.h"

namespace pagoda {

// What one token costs in every layer: the model declares it, the engine sizes the pool.
struct KvCacheSpec {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t k_head_dim = 0;
  int32_t v_head_dim = 0;  // 0 for caches that hold one latent vector per token (MLA)

  // Element type of every layer's K and V: kF32, kF16 or kBF16. The model leaves it at kF32;
  // the engine sets it from --kv-cache-dtype.
  DType dtype = DType::kF32;

  int64_t values_per_token_per_layer() const {
    return static_cast<int64_t>(num_kv_heads) * (k_head_dim + v_head_dim);
  }
  int64_t bytes_per_token() const {
    return values_per_token_per_layer() * num_layers * dtype_size(dtype);
  }
};

// The KV cache dtype a --kv-cache-dtype value names: "fp32"/"float32" give kF32, "auto" and
// "fp16"/"float16"/"half" kF16, "bf16"/"bfloat16" kBF16. Throws pagoda::Error otherwise.
DType parse_kv_cache_dtype(const std::string& name);
// Every name parse_kv_cache_dtype accepts, for command-line checks.
std::vector<std::string> kv_cache_dtype_names();

class KvCache {
 public:
  // `memory` must hold bytes_needed(spec, num_blocks, block_size) bytes and outlive the cache.
  KvCache(const KvCacheSpec& spec, int32_t num_blocks, int32_t block_size, void* memory);

  static int64_t bytes_needed(const KvCacheSpec& spec, int32_t num_blocks, int32_t block_size);

  const PagedKvLayer& layer(int32_t i) const { return layers_[static_cast<size_t>(i)]; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  const KvCacheSpec& spec() const { return spec_; }

  // Copy-on-write support: duplicate one block's contents in every layer.
  void copy_block(int32_t src_block, int32_t dst_block);

 private:
  KvCacheSpec spec_;
  int32_t num_blocks_;
  int32_t block_size_;
  std::vector<PagedKvLayer> layers_;
};

}  // namespace pagoda
