// Inputs and plain scalar results the communicator tests compare against: rank r's value i is a
// fixed function of (seed, r, i), so every process of a test, and the test itself, can build any
// rank's input without exchanging it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "util/dtype.h"
#include "util/half.h"

namespace pagoda::test {

// A float in [-4, 4) with `fraction_bits` bits after the binary point (SplitMix64 of the inputs).
// With few fraction bits every sum of a handful of values is exact in fp32, whatever the order
// of summation (what MPI's results are compared with).
inline float rank_value(uint64_t seed, int rank, size_t i, int fraction_bits = 20) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank) * 0xbf58476d1ce4e5b9ull +
               static_cast<uint64_t>(i) + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const int64_t steps = int64_t{8} << fraction_bits;  // values per [-4, 4)
  const int64_t k = static_cast<int64_t>(z % static_cast<uint64_t>(steps)) - steps / 2;
  return static_cast<float>(k) / static_cast<float>(int64_t{1} << fraction_bits);
}

// Rank r's input of `count` elements of `dtype` (f32, bf16 or f16 bits), as raw 16/32-bit words.
inline std::vector<uint32_t> rank_input(uint64_t seed, int rank, size_t count, DType dtype,
                                        int fraction_bits = 20) {
  std::vector<uint32_t> words(count);
  for (size_t i = 0; i < count; ++i) {
    const float v = rank_value(seed, rank, i, fraction_bits);
    if (dtype == DType::kBF16) {
      words[i] = f32_to_bf16(v);
    } else if (dtype == DType::kF16) {
      words[i] = f32_to_f16(v);
    } else {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      words[i] = bits;
    }
  }
  return words;
}

inline float word_to_f32(uint32_t word, DType dtype) {
  if (dtype == DType::kBF16) return bf16_to_f32(static_cast<bf16_t>(word));
  if (dtype == DType::kF16) return f16_to_f32(static_cast<f16_t>(word));
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

// The sum over ranks 0, 1, ..., world_size - 1 in that order, in fp32, rounded once to dtype.
inline std::vector<uint32_t> reference_sum(uint64_t seed, int world_size, size_t count, DType dtype,
                                           int fraction_bits = 20) {
  std::vector<std::vector<uint32_t>> inputs;
  for (int r = 0; r < world_size; ++r) {
    inputs.push_back(rank_input(seed, r, count, dtype, fraction_bits));
  }
  std::vector<uint32_t> sum(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = word_to_f32(inputs[0][i], dtype);
    for (int r = 1; r < world_size; ++r) acc += word_to_f32(inputs[r][i], dtype);
    if (dtype == DType::kBF16) {
      sum[i] = f32_to_bf16(acc);
    } else if (dtype == DType::kF16) {
      sum[i] = f32_to_f16(acc);
    } else {
      std::memcpy(&sum[i], &acc, sizeof acc);
    }
  }
  return sum;
}

// Packs 32-bit words into the element layout all_reduce_sum takes (2 or 4 bytes each).
inline std::vector<uint8_t> pack(const std::vector<uint32_t>& words, DType dtype) {
  const size_t element_bytes = static_cast<size_t>(dtype_size(dtype));
  std::vector<uint8_t> bytes(words.size() * element_bytes);
  for (size_t i = 0; i < words.size(); ++i) {
    if (element_bytes == 2) {
      const uint16_t half = static_cast<uint16_t>(words[i]);
      std::memcpy(&bytes[i * 2], &half, 2);
    } else {
      std::memcpy(&bytes[i * 4], &words[i], 4);
    }
  }
  return bytes;
}

// rank r's all_gather input: `bytes` bytes, different for every rank and offset.
inline std::vector<uint8_t> gather_input(uint64_t seed, int rank, size_t bytes) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    data[i] = static_cast<uint8_t>(static_cast<int>(rank_value(seed, rank, i, 6) * 64.0f) & 0xff);
  }
  return data;
}

}  // namespace pagoda::test
