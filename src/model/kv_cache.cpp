#include "model/kv_cache.h"

#include <cstring>

#include "util/error.h"

namespace pagoda {

int64_t KvCache::bytes_needed(const KvCacheSpec& spec, int32_t num_blocks, int32_t block_size) {
  return spec.bytes_per_token() * num_blocks * block_size;
}

namespace {

// Every name --kv-cache-dtype accepts (vLLM's and the long forms), and what it stores.
struct KvCacheDtypeName {
  const char* name;
  DType dtype;
};
// auto is fp16, llama.cpp's default: half fp32's memory and attention traffic, and three more
// mantissa bits than bf16 for values inside its range (|v| <= 65504; bf16 is the choice for a
// model whose keys or values go beyond it).
constexpr KvCacheDtypeName kKvCacheDtypeNames[] = {
    {"auto", DType::kF16},  {"fp32", DType::kF32},     {"float32", DType::kF32},
    {"fp16", DType::kF16},  {"float16", DType::kF16},  {"half", DType::kF16},
    {"bf16", DType::kBF16}, {"bfloat16", DType::kBF16}};

}  // namespace

DType parse_kv_cache_dtype(const std::string& name) {
  for (const KvCacheDtypeName& entry : kKvCacheDtypeNames) {
    if (name == entry.name) return entry.dtype;
  }
  fail("--kv-cache-dtype must be auto, fp32, fp16 or bf16, got '{}'", name);
}

std::vector<std::string> kv_cache_dtype_names() {
  std::vector<std::string> names;
  for (const KvCacheDtypeName& entry : kKvCacheDtypeNames) names.emplace_back(entry.name);
  return names;
}

KvCache::KvCache(const KvCacheSpec& spec, int32_t num_blocks, int32_t block_size, void* memory)
    : spec_(spec), num_blocks_(num_blocks), block_size_(block_size) {
  char* p = static_cast<char*>(memory);
  const int64_t slot_bytes = static_cast<int64_t>(num_blocks) * block_size * dtype_size(spec.dtype);
  for (int32_t i = 0; i < spec.num_layers; ++i) {
    PagedKvLayer layer{};
    layer.block_size = block_size;
    layer.num_kv_heads = spec.num_kv_heads;
    layer.k_head_dim = spec.k_head_dim;
    layer.v_head_dim = spec.v_head_dim;
    layer.dtype = spec.dtype;
    layer.k = p;
    p += slot_bytes * spec.num_kv_heads * spec.k_head_dim;
    layer.v = p;
    p += slot_bytes * spec.num_kv_heads * spec.v_head_dim;
    layers_.push_back(layer);
  }
}

void KvCache::copy_block(int32_t src_block, int32_t dst_block) {
  for (const PagedKvLayer& layer : layers_) {
    const int64_t k_block = int64_t{block_size_} * layer.num_kv_heads * layer.k_head_dim;
    const int64_t v_block = int64_t{block_size_} * layer.num_kv_heads * layer.v_head_dim;
    std::memcpy(layer.k_at(dst_block * k_block), layer.k_at(src_block * k_block),
                static_cast<size_t>(k_block * dtype_size(layer.dtype)));
    if (v_block > 0) {
      std::memcpy(layer.v_at(dst_block * v_block), layer.v_at(src_block * v_block),
                  static_cast<size_t>(v_block * dtype_size(layer.dtype)));
    }
  }
}

}  // namespace pagoda
