// The body of the SIMD kernels, written once against a small vector-traits type V and
// compiled once per ISA file: x86/avx2.cpp (V = 8 fp32 lanes in ymm), x86/avx512.cpp (16 lanes
// in zmm), arm/neon.cpp and arm/neon_dotprod.cpp (4 lanes in q registers), each with its own
// -m flags (gemma.cpp/Highway style: one source, several targets). This file holds no
// intrinsics: everything ISA-specific is a member of V.
//
// ODR safety: every function here is a template on V, and each ISA file defines its V in an
// anonymous namespace, so every instantiation has internal linkage and the linker can never
// hand an AVX-512 copy to code running on an AVX2 CPU. For the same reason this file calls no
// inline function from shared headers (no std::min, no util/half.h): tails go through the
// vector path with partial loads instead of scalar conversions.
//
// V provides: F (vector), kLanes, the tile sizes (kTile*, kSweep*), zero/set1/load/store,
// load_n/store_n (first n lanes, rest zero), load_bf16/load_f16 and store_bf16/store_f16 (+_n;
// the stores round to nearest even as util/half.h does), add/sub/mul/div/max and
// fma(a, b, c) = a * b + c, load_bf16_even_odd(_n) (bf16 pairs, see below), reduce_add,
// reduce_max and exp; prefetch_l2(address) (a hint that never faults), sqrt_scalar(float),
// keep_in_register(F&) (an empty asm that pins a value to a register); for the quantized
// matmul (quant_kernels.h) load_i8 / load_u4 (kLanes int8 / 4-bit values as fp32) and
// half_to_float (one fp16 value).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "kernels/kernels.h"

namespace pagoda::simd {

// A per-thread buffer that grows to the largest size asked for and is then reused, so the
// hot path never allocates after warm-up. Template on V only to keep it TU-local (see above).
template <class V>
struct Scratch {
  void* data = nullptr;
  size_t capacity_bytes = 0;
  ~Scratch() { std::free(data); }
  void* get(size_t bytes) {
    if (bytes > capacity_bytes) {
      std::free(data);
      capacity_bytes = (bytes + 4095) & ~size_t{4095};
      data = std::aligned_alloc(64, capacity_bytes);
    }
    return data;
  }
};

template <class V>
inline int64_t min_i64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// kLanes weights of row-major storage starting at element p, widened to fp32.
template <class V, DType kType>
inline typename V::F load_weights(const void* base, int64_t index) {
  if constexpr (kType == DType::kF32) {
    return V::load(static_cast<const float*>(base) + index);
  } else if constexpr (kType == DType::kBF16) {
    return V::load_bf16(static_cast<const uint16_t*>(base) + index);
  } else {
    return V::load_f16(static_cast<const uint16_t*>(base) + index);
  }
}

template <class V, DType kType>
inline typename V::F load_weights_n(const void* base, int64_t index, int n) {
  if constexpr (kType == DType::kF32) {
    return V::load_n(static_cast<const float*>(base) + index, n);
  } else if constexpr (kType == DType::kBF16) {
    return V::load_bf16_n(static_cast<const uint16_t*>(base) + index, n);
  } else {
    return V::load_f16_n(static_cast<const uint16_t*>(base) + index, n);
  }
}

// Quantized weights (kI8, kI4) and dequantize_row: defined in quant_kernels.h, which the ISA
// files include after this file.
template <class V>
void matmul_quantized(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                      int64_t row_end, float* y, int64_t ldy);
template <class V>
void dequantize_row(const WeightView& w, int64_t row, float* dst);

// ---------------------------------------------------------------------------------------------
// Matmul: y[t, r] = dot(x[t, :], W[r, :]).
//
// Batch invariance. Every path below computes each dot product in the same order: one
// accumulator vector per (row, token), the columns visited left to right kLanes at a time, a
// zero-padded last vector, one final reduce_add. So a token's result is bit-identical whatever
// other tokens share the call, whichever path the token count selects, and however ops.h splits
// rows or tokens across threads: a request's greedy output cannot change with the batch it is
// scheduled in (issue 4 tests exactly that). The paths:
//   * few tokens (decode): rows streamed from memory once, 16-bit weights widened on the fly,
//     each row reused by a tile of tokens while it is in L1. Memory-bound, as decode should be.
//   * many tokens (prefill): a panel of rows widened to fp32 once into scratch (L2), swept by
//     register tiles of tokens, so widening is paid once per call rather than once per token.
//   * bf16 weights use "pair order" in both (see below); x is permuted once per call to match.

// Decode streams a group of kRows rows side by side: kRows concurrent streams, each a fresh
// page, which the hardware prefetchers follow poorly (measured: ~55% of the single-stream
// read bandwidth). So while a group is read, the group two ahead (contiguous in memory) is
// prefetched into L2 linearly, as many bytes per step as the step consumes; with it decode
// reaches ~80-90% of the probe (docs/kernels.md). Addresses are formed as integers: past the
// end of W they are harmless (prefetches never fault) and not pointer arithmetic.
constexpr int64_t kPrefetchGroupsAhead = 2;

template <class V>
inline void prefetch_linear(const void* group_base, int64_t group_bytes, int64_t offset_bytes,
                            int64_t num_bytes) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(group_base) +
                         static_cast<uintptr_t>(kPrefetchGroupsAhead * group_bytes + offset_bytes);
  for (int64_t b = 0; b < num_bytes; b += 64) {
    V::prefetch_l2(reinterpret_cast<const void*>(base + static_cast<uintptr_t>(b)));
  }
}

// Quantized weights (util/dtype.h): the shared constants of the weight-only and W8A8 paths.
constexpr int64_t kQuantBlock = 32;  // values per activation block and per int4 packing run

template <DType kType>
constexpr int64_t quant_row_bytes(int64_t cols) {
  return kType == DType::kI8 ? cols : cols / 2;
}

// Prefetch for the streamed (decode) tiles: like prefetch_linear, but steps smaller than a
// cache line issue one prefetch per line instead of one per step.
template <class V>
inline void prefetch_stream(const void* group_base, int64_t group_bytes, int64_t offset_bytes,
                            int64_t step_bytes) {
  if (step_bytes >= 64) {
    prefetch_linear<V>(group_base, group_bytes, offset_bytes, step_bytes);
  } else if ((offset_bytes & 63) < step_bytes) {
    prefetch_linear<V>(group_base, group_bytes, offset_bytes & ~int64_t{63}, 1);
  }
}

// The register tile: kRows weight rows (row stride cols) x kTokens tokens (row stride ldx).
template <class V, DType kType, int kRows, int kTokens>
void dot_rows_tokens(const float* x, int64_t ldx, const void* w, int64_t row, int64_t cols,
                     float* y, int64_t ldy) {
  using F = typename V::F;
  constexpr int kL = V::kLanes;
  constexpr int64_t kElemBytes = kType == DType::kF32 ? 4 : 2;
  F acc[kRows][kTokens];
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) acc[r][t] = V::zero();
  }
  const char* group = static_cast<const char*>(w) + row * cols * kElemBytes;
  int64_t c = 0;
  for (; c + kL <= cols; c += kL) {
    if constexpr (kTokens == 1) {  // decode: the rows come from DRAM (see prefetch_linear)
      prefetch_linear<V>(group, kRows * cols * kElemBytes, c * kRows * kElemBytes,
                         kRows * kL * kElemBytes);
    }
    F wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = load_weights<V, kType>(w, (row + r) * cols + c);
    for (int t = 0; t < kTokens; ++t) {
      const F xv = V::load(x + t * ldx + c);
      for (int r = 0; r < kRows; ++r) acc[r][t] = V::fma(wv[r], xv, acc[r][t]);
    }
  }
  if (c < cols) {  // one partial vector: zero lanes in both operands add nothing
    const int n = static_cast<int>(cols - c);
    F wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = load_weights_n<V, kType>(w, (row + r) * cols + c, n);
    for (int t = 0; t < kTokens; ++t) {
      const F xv = V::load_n(x + t * ldx + c, n);
      for (int r = 0; r < kRows; ++r) acc[r][t] = V::fma(wv[r], xv, acc[r][t]);
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    for (int r = 0; r < kRows; ++r) y[t * ldy + r] = V::reduce_add(acc[r][t]);
  }
}

// Calls body.template operator()<R, T>() with R = min(rows, kRows), T = min(tokens, kTokens):
// a register tile's shape is fixed at compile time, and the edges of a matrix get smaller ones.
template <class V, int kRows, int kTokens, class Body>
inline void with_tile_shape(int64_t rows, int64_t tokens, Body&& body) {
  if constexpr (kRows > 1) {
    if (rows < kRows) return with_tile_shape<V, kRows - 1, kTokens>(rows, tokens, body);
  }
  if constexpr (kTokens > 1) {
    if (tokens < kTokens) return with_tile_shape<V, kRows, kTokens - 1>(rows, tokens, body);
  }
  body.template operator()<kRows, kTokens>();
}

template <class V, DType kType>
void matmul_few_tokens(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                       int64_t row_end, float* y, int64_t ldy) {
  constexpr int kR = V::kTileRows, kT = V::kStreamTileTokens;
  const int64_t cols = w.cols;
  for (int64_t r = row_begin; r < row_end; r += kR) {
    const int64_t rows = min_i64<V>(kR, row_end - r);
    for (int64_t t = 0; t < num_tokens; t += kT) {
      with_tile_shape<V, kR, kT>(rows, num_tokens - t, [&]<int R, int T>() {
        dot_rows_tokens<V, kType, R, T>(x + t * cols, cols, w.data, r, cols, y + t * ldy + r, ldy);
      });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// bf16 pair order. A bf16 value is the top half of an fp32, so a 32-bit lane holding the pair
// (w[2j], w[2j+1]) yields w[2j+1] as fp32 by masking off its low half and w[2j] by shifting it
// left 16: one cheap integer op per vector of weights instead of a zero-extending shuffle plus
// a shift. Products then come in "even" and "odd" vectors, so x is permuted once per call to
// match: each block of 2 * kLanes values is stored as its even-indexed values, then its
// odd-indexed ones, zero-padded to a whole block (row stride ldp). The many-token path widens
// its bf16 panel into the same order, so both paths add the same products in the same order.

template <class V>
int64_t pair_stride(int64_t cols) {
  return (cols + 2 * V::kLanes - 1) / (2 * V::kLanes) * (2 * V::kLanes);
}

template <class V>
void permute_even_odd(const float* x, int64_t num_tokens, int64_t cols, int64_t ldp, float* out) {
  constexpr int kL = V::kLanes;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* src = x + t * cols;
    float* dst = out + t * ldp;
    for (int64_t block = 0; block < ldp; block += 2 * kL) {
      for (int j = 0; j < kL; ++j) {
        const int64_t even = block + 2 * j, odd = even + 1;
        dst[block + j] = even < cols ? src[even] : 0.0f;
        dst[block + kL + j] = odd < cols ? src[odd] : 0.0f;
      }
    }
  }
}

// kRows bf16 rows x kTokens tokens of permuted x. Per block: acc += even * x_even, then
// acc += odd * x_odd — the same sequence dot_rows_tokens runs over a pair-order panel.
template <class V, int kRows, int kTokens>
void bf16_pairs_tile(const float* xp, int64_t ldp, const uint16_t* w, int64_t row, int64_t cols,
                     float* y, int64_t ldy) {
  using F = typename V::F;
  constexpr int kL = V::kLanes;
  F acc[kRows][kTokens];
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) acc[r][t] = V::zero();
  }
  auto step = [&](const F* even, const F* odd, int64_t c) {
    for (int t = 0; t < kTokens; ++t) {
      const F xe = V::load(xp + t * ldp + c), xo = V::load(xp + t * ldp + c + kL);
      for (int r = 0; r < kRows; ++r) {
        acc[r][t] = V::fma(odd[r], xo, V::fma(even[r], xe, acc[r][t]));
      }
    }
  };
  const uint16_t* group = w + row * cols;
  int64_t c = 0;
  for (; c + 2 * kL <= cols; c += 2 * kL) {
    if constexpr (kTokens == 1) {  // decode: the rows come from DRAM (see prefetch_linear)
      prefetch_linear<V>(group, kRows * cols * 2, c * kRows * 2, kRows * 2 * kL * 2);
    }
    F even[kRows], odd[kRows];
    for (int r = 0; r < kRows; ++r)
      V::load_bf16_even_odd(w + (row + r) * cols + c, even[r], odd[r]);
    step(even, odd, c);
  }
  if (c < cols) {  // zero-padded weights meet zero-padded x
    F even[kRows], odd[kRows];
    for (int r = 0; r < kRows; ++r) {
      V::load_bf16_even_odd_n(w + (row + r) * cols + c, static_cast<int>(cols - c), even[r],
                              odd[r]);
    }
    step(even, odd, c);
  }
  for (int t = 0; t < kTokens; ++t) {
    for (int r = 0; r < kRows; ++r) y[t * ldy + r] = V::reduce_add(acc[r][t]);
  }
}

// Few tokens on bf16: rows streamed once, each row reused by a tile of tokens.
template <class V>
void matmul_bf16_pairs(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                       int64_t row_end, float* y, int64_t ldy) {
  static thread_local Scratch<V> x_scratch;
  constexpr int kR = V::kTileRows, kT = V::kBf16TileTokens;
  const int64_t cols = w.cols, ldp = pair_stride<V>(cols);
  float* xp = static_cast<float*>(x_scratch.get(num_tokens * ldp * sizeof(float)));
  permute_even_odd<V>(x, num_tokens, cols, ldp, xp);
  const auto* wb = static_cast<const uint16_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; r += kR) {
    const int64_t rows = min_i64<V>(kR, row_end - r);
    for (int64_t t = 0; t < num_tokens; t += kT) {
      with_tile_shape<V, kR, kT>(rows, num_tokens - t, [&]<int R, int T>() {
        bf16_pairs_tile<V, R, T>(xp + t * ldp, ldp, wb, r, cols, y + t * ldy + r, ldy);
      });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Many tokens: a panel of kPanelRows rows, widened to fp32 once (natural order for f16, pair
// order for bf16; f32 is used in place), is swept by tiles of V::kSweepRows x V::kSweepTokens.
//
// The sweep is blocked over columns. A whole-row tile streams 4 panel rows and 3 token rows
// (56 KiB at 2048 columns) through L1 on every tile, so both operands come from L2: 7 vector
// loads per 12 FMAs is more than L2 delivers, and the FMA units idle about half the time. In
// chunks of kChunkCols columns the panel's chunk (16 KiB) and a token tile's chunk stay in L1
// while every tile of a block of kBlockTokens tokens passes over them. Each tile's register
// accumulators are parked in scratch between chunks; storing a vector and loading it back is
// exact, and every accumulator still takes its columns left to right with the same FMAs and
// the same final reduction as dot_rows_tokens, so the result is bit-identical to it (batch
// invariance: the streaming paths for few tokens compute the very same sums).

constexpr int64_t kPanelRows = 16;
constexpr int64_t kChunkCols = 256;   // a multiple of 2 * kLanes (pair order) for every V
constexpr int64_t kBlockTokens = 96;  // a multiple of every V::kSweepTokens

// Columns [c0, c1) of a kRows x kTokens tile, x with row stride ldx and the panel with ldp (c1 is
// a multiple of kLanes, or the row's end where a partial vector ends it). The accumulator of
// (r, t) lives at acc + (r * acc_ld + t) * kLanes.
template <class V, int kRows, int kTokens>
void accumulate_columns(const float* x, int64_t ldx, const float* panel, int64_t ldp, int64_t c0,
                        int64_t c1, float* acc, int64_t acc_ld) {
  using F = typename V::F;
  constexpr int kL = V::kLanes;
  F a[kRows][kTokens];
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) a[r][t] = V::load(acc + (r * acc_ld + t) * kL);
  }
  int64_t c = c0;
  for (; c + kL <= c1; c += kL) {
    F wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = load_weights<V, DType::kF32>(panel, r * ldp + c);
    for (int t = 0; t < kTokens; ++t) {
      F xv = V::load(x + t * ldx + c);
      // Keeps x in a register: GCC would rather fold the load into every FMA, re-reading it
      // once per row, which makes the step load-bound.
      V::keep_in_register(xv);
      for (int r = 0; r < kRows; ++r) a[r][t] = V::fma(wv[r], xv, a[r][t]);
    }
  }
  if (c < c1) {  // the row's partial last vector, as in dot_rows_tokens
    const int n = static_cast<int>(c1 - c);
    F wv[kRows];
    for (int r = 0; r < kRows; ++r) wv[r] = load_weights_n<V, DType::kF32>(panel, r * ldp + c, n);
    for (int t = 0; t < kTokens; ++t) {
      const F xv = V::load_n(x + t * ldx + c, n);
      for (int r = 0; r < kRows; ++r) a[r][t] = V::fma(wv[r], xv, a[r][t]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) V::store(acc + (r * acc_ld + t) * kL, a[r][t]);
  }
}

// y[t, r] = panel row r . x row t over n columns, for panel_rows fp32 rows (row stride ldp)
// and num_tokens tokens (row stride ldx); y has row stride ldy.
template <class V>
void sweep_panel(const float* x, int64_t ldx, int64_t num_tokens, const float* panel, int64_t ldp,
                 int64_t panel_rows, int64_t n, float* y, int64_t ldy) {
  constexpr int kL = V::kLanes, kT = V::kSweepTokens, kR = V::kSweepRows;
  static thread_local Scratch<V> acc_scratch;
  auto* acc = static_cast<float*>(acc_scratch.get(kPanelRows * kBlockTokens * kL * sizeof(float)));
  for (int64_t b0 = 0; b0 < num_tokens; b0 += kBlockTokens) {
    const int64_t block_tokens = min_i64<V>(kBlockTokens, num_tokens - b0);
    for (int64_t r = 0; r < panel_rows; ++r) {
      for (int64_t t = 0; t < block_tokens; ++t)
        V::store(acc + (r * kBlockTokens + t) * kL, V::zero());
    }
    for (int64_t c0 = 0; c0 < n; c0 += kChunkCols) {
      const int64_t c1 = min_i64<V>(c0 + kChunkCols, n);
      for (int64_t t0 = 0; t0 < block_tokens; t0 += kT) {
        for (int64_t r = 0; r < panel_rows; r += kR) {
          with_tile_shape<V, kR, kT>(panel_rows - r, block_tokens - t0,
                                     [&]<int kRows, int kTokens>() {
                                       accumulate_columns<V, kRows, kTokens>(
                                           x + (b0 + t0) * ldx, ldx, panel + r * ldp, ldp, c0, c1,
                                           acc + (r * kBlockTokens + t0) * kL, kBlockTokens);
                                     });
        }
      }
    }
    for (int64_t t = 0; t < block_tokens; ++t) {
      for (int64_t r = 0; r < panel_rows; ++r) {
        y[(b0 + t) * ldy + r] = V::reduce_add(V::load(acc + (r * kBlockTokens + t) * kL));
      }
    }
  }
}

template <class V, DType kType>
void widen_rows(const void* w, int64_t row, int64_t num_rows, int64_t cols, float* out) {
  constexpr int kL = V::kLanes;
  const int64_t count = num_rows * cols;  // rows are contiguous, so widen them as one run
  const int64_t begin = row * cols;
  int64_t i = 0;
  for (; i + kL <= count; i += kL) V::store(out + i, load_weights<V, kType>(w, begin + i));
  if (i < count) {
    const int n = static_cast<int>(count - i);
    V::store_n(out + i, load_weights_n<V, kType>(w, begin + i, n), n);
  }
}

// bf16 rows into pair order, each row padded with zeros to ldp = pair_stride(cols).
template <class V>
void widen_rows_pair_order(const uint16_t* w, int64_t row, int64_t num_rows, int64_t cols,
                           int64_t ldp, float* out) {
  constexpr int kL = V::kLanes;
  for (int64_t r = 0; r < num_rows; ++r) {
    const uint16_t* src = w + (row + r) * cols;
    float* dst = out + r * ldp;
    for (int64_t c = 0; c < ldp; c += 2 * kL) {
      typename V::F even, odd;
      if (c + 2 * kL <= cols) {
        V::load_bf16_even_odd(src + c, even, odd);
      } else {
        V::load_bf16_even_odd_n(src + c, static_cast<int>(cols - c), even, odd);
      }
      V::store(dst + c, even);
      V::store(dst + c + kL, odd);
    }
  }
}

// The tokens are taken in outer blocks of at most kOuterBlockBytes of x, as few as fit and of
// equal size, each swept by every panel of the row range before the next block starts; each
// panel is widened again per outer block. Sweeping all the tokens per panel would stream the
// whole of x through the caches once per 16 rows: 33 MiB at 4096 tokens x 2048 columns, from
// DRAM, about 11 GB/s per thread at the FMA rate, where a 512-token x (4 MiB) stays in L3 — so
// a long prompt's linear layers ran ~30% slower per token than a short one's (measured,
// docs/kernels.md "Matmul"). Blocks of 96 tokens (1 MiB) measured best under load but ~10%
// slower at 512 tokens on a quieter machine (a panel widened 6 times, a short last block); 4 MiB
// blocks keep a short prompt's sweep as it was (one or two blocks). The bf16 pair permutation
// (or rounding) of x is done per outer block too, into a scratch of one block. Results are the
// same bits whatever the blocking: every output is one accumulator chain over its columns.
constexpr int64_t kOuterBlockBytes = int64_t{4} << 20;

inline int64_t outer_block_tokens(int64_t num_tokens, int64_t bytes_per_token) {
  const int64_t num_blocks =
      (num_tokens * bytes_per_token + kOuterBlockBytes - 1) / kOuterBlockBytes;
  return (num_tokens + num_blocks - 1) / (num_blocks < 1 ? 1 : num_blocks);
}

template <class V, DType kType>
void matmul_many_tokens(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                        int64_t row_end, float* y, int64_t ldy) {
  static thread_local Scratch<V> panel_scratch;
  static thread_local Scratch<V> x_scratch;
  const int64_t cols = w.cols;
  // n: the columns the tiles see; ldx / ldp: the row strides of x and the panel. bf16 copies
  // both into scratch with one zero block of padding per row, so that rows are not a power of
  // two bytes apart: 2048 fp32 columns would put every row of a tile in the same L1 set.
  int64_t n = cols, ldx = cols, ldp = cols;
  if constexpr (kType == DType::kBF16) {
    n = pair_stride<V>(cols);
    ldx = ldp = n + 2 * V::kLanes;
  }
  const int64_t outer_tokens = outer_block_tokens(num_tokens, ldx * int64_t{sizeof(float)});
  for (int64_t t0 = 0; t0 < num_tokens; t0 += outer_tokens) {
    const int64_t block_tokens = min_i64<V>(outer_tokens, num_tokens - t0);
    const float* xs = x + t0 * cols;
    if constexpr (kType == DType::kBF16) {
      float* xp = static_cast<float*>(x_scratch.get(block_tokens * ldx * sizeof(float)));
      permute_even_odd<V>(xs, block_tokens, cols, ldx, xp);
      xs = xp;
    }
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kPanelRows) {
      const int64_t panel_rows = min_i64<V>(kPanelRows, row_end - r0);
      const float* panel;
      if constexpr (kType == DType::kF32) {
        panel = static_cast<const float*>(w.data) + r0 * cols;
      } else {
        float* widened = static_cast<float*>(panel_scratch.get(kPanelRows * ldp * sizeof(float)));
        if constexpr (kType == DType::kBF16) {
          widen_rows_pair_order<V>(static_cast<const uint16_t*>(w.data), r0, panel_rows, cols, ldp,
                                   widened);
        } else {
          widen_rows<V, kType>(w.data, r0, panel_rows, cols, widened);
        }
        panel = widened;
      }
      sweep_panel<V>(xs, ldx, block_tokens, panel, ldp, panel_rows, n, y + t0 * ldy + r0, ldy);
    }
  }
}

// From this many tokens on, the panel path is faster than streaming (measured on Zen 3 with
// single-thread GFLOP/s per CPU-second at 1..128 tokens, docs/kernels.md): the bf16 pair path
// holds up to ~16 tokens, on-the-fly widening (f16) up to ~10. Results do not depend on it.
constexpr int64_t kManyTokens = 10;
constexpr int64_t kManyTokensBf16 = 16;

template <class V, DType kType>
void matmul_typed(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                  int64_t row_end, float* y, int64_t ldy) {
  if constexpr (kType == DType::kBF16) {
    if (num_tokens < kManyTokensBf16) {
      matmul_bf16_pairs<V>(x, num_tokens, w, row_begin, row_end, y, ldy);
      return;
    }
  } else {
    if (num_tokens < kManyTokens) {
      matmul_few_tokens<V, kType>(x, num_tokens, w, row_begin, row_end, y, ldy);
      return;
    }
  }
  matmul_many_tokens<V, kType>(x, num_tokens, w, row_begin, row_end, y, ldy);
}

template <class V>
void matmul(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
            int64_t row_end, float* y, int64_t ldy) {
  if (row_end <= row_begin || num_tokens <= 0) return;
  switch (w.dtype) {
    case DType::kF32:
      matmul_typed<V, DType::kF32>(x, num_tokens, w, row_begin, row_end, y, ldy);
      break;
    case DType::kBF16:
      matmul_typed<V, DType::kBF16>(x, num_tokens, w, row_begin, row_end, y, ldy);
      break;
    case DType::kF16:
      matmul_typed<V, DType::kF16>(x, num_tokens, w, row_begin, row_end, y, ldy);
      break;
    case DType::kI8:
    case DType::kI4:
      matmul_quantized<V>(x, num_tokens, w, row_begin, row_end, y, ldy);
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Element-wise and reduction kernels. Each loops over full vectors, then one partial vector.

template <class V>
float sum_squares(const float* x, int64_t n) {
  constexpr int kL = V::kLanes;
  typename V::F acc0 = V::zero(), acc1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * kL <= n; i += 2 * kL) {
    const auto a = V::load(x + i), b = V::load(x + i + kL);
    acc0 = V::fma(a, a, acc0);
    acc1 = V::fma(b, b, acc1);
  }
  for (; i < n; i += kL) {
    const auto a = V::load_n(x + i, static_cast<int>(min_i64<V>(kL, n - i)));
    acc0 = V::fma(a, a, acc0);
  }
  return V::reduce_add(V::add(acc0, acc1));
}

template <class V>
float inverse_sqrt(float v) {
  return 1.0f / V::sqrt_scalar(v);
}

template <class V>
void scale_by_weight(const float* x, float scale, const float* weight, int64_t n, float* out) {
  constexpr int kL = V::kLanes;
  const auto s = V::set1(scale);
  for (int64_t i = 0; i < n; i += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - i));
    const auto v = V::mul(V::mul(V::load_n(x + i, m), s), V::load_n(weight + i, m));
    V::store_n(out + i, v, m);
  }
}

template <class V>
void rms_norm(const float* x, const float* weight, float eps, int64_t n, float* out) {
  const float inv_rms = inverse_sqrt<V>(sum_squares<V>(x, n) / static_cast<float>(n) + eps);
  scale_by_weight<V>(x, inv_rms, weight, n, out);
}

template <class V>
void add_rms_norm(float* residual, const float* x, const float* weight, float eps, int64_t n,
                  float* out) {
  constexpr int kL = V::kLanes;
  for (int64_t i = 0; i < n; i += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - i));
    V::store_n(residual + i, V::add(V::load_n(residual + i, m), V::load_n(x + i, m)), m);
  }
  rms_norm<V>(residual, weight, eps, n, out);
}

template <class V>
void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  constexpr int kL = V::kLanes;
  const auto one = V::set1(1.0f);
  for (int64_t i = 0; i < n; i += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - i));
    const auto g = V::load_n(gate + i, m);
    const auto sig_denominator = V::add(one, V::exp(V::sub(V::zero(), g)));
    V::store_n(out + i, V::div(V::mul(g, V::load_n(up + i, m)), sig_denominator), m);
  }
}

template <class V>
void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  constexpr int kL = V::kLanes;
  auto max_v = V::set1(x[0]);
  for (int64_t i = 0; i < n; i += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - i));
    // Lanes past n repeat x[0] so they cannot raise the maximum.
    max_v = V::max(max_v, V::load_n_fill(x + i, m, x[0]));
  }
  const auto max_b = V::set1(V::reduce_max(max_v));
  auto sum_v = V::zero();
  for (int64_t i = 0; i < n; i += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - i));
    const auto e = V::exp(V::sub(V::load_n(x + i, m), max_b));
    const auto e_valid = V::mask_n(e, m);
    V::store_n(x + i, e_valid, m);
    sum_v = V::add(sum_v, e_valid);
  }
  const auto inv = V::set1(1.0f / V::reduce_add(sum_v));
  for (int64_t i = 0; i < n; i += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - i));
    V::store_n(x + i, V::mul(V::load_n(x + i, m), inv), m);
  }
}

// dot(a, b) with b stored as kType from element `index` of `base` (a KV cache row).
template <class V, DType kType>
float dot_stored(const float* a, const void* base, int64_t index, int64_t n) {
  constexpr int kL = V::kLanes;
  typename V::F acc0 = V::zero(), acc1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * kL <= n; i += 2 * kL) {
    acc0 = V::fma(V::load(a + i), load_weights<V, kType>(base, index + i), acc0);
    acc1 = V::fma(V::load(a + i + kL), load_weights<V, kType>(base, index + i + kL), acc1);
  }
  for (; i < n; i += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - i));
    acc0 = V::fma(V::load_n(a + i, m), load_weights_n<V, kType>(base, index + i, m), acc0);
  }
  return V::reduce_add(V::add(acc0, acc1));
}

template <class V>
float dot(const float* a, const float* b, int64_t n) {
  return dot_stored<V, DType::kF32>(a, b, 0, n);
}

template <class V>
void axpy(float a, const float* x, int64_t n, float* y) {
  constexpr int kL = V::kLanes;
  const auto av = V::set1(a);
  int64_t i = 0;
  for (; i + kL <= n; i += kL) V::store(y + i, V::fma(av, V::load(x + i), V::load(y + i)));
  if (i < n) {
    const int m = static_cast<int>(n - i);
    V::store_n(y + i, V::fma(av, V::load_n(x + i, m), V::load_n(y + i, m)), m);
  }
}

// dot over kRowsAtOnce rows at a time: the same two accumulators, loop and reduction per row
// as dot (so the same bits), but the rows' independent FMA chains interleave instead of one
// row's 8-deep chain waiting on FMA latency. Rows are stored as kType (the KV cache dtype).
template <class V, DType kType>
void dot_rows_typed(const float* a, const void* rows, int64_t row_stride, int64_t num_rows,
                    int64_t n, float* out) {
  using F = typename V::F;
  constexpr int kL = V::kLanes, kRowsAtOnce = 4;
  int64_t j = 0;
  for (; j + kRowsAtOnce <= num_rows; j += kRowsAtOnce) {
    const int64_t r = j * row_stride;  // element index of row j
    F acc0[kRowsAtOnce], acc1[kRowsAtOnce];
    for (int k = 0; k < kRowsAtOnce; ++k) acc0[k] = acc1[k] = V::zero();
    int64_t i = 0;
    for (; i + 2 * kL <= n; i += 2 * kL) {
      const F a0 = V::load(a + i), a1 = V::load(a + i + kL);
      for (int k = 0; k < kRowsAtOnce; ++k) {
        const int64_t at = r + k * row_stride + i;
        acc0[k] = V::fma(a0, load_weights<V, kType>(rows, at), acc0[k]);
        acc1[k] = V::fma(a1, load_weights<V, kType>(rows, at + kL), acc1[k]);
      }
    }
    for (; i < n; i += kL) {
      const int m = static_cast<int>(min_i64<V>(kL, n - i));
      const F a0 = V::load_n(a + i, m);
      for (int k = 0; k < kRowsAtOnce; ++k) {
        acc0[k] = V::fma(a0, load_weights_n<V, kType>(rows, r + k * row_stride + i, m), acc0[k]);
      }
    }
    for (int k = 0; k < kRowsAtOnce; ++k) out[j + k] = V::reduce_add(V::add(acc0[k], acc1[k]));
  }
  for (; j < num_rows; ++j) out[j] = dot_stored<V, kType>(a, rows, j * row_stride, n);
}

// axpy per row, in row order, with kChunk vectors of y held in registers across all rows
// instead of loaded and stored for each row: each y element sees the same FMAs in the same
// order as num_rows axpy calls.
template <class V, DType kType>
void axpy_rows_typed(const float* coeffs, const void* rows, int64_t row_stride, int64_t num_rows,
                     int64_t n, float* y) {
  using F = typename V::F;
  constexpr int kL = V::kLanes, kChunk = 8;
  int64_t i = 0;
  for (; i + kChunk * kL <= n; i += kChunk * kL) {
    F acc[kChunk];
    for (int v = 0; v < kChunk; ++v) acc[v] = V::load(y + i + v * kL);
    for (int64_t j = 0; j < num_rows; ++j) {
      const F c = V::set1(coeffs[j]);
      const int64_t at = j * row_stride + i;
      for (int v = 0; v < kChunk; ++v) {
        acc[v] = V::fma(c, load_weights<V, kType>(rows, at + v * kL), acc[v]);
      }
    }
    for (int v = 0; v < kChunk; ++v) V::store(y + i + v * kL, acc[v]);
  }
  for (; i < n; i += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - i));
    F acc = V::load_n(y + i, m);
    for (int64_t j = 0; j < num_rows; ++j) {
      acc = V::fma(V::set1(coeffs[j]), load_weights_n<V, kType>(rows, j * row_stride + i, m), acc);
    }
    V::store_n(y + i, acc, m);
  }
}

// Calls body.template operator()<kType>() for a KV cache dtype (kF32, kF16, kBF16).
template <class V, class Body>
inline void with_cache_dtype(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::kF16:
      body.template operator()<DType::kF16>();
      break;
    case DType::kBF16:
      body.template operator()<DType::kBF16>();
      break;
    default:
      body.template operator()<DType::kF32>();
      break;
  }
}

template <class V>
void dot_rows(const float* a, const void* rows, DType rows_dtype, int64_t row_stride,
              int64_t num_rows, int64_t n, float* out) {
  with_cache_dtype<V>(rows_dtype, [&]<DType kType>() {
    dot_rows_typed<V, kType>(a, rows, row_stride, num_rows, n, out);
  });
}

template <class V>
void axpy_rows(const float* coeffs, const void* rows, DType rows_dtype, int64_t row_stride,
               int64_t num_rows, int64_t n, float* y) {
  with_cache_dtype<V>(rows_dtype, [&]<DType kType>() {
    axpy_rows_typed<V, kType>(coeffs, rows, row_stride, num_rows, n, y);
  });
}

template <class V>
void rope(const float* x, const float* cos, const float* sin, int64_t rotary_dim, bool neox,
          float* out) {
  const int64_t half = rotary_dim / 2;
  // Each chunk loads its inputs before storing, so out == x is safe.
  if (neox) {  // pairs (i, i + half): both halves are contiguous, so vectorise directly
    constexpr int kL = V::kLanes;
    for (int64_t i = 0; i < half; i += kL) {
      const int m = static_cast<int>(min_i64<V>(kL, half - i));
      const auto a = V::load_n(x + i, m), b = V::load_n(x + half + i, m);
      const auto c = V::load_n(cos + i, m), s = V::load_n(sin + i, m);
      V::store_n(out + i, V::sub(V::mul(a, c), V::mul(b, s)), m);
      V::store_n(out + half + i, V::fma(a, s, V::mul(b, c)), m);
    }
    return;
  }
  // Interleaved (GPT-J) pairs (2i, 2i + 1): rare in DeepSeek models, kept simple.
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    out[2 * i] = a * cos[i] - b * sin[i];
    out[2 * i + 1] = b * cos[i] + a * sin[i];
  }
}

template <class V>
void to_f32(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      widen_rows<V, DType::kF32>(src, 0, 1, n, dst);
      break;
    case DType::kBF16:
      widen_rows<V, DType::kBF16>(src, 0, 1, n, dst);
      break;
    case DType::kF16:
      widen_rows<V, DType::kF16>(src, 0, 1, n, dst);
      break;
    case DType::kI8:
    case DType::kI4:
      break;  // quantized rows need their scales: dequantize_row
  }
}

// n values stored as kType from fp32: the KV cache write.
template <class V, DType kType>
inline void store_as(void* base, int64_t index, typename V::F v) {
  if constexpr (kType == DType::kF32) {
    V::store(static_cast<float*>(base) + index, v);
  } else if constexpr (kType == DType::kBF16) {
    V::store_bf16(static_cast<uint16_t*>(base) + index, v);
  } else {
    V::store_f16(static_cast<uint16_t*>(base) + index, v);
  }
}

template <class V, DType kType>
inline void store_as_n(void* base, int64_t index, typename V::F v, int n) {
  if constexpr (kType == DType::kF32) {
    V::store_n(static_cast<float*>(base) + index, v, n);
  } else if constexpr (kType == DType::kBF16) {
    V::store_bf16_n(static_cast<uint16_t*>(base) + index, v, n);
  } else {
    V::store_f16_n(static_cast<uint16_t*>(base) + index, v, n);
  }
}

template <class V>
void from_f32(const float* src, DType dtype, int64_t n, void* dst) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) return;
  with_cache_dtype<V>(dtype, [&]<DType kType>() {
    constexpr int kL = V::kLanes;
    int64_t i = 0;
    for (; i + kL <= n; i += kL) store_as<V, kType>(dst, i, V::load(src + i));
    if (i < n) {
      const int m = static_cast<int>(n - i);
      store_as_n<V, kType>(dst, i, V::load_n(src + i, m), m);
    }
  });
}

template <class V>
float exp_shifted(float* x, float shift, int64_t n) {
  constexpr int kL = V::kLanes;
  const auto shift_v = V::set1(shift);
  auto sum_v = V::zero();
  for (int64_t i = 0; i < n; i += kL) {
    const int m = static_cast<int>(min_i64<V>(kL, n - i));
    const auto e = V::mask_n(V::exp(V::sub(V::load_n(x + i, m), shift_v)), m);
    V::store_n(x + i, e, m);
    sum_v = V::add(sum_v, e);
  }
  return V::reduce_add(sum_v);
}

// The prefill attention tiles: defined in attention_tiles.h, included at the end of this file.
template <class V>
void attention_scores(const float* q, int64_t ldq, int64_t num_q, const void* rows,
                      DType rows_dtype, int64_t row_stride, int64_t num_rows, int64_t n, float* s,
                      int64_t lds);
template <class V>
void attention_values(const float* p, int64_t ldp, int64_t num_q, const float* row_scale,
                      const void* const* blocks, int64_t block_rows, DType rows_dtype,
                      int64_t row_stride, int64_t num_rows, int64_t n, float* acc, int64_t lda);

// Fills every entry of a table with this ISA's versions.
template <class V>
KernelTable make_table(const char* isa) {
  KernelTable t;
  t.isa = isa;
  t.matmul = matmul<V>;
  t.rms_norm = rms_norm<V>;
  t.add_rms_norm = add_rms_norm<V>;
  t.silu_mul = silu_mul<V>;
  t.softmax = softmax<V>;
  t.dot = dot<V>;
  t.axpy = axpy<V>;
  t.dot_rows = dot_rows<V>;
  t.axpy_rows = axpy_rows<V>;
  t.attention_scores = attention_scores<V>;
  t.attention_values = attention_values<V>;
  t.rope = rope<V>;
  t.to_f32 = to_f32<V>;
  t.from_f32 = from_f32<V>;
  t.dequantize_row = dequantize_row<V>;
  t.exp_shifted = exp_shifted<V>;
  return t;
}

}  // namespace pagoda::simd

#include "kernels/simd/attention_tiles.h"  // IWYU pragma: keep
