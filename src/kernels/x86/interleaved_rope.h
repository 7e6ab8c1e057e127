// Interleaved (GPT-J) rope on x86: DeepSeek-V2/V3's MLA rotates its rope dims in pairs
// (2i, 2i + 1) (HF DeepseekV2's apply_rotary_pos_emb de-interleaves them first), once per head
// and token, and the shared template (simd/simd_kernels.h) does those pairs one at a time.
// The main loops split 8 (AVX2) or 16 (AVX-512) pairs into their a's and b's and rejoin them
// after (below). In the last few pairs a vector holds whole pairs (a_i, b_i) as they lie in
// memory: the pair-swapped copy (b_i, a_i) comes from an in-lane permute and cos / sin are
// duplicated into both lanes of their pair, so out = x * cos -/+ swapped * sin, subtracting in
// even lanes and adding in odd ones. Either way these are the scalar table's operations (two
// products, then a difference or a sum, unfused), so the bits are the scalar table's too.
// AArch64's version, on ld2 / st2, is in arm/arm_table.h.
// Included by the AVX2 file (the ymm version) and the AVX-512 file (the zmm version, compiled
// only under the AVX-512 flags).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/simd/simd_kernels.h"

namespace pagoda::x86 {

// Four values as (v0, v0, v1, v1, v2, v2, v3, v3): one cos or sin per pair, in both its lanes.
inline __m256 duplicated_into_pairs(__m128 v) {
  return _mm256_set_m128(_mm_unpackhi_ps(v, v), _mm_unpacklo_ps(v, v));
}

// All lanes' bits set in the first n 32-bit lanes (vmaskmovps's mask).
inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// num_pairs (1..4) pairs from pairs_x, cos, sin into out. vaddsubps subtracts in even lanes and
// adds in odd ones, which is exactly the pairing's pattern; like the zmm version's masked add
// and subtract, it is a builtin the compiler does not fuse with the products (plain C++ or
// vector + here would be fused into FMAs under -mfma, away from the scalar table's bits).
inline void rope_interleaved_ymm_step(const float* pairs_x, const float* cos, const float* sin,
                                      int64_t num_pairs, float* out) {
  __m256 pairs, c, s;
  if (num_pairs == 4) {
    pairs = _mm256_loadu_ps(pairs_x);  // a0 b0 a1 b1 a2 b2 a3 b3
    c = duplicated_into_pairs(_mm_loadu_ps(cos));
    s = duplicated_into_pairs(_mm_loadu_ps(sin));
  } else {
    const __m256i lanes = first_lanes(2 * num_pairs);
    const __m128i pair_lanes = _mm256_castsi256_si128(first_lanes(num_pairs));
    pairs = _mm256_maskload_ps(pairs_x, lanes);
    c = duplicated_into_pairs(_mm_maskload_ps(cos, pair_lanes));
    s = duplicated_into_pairs(_mm_maskload_ps(sin, pair_lanes));
  }
  const __m256 swapped = _mm256_permute_ps(pairs, 0xB1);  // b0 a0 b1 a1 b2 a2 b3 a3
  const __m256 rotated = _mm256_addsub_ps(_mm256_mul_ps(pairs, c), _mm256_mul_ps(swapped, s));
  if (num_pairs == 4) {
    _mm256_storeu_ps(out, rotated);
  } else {
    _mm256_maskstore_ps(out, first_lanes(2 * num_pairs), rotated);
  }
}

// 4 pairs per ymm, the last step masked. Each step loads before it stores: out == x is safe.
// An opaque copy: the compiler cannot see that v is a product, so it cannot fuse it into an
// FMA with the sum or difference that follows (vector + and - on __m256 would otherwise be
// contracted under -mfma). Costs no instruction.
inline __m256 unfused(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

// 8 pairs per step, split into the a's and b's: vshufps works within 128-bit lanes, so they come
// in the pair order 0 1 4 5 | 2 3 6 7, cos and sin are put in that order with one vpermpd, and
// vunpcklps / vunpckhps put the results back as pairs 0-3 and 4-7. Six shuffles per 8 pairs,
// against seven per 4 for the vaddsubps step (whose pair duplication and swap are all
// shuffles, one port on many cores); the latter does the last 1-7 pairs.
inline void rope_interleaved_ymm(const float* x, const float* cos, const float* sin, int64_t half,
                                 float* out) {
  const auto in_lane_pair_order = [](__m256 v) {  // v0 v1 v4 v5 | v2 v3 v6 v7
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
  };
  int64_t i = 0;
  for (; i + 8 <= half; i += 8) {  // loads before stores: out == x is safe
    const __m256 lo = _mm256_loadu_ps(x + 2 * i), hi = _mm256_loadu_ps(x + 2 * i + 8);
    const __m256 a = _mm256_shuffle_ps(lo, hi, 0x88), b = _mm256_shuffle_ps(lo, hi, 0xDD);
    const __m256 c = in_lane_pair_order(_mm256_loadu_ps(cos + i));
    const __m256 s = in_lane_pair_order(_mm256_loadu_ps(sin + i));
    const __m256 rotated_a = unfused(_mm256_mul_ps(a, c)) - unfused(_mm256_mul_ps(b, s));
    const __m256 rotated_b = unfused(_mm256_mul_ps(b, c)) + unfused(_mm256_mul_ps(a, s));
    _mm256_storeu_ps(out + 2 * i, _mm256_unpacklo_ps(rotated_a, rotated_b));
    _mm256_storeu_ps(out + 2 * i + 8, _mm256_unpackhi_ps(rotated_a, rotated_b));
  }
  for (; i < half; i += 4) {
    rope_interleaved_ymm_step(x + 2 * i, cos + i, sin + i, half - i < 4 ? half - i : 4,
                              out + 2 * i);
  }
}

#if defined(__AVX512F__) && defined(__AVX512VL__)
// 1-8 pairs in one zmm (the tail of the loop below). AVX-512 has no vaddsubps on zmm: the sum
// goes into the odd lanes and the difference into the even ones, each under a mask (masked
// builtins, which the compiler does not fuse with the products either).
inline void rope_interleaved_zmm_step(const float* pairs_x, const float* cos, const float* sin,
                                      int64_t num_pairs, float* out) {
  const __m512i pair_of = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  constexpr __mmask16 kEvenLanes = 0x5555, kOddLanes = 0xAAAA;
  const __mmask8 pair_mask = static_cast<__mmask8>((1u << num_pairs) - 1);
  const __mmask16 lane_mask = static_cast<__mmask16>((1u << (2 * num_pairs)) - 1);
  const __m512 pairs = _mm512_maskz_loadu_ps(lane_mask, pairs_x);
  const __m512 swapped = _mm512_permute_ps(pairs, 0xB1);
  const __m512 c =
      _mm512_permutexvar_ps(pair_of, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(pair_mask, cos)));
  const __m512 s =
      _mm512_permutexvar_ps(pair_of, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(pair_mask, sin)));
  const __m512 ac = _mm512_mul_ps(pairs, c), bs = _mm512_mul_ps(swapped, s);
  const __m512 rotated =
      _mm512_mask_sub_ps(_mm512_mask_add_ps(ac, kOddLanes, ac, bs), kEvenLanes, ac, bs);
  _mm512_mask_storeu_ps(out, lane_mask, rotated);
}

inline __m512 unfused(__m512 v) {  // as the __m256 one above
  __asm__("" : "+v"(v));
  return v;
}

// 16 pairs per step: vpermt2ps splits two zmm of pairs into the a's and the b's in pair order,
// so cos and sin are used as loaded, and two more put the results back as pairs: four shuffles
// per 16 pairs. The last 1-15 pairs take the masked step above.
inline void rope_interleaved_zmm(const float* x, const float* cos, const float* sin, int64_t half,
                                 float* out) {
  const __m512i evens =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i first_pairs =
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i last_pairs =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  int64_t i = 0;
  for (; i + 16 <= half; i += 16) {  // loads before stores: out == x is safe
    const __m512 lo = _mm512_loadu_ps(x + 2 * i), hi = _mm512_loadu_ps(x + 2 * i + 16);
    const __m512 a = _mm512_permutex2var_ps(lo, evens, hi);
    const __m512 b = _mm512_permutex2var_ps(lo, odds, hi);
    const __m512 c = _mm512_loadu_ps(cos + i), s = _mm512_loadu_ps(sin + i);
    const __m512 rotated_a = unfused(_mm512_mul_ps(a, c)) - unfused(_mm512_mul_ps(b, s));
    const __m512 rotated_b = unfused(_mm512_mul_ps(b, c)) + unfused(_mm512_mul_ps(a, s));
    _mm512_storeu_ps(out + 2 * i, _mm512_permutex2var_ps(rotated_a, first_pairs, rotated_b));
    _mm512_storeu_ps(out + 2 * i + 16, _mm512_permutex2var_ps(rotated_a, last_pairs, rotated_b));
  }
  for (; i < half; i += 8) {
    rope_interleaved_zmm_step(x + 2 * i, cos + i, sin + i, half - i < 8 ? half - i : 8,
                              out + 2 * i);
  }
}
#endif

// The table's rope: neox pairs through the shared template (already vectorised), interleaved
// pairs through the widest version this file is compiled for.
template <class V>
void rope(const float* x, const float* cos, const float* sin, int64_t rotary_dim, bool neox,
          float* out) {
  if (neox) {
    simd::rope<V>(x, cos, sin, rotary_dim, neox, out);
    return;
  }
#if defined(__AVX512F__) && defined(__AVX512VL__)
  if constexpr (V::kLanes == 16) {
    rope_interleaved_zmm(x, cos, sin, rotary_dim / 2, out);
    return;
  }
#endif
  rope_interleaved_ymm(x, cos, sin, rotary_dim / 2, out);
}

}  // namespace pagoda::x86
