// AVX2 + FMA + F16C kernels: the vector traits for 8 fp32 lanes in ymm registers; the kernels
// themselves are the shared templates in simd_kernels.h. Compiled with -mavx2 -mfma -mf16c
// (src/kernels/CMakeLists.txt) and only called after dispatch.cpp checked the CPU.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>

#include "kernels/simd/quant_kernels.h"
#include "kernels/simd/simd_kernels.h"
#include "kernels/tables.h"
#include "kernels/x86/int8_kernels.h"
#include "kernels/x86/interleaved_rope.h"

namespace pagoda::detail {
namespace {

// Sliding window over this gives the mask for the first n lanes: kLaneMask + 8 - n.
alignas(64) constexpr int32_t kLaneMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                               0,  0,  0,  0,  0,  0,  0,  0};

struct Avx2 {
  using F = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kVectorRegisters = 16;  // ymm0-15
  // Register tiles of the matmul (rows x tokens), sized to the 16 ymm registers and picked
  // by measurement (docs/kernels.md): 4 x 3 = 12 accumulators + 4 weight vectors, with x
  // mostly read as a memory operand of the FMA. kTileTokens: widened panel path;
  // kStreamTileTokens: widening on the fly; kBf16TileTokens: bf16 even/odd pairs.
  static constexpr int kTileRows = 4;
  static constexpr int kTileTokens = 3;
  static constexpr int kStreamTileTokens = 3;
  static constexpr int kBf16TileTokens = 3;
  // The column-blocked panel sweep (simd_kernels.h): 2 x 6 = 12 accumulators + 2 weight
  // vectors + 1 x vector, all in registers, so a step is 8 loads per 12 FMAs; 4 x 3 leaves no
  // register for x, which is then re-read by every FMA (16 loads per 12 FMAs: load-bound at
  // 2 loads per cycle). 3 x 4 measured the same as 2 x 6 and splits a 16-row panel unevenly.
  static constexpr int kSweepRows = 2;
  static constexpr int kSweepTokens = 6;
  // W8A8 / W4A8 (int8_kernels.h): no VNNI; many tokens of int8 take the ymm lane panels
  // (int8_lane_panels.h, the same tiles on both x86 tables); int4 takes tiles of 4 rows x
  // kIntTileTokens tokens (4 accumulators, 4 rows' weights and their partial sums in 16 ymm).
  static constexpr int kIntTileTokens = 4;
  static constexpr bool kVnni = false;
  static constexpr bool kZmmBlockTiles = false;  // zmm int8/int4 tiles: see Avx512Vnni

  static __m256i mask(int n) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLaneMask + 8 - n));
  }
  // The ISA-specific helpers of the shared templates (simd/simd_kernels.h).
  static void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
  static float sqrt_scalar(float v) { return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(v))); }
  static void keep_in_register(F& v) { __asm__("" : "+x"(v)); }
  static float half_to_float(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
  }
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F load_n(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
  static F load_n_fill(const float* p, int n, float fill) {
    const __m256i m = mask(n);
    return _mm256_blendv_ps(set1(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static F mask_n(F v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(mask(n))); }
  static void store_n(float* p, F v, int n) { _mm256_maskstore_ps(p, mask(n), v); }

  // bf16 is the top half of fp32: zero-extend to 32 bits and shift into place.
  static F load_bf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static F load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // 16-bit tails: copy into a zeroed block (0x0000 is +0 in both formats), then widen.
  static F load_bf16_n(const uint16_t* p, int n) {
    alignas(16) uint16_t block[8] = {};
    for (int i = 0; i < n; ++i) block[i] = p[i];
    return load_bf16(block);
  }
  static F load_f16_n(const uint16_t* p, int n) {
    alignas(16) uint16_t block[8] = {};
    for (int i = 0; i < n; ++i) block[i] = p[i];
    return load_f16(block);
  }

  // fp32 narrowed to 16 bits, rounding to nearest even as util/half.h does (the KV cache
  // write): f16 by vcvtps2ph; bf16 by adding 0x7fff plus the lowest kept bit, except that a
  // NaN keeps its top bits with the quiet bit set. The 32-bit results are below 2^16, so the
  // unsigned-saturating pack is exact.
  static __m128i narrow_f16(F v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
  static __m128i narrow_bf16(F v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lowest_kept = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lowest_kept)), 16);
    const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const __m256i h = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(rounded),
                                                           _mm256_castsi256_ps(quiet_nan),
                                                           _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  }
  static void store_16(uint16_t* p, __m128i h) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
  static void store_16_n(uint16_t* p, __m128i h, int n) {
    alignas(16) uint16_t block[8];
    store_16(block, h);
    for (int i = 0; i < n; ++i) p[i] = block[i];
  }
  static void store_f16(uint16_t* p, F v) { store_16(p, narrow_f16(v)); }
  static void store_bf16(uint16_t* p, F v) { store_16(p, narrow_bf16(v)); }
  static void store_f16_n(uint16_t* p, F v, int n) { store_16_n(p, narrow_f16(v), n); }
  static void store_bf16_n(uint16_t* p, F v, int n) { store_16_n(p, narrow_bf16(v), n); }

  // 16 bf16 values as fp32: lane j of even = p[2j], of odd = p[2j + 1] (see simd_kernels.h).
  static void load_bf16_even_odd(const uint16_t* p, F& even, F& odd) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    odd =
        _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void load_bf16_even_odd_n(const uint16_t* p, int n, F& even, F& odd) {
    alignas(32) uint16_t block[16] = {};
    for (int i = 0; i < n; ++i) block[i] = p[i];
    load_bf16_even_odd(block, even, odd);
  }

  // 8 int8 / 4-bit values as fp32; load_u4 takes the nibble at bit `shift` of 8 bytes.
  static F load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static F load_u4(const uint8_t* p, int shift) {
    const __m256i bytes =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtepi32_ps(
        _mm256_and_si256(_mm256_srl_epi32(bytes, _mm_cvtsi32_si128(shift)), _mm256_set1_epi32(15)));
  }
  // 32 u8 x s8 products summed in fours into 8 int32: vpmaddubsw (pairs into int16; callers
  // keep pair sums within int16) then vpmaddwd with ones.
  static __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }

  // The long-block W8A8 products: 16 int16 lanes per vector, pairs summed into int32.
  using I = __m256i;
  static constexpr int kWideLanes = 16;
  static I zero_i() { return _mm256_setzero_si256(); }
  static I load_i8_as_i16(const int8_t* p) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I load_i16(const int16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static I madd_add(I acc, I a, I b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
  static int32_t reduce_add_i32(I v) { return x86::reduce_add_epi32_256<Avx2>(v); }

  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }

  static float reduce_add(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Lane j = reduce_add(v[j]) for 8 vectors at once, bit for bit: each sum pairs the same
  // partial sums as reduce_add (lanes i and i + 4, then i and i + 2, then i and i + 1; IEEE
  // addition commutes), but 8 vectors share each shuffle and add: 7 adds and 14 shuffles
  // instead of 8 x (3 adds, 3 shuffles and an extract). The prefill score tiles end with it
  // (attention_tiles.h).
  static F reduce_add_each(const F* v) {
    // After the three steps lane 4k + m holds the sum of input k of c_m (add_halves(a, b):
    // input 0 is a, 1 is b): hence c_m = add_halves(v[m], v[m + 4]), the result in order.
    const F c0 = add_halves(v[0], v[4]), c1 = add_halves(v[1], v[5]);
    const F c2 = add_halves(v[2], v[6]), c3 = add_halves(v[3], v[7]);
    const F e = add_shuffled<_MM_SHUFFLE(1, 0, 1, 0), _MM_SHUFFLE(3, 2, 3, 2)>(c0, c1);
    const F f = add_shuffled<_MM_SHUFFLE(1, 0, 1, 0), _MM_SHUFFLE(3, 2, 3, 2)>(c2, c3);
    return add_shuffled<_MM_SHUFFLE(2, 0, 2, 0), _MM_SHUFFLE(3, 1, 3, 1)>(e, f);
  }
  // [a lo + a hi, b lo + b hi]: the first step of reduce_add for two vectors.
  static F add_halves(F a, F b) {
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
  template <int kFirst, int kSecond>
  static F add_shuffled(F a, F b) {
    return _mm256_add_ps(_mm256_shuffle_ps(a, b, kFirst), _mm256_shuffle_ps(a, b, kSecond));
  }
  static float reduce_max(F v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // e^x: x = n ln2 + r with |r| <= ln2/2, e^r from Cephes expf's degree-6 polynomial
  // (relative error ~2e-7), 2^n built in the exponent field. Inputs are clamped to
  // [-87.3, 88], where the result is still a normal finite float.
  static F exp(F x) {
    x = _mm256_min_ps(_mm256_max_ps(x, set1(-87.3365f)), set1(88.0f));
    const F n = _mm256_round_ps(_mm256_mul_ps(x, set1(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm256_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    F p = set1(1.9875691500e-4f);
    p = fma(p, r, set1(1.3981999507e-3f));
    p = fma(p, r, set1(8.3334519073e-3f));
    p = fma(p, r, set1(4.1665795894e-2f));
    p = fma(p, r, set1(1.6666665459e-1f));
    p = fma(p, r, set1(5.0000001201e-1f));
    p = fma(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, set1(1.0f)));
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  }
};

}  // namespace

const KernelTable& avx2_table() {
  static const KernelTable table = [] {
    KernelTable t = simd::make_table<Avx2>("avx2");
    t.int8_lane_panels = x86::kLanePanelLayout;  // int8_lane_panels.h
    t.rope = x86::rope<Avx2>;                    // interleaved pairs vectorised (interleaved_rope.h)
    return t;
  }();
  return table;
}

}  // namespace pagoda::detail

#endif  // __x86_64__
