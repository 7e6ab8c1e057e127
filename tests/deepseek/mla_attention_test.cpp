// The MLA kernel: the paged, blocked, threaded version against the contiguous scalar
// reference (mixed decode + prefill chunk over a shuffled block table; fp32, fp16 and bf16
// caches), and the absorbed form against the expanded per-head attention it replaces.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "kernels/mla_attention.h"
#include "util/half.h"

namespace pagoda {
namespace {

constexpr int32_t kHeads = 5, kRank = 24, kRope = 8, kLatent = kRank + kRope, kBlock = 4;

// The latent rows as a cache of `dtype` holds them: rounded once, widened exactly.
std::vector<float> as_cached(DType dtype, std::vector<float> rows) {
  for (float& f : rows) {
    if (dtype == DType::kF16) f = f16_to_f32(f32_to_f16(f));
    if (dtype == DType::kBF16) f = bf16_to_f32(f32_to_bf16(f));
  }
  return rows;
}

class MlaCacheDtypeTest : public ::testing::TestWithParam<DType> {};

// In every cache dtype (--kv-cache-dtype): a 16-bit cache must match the reference on the
// rounded latents as closely as the fp32 cache matches it on the exact ones.
TEST_P(MlaCacheDtypeTest, PagedMatchesContiguousReference) {
  const DType dtype = GetParam();
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  // Two sequences: A decodes its 19th token, B prefills a chunk of 6 after 7 cached tokens.
  struct Seq {
    int32_t context_len, num_tokens;
    std::vector<int32_t> blocks;
  };
  std::vector<Seq> seqs = {{19, 1, {9, 2, 7, 0, 5}}, {13, 6, {3, 8, 1, 6}}};
  const int32_t num_blocks = 10;
  std::vector<uint8_t> storage(static_cast<size_t>(num_blocks * kBlock * kLatent) *
                               static_cast<size_t>(dtype_size(dtype)));
  PagedKvLayer cache{storage.data(), nullptr, kBlock, 1, kLatent, 0, dtype};

  std::vector<std::vector<float>> contiguous;
  std::vector<AttentionSequence> attn;
  int32_t total = 0;
  for (const Seq& s : seqs) {
    std::vector<float> rows(static_cast<size_t>(s.context_len * kLatent));
    for (float& v : rows) v = n(rng);
    std::vector<int64_t> slots;
    for (int32_t p = 0; p < s.context_len; ++p)
      slots.push_back(int64_t{s.blocks[static_cast<size_t>(p / kBlock)]} * kBlock + p % kBlock);
    write_latent(cache, rows.data(), slots.data(), s.context_len);
    contiguous.push_back(as_cached(dtype, rows));
    attn.push_back({total, s.num_tokens, s.context_len, s.blocks.data()});
    total += s.num_tokens;
  }
  std::vector<float> q(static_cast<size_t>(total * kHeads * kLatent));
  for (float& v : q) v = n(rng);
  const float scale = 0.17f;
  std::vector<float> out(static_cast<size_t>(total * kHeads * kRank));
  mla_attention(q.data(), kHeads, kRank, cache, attn.data(), 2, scale, out.data());

  // On a table with fp16 arithmetic (KernelTable::f16_arithmetic, AArch64 with +fp16) an fp16
  // cache's scores are within delta = scale * 10 * 2^-11 * sum|q k| (+ 2^-28 max|q| per step,
  // see kernels/arm/fp16_kernels.h) of the exact ones, which moves the output by at most
  // (e^(2 delta) - 1) max|latent|; the weighted sum of the latent rows, in fp16 too
  // (kernels/arm/fp16_values.h), adds 10 * 2^-11 max|latent| (+ 2^-20 per step, here 2^-12).
  double tolerance = 1e-5;
  if (dtype == DType::kF16 && kernels().f16_arithmetic) {
    double worst = 0.0, max_latent = 0.0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      for (float v : contiguous[i]) max_latent = std::max(max_latent, double{std::fabs(v)});
      for (int32_t h = 0; h < attn[i].num_tokens * kHeads; ++h) {
        const float* qh = &q[static_cast<size_t>((attn[i].token_begin * kHeads + h) * kLatent)];
        for (int32_t p = 0; p < attn[i].context_len; ++p) {
          double sum = 0.0, max_q = 0.0;
          for (int32_t c = 0; c < kLatent; ++c) {
            sum += std::fabs(double{qh[c]} * contiguous[i][static_cast<size_t>(p * kLatent + c)]);
            max_q = std::max(max_q, double{std::fabs(qh[c])});
          }
          worst = std::max(worst, 10.0 * std::ldexp(1.0, -11) * sum +
                                      2.0 * kLatent * std::ldexp(1.0, -28) * max_q);
        }
      }
    }
    tolerance += std::expm1(2.0 * scale * worst) * max_latent +
                 (10.0 * std::ldexp(1.0, -11) + std::ldexp(1.0, -12)) * max_latent;
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    const AttentionSequence& a = attn[i];
    std::vector<float> want(static_cast<size_t>(a.num_tokens * kHeads * kRank));
    mla_attention_reference(&q[static_cast<size_t>(a.token_begin * kHeads * kLatent)], a.num_tokens,
                            kHeads, contiguous[i].data(), a.context_len, kLatent, kRank, scale,
                            want.data());
    for (size_t j = 0; j < want.size(); ++j) {
      ASSERT_NEAR(out[static_cast<size_t>(a.token_begin * kHeads * kRank) + j], want[j], tolerance)
          << dtype_name(dtype) << " sequence " << i << " value " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CacheDtypes, MlaCacheDtypeTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// One head, written out the long way: k_j = [W_uk c_j | k_pe_j], v_j = W_uv c_j,
// o = sum_j softmax(q.k_j * scale) v_j; versus absorbing W_uk into q and W_uv after.
TEST(MlaAttention, AbsorbedFormEqualsExpandedAttention) {
  constexpr int32_t kNope = 6, kV = 7, kCtx = 9;
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto rnd = [&](size_t count) {
    std::vector<float> v(count);
    for (float& x : v) x = n(rng);
    return v;
  };
  const std::vector<float> w_uk = rnd(kNope * kRank), w_uv = rnd(kV * kRank);
  const std::vector<float> latent = rnd(kCtx * kLatent);  // [c | k_pe] per position
  const std::vector<float> q_nope = rnd(kNope), q_pe = rnd(kRope);
  const float scale = 0.05f;

  // Expanded.
  std::vector<double> scores(kCtx), expanded(kV, 0.0);
  double max_score = -1e30, sum = 0.0;
  for (int32_t j = 0; j < kCtx; ++j) {
    const float* c = &latent[static_cast<size_t>(j * kLatent)];
    double s = 0.0;
    for (int32_t i = 0; i < kNope; ++i) {
      double k = 0.0;
      for (int32_t r = 0; r < kRank; ++r)
        k += double{w_uk[static_cast<size_t>(i * kRank + r)]} * c[r];
      s += q_nope[static_cast<size_t>(i)] * k;
    }
    for (int32_t i = 0; i < kRope; ++i) s += double{q_pe[static_cast<size_t>(i)]} * c[kRank + i];
    scores[static_cast<size_t>(j)] = s * scale;
    max_score = std::max(max_score, scores[static_cast<size_t>(j)]);
  }
  for (double& s : scores) sum += (s = std::exp(s - max_score));
  for (int32_t j = 0; j < kCtx; ++j) {
    const float* c = &latent[static_cast<size_t>(j * kLatent)];
    for (int32_t d = 0; d < kV; ++d) {
      double v = 0.0;
      for (int32_t r = 0; r < kRank; ++r)
        v += double{w_uv[static_cast<size_t>(d * kRank + r)]} * c[r];
      expanded[static_cast<size_t>(d)] += scores[static_cast<size_t>(j)] / sum * v;
    }
  }

  // Absorbed, through the paged kernel (the last token of a one-sequence prefill).
  std::vector<float> q_abs(kLatent, 0.0f);
  for (int32_t r = 0; r < kRank; ++r) {
    for (int32_t i = 0; i < kNope; ++i)
      q_abs[static_cast<size_t>(r)] +=
          q_nope[static_cast<size_t>(i)] * w_uk[static_cast<size_t>(i * kRank + r)];
  }
  for (int32_t i = 0; i < kRope; ++i)
    q_abs[static_cast<size_t>(kRank + i)] = q_pe[static_cast<size_t>(i)];
  const int32_t num_blocks = (kCtx + kBlock - 1) / kBlock;
  std::vector<float> storage(static_cast<size_t>(num_blocks * kBlock * kLatent));
  PagedKvLayer cache{storage.data(), nullptr, kBlock, 1, kLatent, 0};
  std::vector<int32_t> blocks = {2, 0, 1};
  std::vector<int64_t> slots;
  for (int32_t p = 0; p < kCtx; ++p)
    slots.push_back(int64_t{blocks[static_cast<size_t>(p / kBlock)]} * kBlock + p % kBlock);
  write_latent(cache, latent.data(), slots.data(), kCtx);
  AttentionSequence seq{0, 1, kCtx, blocks.data()};
  std::vector<float> ctx(kRank);
  mla_attention(q_abs.data(), 1, kRank, cache, &seq, 1, scale, ctx.data());
  for (int32_t d = 0; d < kV; ++d) {
    double o = 0.0;
    for (int32_t r = 0; r < kRank; ++r)
      o += double{w_uv[static_cast<size_t>(d * kRank + r)]} * ctx[static_cast<size_t>(r)];
    EXPECT_NEAR(o, expanded[static_cast<size_t>(d)], 1e-4) << "dim " << d;
  }
}

TEST(MlaAttention, WriteLatentSkipsPaddingSlots) {
  std::vector<float> storage(static_cast<size_t>(2 * kBlock * kLatent), -1.0f);
  PagedKvLayer cache{storage.data(), nullptr, kBlock, 1, kLatent, 0};
  std::vector<float> rows(static_cast<size_t>(2 * kLatent), 5.0f);
  const std::vector<int64_t> slots = {6, -1};
  write_latent(cache, rows.data(), slots.data(), 2);
  EXPECT_EQ(storage[static_cast<size_t>(6 * kLatent)], 5.0f);
  EXPECT_EQ(storage[static_cast<size_t>(7 * kLatent)], -1.0f);
  EXPECT_EQ(storage[0], -1.0f);
}

}  // namespace
}  // namespace pagoda
