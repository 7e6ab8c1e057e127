// The quantized matmul (kI8 / kI4 weights, util/dtype.h) and dequantize_row for the SIMD ISA
// files, written once as templates on the vector traits V (see simd_kernels.h, whose ODR rules
// apply here too: every function is a template on V, so each ISA file gets its own copy).
// Included by every ISA file after simd_kernels.h and after its architecture's W8A8 header,
// which defines matmul_int8_activations (x86/int8_kernels.h, arm/int8_kernels.h).
//
// Two ways to multiply, chosen by WeightView::int8_activations:
//
//  * Weight-only (fp32 activations), here. Weights are dequantized to fp32 exactly as
//    dequantize_row_reference does (scale * q, + min for int4: a product then a sum) and
//    multiplied with fp32 FMA. Few tokens: streamed and dequantized on the fly in V::kLanes
//    vectors; many tokens: a panel of rows dequantized once into scratch and swept by the float
//    register tiles of simd_kernels.h. Both add the same fp32 products in the same order as
//    the float matmul does, so results are batch-invariant and equal the float matmul on the
//    dequantized matrix up to its summation order.
//
//  * W8A8 / W4A8 (int8 activations): integer dot products per block, which each architecture
//    writes with its own instructions (vpmaddubsw / vpdpbusd on x86, smull / sdot on AArch64);
//    the scalar table documents the arithmetic every version follows.
#pragma once

#include <cstdint>

#include "kernels/lane_panels.h"
#include "kernels/simd/simd_kernels.h"

namespace pagoda::simd {

// ---------------------------------------------------------------------------------------------
// Weight-only: dequantize to fp32, multiply with fp32 FMA.

// V::kLanes raw quantized values of `row` from column c (a multiple of kLanes) as fp32.
template <class V, DType kType>
inline typename V::F load_quantized(const void* data, int64_t row, int64_t cols, int64_t c) {
  if constexpr (kType == DType::kI8) {
    return V::load_i8(static_cast<const int8_t*>(data) + row * cols + c);
  } else {
    // In each run of 32 values byte j holds value j (low nibble) and j + 16 (high nibble).
    const uint8_t* run = static_cast<const uint8_t*>(data) + (row * cols + (c & ~int64_t{31})) / 2;
    const int j = static_cast<int>(c & 31);
    return V::load_u4(run + (j & 15), j >= 16 ? 4 : 0);
  }
}

// dequantize_row_reference's expression: scale * q, then + min for int4.
template <class V, DType kType>
inline typename V::F dequantize(typename V::F q, typename V::F scale, typename V::F min) {
  if constexpr (kType == DType::kI8) {
    return V::mul(scale, q);
  } else {
    return V::add(V::mul(scale, q), min);
  }
}

template <class V, DType kType>
void dequantize_rows(const WeightView& w, int64_t row, int64_t num_rows, float* out) {
  constexpr int kL = V::kLanes;
  const int64_t cols = w.cols, gs = w.group_size, num_groups = cols / gs;
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int64_t g = 0; g < num_groups; ++g) {
      const int64_t s = (row + r) * num_groups + g;
      const typename V::F scale = V::set1(V::half_to_float(w.scales[s]));
      const typename V::F min =
          kType == DType::kI4 ? V::set1(V::half_to_float(w.mins[s])) : V::zero();
      for (int64_t c = g * gs; c < (g + 1) * gs; c += kL) {
        V::store(
            out + r * cols + c,
            dequantize<V, kType>(load_quantized<V, kType>(w.data, row + r, cols, c), scale, min));
      }
    }
  }
}

// kRows rows x kTokens tokens, dequantizing on the fly; the same fp32 products in the same
// order as dot_rows_tokens over a dequantized panel.
template <class V, DType kType, int kRows, int kTokens>
void dequant_dot_tile(const float* x, int64_t ldx, const WeightView& w, int64_t row, float* y,
                      int64_t ldy) {
  using F = typename V::F;
  constexpr int kL = V::kLanes;
  const int64_t cols = w.cols, gs = w.group_size, num_groups = cols / gs;
  const int64_t row_bytes = quant_row_bytes<kType>(cols);
  const char* group_base = static_cast<const char*>(w.data) + row * row_bytes;
  F acc[kRows][kTokens];
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) acc[r][t] = V::zero();
  }
  for (int64_t g = 0; g < num_groups; ++g) {
    F scale[kRows], min[kRows];
    for (int r = 0; r < kRows; ++r) {
      scale[r] = V::set1(V::half_to_float(w.scales[(row + r) * num_groups + g]));
      min[r] = kType == DType::kI4 ? V::set1(V::half_to_float(w.mins[(row + r) * num_groups + g]))
                                   : V::zero();
    }
    for (int64_t c = g * gs; c < (g + 1) * gs; c += kL) {
      if constexpr (kTokens == 1) {  // decode: see prefetch_linear
        prefetch_stream<V>(group_base, kRows * row_bytes, quant_row_bytes<kType>(c * kRows),
                           quant_row_bytes<kType>(kRows * kL));
      }
      F wv[kRows];
      for (int r = 0; r < kRows; ++r) {
        wv[r] = dequantize<V, kType>(load_quantized<V, kType>(w.data, row + r, cols, c), scale[r],
                                     min[r]);
      }
      for (int t = 0; t < kTokens; ++t) {
        const F xv = V::load(x + t * ldx + c);
        for (int r = 0; r < kRows; ++r) acc[r][t] = V::fma(wv[r], xv, acc[r][t]);
      }
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    for (int r = 0; r < kRows; ++r) y[t * ldy + r] = V::reduce_add(acc[r][t]);
  }
}

// From this many tokens on, dequantizing a panel once beats dequantizing per tile of tokens
// (the same threshold as f16 weights, whose on-the-fly widening costs about as much).
constexpr int64_t kDequantManyTokens = 10;

template <class V, DType kType>
void matmul_dequantized(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                        int64_t row_end, float* y, int64_t ldy) {
  const int64_t cols = w.cols;
  if (num_tokens < kDequantManyTokens) {
    constexpr int kR = V::kTileRows, kT = V::kStreamTileTokens;
    for (int64_t r = row_begin; r < row_end; r += kR) {
      const int64_t rows = min_i64<V>(kR, row_end - r);
      for (int64_t t = 0; t < num_tokens; t += kT) {
        with_tile_shape<V, kR, kT>(rows, num_tokens - t, [&]<int R, int T>() {
          dequant_dot_tile<V, kType, R, T>(x + t * cols, cols, w, r, y + t * ldy + r, ldy);
        });
      }
    }
    return;
  }
  static thread_local Scratch<V> panel_scratch;
  float* panel = static_cast<float*>(panel_scratch.get(kPanelRows * cols * sizeof(float)));
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kPanelRows) {
    const int64_t panel_rows = min_i64<V>(kPanelRows, row_end - r0);
    dequantize_rows<V, kType>(w, r0, panel_rows, panel);
    sweep_panel<V>(x, cols, num_tokens, panel, cols, panel_rows, cols, y + r0, ldy);
  }
}

// W8A8 / W4A8: defined by the architecture's header (x86/int8_kernels.h, arm/int8_kernels.h).
template <class V>
void matmul_int8_activations(const float* x, int64_t num_tokens, const WeightView& w,
                             int64_t row_begin, int64_t row_end, float* y, int64_t ldy);

// ---------------------------------------------------------------------------------------------
// Entry points (declared in simd_kernels.h).

template <class V>
void matmul_quantized(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                      int64_t row_end, float* y, int64_t ldy) {
  if (w.int8_activations) {
    matmul_int8_activations<V>(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else if (w.dtype == DType::kI8) {
    matmul_dequantized<V, DType::kI8>(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else {
    matmul_dequantized<V, DType::kI4>(x, num_tokens, w, row_begin, row_end, y, ldy);
  }
}

template <class V>
void dequantize_row(const WeightView& w, int64_t row, float* dst) {
  if (w.lane_panels != nullptr) {  // int8 or int4, row-major again
    dequantize_row<V>(unpacked_lane_panel_row(w, row), 0, dst);
    return;
  }
  switch (w.dtype) {
    case DType::kI8:
      dequantize_rows<V, DType::kI8>(w, row, 1, dst);
      break;
    case DType::kI4:
      dequantize_rows<V, DType::kI4>(w, row, 1, dst);
      break;
    default:
      // (no dtype_row_bytes: an inline function of a shared header, see simd_kernels.h)
      to_f32<V>(static_cast<const char*>(w.data) + row * w.cols * (w.dtype == DType::kF32 ? 4 : 2),
                w.dtype, w.cols, dst);
      break;
  }
}

}  // namespace pagoda::simd
