// Paged attention against the contiguous reference: random block tables, block sizes 1, 5 and
// 16, decodes mixed with fresh and continuing prefill chunks in one flattened batch, MHA, GQA
// and MQA head layouts, k and v head sizes that differ (as in MLA), on every ISA this CPU has;
// and the cache write with rope fused in against rope followed by the plain write; fp16 and bf16
// caches against an fp32 cache of the same rounded values; the prefill tiles (sequences of 2 or
// more new tokens) across blocks, chunks and tile tails, their independence from chunking and
// batching, and their two kernels on their own.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "util/half.h"

namespace pagoda {
namespace {

struct SeqSpec {
  int32_t num_tokens;   // new tokens this step
  int32_t context_len;  // cached + new
};

std::vector<float> random_floats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// x as a cache of `dtype` holds it: rounded once (round to nearest even), widened exactly.
std::vector<float> as_cached(DType dtype, std::vector<float> x) {
  for (float& f : x) {
    if (dtype == DType::kF16) f = f16_to_f32(f32_to_f16(f));
    if (dtype == DType::kBF16) f = bf16_to_f32(f32_to_bf16(f));
  }
  return x;
}

// A cache pool of n elements of `dtype`, each set to `fill` (rounded to the dtype).
std::vector<uint8_t> filled_pool(DType dtype, size_t n, float fill) {
  std::vector<uint8_t> pool(n * size_t(dtype_size(dtype)));
  for (size_t i = 0; i < n; ++i) {
    kernels_for("scalar")->from_f32(&fill, dtype, 1, pool.data() + i * dtype_size(dtype));
  }
  return pool;
}

// Which cache a batch runs on: its element type, and the type its random k/v values are rounded
// to before they are written (so an fp32 cache can hold exactly what a 16-bit one holds).
struct CacheTypes {
  DType cache = DType::kF32;
  DType values = DType::kF32;
};

// Runs one flattened batch through paged_attention on the current table and checks every
// sequence against paged_attention_reference on its contiguous k/v (as the cache holds them).
// The output goes to *result where given, for bit comparisons between cache types.
void check_batch(const std::vector<SeqSpec>& specs, int32_t num_heads, int32_t num_kv_heads,
                 int32_t k_head_dim, int32_t v_head_dim, int32_t block_size, uint32_t seed,
                 CacheTypes types = {}, std::vector<float>* result = nullptr) {
  std::mt19937 rng(seed);
  int32_t total_blocks = 0, total_tokens = 0;
  for (const SeqSpec& s : specs) {
    total_blocks += (s.context_len + block_size - 1) / block_size;
    total_tokens += s.num_tokens;
  }
  total_blocks += 3;  // unused blocks, so a wrong block id reads the wrong data
  // The pool starts as NaN: reading a slot nobody wrote poisons the output.
  std::vector<uint8_t> k_pool =
      filled_pool(types.cache, size_t(total_blocks) * block_size * num_kv_heads * k_head_dim, NAN);
  std::vector<uint8_t> v_pool =
      filled_pool(types.cache, size_t(total_blocks) * block_size * num_kv_heads * v_head_dim, NAN);
  PagedKvLayer cache{k_pool.data(), v_pool.data(), block_size, num_kv_heads,
                     k_head_dim,    v_head_dim,    types.cache};

  std::vector<int32_t> free_blocks(total_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);  // random, non-contiguous tables

  const float scale = 1.0f / std::sqrt(static_cast<float>(k_head_dim));
  std::vector<std::vector<int32_t>> tables(specs.size());
  std::vector<std::vector<float>> ks(specs.size()), vs(specs.size());
  std::vector<AttentionSequence> seqs;
  const std::vector<float> q = random_floats(rng, size_t(total_tokens) * num_heads * k_head_dim);
  int32_t token_begin = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const SeqSpec& s = specs[i];
    const int32_t num_blocks = (s.context_len + block_size - 1) / block_size;
    for (int32_t b = 0; b < num_blocks; ++b) {
      tables[i].push_back(free_blocks.back());
      free_blocks.pop_back();
    }
    ks[i] = as_cached(types.values,
                      random_floats(rng, size_t(s.context_len) * num_kv_heads * k_head_dim));
    vs[i] = as_cached(types.values,
                      random_floats(rng, size_t(s.context_len) * num_kv_heads * v_head_dim));
    // The cached prefix and then the new tokens, as two write_kv calls like two engine steps.
    std::vector<int64_t> slots(s.context_len);
    for (int32_t p = 0; p < s.context_len; ++p) {
      slots[p] = int64_t{tables[i][p / block_size]} * block_size + p % block_size;
    }
    const int32_t cached = s.context_len - s.num_tokens;
    write_kv(cache, ks[i].data(), vs[i].data(), slots.data(), cached);
    write_kv(cache, ks[i].data() + size_t(cached) * num_kv_heads * k_head_dim,
             vs[i].data() + size_t(cached) * num_kv_heads * v_head_dim, slots.data() + cached,
             s.num_tokens);
    seqs.push_back(AttentionSequence{token_begin, s.num_tokens, s.context_len, tables[i].data()});
    token_begin += s.num_tokens;
  }

  std::vector<float> out(size_t(total_tokens) * num_heads * v_head_dim, NAN);
  paged_attention(q.data(), num_heads, cache, seqs.data(), static_cast<int32_t>(seqs.size()), scale,
                  out.data());
  if (result != nullptr) *result = out;

  for (size_t i = 0; i < specs.size(); ++i) {
    const AttentionSequence& s = seqs[i];
    std::vector<float> expected(size_t(s.num_tokens) * num_heads * v_head_dim);
    const std::vector<float> k_cached = as_cached(types.cache, ks[i]);
    const std::vector<float> v_cached = as_cached(types.cache, vs[i]);
    paged_attention_reference(q.data() + size_t(s.token_begin) * num_heads * k_head_dim,
                              s.num_tokens, num_heads, k_cached.data(), v_cached.data(),
                              s.context_len, num_kv_heads, k_head_dim, v_head_dim, scale,
                              expected.data());
    for (size_t j = 0; j < expected.size(); ++j) {
      const float got = out[size_t(s.token_begin) * num_heads * v_head_dim + j];
      // |v| <= 1 and the weights sum to 1, so outputs are O(1); fp32 sums over <= 100 positions
      // (block-wise rescaled) and the vector exp (~2e-7 relative) stay well inside 2e-5.
      double tolerance = 2e-5;
      if (types.cache == DType::kF16 && kernels().f16_arithmetic) {
        // Scores in fp16 arithmetic (kernel_table_test's f16_arithmetic_bound): each is off by
        // at most delta = scale * 10 * 2^-11 * sum|q| (|k| <= 1, the subnormal term folded
        // into the slack), which scales every softmax weight by at most e^(+-delta) each way:
        // the output moves by at most (e^(2 delta) - 1) max|v|, max|v| <= 1.
        const int64_t token = j / (size_t(num_heads) * v_head_dim);
        const int64_t head = j / v_head_dim % num_heads;
        const float* qh =
            q.data() + (size_t(s.token_begin + token) * num_heads + head) * k_head_dim;
        double sum_q = 0.0;
        for (int32_t c = 0; c < k_head_dim; ++c) sum_q += std::fabs(qh[c]);
        const double delta = scale * (10.0 * std::ldexp(1.0, -11) * sum_q + 1e-6);
        tolerance += std::expm1(2.0 * delta);
        // The value sums too (kernel_table_test's f16_value_bound): 10 * 2^-11 of the weighted
        // |v| (<= 1 after the division by the weights' sum, itself >= 1), plus, per block, at
        // most (3 block_size + 8) steps of 2^-20 near fp16's subnormals.
        const int32_t num_blocks = (s.context_len + block_size - 1) / block_size;
        tolerance += 10.0 * std::ldexp(1.0, -11) +
                     double(num_blocks) * (3 * block_size + 8) * std::ldexp(1.0, -20);
      }
      ASSERT_NEAR(got, expected[j], tolerance)
          << "seq " << i << " element " << j << " (heads " << num_heads << "/" << num_kv_heads
          << ", block_size " << block_size << ", cache " << dtype_name(types.cache) << ", isa "
          << kernels().isa << ")";
    }
  }
}

class AttentionIsaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (kernels_for(GetParam()) == nullptr) GTEST_SKIP() << "this CPU cannot run " << GetParam();
    previous_ = kernels().isa;
    set_kernel_isa(GetParam());
  }
  void TearDown() override {
    if (kernels_for(GetParam()) != nullptr) set_kernel_isa(previous_);
  }
  std::string previous_ = "scalar";
};

// Decodes mixed with a fresh prefill, a continuing chunk and a one-token context.
const std::vector<SeqSpec> kMixedBatch = {{1, 37}, {20, 20}, {7, 50}, {1, 1}, {1, 16}, {13, 33}};

TEST_P(AttentionIsaTest, GqaMixedBatchEveryBlockSize) {
  for (int32_t block_size : {1, 5, 16}) {
    check_batch(kMixedBatch, /*num_heads=*/8, /*num_kv_heads=*/2, 16, 16, block_size, 7);
  }
}

TEST_P(AttentionIsaTest, MhaAndMqaAndUnequalHeadDims) {
  check_batch(kMixedBatch, 4, 4, 24, 24, 16, 11);  // MHA
  check_batch(kMixedBatch, 6, 1, 16, 16, 5, 12);   // MQA
  check_batch(kMixedBatch, 4, 2, 40, 17, 16, 13);  // k 40 wide, v 17 wide (MLA-like shapes)
}

TEST_P(AttentionIsaTest, LongContextManyBlocks) {
  // A DeepSeek-like head (128) over 300 positions, 16-token blocks: many rescalings of the
  // running softmax state.
  check_batch({{1, 300}, {9, 300}}, 4, 2, 128, 128, 16, 21);
}

TEST_P(AttentionIsaTest, SixteenBitCacheGivesTheFp32CacheResultOnItsRoundedValues) {
  // A 16-bit cache rounds each k/v value once, when written, and widens it exactly when read,
  // so it must give the very bits an fp32 cache holding the rounded values gives; and both
  // match the reference on those values (inside check_batch).
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int32_t block_size : {5, 16}) {
      std::vector<float> narrow, wide;
      check_batch(kMixedBatch, 8, 2, 40, 17, block_size, 41, CacheTypes{dtype, DType::kF32},
                  &narrow);
      check_batch(kMixedBatch, 8, 2, 40, 17, block_size, 41, CacheTypes{DType::kF32, dtype}, &wide);
      // With fp16 arithmetic (KernelTable::f16_arithmetic) an fp16 cache is not widened
      // exactly, so only the bound inside check_batch holds for it.
      if (dtype == DType::kF16 && kernels().f16_arithmetic) continue;
      ASSERT_EQ(narrow, wide) << dtype_name(dtype) << " block_size " << block_size;
    }
  }
  check_batch({{1, 300}, {9, 300}}, 4, 2, 128, 128, 16, 43, CacheTypes{DType::kF16});
  check_batch({{1, 300}, {9, 300}}, 4, 2, 128, 128, 16, 44, CacheTypes{DType::kBF16});
}

// Sequences of 2 or more new tokens take the prefill tiles: 64 query rows per work item (the
// group's heads times 64 / group tokens). Prompts over many blocks and partial blocks, chunks
// that continue a cached prefix, token counts that are not multiples of the tile, alongside
// decodes in the same batch.
TEST_P(AttentionIsaTest, PrefillTilesAcrossBlocksGqaChunksAndTails) {
  // GQA, group 4: 16-token tiles.
  const std::vector<SeqSpec> gqa = {{70, 70}, {37, 100}, {16, 16}, {17, 40}, {2, 2}, {1, 60}};
  for (int32_t block_size : {1, 5, 16}) check_batch(gqa, 8, 2, 64, 64, block_size, 51);
  // MHA with DeepSeek-Coder's 128-wide heads: 64-token tiles.
  check_batch({{130, 130}, {65, 200}, {3, 3}}, 4, 4, 128, 128, 16, 52);
  // MQA, group 6 (10-token tiles, 60 rows), k and v widths with vector tails.
  check_batch({{23, 23}, {11, 31}, {1, 9}}, 6, 1, 40, 17, 5, 53);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (int32_t block_size : {5, 16}) {
      check_batch(gqa, 8, 2, 64, 64, block_size, 54, CacheTypes{dtype});
      check_batch({{23, 23}, {11, 31}}, 6, 1, 40, 17, block_size, 55, CacheTypes{dtype});
    }
  }
}

// The online softmax steps by key tiles of whole blocks (about 64 positions): prompts and
// chunks whose query tiles start and end inside key tiles, contexts that end one past a key
// tile, block sizes that divide 64 (1, 16, 32) and that do not (5, 7: tiles of 60 and 63
// positions), MHA and GQA, fp32 and fp16 caches, against the reference.
TEST_P(AttentionIsaTest, PrefillAcrossKeyTilesRaggedLengthsAndBlockSizes) {
  const std::vector<SeqSpec> ragged = {{150, 150}, {70, 203}, {1, 129}, {65, 65}, {3, 193}};
  for (int32_t block_size : {1, 5, 7, 16, 32}) {
    check_batch(ragged, 8, 2, 64, 48, block_size, 81);
  }
  check_batch(ragged, 4, 4, 128, 128, 16, 82, CacheTypes{DType::kF16});
  check_batch(ragged, 6, 2, 40, 17, 7, 83, CacheTypes{DType::kBF16});
}

// A prefill token's output bits depend only on its own sequence's data: the same prompt run as
// one call, as two chunks with different tile boundaries, and next to another sequence gives
// identical outputs (every row's operations are the same whatever rows share its tile, and the
// blocks a row cannot see yet add exactly nothing).
TEST_P(AttentionIsaTest, PrefillTilesDoNotDependOnChunksOrBatch) {
  const int32_t num_heads = 8, num_kv_heads = 2, dk = 40, dv = 24, bs = 16, len = 50;
  std::mt19937 rng(61);
  const int32_t num_blocks = (len + bs - 1) / bs;
  std::vector<float> k_pool = random_floats(rng, size_t(num_blocks) * bs * num_kv_heads * dk);
  std::vector<float> v_pool = random_floats(rng, size_t(num_blocks) * bs * num_kv_heads * dv);
  const PagedKvLayer cache{k_pool.data(), v_pool.data(), bs, num_kv_heads, dk, dv, DType::kF32};
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  const std::vector<float> q = random_floats(rng, size_t(len) * num_heads * dk);
  const float scale = 0.2f;
  const size_t row = size_t(num_heads) * dv;

  std::vector<float> whole(len * row, NAN);
  const AttentionSequence one{0, len, len, table.data()};
  paged_attention(q.data(), num_heads, cache, &one, 1, scale, whole.data());

  std::vector<float> chunked(len * row, NAN);
  const AttentionSequence first{0, 20, 20, table.data()};
  paged_attention(q.data(), num_heads, cache, &first, 1, scale, chunked.data());
  const AttentionSequence rest{0, len - 20, len, table.data()};
  paged_attention(q.data() + size_t(20) * num_heads * dk, num_heads, cache, &rest, 1, scale,
                  chunked.data() + 20 * row);
  EXPECT_EQ(chunked, whole) << kernels().isa;

  // A 7-token chunk of the same cache first in the batch: the prompt's rows shift by 7.
  std::vector<float> q_batch = random_floats(rng, size_t(7) * num_heads * dk);
  q_batch.insert(q_batch.end(), q.begin(), q.end());
  std::vector<float> batched((7 + len) * row, NAN);
  const AttentionSequence pair[] = {{0, 7, 30, table.data()}, {7, len, len, table.data()}};
  paged_attention(q_batch.data(), num_heads, cache, pair, 2, scale, batched.data());
  EXPECT_EQ(std::vector<float>(batched.begin() + 7 * row, batched.end()), whole) << kernels().isa;
}

// Speculative decoding verifies k drafted tokens in one forward (the prefill tiles) where plain
// decoding attends one token per step (attend_tokens: dot_rows, axpy_rows). Greedy outputs are
// identical only if both give every token the same bits: here each token of a 150-token
// sequence attended alone equals it inside 2- and 5-token calls and the whole prefill, for
// every cache dtype, MHA with 128-wide heads (vector pairs) and GQA with tails (40, 24), over
// several key tiles (the softmax steps both paths take) of 16- and 5-position blocks.
TEST_P(AttentionIsaTest, TokensDecodedOneByOneGiveTheBitsOfTheTiles) {
  struct Shape {
    int32_t num_heads, num_kv_heads, dk, dv, block_size;
  };
  for (const Shape shape :
       {Shape{8, 2, 40, 24, 16}, Shape{4, 4, 128, 128, 16}, Shape{4, 2, 128, 128, 5}}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      const int32_t bs = shape.block_size, len = 150;
      std::mt19937 rng(67);
      const int32_t num_blocks = (len + bs - 1) / bs;
      const size_t k_values = size_t(num_blocks) * bs * shape.num_kv_heads * shape.dk;
      const size_t v_values = size_t(num_blocks) * bs * shape.num_kv_heads * shape.dv;
      const std::vector<float> k_f32 = random_floats(rng, k_values);
      const std::vector<float> v_f32 = random_floats(rng, v_values);
      std::vector<uint8_t> k_pool(k_values * size_t(dtype_size(dtype)));
      std::vector<uint8_t> v_pool(v_values * size_t(dtype_size(dtype)));
      kernels().from_f32(k_f32.data(), dtype, int64_t(k_values), k_pool.data());
      kernels().from_f32(v_f32.data(), dtype, int64_t(v_values), v_pool.data());
      const PagedKvLayer cache{k_pool.data(), v_pool.data(), bs,   shape.num_kv_heads,
                               shape.dk,      shape.dv,      dtype};
      std::vector<int32_t> table(num_blocks);
      std::iota(table.begin(), table.end(), 0);
      const std::vector<float> q = random_floats(rng, size_t(len) * shape.num_heads * shape.dk);
      const float scale = 0.3f;
      const size_t q_row = size_t(shape.num_heads) * shape.dk;
      const size_t row = size_t(shape.num_heads) * shape.dv;
      std::vector<float> decoded(len * row, NAN);
      for (int32_t t = 0; t < len; ++t) {
        const AttentionSequence one{0, 1, t + 1, table.data()};
        paged_attention(q.data() + t * q_row, shape.num_heads, cache, &one, 1, scale,
                        decoded.data() + t * row);
      }
      for (int32_t step : {2, 5, len}) {
        std::vector<float> tiled(len * row, NAN);
        for (int32_t t = 0; t < len; t += step) {
          const int32_t n = std::min(step, len - t);
          const AttentionSequence chunk{0, n, t + n, table.data()};
          paged_attention(q.data() + t * q_row, shape.num_heads, cache, &chunk, 1, scale,
                          tiled.data() + t * row);
        }
        // The first call of the 2- and 5-token runs covers positions 0.. as a prefill does.
        for (size_t i = 0; i < tiled.size(); ++i) {
          ASSERT_EQ(tiled[i], decoded[i]) << kernels().isa << " " << dtype_name(dtype) << " dk "
                                          << shape.dk << " step " << step << " token " << i / row;
        }
      }
    }
  }
}

// The two tile kernels on their own, against the scalar table, and each query row alone
// against the same row inside tiles of every height: rows of 1..7 queries (the 3-row tiles
// and both tails) over 1..35 cache rows (4-row tiles and their tails, and on x86 one, two and
// more lanes' worth of cache rows, whose scores are reduced together), dims with vector tails.
TEST_P(AttentionIsaTest, TileKernelsMatchScalarAndEachRowAlone) {
  const KernelTable& kt = kernels();
  const KernelTable& scalar = *kernels_for("scalar");
  std::mt19937 rng(71);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n : {5, 17, 64, 128, 130}) {
      const int64_t stride = n + 3, max_q = 7, max_rows = 35, ld = n + 1;
      const std::vector<float> rows_f32 = random_floats(rng, size_t(max_rows * stride));
      std::vector<uint8_t> rows(rows_f32.size() * size_t(dtype_size(dtype)));
      scalar.from_f32(rows_f32.data(), dtype, int64_t(rows_f32.size()), rows.data());
      const std::vector<float> q = random_floats(rng, size_t(max_q * ld));
      const std::vector<float> p = random_floats(rng, size_t(max_q * max_rows));
      const std::vector<float> row_scale = random_floats(rng, size_t(max_q));
      const std::vector<float> acc0 = random_floats(rng, size_t(max_q * ld));
      for (int64_t num_q = 1; num_q <= max_q; ++num_q) {
        for (int64_t num_rows = 1; num_rows <= max_rows; ++num_rows) {
          const std::string where = std::string(kt.isa) + " " + dtype_name(dtype) + " n " +
                                    std::to_string(n) + " queries " + std::to_string(num_q) +
                                    " rows " + std::to_string(num_rows);
          std::vector<float> s(size_t(max_q * max_rows), NAN), s_ref = s, s_alone = s;
          kt.attention_scores(q.data(), ld, num_q, rows.data(), dtype, stride, num_rows, n,
                              s.data(), max_rows);
          scalar.attention_scores(q.data(), ld, num_q, rows.data(), dtype, stride, num_rows, n,
                                  s_ref.data(), max_rows);
          // The values' rows as one block, and as blocks of 4 rows (a key tile of 4-row cache
          // blocks, here 4 apart in one buffer).
          const void* whole[] = {rows.data()};
          std::vector<const void*> blocks_of_4;
          for (int64_t j = 0; j < num_rows; j += 4) {
            blocks_of_4.push_back(rows.data() + j * stride * dtype_size(dtype));
          }
          std::vector<float> acc = acc0, acc_ref = acc0, acc_alone = acc0, acc_blocks = acc0;
          kt.attention_values(p.data(), max_rows, num_q, row_scale.data(), whole, num_rows, dtype,
                              stride, num_rows, n, acc.data(), ld);
          scalar.attention_values(p.data(), max_rows, num_q, row_scale.data(), whole, num_rows,
                                  dtype, stride, num_rows, n, acc_ref.data(), ld);
          kt.attention_values(p.data(), max_rows, num_q, row_scale.data(), blocks_of_4.data(), 4,
                              dtype, stride, num_rows, n, acc_blocks.data(), ld);
          for (int64_t i = 0; i < num_q; ++i) {
            kt.attention_scores(q.data() + i * ld, ld, 1, rows.data(), dtype, stride, num_rows, n,
                                s_alone.data() + i * max_rows, max_rows);
            kt.attention_values(p.data() + i * max_rows, max_rows, 1, row_scale.data() + i, whole,
                                num_rows, dtype, stride, num_rows, n, acc_alone.data() + i * ld,
                                ld);
          }
          // The decode path's kernels on the same row: dot_rows, and the rescale then axpy_rows.
          std::vector<float> s_decode = s, acc_decode = acc0;
          for (int64_t i = 0; i < num_q; ++i) {
            kt.dot_rows(q.data() + i * ld, rows.data(), dtype, stride, num_rows, n,
                        s_decode.data() + i * max_rows);
            for (int64_t d = 0; d < n; ++d) acc_decode[size_t(i * ld + d)] *= row_scale[size_t(i)];
            kt.axpy_rows(p.data() + i * max_rows, rows.data(), dtype, stride, num_rows, n,
                         acc_decode.data() + i * ld);
          }
          // Decode over the same blocks of 4: axpy_rows once per block, as attention.cpp does.
          std::vector<float> acc_decode_blocks = acc0;
          for (int64_t i = 0; i < num_q; ++i) {
            for (int64_t d = 0; d < n; ++d) {
              acc_decode_blocks[size_t(i * ld + d)] *= row_scale[size_t(i)];
            }
            for (int64_t j = 0; j < num_rows; j += 4) {
              kt.axpy_rows(p.data() + i * max_rows + j, blocks_of_4[size_t(j / 4)], dtype, stride,
                           std::min<int64_t>(4, num_rows - j), n,
                           acc_decode_blocks.data() + i * ld);
            }
          }
          // fp16 arithmetic scales a block's weights by its own power of two and runs 8 rows from
          // the block's first row (arm/fp16_values.h), so there the bits follow the cache blocks:
          // prefill and decode split at the same blocks agree, one block and four do not.
          const bool bits_follow_blocks = dtype == DType::kF16 && kt.f16_arithmetic;
          for (int64_t i = 0; i < num_q; ++i) {
            for (int64_t j = 0; j < num_rows; ++j) {
              const size_t at = size_t(i * max_rows + j);
              ASSERT_EQ(s[at], s_alone[at]) << where;
              ASSERT_EQ(s[at], s_decode[at]) << where;
              // fp16 arithmetic multiplies an fp16 cache's scores in fp16, as dot_rows does
              // there (its bound is SixteenBitCache...'s).
              if (dtype == DType::kF16 && kt.f16_arithmetic) continue;
              ASSERT_NEAR(s[at], s_ref[at], 1e-5 * double(n)) << where;
            }
            for (int64_t d = 0; d < n; ++d) {
              const size_t at = size_t(i * ld + d);
              ASSERT_EQ(acc[at], acc_alone[at]) << where;
              ASSERT_EQ(acc_blocks[at], acc_decode_blocks[at]) << where;
              if (!bits_follow_blocks) {
                ASSERT_EQ(acc[at], acc_blocks[at]) << where;
              }
              ASSERT_EQ(acc[at], acc_decode[at]) << where;
              double tolerance = 1e-5 * double(num_rows + 1);
              if (dtype == DType::kF16 && kt.f16_arithmetic) {
                // The weighted sum in fp16 (arm/fp16_values.h; kernel_table_test's
                // f16_value_bound): |p|, |v| <= 1.
                double sum_abs = 0.0, sum_v = 0.0, max_p = 0.0;
                for (int64_t j = 0; j < num_rows; ++j) {
                  const double pj = p[size_t(i * max_rows + j)];
                  const double vj = rows_f32[size_t(j * stride + d)];
                  sum_abs += std::fabs(pj * vj);
                  sum_v += std::fabs(vj);
                  max_p = std::max(max_p, std::fabs(pj));
                }
                tolerance += 10.0 * std::ldexp(1.0, -11) * sum_abs +
                             (2.0 * num_rows + 8 + sum_v) * std::ldexp(1.0, -20) * max_p;
              }
              ASSERT_NEAR(acc[at], acc_ref[at], tolerance) << where;
            }
          }
          // Nothing outside the tile is written.
          for (int64_t d = n; d < ld; ++d) ASSERT_EQ(acc[size_t(d)], acc0[size_t(d)]) << where;
          for (size_t at = size_t(num_q * max_rows); at < s.size(); ++at) {
            ASSERT_TRUE(std::isnan(s[at])) << where;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, AttentionIsaTest, ::testing::ValuesIn(kernel_isa_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(WriteKv, SlotsLandAtBlockAndOffsetAndNegativeSlotsAreSkipped) {
  // 3 blocks of 4 slots, 2 kv heads of dim 3 (k) and 2 (v).
  std::vector<float> k(3 * 4 * 2 * 3, 0.0f), v(3 * 4 * 2 * 2, 0.0f);
  PagedKvLayer cache{k.data(), v.data(), 4, 2, 3, 2};
  std::vector<float> new_k(2 * 2 * 3), new_v(2 * 2 * 2);
  std::iota(new_k.begin(), new_k.end(), 1.0f);
  std::iota(new_v.begin(), new_v.end(), 101.0f);
  const int64_t slots[] = {9, -1};  // block 2, offset 1; the second token is padding
  write_kv(cache, new_k.data(), new_v.data(), slots, 2);
  // Slot 9 = block 2, offset 1; blocks are [head][offset][dim], so head h's row starts at
  // element ((2 * 2 + h) * 4 + 1) * head_dim.
  for (int head = 0; head < 2; ++head) {
    const int row = (2 * 2 + head) * 4 + 1;
    for (int d = 0; d < 3; ++d) EXPECT_EQ(k[row * 3 + d], 1.0f + head * 3 + d);
    for (int d = 0; d < 2; ++d) EXPECT_EQ(v[row * 2 + d], 101.0f + head * 2 + d);
  }
  const float k_written = std::accumulate(k.begin(), k.end(), 0.0f);
  EXPECT_EQ(k_written, 21.0f);  // 1 + ... + 6: only the first token was written
}

// write_kv_rope must leave exactly what the unfused steps leave: KernelTable::rope in place on
// every q and k head, then write_kv. Bit for bit, on the table the model would use.
void check_write_kv_rope(int32_t num_q_heads, int32_t num_kv_heads, int32_t k_head_dim,
                         int32_t v_head_dim, int32_t rotary_dim, bool neox, uint32_t seed,
                         DType cache_dtype = DType::kF32) {
  std::mt19937 rng(seed);
  const int32_t block_size = 4, num_blocks = 4;
  // Padding (-1) first, in the middle and last; the others in scattered blocks.
  const std::vector<int64_t> slots = {-1, 9, 2, -1, 15, 4, -1};
  const auto T = static_cast<int64_t>(slots.size());
  const int32_t half = rotary_dim / 2;
  std::vector<float> cos(size_t(T) * half), sin(size_t(T) * half);
  for (int64_t t = 0; t < T; ++t) {
    for (int32_t i = 0; i < half; ++i) {
      const float angle =
          static_cast<float>(t * 7 + 1) * std::pow(10000.0f, -2.0f * i / rotary_dim);
      cos[size_t(t * half + i)] = std::cos(angle);
      sin[size_t(t * half + i)] = std::sin(angle);
    }
  }
  const std::vector<float> q = random_floats(rng, size_t(T) * num_q_heads * k_head_dim);
  const std::vector<float> k = random_floats(rng, size_t(T) * num_kv_heads * k_head_dim);
  const std::vector<float> v = random_floats(rng, size_t(T) * num_kv_heads * v_head_dim);
  const size_t k_pool = size_t(num_blocks) * block_size * num_kv_heads * k_head_dim;
  const size_t v_pool = size_t(num_blocks) * block_size * num_kv_heads * v_head_dim;

  // Unfused: rope in place on copies of q and k, then the plain cache write.
  std::vector<float> q_expected = q, k_rotated = k;
  std::vector<uint8_t> k_expected = filled_pool(cache_dtype, k_pool, -7.0f);
  std::vector<uint8_t> v_expected = filled_pool(cache_dtype, v_pool, -7.0f);
  const KernelTable& kt = kernels();
  for (int64_t t = 0; t < T; ++t) {
    for (int32_t h = 0; h < num_q_heads; ++h) {
      float* head = &q_expected[size_t((t * num_q_heads + h) * k_head_dim)];
      kt.rope(head, &cos[size_t(t * half)], &sin[size_t(t * half)], rotary_dim, neox, head);
    }
    for (int32_t h = 0; h < num_kv_heads; ++h) {
      float* head = &k_rotated[size_t((t * num_kv_heads + h) * k_head_dim)];
      kt.rope(head, &cos[size_t(t * half)], &sin[size_t(t * half)], rotary_dim, neox, head);
    }
  }
  const PagedKvLayer expected_cache{k_expected.data(), v_expected.data(), block_size, num_kv_heads,
                                    k_head_dim,        v_head_dim,        cache_dtype};
  write_kv(expected_cache, k_rotated.data(), v.data(), slots.data(), T);

  // Fused. The pools start with the same sentinel, so a write to a padding slot shows.
  std::vector<float> q_actual = q;
  std::vector<uint8_t> k_actual = filled_pool(cache_dtype, k_pool, -7.0f);
  std::vector<uint8_t> v_actual = filled_pool(cache_dtype, v_pool, -7.0f);
  const PagedKvLayer actual_cache{k_actual.data(), v_actual.data(), block_size, num_kv_heads,
                                  k_head_dim,      v_head_dim,      cache_dtype};
  write_kv_rope(actual_cache, RopeRows{cos.data(), sin.data(), rotary_dim, neox}, q_actual.data(),
                num_q_heads, k.data(), v.data(), slots.data(), T);

  const std::string where = std::string(neox ? "neox" : "interleaved") + " rotary_dim " +
                            std::to_string(rotary_dim) + " of " + std::to_string(k_head_dim) +
                            ", cache " + dtype_name(cache_dtype) + ", isa " + kernels().isa;
  // Bit equality (not a tolerance): the fused path must not change a single result.
  EXPECT_EQ(q_actual, q_expected) << where;
  EXPECT_EQ(k_actual, k_expected) << where;
  EXPECT_EQ(v_actual, v_expected) << where;
  const std::vector<uint8_t> sentinel = filled_pool(cache_dtype, 1, -7.0f);
  std::ptrdiff_t untouched = 0;
  for (size_t i = 0; i < k_pool; ++i) {
    untouched += std::equal(sentinel.begin(), sentinel.end(),
                            k_actual.begin() + std::ptrdiff_t(i * sentinel.size()));
  }
  EXPECT_EQ(untouched, static_cast<std::ptrdiff_t>(k_pool) - 4 * num_kv_heads * k_head_dim)
      << "only the 4 real slots are written; " << where;
}

TEST_P(AttentionIsaTest, WriteKvRopeMatchesRopeThenWriteKv) {
  for (bool neox : {true, false}) {
    check_write_kv_rope(8, 2, 64, 64, 64, neox, 31);     // GQA, whole head rotated (Llama)
    check_write_kv_rope(4, 4, 128, 128, 128, neox, 32);  // MHA, DeepSeek-Coder's 128-wide heads
    check_write_kv_rope(3, 1, 22, 9, 18, neox, 33);      // partial rotary; half 9: a vector tail
    for (DType dtype : {DType::kF16, DType::kBF16}) {  // the rotated row rounded as write_kv would
      check_write_kv_rope(4, 4, 128, 128, 128, neox, 34, dtype);
      check_write_kv_rope(3, 1, 22, 9, 18, neox, 35, dtype);
    }
  }
}

TEST(AttentionReference, SingleKeyReturnsItsValue) {
  // One position: softmax weight 1, so the output is exactly v, whatever q is.
  const float q[] = {0.3f, -2.0f}, k[] = {1.0f, 1.0f}, v[] = {4.0f, 5.0f, 6.0f};
  float out[3];
  paged_attention_reference(q, 1, 1, k, v, 1, 1, 2, 3, 1.0f, out);
  EXPECT_FLOAT_EQ(out[0], 4.0f);
  EXPECT_FLOAT_EQ(out[2], 6.0f);
  // Two positions with scores 0 and log 3: weights 1/4 and 3/4.
  const float q2[] = {1.0f}, k2[] = {0.0f, std::log(3.0f)}, v2[] = {4.0f, 8.0f};
  float out2[1];
  paged_attention_reference(q2, 1, 1, k2, v2, 2, 1, 1, 1, 1.0f, out2);
  EXPECT_FLOAT_EQ(out2[0], 7.0f);
}

}  // namespace
}  // namespace pagoda
