// AVX-512 kernels: the vector traits for 16 fp32 lanes in zmm registers (the kernels are the
// shared templates in simd_kernels.h), plus a bf16 matmul on vdpbf16ps for CPUs with
// AVX512_BF16. Compiled with the AVX-512 flags in src/kernels/CMakeLists.txt and only called
// after dispatch.cpp checked the CPU (the vdpbf16ps path only if avx512_bf16 is present).
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/simd/quant_kernels.h"
#include "kernels/simd/simd_kernels.h"
#include "kernels/tables.h"
#include "kernels/x86/int8_kernels.h"
#include "kernels/x86/interleaved_rope.h"

namespace pagoda::detail {
namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kVectorRegisters = 32;  // zmm0-31
  // Register tiles (see Avx2) for the 32 zmm registers: 4 x 6 = 24 accumulators + 4 weight
  // vectors + x; the bf16 pair tile holds 2 vectors per weight row, hence 4 x 4.
  static constexpr int kTileRows = 4;
  static constexpr int kTileTokens = 6;
  static constexpr int kStreamTileTokens = 6;
  static constexpr int kBf16TileTokens = 4;
  static constexpr int kSweepRows = 4;  // the panel sweep: x fits in a register here
  static constexpr int kSweepTokens = 6;
  // W8A8 / W4A8 (int8_kernels.h): no VNNI; many tokens of int8 take the ymm lane panels
  // (int8_lane_panels.h, the same tiles on both x86 tables); int4 takes tiles of 4 rows x
  // kIntTileTokens tokens (32 registers).
  static constexpr int kIntTileTokens = 8;
  static constexpr bool kVnni = false;
  static constexpr bool kZmmBlockTiles = false;  // zmm int8/int4 tiles: see Avx512Vnni

  // The first n lanes; n may be <= 0 (a padding block past the row: nothing) or >= the lanes.
  static __mmask16 mask(int n) {
    return n <= 0 ? 0 : n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1u);
  }
  static __mmask32 mask32(int n) {
    return n <= 0 ? 0 : n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u);
  }
  // The ISA-specific helpers of the shared templates (simd/simd_kernels.h).
  static void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
  static float sqrt_scalar(float v) { return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(v))); }
  static void keep_in_register(F& v) { __asm__("" : "+x"(v)); }
  static float half_to_float(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
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

  // fp32 narrowed to 16 bits as Avx2 does (see there); vpmovdw truncates the 32-bit results,
  // which are below 2^16.
  static __m256i narrow_f16(F v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static __m256i narrow_bf16(F v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lowest_kept = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lowest_kept)), 16);
    const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet_nan));
  }
  static void store_f16(uint16_t* p, F v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_f16(v));
  }
  static void store_bf16(uint16_t* p, F v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_bf16(v));
  }
  static void store_f16_n(uint16_t* p, F v, int n) {
    _mm256_mask_storeu_epi16(p, mask(n), narrow_f16(v));
  }
  static void store_bf16_n(uint16_t* p, F v, int n) {
    _mm256_mask_storeu_epi16(p, mask(n), narrow_bf16(v));
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
  // Lane j = reduce_add(v[j]) for 16 vectors at once, bit for bit: each sum pairs the same
  // partial sums as reduce_add (lanes i and i ^ 8, then i ^ 4, i ^ 2, i ^ 1; IEEE addition
  // commutes), but 16 vectors share each shuffle and add: 15 adds and 30 shuffles instead of
  // 16 x (4 adds, 4 shuffles and an extract). The prefill score tiles end with it
  // (attention_tiles.h).
  static F reduce_add_each(const F* v) {
    // After the four steps lane 4k + m holds input 4m + k of the first step (the inputs of
    // c_i are 2i and 2i + 1): the inputs are taken transposed so the result comes out in order.
    constexpr int kLo = _MM_SHUFFLE(1, 0, 1, 0), kHi = _MM_SHUFFLE(3, 2, 3, 2);
    constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0), kOdd = _MM_SHUFFLE(3, 1, 3, 1);
    const F c0 = add_blocks<kLo, kHi>(v[0], v[4]), c1 = add_blocks<kLo, kHi>(v[8], v[12]);
    const F c2 = add_blocks<kLo, kHi>(v[1], v[5]), c3 = add_blocks<kLo, kHi>(v[9], v[13]);
    const F c4 = add_blocks<kLo, kHi>(v[2], v[6]), c5 = add_blocks<kLo, kHi>(v[10], v[14]);
    const F c6 = add_blocks<kLo, kHi>(v[3], v[7]), c7 = add_blocks<kLo, kHi>(v[11], v[15]);
    const F e0 = add_blocks<kEven, kOdd>(c0, c1), e1 = add_blocks<kEven, kOdd>(c2, c3);
    const F e2 = add_blocks<kEven, kOdd>(c4, c5), e3 = add_blocks<kEven, kOdd>(c6, c7);
    const F g0 = add_shuffled<kLo, kHi>(e0, e1), g1 = add_shuffled<kLo, kHi>(e2, e3);
    return add_shuffled<kEven, kOdd>(g0, g1);
  }
  // Two 128-bit blocks of a and two of b picked by kFirst, added to the two of each picked by
  // kSecond (vshuff32x4).
  template <int kFirst, int kSecond>
  static F add_blocks(F a, F b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, kFirst), _mm512_shuffle_f32x4(a, b, kSecond));
  }
  // The same within each 128-bit block, lanes instead of blocks (vshufps).
  template <int kFirst, int kSecond>
  static F add_shuffled(F a, F b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, kFirst), _mm512_shuffle_ps(a, b, kSecond));
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

// ---------------------------------------------------------------------------------------------
// int8 weights in blocks of 32 (GGUF Q8_0) on AVX512_VNNI, two blocks per zmm. The generic
// tile (int8_kernels.h) spends per 4 rows, token and block: 4 vpsignb + 4 vpdpbusd (ymm) +
// 3 vphaddd (9 uops) + convert, multiply, FMA. Here, per 4 rows, token and *pair* of blocks:
// 4 vpdpbusd (zmm) + 2 for the bias correction + a 9-uop transpose-fold + 2 to add the
// halves + convert, multiply and an FMA per block: about half the uops per product.
//
// Bias instead of the sign trick: vpdpbusd wants one unsigned operand, so the weights get
// +128 (an xor per row and pair, shared by the tile's tokens) and Σ(w+128)x = Σwx + 128Σx is
// corrected by starting each row's sum at -128Σx, a per-token vector (vpdpbusd of 0x80 bytes
// and x, negated) shared by the 4 rows. Integer sums stay exact.
//
// The fold: 4 rows' 16 int32 lanes each ([block b: lanes 0..7 | block b+1: 8..15]) become one
// vector whose 128-bit lane k holds [r0 r1 r2 r3] summed over lane k's 16 values (unpack
// epi32 + add, unpack epi64 + add), so lanes 0-1 are block b and 2-3 block b+1; one more
// shuffle and add give each block's whole sum. Each block is then finished on its own, in
// block order: acc = fma(float(sum_b), d_b * s_b, acc), the order the many-token panels below
// use too, so a row's result does not depend on which path or tile computed it (batch
// invariance). Rows past num_rows repeat the last row, as in the generic tiles.

// Bytes of one block; a pair is 64 bytes, one zmm.
constexpr int64_t kBlock = simd::kQuantBlock;

// x86::scales_of_4_rows on zmm: 32 groups per step, the 4 x 8 transpose of each 128-bit lane
// as there, then a 4 x 4 transpose of the lanes so that each vector holds 8 whole groups.
// Half the instructions per group (it was 7% of a Q4_0 decode step in perf); the same values.
inline const float* scales_of_4_rows(const uint16_t* const scale_row[4], int64_t num_groups) {
  float* out = x86::scales_of_4_rows_scratch<Avx512>(num_groups);
  int64_t g = 0;
  for (; g + 32 <= num_groups; g += 32) {
    __m512i r[4];
    for (int i = 0; i < 4; ++i) r[i] = _mm512_loadu_si512(scale_row[i] + g);
    const __m512i r01_lo = _mm512_unpacklo_epi16(r[0], r[1]);
    const __m512i r01_hi = _mm512_unpackhi_epi16(r[0], r[1]);
    const __m512i r23_lo = _mm512_unpacklo_epi16(r[2], r[3]);
    const __m512i r23_hi = _mm512_unpackhi_epi16(r[2], r[3]);
    // Lane L of pairs[i]: groups 8L + 2i and 8L + 2i + 1, each [r0 r1 r2 r3].
    const __m512i pairs[4] = {
        _mm512_unpacklo_epi32(r01_lo, r23_lo), _mm512_unpackhi_epi32(r01_lo, r23_lo),
        _mm512_unpacklo_epi32(r01_hi, r23_hi), _mm512_unpackhi_epi32(r01_hi, r23_hi)};
    const __m512i t0 = _mm512_shuffle_i32x4(pairs[0], pairs[1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i t1 = _mm512_shuffle_i32x4(pairs[0], pairs[1], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i t2 = _mm512_shuffle_i32x4(pairs[2], pairs[3], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i t3 = _mm512_shuffle_i32x4(pairs[2], pairs[3], _MM_SHUFFLE(3, 2, 3, 2));
    // groups[L]: groups 8L..8L+7 in order (lane L of pairs[0], pairs[1], pairs[2], pairs[3]).
    const __m512i groups[4] = {_mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(3, 1, 3, 1)),
                               _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(3, 1, 3, 1))};
    for (int l = 0; l < 4; ++l) {
      float* o = out + (g + 8 * l) * 4;
      _mm512_storeu_ps(o, _mm512_cvtph_ps(_mm512_castsi512_si256(groups[l])));
      _mm512_storeu_ps(o + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(groups[l], 1)));
    }
  }
  x86::scales_of_4_rows_from<Avx512>(scale_row, g, num_groups, out);
  return out;
}

// [r0 r1 r2 r3] of each 128-bit lane: the sums of p[r]'s four int32 in that lane.
inline __m512i fold_4_rows(const __m512i p[4]) {
  const __m512i p01 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
  const __m512i p23 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(p01, p23), _mm512_unpackhi_epi64(p01, p23));
}

// One pair of blocks (or the last, unpaired block when kFull is false: its missing half is
// zero in both operands and is not added). acc[t] = [r0 r1 r2 r3] of token t.
template <int kTokens, bool kFull>
inline void int8_pair_step(const x86::QuantizedActivations& qa, int64_t token,
                           const uint8_t* const w_row[4], const float* scales, int64_t b,
                           __m128 acc[kTokens]) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const auto load = [](const void* p) {
    return kFull ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(0xffffffffull, p);
  };
  __m512i wu[4];
  for (int r = 0; r < 4; ++r) wu[r] = _mm512_xor_si512(load(w_row[r] + b * kBlock), bias);
  // [g_b of r0..r3 | g_b+1 of r0..r3] from scales_of_4_rows, spread to [b b | b+1 b+1].
  const __m256 s8 =
      kFull ? _mm256_loadu_ps(scales + b * 4) : _mm256_maskz_loadu_ps(0x0f, scales + b * 4);
  const __m512 s16 = _mm512_shuffle_f32x4(_mm512_castps256_ps512(s8), _mm512_castps256_ps512(s8),
                                          _MM_SHUFFLE(1, 1, 0, 0));
  for (int t = 0; t < kTokens; ++t) {
    const __m512i x = load(qa.q + (token + t) * qa.q_ld + b * kBlock);
    const __m512i neg_bias = _mm512_sub_epi32(_mm512_setzero_si512(),
                                              _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, x));
    __m512i p[4];
    for (int r = 0; r < 4; ++r) p[r] = _mm512_dpbusd_epi32(neg_bias, wu[r], x);
    // 128-bit lanes [b b b+1 b+1] -> each lane the whole block: lanes 0 and 2 are used.
    __m512i sums = fold_4_rows(p);
    sums = _mm512_add_epi32(sums, _mm512_shuffle_i32x4(sums, sums, _MM_SHUFFLE(2, 3, 0, 1)));
    const float* d = qa.d + (token + t) * qa.num_blocks + b;
    const __m512 dv = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d[0])),
                                         _mm256_set1_ps(kFull ? d[1] : 0.0f), 1);
    const __m512 f = _mm512_cvtepi32_ps(sums), ds = _mm512_mul_ps(dv, s16);
    acc[t] = _mm_fmadd_ps(_mm512_castps512_ps128(f), _mm512_castps512_ps128(ds), acc[t]);
    if constexpr (kFull) {
      acc[t] = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 2), _mm512_extractf32x4_ps(ds, 2), acc[t]);
    }
  }
}

// Many tokens (prefill, batched decode): the 4-row fold above costs as much as the products.
// With the rows in the lanes there is nothing to fold: a panel of 16 rows is repacked once
// per call as [quad q][row r] (4 weight bytes of each row side by side, +128) with its
// scales as [group][row] fp32, and one vpdpbusd multiplies a quad of all 16 rows by a token's
// quad broadcast from memory. A group's int32 sums start at -128 * sum(x) (per token and
// group, computed once per call) and the group is finished as fma(float(sum), d * s, acc),
// groups in order. Groups of 32 (Q8_0) finish exactly as int8_pair_step does, longer groups
// (per channel) as int8_wide_tile does, so every path gives the same bits. int4 uses the same
// panels and tile (below).

// One call's int8 activations as the panel tile reads them. A segment is the run of quads
// whose int32 sums are finished together: an int8 group, or an int4 block (32 values).
//   q [num_tokens][q_ld]; d [num_tokens][num_segments]; quads_per_segment (int8 only: int4
//   blocks are 8 quads in the pair order); segments_per_scale: segments sharing a scale;
//   neg_bias [num_tokens][num_segments]: int8, -128 * the sum of the segment's q; symmetric
//   int4, -8 * that sum (int8_kernels.h); the segment's int32 sums start from it;
//   int4 with zero points: group_sums [num_tokens][num_groups] for the min term instead.
struct PanelActivations {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* neg_bias = nullptr;
  const float* group_sums = nullptr;
  int64_t q_ld = 0, num_segments = 0, quads_per_segment = 0, segments_per_scale = 1;
  int64_t num_groups = 0;
};

// neg_bias for every token and group of int8 activations q.
inline void group_biases(const int8_t* q, int64_t q_ld, int64_t num_tokens, int64_t num_groups,
                         int64_t group_size, int32_t* out) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t g = 0; g < num_groups; ++g) {
      __m256i sums = _mm256_setzero_si256();
      for (int64_t c = g * group_size; c < (g + 1) * group_size; c += kBlock) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + t * q_ld + c));
        sums = _mm256_dpbusd_epi32(sums, bias, x);
      }
      out[t * num_groups + g] = -x86::reduce_add_epi32_256<Avx512>(sums);
    }
  }
}

// 0, 1, ..., 15 in the 16 int32 lanes: multiplied by a row stride, one gather offset per row.
inline __m512i lane_indices() {
  return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// Rows [row, row + num_rows) (num_rows <= 16) of an fp16 [rows][num_groups] plane (scales or
// mins) as fp32 [group][16 rows], missing rows zero: each row converted into scratch_rows
// ([row][group]), then gathered per group.
inline void plane_by_group(const uint16_t* plane, int64_t row, int64_t num_rows, int64_t num_groups,
                           float* scratch_rows, float* out) {
  for (int64_t r = 0; r < num_rows; ++r) {
    simd::to_f32<Avx512>(plane + (row + r) * num_groups, DType::kF16, num_groups,
                         scratch_rows + r * num_groups);
  }
  const __m512i lane = lane_indices();
  const __m512i group_offsets =
      _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(num_groups)));
  const __mmask16 valid = Avx512::mask(static_cast<int>(num_rows));
  for (int64_t g = 0; g < num_groups; ++g) {
    _mm512_store_ps(out + g * 16, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid,
                                                           group_offsets, scratch_rows + g, 4));
  }
}

// 64 bytes (16 quads) of each of 16 rows, row r at base + r * ld (rows from num_rows on read
// as zero), transposed: quads[k] holds quad k of rows 0..15. Four rounds of 16 shuffles where a
// gather costs one per quad at best; each row's line two ahead is prefetched by hand (16 rows
// are 16 streams, too many for the hardware prefetcher, and with few tokens they come from DRAM).
inline void load_16_rows_by_quad(const uint8_t* base, int64_t ld, int64_t num_rows,
                                 __m512i quads[16]) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) {
    if (i < num_rows) {
      _mm_prefetch(reinterpret_cast<const char*>(base + i * ld + 128), _MM_HINT_T0);
      r[i] = _mm512_loadu_si512(base + i * ld);
    } else {
      r[i] = _mm512_setzero_si512();
    }
  }
  // In each 128-bit lane L: t[2i], t[2i+1] = quads 4L, 4L+1 / 4L+2, 4L+3 of rows 2i, 2i+1 ...
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // ... then r[4i + j], lane L = quad 4L + j of rows 4i..4i+3 ...
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // ... and a 4 x 4 transpose of 128-bit lanes puts rows 4i..4i+3 of quad 4L + j in lane i.
  for (int j = 0; j < 4; ++j) {
    const __m512i ab_low = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x44);
    const __m512i ab_high = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xee);
    const __m512i cd_low = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x44);
    const __m512i cd_high = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xee);
    quads[j] = _mm512_shuffle_i32x4(ab_low, cd_low, 0x88);
    quads[4 + j] = _mm512_shuffle_i32x4(ab_low, cd_low, 0xdd);
    quads[8 + j] = _mm512_shuffle_i32x4(ab_high, cd_high, 0x88);
    quads[12 + j] = _mm512_shuffle_i32x4(ab_high, cd_high, 0xdd);
  }
}

// Quad k of 16 rows (row r at base + r * ld), rows from num_rows on zero: the odd quads
// past the last whole 64 bytes.
inline __m512i gather_quad(const uint8_t* base, int64_t ld, int64_t num_rows) {
  const __m512i lane = lane_indices();
  const __m512i row_offsets = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(ld)));
  return _mm512_mask_i32gather_epi32(
      _mm512_setzero_si512(), Avx512::mask(static_cast<int>(num_rows)), row_offsets, base, 1);
}

// Rows [row, row + num_rows) (num_rows <= 16) into the panel layout; missing rows are zero.
inline void pack_int8_panel(const WeightView& w, int64_t row, int64_t num_rows, uint8_t* packed,
                            float* scales, float* scale_rows) {
  const int64_t cols = w.cols, num_groups = cols / w.group_size, num_quads = cols / 4;
  const auto* values = static_cast<const uint8_t*>(w.data) + row * cols;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  int64_t q = 0;
  for (; q + 16 <= num_quads; q += 16) {
    __m512i quads[16];
    load_16_rows_by_quad(values + q * 4, cols, num_rows, quads);
    for (int k = 0; k < 16; ++k) {
      _mm512_store_si512(packed + (q + k) * 64, _mm512_xor_si512(quads[k], bias));
    }
  }
  for (; q < num_quads; ++q) {
    _mm512_store_si512(packed + q * 64,
                       _mm512_xor_si512(gather_quad(values + q * 4, cols, num_rows), bias));
  }
  plane_by_group(w.scales, row, num_rows, num_groups, scale_rows, scales);
}

// int4 on the same panels: the nibbles unpacked to bytes (0..15, unsigned, so no bias) and
// laid out in the activations' pair order (int8_kernels.h): quad k of pair P (activation
// bytes 64P + 4k) holds values of block 2P (k in 0..3, 8..11) or 2P + 1 (4..7, 12..15), the
// low nibbles of packed bytes 32P + 4(k mod 8) for k < 8 and their high nibbles for k >= 8.
// Each block is finished on its own (its activations have their own d), in block order; with
// zero points the min term sum_g min_g * group_sums_g is added group by group at the end, as
// the int4 decode tile does (symmetric weights start each block's sums at -8 sum(q) instead).

// Rows [row, row + num_rows) (num_rows <= 16) into the int4 panel layout; scales and (zero
// points only) mins as [group][row]. Missing rows and the missing half of an odd last pair
// are zero.
inline void pack_int4_panel(const WeightView& w, int64_t row, int64_t num_rows, int64_t num_pairs,
                            uint8_t* packed, float* scales, float* mins, float* scratch_rows) {
  const int64_t cols = w.cols, row_bytes = cols / 2, num_blocks = cols / kBlock;
  const int64_t num_groups = cols / w.group_size;
  const auto* values = static_cast<const uint8_t*>(w.data) + row * row_bytes;
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  // Packed quad m (m < 8) of a pair holds the low nibbles for activation quad m and the high
  // nibbles for quad m + 8.
  const auto store_quad = [&](int64_t pair, int64_t m, __m512i quads) {
    uint8_t* out = packed + (pair * 16 + m) * 64;
    _mm512_store_si512(out, _mm512_and_si512(quads, low_nibbles));
    _mm512_store_si512(out + 8 * 64, _mm512_and_si512(_mm512_srli_epi32(quads, 4), low_nibbles));
  };
  int64_t pair = 0;
  for (; 2 * pair + 4 <= num_blocks; pair += 2) {  // 64 bytes: 2 pairs
    __m512i quads[16];
    load_16_rows_by_quad(values + pair * 32, row_bytes, num_rows, quads);
    for (int k = 0; k < 16; ++k) store_quad(pair + k / 8, k % 8, quads[k]);
  }
  for (; pair < num_pairs; ++pair) {  // the rest, the missing half of an odd last pair zero
    const int64_t packed_valid = 2 * pair + 1 < num_blocks ? 32 : 16;
    for (int64_t m = 0; m < 8; ++m) {
      store_quad(pair, m,
                 4 * m < packed_valid ? gather_quad(values + pair * 32 + 4 * m, row_bytes, num_rows)
                                      : _mm512_setzero_si512());
    }
  }
  plane_by_group(w.scales, row, num_rows, num_groups, scratch_rows, scales);
  if (!w.symmetric_int4) plane_by_group(w.mins, row, num_rows, num_groups, scratch_rows, mins);
}

// acc + the byte products of a (unsigned) and b (signed). With the intrinsic GCC copied each
// accumulator to another register and back around every vpdpbusd (the tile ran at a sixth of
// the unit's rate); the "+v" operand updates it in place. Taken and returned by value: a
// reference into the tile's array of sums made GCC keep that array on the stack.
inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// kPanels panels of 16 rows (panel p at packed + p * panel_bytes, its scales and mins at
// + p * scales_ld) x kTokens tokens, int8 or int4 panels. Two panels share each token's
// broadcast quad, so one load feeds two vpdpbusd and the loads (two per cycle) stay below what
// the two 512-bit multiply ports take; 2 x 6 int32 sums + 2 x 6 fp32 accumulators + 2 weight
// vectors + the broadcast fill 27 of the 32 registers.
constexpr int kPanelTileTokens = 6;

// sums[p][t] += quads [0, count) of panel p (at w + p * panel_bytes) times token t's (at
// x + t * x_ld): an int8 segment's one run of quads, or one of an int4 block's two. (Fixing
// count at compile time for blocks of 32, so that the loop unrolls, measured no faster.)
template <int kPanels, int kTokens>
[[gnu::always_inline]] inline void add_quads(__m512i (&sums)[kPanels][kTokens], const uint8_t* w,
                                             int64_t panel_bytes, const int8_t* x, int64_t x_ld,
                                             int64_t count) {
  for (int64_t q = 0; q < count; ++q, w += 64, x += 4) {
    __m512i wv[kPanels];
    for (int p = 0; p < kPanels; ++p) wv[p] = _mm512_load_si512(w + p * panel_bytes);
    for (int t = 0; t < kTokens; ++t) {
      int32_t quad;
      __builtin_memcpy(&quad, x + t * x_ld, 4);
      const __m512i xv = _mm512_set1_epi32(quad);
      for (int p = 0; p < kPanels; ++p) sums[p][t] = dpbusd(sums[p][t], wv[p], xv);
    }
  }
}

template <bool kInt4, int kPanels, int kTokens>
void panel_tile(const PanelActivations& pa, int64_t token, const uint8_t* packed,
                int64_t panel_bytes, const float* scales, const float* mins, int64_t scales_ld,
                int64_t num_rows, float* y, int64_t ldy) {
  __m512 acc[kPanels][kTokens];
  for (int p = 0; p < kPanels; ++p) {
    for (int t = 0; t < kTokens; ++t) acc[p][t] = _mm512_setzero_ps();
  }
  const int8_t* x = pa.q + token * pa.q_ld;
  // Counted rather than divided: a division per segment cost ~10% of the int4 tile.
  int64_t scale_group = 0, segment_in_group = 0;
  for (int64_t seg = 0; seg < pa.num_segments; ++seg) {
    __m512i sums[kPanels][kTokens];
    for (int t = 0; t < kTokens; ++t) {
      const __m512i start =
          pa.neg_bias != nullptr
              ? _mm512_set1_epi32(pa.neg_bias[(token + t) * pa.num_segments + seg])
              : _mm512_setzero_si512();
      for (int p = 0; p < kPanels; ++p) sums[p][t] = start;
    }
    // int8: one run of quads; int4 block 2P + h: quads 4h..4h+3 and 8+4h..11+4h of pair P.
    if constexpr (kInt4) {
      const int64_t first = seg / 2 * 16 + seg % 2 * 4;
      add_quads<kPanels, kTokens>(sums, packed + first * 64, panel_bytes, x + first * 4, pa.q_ld,
                                  4);
      add_quads<kPanels, kTokens>(sums, packed + (first + 8) * 64, panel_bytes, x + (first + 8) * 4,
                                  pa.q_ld, 4);
    } else {
      const int64_t first = seg * pa.quads_per_segment;
      add_quads<kPanels, kTokens>(sums, packed + first * 64, panel_bytes, x + first * 4, pa.q_ld,
                                  pa.quads_per_segment);
    }
    for (int p = 0; p < kPanels; ++p) {
      const __m512 s = _mm512_load_ps(scales + p * scales_ld + scale_group * 16);
      for (int t = 0; t < kTokens; ++t) {
        const __m512 ds =
            _mm512_mul_ps(_mm512_set1_ps(pa.d[(token + t) * pa.num_segments + seg]), s);
        acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[p][t]), ds, acc[p][t]);
      }
    }
    if (++segment_in_group == pa.segments_per_scale) {
      segment_in_group = 0;
      ++scale_group;
    }
  }
  if (kInt4 && pa.neg_bias == nullptr) {
    // The min term, sum_g min_g * group_sums_g, then added to acc (as the int4 decode tile
    // does); the tokens side by side, since one token's FMAs over the groups form a chain.
    for (int p = 0; p < kPanels; ++p) {
      __m512 min_sum[kTokens];
      for (int t = 0; t < kTokens; ++t) min_sum[t] = _mm512_setzero_ps();
      const float* group_sums = pa.group_sums + token * pa.num_groups;
      for (int64_t g = 0; g < pa.num_groups; ++g) {
        const __m512 m = _mm512_load_ps(mins + p * scales_ld + g * 16);
        for (int t = 0; t < kTokens; ++t) {
          min_sum[t] =
              _mm512_fmadd_ps(m, _mm512_set1_ps(group_sums[t * pa.num_groups + g]), min_sum[t]);
        }
      }
      for (int t = 0; t < kTokens; ++t) acc[p][t] = _mm512_add_ps(acc[p][t], min_sum[t]);
    }
  }
  for (int p = 0; p < kPanels; ++p) {
    const __mmask16 valid = Avx512::mask(static_cast<int>(num_rows - 16 * p));
    for (int t = 0; t < kTokens; ++t) _mm512_mask_storeu_ps(y + t * ldy + 16 * p, valid, acc[p][t]);
  }
}

// The panel sweep over rows [row_begin, row_end), two panels (32 rows) at a time, each packed
// once per call.
template <bool kInt4>
void panel_matmul(const PanelActivations& pa, int64_t num_tokens, const WeightView& w,
                  int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  static thread_local simd::Scratch<Avx512> panel_scratch;
  constexpr int64_t kRows = simd::kPanelRows;
  const int64_t num_pairs = (w.cols / kBlock + 1) / 2;  // int4: a pair of blocks is 16 quads
  const int64_t panel_bytes = kInt4 ? num_pairs * 16 * 64 : kRows * w.cols;
  const int64_t scales_ld = kRows * (w.cols / w.group_size);
  auto* packed = static_cast<uint8_t*>(
      panel_scratch.get(static_cast<size_t>(2 * panel_bytes + 5 * scales_ld * 4)));
  auto* scales = reinterpret_cast<float*>(packed + 2 * panel_bytes);
  float* mins = scales + 2 * scales_ld;
  float* scratch_rows = mins + 2 * scales_ld;
  const auto pack = [&](int64_t row, int64_t num_rows, int p) {
    if constexpr (kInt4) {
      pack_int4_panel(w, row, num_rows, num_pairs, packed + p * panel_bytes, scales + p * scales_ld,
                      mins + p * scales_ld, scratch_rows);
    } else {
      pack_int8_panel(w, row, num_rows, packed + p * panel_bytes, scales + p * scales_ld,
                      scratch_rows);
    }
  };
  for (int64_t r0 = row_begin; r0 < row_end; r0 += 2 * kRows) {
    const int64_t rows = simd::min_i64<Avx512>(2 * kRows, row_end - r0);
    pack(r0, simd::min_i64<Avx512>(kRows, rows), 0);
    if (rows > kRows) pack(r0 + kRows, rows - kRows, 1);
    // Tiles of near-equal size (32 tokens: 5 5 5 5 6 6, not 6 6 6 6 6 2): a small tile loads
    // the panel's weights for few products.
    const int64_t num_tiles = (num_tokens + kPanelTileTokens - 1) / kPanelTileTokens;
    for (int64_t tile = 0, t0 = 0; tile < num_tiles; ++tile) {
      const int64_t tokens = (num_tokens - t0) / (num_tiles - tile);
      simd::with_tile_shape<Avx512, 2, kPanelTileTokens>(
          rows > kRows ? 2 : 1, tokens, [&]<int P, int T>() {
            panel_tile<kInt4, P, T>(pa, t0, packed, panel_bytes, scales, mins, scales_ld, rows,
                                    y + t0 * ldy + r0, ldy);
          });
      t0 += tokens;
    }
  }
}

// int4 (blocks of 32, GGUF Q4_0 and Pagoda's int4): 64 packed bytes of a row hold blocks
// b..b+3, so `& 0x0f` gives [b 0..15 | b+1 0..15 | b+2 0..15 | b+3 0..15] and `>> 4 & 0x0f`
// the values 16..31 likewise: the activations' pair layout (int8_kernels.h) of pairs p and
// p + 1 side by side (two 256-bit loads each), their d_pairs adjacent (one 512-bit load). The
// nibbles are unsigned, so no bias. After the fold 128-bit lane k is block b+k entirely, and
// the scale vector is [s_b+k(r0..r3)] for k = 0..3: twice the blocks per fold of the ymm tile.

// The scales of 4 rows for blocks b..b+3 (zero past num_blocks), from scales_of_4_rows.
inline __m512 scales_of_4_blocks(const float* scales, int64_t b, int64_t blocks_per_group,
                                 int64_t num_blocks) {
  if (blocks_per_group == 1 && b + 4 <= num_blocks) return _mm512_loadu_ps(scales + b * 4);
  __m128 s[4];
  for (int k = 0; k < 4; ++k) {
    s[k] = b + k < num_blocks ? _mm_loadu_ps(scales + (b + k) / blocks_per_group * 4)
                              : _mm_setzero_ps();
  }
  const __m512 low = _mm512_insertf32x4(_mm512_castps128_ps512(s[0]), s[1], 1);
  return _mm512_insertf32x4(_mm512_insertf32x4(low, s[2], 2), s[3], 3);
}

// Two pairs of blocks, or (kFull false) the last pair alone, itself maybe one block: what is
// missing reads as zero weights and activations and is not added. acc[t] = [r0 r1 r2 r3].
// Symmetric weights add each block's -8 sum(q) (qa.neg_bias) to its integer sums.
template <int kTokens, bool kFull>
inline void int4_quad_step(const x86::QuantizedActivations& qa, int64_t token,
                           const uint8_t* const w_row[4], __m512 s16, int64_t pair,
                           int64_t num_valid_blocks, bool symmetric, __m128 acc[kTokens]) {
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  const int64_t packed_bytes = num_valid_blocks * kBlock / 2;
  __m512i lo[4], hi[4];
  for (int r = 0; r < 4; ++r) {
    const uint8_t* p = w_row[r] + pair * kBlock;
    const __m512i packed = kFull ? _mm512_loadu_si512(p)
                                 : _mm512_maskz_loadu_epi8((uint64_t{1} << packed_bytes) - 1u, p);
    lo[r] = _mm512_and_si512(packed, low_nibbles);
    hi[r] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibbles);
  }
  const auto load_2_pairs = [](const int8_t* p) {
    const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (!kFull) return _mm512_zextsi256_si512(first);
    return _mm512_inserti64x4(_mm512_castsi256_si512(first),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * kBlock)),
                              1);
  };
  for (int t = 0; t < kTokens; ++t) {
    const int8_t* xp = qa.q + (token + t) * qa.q_ld + pair * 2 * kBlock;
    const __m512i x_lo = load_2_pairs(xp), x_hi = load_2_pairs(xp + kBlock);
    __m512i p[4];
    for (int r = 0; r < 4; ++r) {
      p[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], x_lo), hi[r],
                                 x_hi);
    }
    const float* d = qa.d_pairs + ((token + t) * qa.num_pairs + pair) * 8;
    const __m512 dv = kFull ? _mm512_loadu_ps(d) : _mm512_zextps256_ps512(_mm256_loadu_ps(d));
    // 128-bit lane k is block 2 * pair + k: finished one after the other, as the panels do.
    __m512i sums = fold_4_rows(p);
    if (symmetric) {
      const int32_t* bias = qa.neg_bias + (token + t) * qa.num_blocks + 2 * pair;
      const __m128i bias4 = kFull ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(bias))
                                  : _mm_maskz_loadu_epi32((1 << num_valid_blocks) - 1, bias);
      const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
      sums =
          _mm512_add_epi32(sums, _mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(bias4)));
    }
    const __m512 f = _mm512_cvtepi32_ps(sums), ds = _mm512_mul_ps(dv, s16);
    acc[t] = _mm_fmadd_ps(_mm512_castps512_ps128(f), _mm512_castps512_ps128(ds), acc[t]);
    if (kFull || num_valid_blocks > 1) {
      acc[t] = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 1), _mm512_extractf32x4_ps(ds, 1), acc[t]);
    }
    if constexpr (kFull) {
      acc[t] = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 2), _mm512_extractf32x4_ps(ds, 2), acc[t]);
      acc[t] = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 3), _mm512_extractf32x4_ps(ds, 3), acc[t]);
    }
  }
}

// AVX512_VNNI: vpdpbusd sums each four u8 x s8 products straight into int32 (one instruction
// instead of two, and no int16 intermediate). Used only by the quantized matmul.
struct Avx512Vnni : Avx512 {
  static constexpr bool kVnni = true;
  static constexpr bool kZmmBlockTiles = true;

  // The int8 block tile of int8_kernels.h (same arguments and contract), two blocks per step.
  template <int kTokens>
  static void int8_zmm_tile(const x86::QuantizedActivations& qa, int64_t token,
                            const uint8_t* w_rows, int64_t w_ld, const WeightView& w, int64_t row,
                            int64_t num_rows, float* y, int64_t ldy) {
    const int64_t num_blocks = qa.num_blocks;  // = groups: this path has groups of 32
    const x86::TileRows rows = x86::tile_rows<Avx512>(w_rows, w_ld, w, row, num_rows, num_blocks);
    const float* scales = scales_of_4_rows(rows.scales, num_blocks);
    __m128 acc[kTokens];
    for (int t = 0; t < kTokens; ++t) acc[t] = _mm_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= num_blocks; b += 2) {
      if constexpr (kTokens == 1) {  // decode: see prefetch_linear
        simd::prefetch_stream<Avx512>(w_rows, 4 * w_ld, b * 4 * kBlock, 4 * 2 * kBlock);
      }
      int8_pair_step<kTokens, true>(qa, token, rows.values, scales, b, acc);
    }
    if (b < num_blocks) int8_pair_step<kTokens, false>(qa, token, rows.values, scales, b, acc);
    for (int t = 0; t < kTokens; ++t) {
      alignas(16) float rows4[4];
      _mm_store_ps(rows4, acc[t]);
      for (int r = 0; r < num_rows; ++r) y[t * ldy + r] = rows4[r];
    }
  }

  // int8 weights for many tokens; int8_kernels.h calls these instead of its panel sweeps.
  // Blocks of 32 (the activations already int8):
  static void int8_panels(const x86::QuantizedActivations& qa, int64_t num_tokens,
                          const WeightView& w, int64_t row_begin, int64_t row_end, float* y,
                          int64_t ldy) {
    static thread_local simd::Scratch<Avx512> bias_scratch;
    auto* neg_bias = static_cast<int32_t*>(
        bias_scratch.get(static_cast<size_t>(num_tokens * qa.num_blocks) * sizeof(int32_t)));
    group_biases(qa.q, qa.q_ld, num_tokens, qa.num_blocks, kBlock, neg_bias);
    PanelActivations pa;
    pa.q = qa.q;
    pa.q_ld = qa.q_ld;
    pa.d = qa.d;
    pa.neg_bias = neg_bias;
    pa.num_segments = qa.num_blocks;
    pa.quads_per_segment = kBlock / 4;
    panel_matmul<false>(pa, num_tokens, w, row_begin, row_end, y, ldy);
  }
  // Longer groups (per channel above all): the long-block path's int16 activations (values
  // within +-127) narrowed to int8 once per call.
  static void int8_wide_panels(const x86::WideActivations& qa, int64_t num_tokens,
                               const WeightView& w, int64_t row_begin, int64_t row_end, float* y,
                               int64_t ldy) {
    static thread_local simd::Scratch<Avx512> scratch;
    const int64_t cols = qa.cols, q_bytes = (num_tokens * cols + 63) & ~int64_t{63};
    auto* base = static_cast<char*>(
        scratch.get(static_cast<size_t>(q_bytes + num_tokens * qa.num_groups * 4)));
    auto* q = reinterpret_cast<int8_t*>(base);
    for (int64_t i = 0; i < num_tokens * cols; i += 32) {  // cols is a multiple of 32
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i),
                          _mm512_cvtepi16_epi8(_mm512_loadu_si512(qa.q + i)));
    }
    auto* neg_bias = reinterpret_cast<int32_t*>(base + q_bytes);
    group_biases(q, cols, num_tokens, qa.num_groups, w.group_size, neg_bias);
    PanelActivations pa;
    pa.q = q;
    pa.q_ld = cols;
    pa.d = qa.d;
    pa.neg_bias = neg_bias;
    pa.num_segments = qa.num_groups;
    pa.quads_per_segment = w.group_size / 4;
    panel_matmul<false>(pa, num_tokens, w, row_begin, row_end, y, ldy);
  }

  // int4 for many tokens (int8_kernels.h calls it instead of its panel sweep).
  static void int4_panels(const x86::QuantizedActivations& qa, int64_t num_tokens,
                          const WeightView& w, int64_t row_begin, int64_t row_end, float* y,
                          int64_t ldy) {
    PanelActivations pa;
    pa.q = qa.q;
    pa.q_ld = qa.q_ld;
    pa.d = qa.d;
    if (w.symmetric_int4) {
      pa.neg_bias = qa.neg_bias;
    } else {
      pa.group_sums = qa.group_sums;
    }
    pa.num_segments = qa.num_blocks;
    pa.segments_per_scale = w.group_size / kBlock;
    pa.num_groups = qa.num_groups;
    panel_matmul<true>(pa, num_tokens, w, row_begin, row_end, y, ldy);
  }

  // The int4 tile of int8_kernels.h (same arguments and contract), four blocks per step.
  template <int kTokens>
  static void int4_zmm_tile(const x86::QuantizedActivations& qa, int64_t token,
                            const uint8_t* w_rows, int64_t w_ld, const WeightView& w, int64_t row,
                            int64_t num_rows, float* y, int64_t ldy) {
    const int64_t num_blocks = qa.num_blocks, blocks_per_group = w.group_size / kBlock;
    const x86::TileRows rows =
        x86::tile_rows<Avx512>(w_rows, w_ld, w, row, num_rows, qa.num_groups);
    // Zero points: the min term, sum_g min_g * group_sums_g, group by group (as the panels add
    // it). The mins and the scales share scales_of_4_rows' scratch, so the mins are used first.
    __m128 min_sum[kTokens];
    for (int t = 0; t < kTokens; ++t) min_sum[t] = _mm_setzero_ps();
    if (!w.symmetric_int4) {
      const float* mins = scales_of_4_rows(rows.mins, qa.num_groups);
      for (int t = 0; t < kTokens; ++t) {
        const float* sums = qa.group_sums + (token + t) * qa.num_groups;
        for (int64_t g = 0; g < qa.num_groups; ++g) {
          min_sum[t] = _mm_fmadd_ps(_mm_loadu_ps(mins + g * 4), _mm_set1_ps(sums[g]), min_sum[t]);
        }
      }
    }
    const float* scales = scales_of_4_rows(rows.scales, qa.num_groups);
    __m128 acc[kTokens];
    for (int t = 0; t < kTokens; ++t) acc[t] = _mm_setzero_ps();
    int64_t pair = 0;
    // Whole steps need 4 whole blocks: a 64-byte load past an odd last block would read 16
    // bytes beyond the row (beyond the matrix, for its last row).
    for (; 2 * pair + 4 <= num_blocks; pair += 2) {
      if constexpr (kTokens == 1) {  // decode: see prefetch_linear
        simd::prefetch_stream<Avx512>(w_rows, 4 * w_ld, pair * 4 * kBlock, 4 * 2 * kBlock);
      }
      const __m512 s16 = scales_of_4_blocks(scales, 2 * pair, blocks_per_group, num_blocks);
      int4_quad_step<kTokens, true>(qa, token, rows.values, s16, pair, 4, w.symmetric_int4, acc);
    }
    for (; pair < qa.num_pairs; ++pair) {  // the last 1-3 blocks, a pair (or one block) a step
      const __m512 s16 = scales_of_4_blocks(scales, 2 * pair, blocks_per_group, num_blocks);
      const int64_t blocks = num_blocks - 2 * pair < 2 ? num_blocks - 2 * pair : 2;
      int4_quad_step<kTokens, false>(qa, token, rows.values, s16, pair, blocks, w.symmetric_int4,
                                     acc);
    }
    for (int t = 0; t < kTokens; ++t) {
      alignas(16) float rows4[4];
      _mm_store_ps(rows4, _mm_add_ps(acc[t], min_sum[t]));
      for (int r = 0; r < num_rows; ++r) y[t * ldy + r] = rows4[r];
    }
  }

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

// The two AVX512_BF16 instructions the bf16 matmul is built on.
struct Bf16Instructions {
  // 16 fp32 -> 16 bf16, round to nearest even (vcvtneps2bf16).
  static __m256i narrow(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
  // acc[j] += x[2j+1] w[2j+1] + x[2j] w[2j] over 32 bf16 pairs (vdpbf16ps).
  static __m512 dot(__m512 acc, __m512i x, __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
  }
};

// The same two instructions written in AVX-512F after the pseudo-code of Intel's SDM, so that a
// CPU without AVX512_BF16 runs and tests the kernel around them (tiles, tails, padding, the
// rounding of x): vcvtneps2bf16 flushes zero and denormal inputs to a signed zero, keeps NaNs
// quiet and rounds the rest by adding 0x7fff plus the kept lsb; vdpbf16ps is two fp32 FMAs,
// odd pair first, with denormal inputs and results flushed to zero. A bf16 product is exact in
// fp32, so fusing it changes nothing. Where the CPU has the instructions, a test checks that the
// emulation gives the same bits.
struct EmulatedBf16Instructions {
  // Denormals (and zeros) to a zero of the same sign.
  static __m512 flush_denormals(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __mmask16 tiny = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(
        _mm512_mask_and_epi32(bits, tiny, bits, _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  }
  static __m256i narrow(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
    __m512i out = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
    out = _mm512_mask_or_epi32(out, nan, high, _mm512_set1_epi32(0x40));
    const __mmask16 tiny = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7f800000));
    out = _mm512_mask_and_epi32(out, tiny, high, _mm512_set1_epi32(0x8000));
    return _mm512_cvtepi32_epi16(out);
  }
  static __m512 dot(__m512 acc, __m512i x, __m512i w) {
    const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    const auto odd = [&](__m512i v) {
      return flush_denormals(_mm512_castsi512_ps(_mm512_and_si512(v, high_half)));
    };
    const auto even = [](__m512i v) {
      return flush_denormals(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    };
    acc = flush_denormals(_mm512_fmadd_ps(odd(x), odd(w), flush_denormals(acc)));
    return flush_denormals(_mm512_fmadd_ps(even(x), even(w), acc));
  }
};

// kRows weight rows x kTokens tokens; xb rows are padded with zeros to a multiple of 32 so
// full loads are always in bounds, the weight tail is a masked load.
template <class Bf16, int kRows, int kTokens>
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
    if constexpr (kTokens == 1) {  // decode: see simd::prefetch_linear
      simd::prefetch_linear<Avx512>(w, kRows * cols * 2, c * kRows * 2, kRows * kBf16Lanes * 2);
    }
    __m512i xv[kTokens];
    for (int t = 0; t < kTokens; ++t) xv[t] = _mm512_loadu_si512(xb + t * ldx + c);
    for (int r = 0; r < kRows; ++r) {
      const __m512i wv = _mm512_maskz_loadu_epi16(m, w + r * cols + c);
      for (int t = 0; t < kTokens; ++t) acc[r][t] = Bf16::dot(acc[r][t], xv[t], wv);
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    for (int r = 0; r < kRows; ++r) y[t * ldy + r] = Avx512::reduce_add(acc[r][t]);
  }
}

template <class Bf16>
void matmul_bf16_dot(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
                     int64_t row_end, float* y, int64_t ldy) {
  if (row_end <= row_begin || num_tokens <= 0) return;
  static thread_local simd::Scratch<Avx512> x_scratch;
  const int64_t cols = w.cols;
  const int64_t ldx = (cols + kBf16Lanes - 1) / kBf16Lanes * kBf16Lanes;
  const auto* wb = static_cast<const uint16_t*>(w.data);
  // Same blocking as the fp32 panel path (simd::matmul_many_tokens): outer blocks of at most
  // 4 MiB of x, narrowed to bf16 one block at a time, each swept by every panel of rows (in
  // L2) in tiles of tokens (in L1). Sweeping all the tokens per panel streamed a 4096-token x
  // (16 MiB in bf16) from DRAM once per 16 rows.
  const int64_t outer_tokens =
      simd::outer_block_tokens(num_tokens, ldx * int64_t{sizeof(uint16_t)});
  for (int64_t b0 = 0; b0 < num_tokens; b0 += outer_tokens) {
    const int64_t block_tokens = num_tokens - b0 < outer_tokens ? num_tokens - b0 : outer_tokens;
    auto* xb = static_cast<uint16_t*>(x_scratch.get(block_tokens * ldx * sizeof(uint16_t)));
    for (int64_t t = 0; t < block_tokens; ++t) {
      for (int64_t c = 0; c < ldx; c += 16) {
        const int64_t left = cols - c;
        const int n = left >= 16 ? 16 : (left > 0 ? static_cast<int>(left) : 0);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(xb + t * ldx + c),
                            Bf16::narrow(Avx512::load_n(x + (b0 + t) * cols + c, n)));
      }
    }
    for (int64_t r0 = row_begin; r0 < row_end; r0 += simd::kPanelRows) {
      const int64_t panel_end = r0 + simd::kPanelRows < row_end ? r0 + simd::kPanelRows : row_end;
      for (int64_t t0 = 0; t0 < block_tokens; t0 += kBf16TileTokens) {
        const int64_t tokens =
            block_tokens - t0 < kBf16TileTokens ? block_tokens - t0 : kBf16TileTokens;
        for (int64_t r = r0; r < panel_end; r += 4) {
          const uint16_t* xt = xb + t0 * ldx;
          const uint16_t* wr = wb + r * cols;
          float* yt = y + (b0 + t0) * ldy + r;
          simd::with_tile_shape<Avx512, 4, kBf16TileTokens>(
              panel_end - r, tokens,
              [&]<int R, int T>() { bf16_dot_tile<Bf16, R, T>(xt, ldx, wr, cols, yt, ldy); });
        }
      }
    }
  }
}

// The table's matmul: bf16 weights on vdpbf16ps (Bf16 says whose) unless Bf16 is void,
// quantized weights on VNNI if present.
template <class Bf16, bool kVnni>
void matmul(const float* x, int64_t num_tokens, const WeightView& w, int64_t row_begin,
            int64_t row_end, float* y, int64_t ldy) {
  if constexpr (!std::is_void_v<Bf16>) {
    if (w.dtype == DType::kBF16) {
      matmul_bf16_dot<Bf16>(x, num_tokens, w, row_begin, row_end, y, ldy);
      return;
    }
  }
  if (kVnni && (w.dtype == DType::kI8 || w.dtype == DType::kI4)) {
    if (row_end <= row_begin || num_tokens <= 0) return;
    simd::matmul_quantized<Avx512Vnni>(x, num_tokens, w, row_begin, row_end, y, ldy);
  } else {
    simd::matmul<Avx512>(x, num_tokens, w, row_begin, row_end, y, ldy);
  }
}

template <class Bf16, bool kVnni>
KernelTable make_avx512_table() {
  KernelTable t = simd::make_table<Avx512>("avx512");
  t.matmul = matmul<Bf16, kVnni>;
  t.matmul_bf16_activations = !std::is_void_v<Bf16>;
  if (!kVnni)
    t.int8_lane_panels = x86::kLanePanelLayout;  // the ymm lane panels; VNNI has its zmm panels
  t.rope = x86::rope<Avx512>;                    // interleaved pairs vectorised (interleaved_rope.h)
  return t;
}

}  // namespace

const KernelTable& avx512_table(bool use_bf16_dot, bool use_vnni) {
  static const KernelTable tables[2][2] = {
      {make_avx512_table<void, false>(), make_avx512_table<void, true>()},
      {make_avx512_table<Bf16Instructions, false>(), make_avx512_table<Bf16Instructions, true>()}};
  return tables[use_bf16_dot ? 1 : 0][use_vnni ? 1 : 0];
}

const KernelTable& avx512_table_emulating_bf16_dot() {
  static const KernelTable table = make_avx512_table<EmulatedBf16Instructions, false>();
  return table;
}

}  // namespace pagoda::detail

#endif  // __x86_64__
