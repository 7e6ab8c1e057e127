// AVX-512 kernels: the vector traits for 16 fp32 lanes in zmm registers (the kernels are the
// shared templates in simd_kernels.h), plus a bf16 matmul on vdpbf16ps for CPUs with
// AVX512_BF16. Compiled with the AVX-512 flags in src/kernels/CMakeLists.txt and only called
// after dispatch.cpp checked the CPU (the vdpbf16ps path only if avx512_bf16 is present).
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>

#include "kernels/tables.h"
#include "kernels/x86/quant_kernels.h"
#include "kernels/x86/simd_kernels.h"

namespace pagoda::detail {
namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int kLanes = 16;
  // Register tiles (see Avx2) for the 32 zmm registers: 4 x 6 = 24 accumulators + 4 weight
  // vectors + x; the bf16 pair tile holds 2 vectors per weight row, hence 4 x 4.
  static constexpr int kTileRows = 4;
  static constexpr int kTileTokens = 6;
  static constexpr int kStreamTileTokens = 6;
  static constexpr int kBf16TileTokens = 4;
  static constexpr int kSweepRows = 4;  // the panel sweep: x fits in a register here
  static constexpr int kSweepTokens = 6;
  // W8A8 / W4A8 (quant_kernels.h, 256-bit blocks): tokens per 4-row integer tile (32 registers).
  static constexpr int kIntTileTokens = 8;
  static constexpr bool kVnni = false;
  // W8A8 with long blocks: 4 x 4 int32 accumulators + 4 weight vectors + 1 activation vector,
  // half the 32 registers (on AVX2 GCC spilled tiles that filled them; not measured here).
  static constexpr int kWideTileRows = 4;
  static constexpr int kWideTileTokens = 4;

  // The first n lanes; n may be <= 0 (a padding block past the row: nothing) or >= the lanes.
  static __mmask16 mask(int n) {
    return n <= 0 ? 0 : n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1u);
  }
  static __mmask32 mask32(int n) {
    return n <= 0 ? 0 : n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u);
  }
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static F load_n_fill(const float* p, int n, float fill) {
    return _mm512_mask_loadu_ps(set1(fill), mask(n), p);
  }
  static F mask_n(F v, int n) { return _mm512_maskz_mov_ps(mask(n), v); }
  static void store_n(float* p, F v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }

  static F widen_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static F load_bf16(const uint16_t* p) {
    return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F load_bf16_n(const uint16_t* p, int n) {
    return widen_bf16(_mm256_maskz_loadu_epi16(mask(n), p));
  }
  static F load_f16_n(const uint16_t* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), p));
  }

  // 32 bf16 values as fp32: lane j of even = p[2j], of odd = p[2j + 1] (see simd_kernels.h).
  static void split_bf16_pairs(__m512i v, F& even, F& odd) {
    even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    odd =
        _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void load_bf16_even_odd(const uint16_t* p, F& even, F& odd) {
    split_bf16_pairs(_mm512_loadu_si512(p), even, odd);
  }
  static void load_bf16_even_odd_n(const uint16_t* p, int n, F& even, F& odd) {
    split_bf16_pairs(_mm512_maskz_loadu_epi16(mask32(n), p), even, odd);
  }

  // 16 int8 / 4-bit values as fp32; load_u4 takes the nibble at bit `shift` of 16 bytes.
  static F load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static F load_u4(const uint8_t* p, int shift) {
    const __m512i bytes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srl_epi32(bytes, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(15)));
  }
  // One 32-byte block without VNNI: vpmaddubsw + vpmaddwd, as on AVX2 (see Avx512Vnni).
  static __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }

  // The long-block W8A8 products: 32 int16 lanes per vector, pairs summed into int32.
  using I = __m512i;
  static constexpr int kWideLanes = 32;
  static I zero_i() { return _mm512_setzero_si512(); }
  static I load_i8_as_i16(const int8_t* p) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static I load_i16(const int16_t* p) { return _mm512_loadu_si512(p); }
  static I madd_add(I acc, I a, I b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
  static int32_t reduce_add_i32(I v) { return _mm512_reduce_add_epi32(v); }

  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }

  // Folds halves within the register (shuffles, no casts to narrower types) and reads lane 0.
  template <class Op>
  static float reduce(F v, Op op) {
    v = op(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = op(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    v = op(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = op(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(v);
  }
  static float reduce_add(F v) {
    return reduce(v, [](F a, F b) { return _mm512_add_ps(a, b); });
  }
  static float reduce_max(F v) {
    return reduce(v, [](F a, F b) { return _mm512_max_ps(a, b); });
  }

  // Same method and constants as Avx2::exp (Cephes expf polynomial, clamped to [-87.3, 88]).
  static F exp(F x) {
    x = _mm512_min_ps(_mm512_max_ps(x, set1(-87.3365f)), set1(88.0f));
    const F n = _mm512_roundscale_ps(_mm512_mul_ps(x, set1(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm512_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    F p = set1(1.9875691500e-4f);
    p = fma(p, r, set1(1.3981999507e-3f));
    p = fma(p, r, set1(8.3334519073e-3f));
    p = fma(p, r, set1(4.1665795894e-2f));
    p = fma(p, r, set1(1.6666665459e-1f));
    p = fma(p, r, set1(5.0000001201e-1f));
    p = fma(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, set1(1.0f)));
    const __m512i bits =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  }
};

// AVX512_VNNI: vpdpbusd sums each four u8 x s8 products straight into int32 (one instruction
// instead of two, and no int16 intermediate). Used only by the quantized matmul.
struct Avx512Vnni : Avx512 {
  static constexpr bool kVnni = true;
  static __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
  }
  static __m256i dot_u8s8_add(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(acc, u, s);
  }
  // vpdpwssd: the int16 pair products summed straight into the accumulator.
  static I madd_add(I acc, I a, I b) { return _mm512_dpwssd_epi32(acc, a, b); }
};

// ---------------------------------------------------------------------------------------------
// bf16 weights on vdpbf16ps: each instruction multiplies 32 bf16 pairs and accumulates into 16
// fp32 lanes, reading the weights as stored (no widening). The activations are rounded to bf16
// once per call (round-to-nearest-even, vcvtneps2bf16), which is the only difference from the
// fp32 path: the relative error per product is <= 2^-8, the tolerance the tests state.

constexpr int kBf16Lanes = 32;  // bf16 values per zmm
constexpr int kBf16TileTokens = 6;

// kRows weight rows x kTokens tokens; xb rows are padded with zeros to a multiple of 32 so
// full loads are always in bounds, the weight tail is a masked load.
template <int kRows, int kTokens>
void bf16_dot_tile(const uint16_t* xb, int64_t ldx, const uint16_t* w, int64_t cols, float* y,
                   int64_t ldy) {
  __m512 acc[kRows][kTokens];
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < cols; c += kBf16Lanes) {
    const int64_t left = cols - c;
    const __mmask32 m =
        left >= kBf16Lanes ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1u);
    if constexpr (kTokens == 1) {  // decode: see x86::prefetch_linear
      x86::prefetch_linear<Avx512>(w, kRows * cols * 2, c * kRows * 2, kRows * kBf16Lanes * 2);
    }
    __m512i xv[kTokens];
    for (int t = 0; t < kTokens; ++t) xv[t] = _mm512_loadu_si512(xb + t * ldx + c);
    for (int r = 0; r < kRows; ++r) {
      const __m512i wv = _mm512_maskz_loadu_epi16(m, w + r * cols + c);
      for (int t = 0; t < kTokens; ++t) {
        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)xv[t], (__m512bh)wv);
      }
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    for (int r = 0; r < kRows; ++r) y[t * ldy + r] = Avx512::reduce_add(acc[r][t]);
  }
}

template <int kRows, int kTokens>
void run_bf16_tile(int64_t tokens, const uint16_t* xb, int64_t ldx, const uint16_t* w, int64_t cols,
                   float* y, int64_t ldy) {
  if constexpr (kTokens > 1) {
    if (tokens < kTokens) {
      run_bf16_tile<kRows, kTokens - 1>(tokens, xb, ldx, w, cols, y, ldy);
      return;
    }
  }
  bf16_dot_tile<kRows, kTokens>(xb, ldx, w, cols, y, ldy);
}

void matmul_bf16_dot(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                     int64_t row_end, float* y, int64_t ldy) {
  if (row_end <= row_begin || num_tokens <= 0) return;
  static thread_local x86::Scratch<Avx512> x_scratch;
  const int64_t cols = w.cols;
  const int64_t ldx = (cols + kBf16Lanes - 1) / kBf16Lanes * kBf16Lanes;
  auto* xb = static_cast<uint16_t*>(x_scratch.get(num_tokens * ldx * sizeof(uint16_t)));
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t c = 0; c < ldx; c += 16) {
      const int64_t left = cols - c;
      const int n = left >= 16 ? 16 : (left > 0 ? static_cast<int>(left) : 0);
      const __m256bh b = _mm512_cvtneps_pbh(Avx512::load_n(x + t * cols + c, n));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xb + t * ldx + c), (__m256i)b);
    }
  }
  const auto* wb = static_cast<const uint16_t*>(w.data);
  // Same blocking as the fp32 panel path: a panel of rows stays in L2 while tiles of tokens
  // (in L1) sweep it.
  for (int64_t r0 = row_begin; r0 < row_end; r0 += x86::kPanelRows) {
    const int64_t panel_end = r0 + x86::kPanelRows < row_end ? r0 + x86::kPanelRows : row_end;
    for (int64_t t0 = 0; t0 < num_tokens; t0 += kBf16TileTokens) {
      const int64_t tokens = num_tokens - t0 < kBf16TileTokens ? num_tokens - t0 : kBf16TileTokens;
      for (int64_t r = r0; r < panel_end; r += 4) {
        const uint16_t* xt = xb + t0 * ldx;
        const uint16_t* wr = wb + r * cols;
        float* yt = y + t0 * ldy + r;
        switch (panel_end - r >= 4 ? 4 : panel_end - r) {
          case 4:
            run_bf16_tile<4, kBf16TileTokens>(tokens, xt, ldx, wr, cols, yt, ldy);
            break;
          case 3:
            run_bf16_tile<3, kBf16TileTokens>(tokens, xt, ldx, wr, cols, yt, ldy);
            break;
          case 2:
            run_bf16_tile<2, kBf16TileTokens>(tokens, xt, ldx, wr, cols, yt, ldy);
            break;
          default:
            run_bf16_tile<1, kBf16TileTokens>(tokens, xt, ldx, wr, cols, yt, ldy);
            break;
        }
      }
    }
  }
}

// The table's matmul: bf16 on vdpbf16ps if chosen, quantized weights on VNNI if present.
template <bool kBf16Dot, bool kVnni>
void matmul(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
            int64_t row_end, float* y, int64_t ldy) {
  if (kBf16Dot && w.dtype == DType::kBF16) {
    matmul_bf16_dot(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else if (kVnni && (w.dtype == DType::kI8 || w.dtype == DType::kI4)) {
    if (row_end <= row_begin || num_tokens <= 0) return;
    x86::matmul_quantized<Avx512Vnni>(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else {
    x86::matmul<Avx512>(x, num_tokens, w, row_begin, row_end, y, ldy);
  }
}

template <bool kBf16Dot, bool kVnni>
KernelTable make_avx512_table() {
  KernelTable t = x86::make_table<Avx512>(Isa::kAvx512);
  t.matmul = matmul<kBf16Dot, kVnni>;
  t.matmul_bf16_activations = kBf16Dot;
  return t;
}

}  // namespace

const KernelTable& avx512_table(bool use_bf16_dot, bool use_vnni) {
  static const KernelTable tables[2][2] = {
      {make_avx512_table<false, false>(), make_avx512_table<false, true>()},
      {make_avx512_table<true, false>(), make_avx512_table<true, true>()}};
  return tables[use_bf16_dot ? 1 : 0][use_vnni ? 1 : 0];
}

}  // namespace pagoda::detail

#endif  // __x86_64__
