// The per-request random number generator of the sampler: xoshiro256** seeded through
// splitmix64 (Blackman & Vigna, https://prng.di.unimi.it/). Each sequence owns one, so its draws
// depend only on its own seed and step count, never on batch composition or other requests.
#pragma once

#include <cstdint>

namespace pagoda {

class SamplingRng {
 public:
  explicit SamplingRng(uint64_t seed) {
    // splitmix64 spreads any seed (0 included) over the whole 256-bit state, which must not be
    // all zero for xoshiro.
    uint64_t x = seed;
    for (uint64_t& word : state_) {
      x += 0x9e3779b97f4a7c15ULL;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      word = z ^ (z >> 31);
    }
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t state_[4];
};

}  // namespace pagoda
