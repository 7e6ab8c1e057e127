// The families' tensor-name tables: export (HF -> GGUF) must be the inverse of import
// (GGUF -> HF), so no name may appear twice on either side; names follow llama.cpp's
// gguf-py/gguf/constants.py (spot-checked here against names it defines).
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "model/tensor_names.h"

namespace pagoda {
namespace {

void expect_one_to_one(const FamilyTensorNames& family) {
  for (auto table : {family.layer, family.global}) {
    std::set<std::string> gguf, hf;
    for (const TensorName& t : table) {
      EXPECT_TRUE(gguf.insert(t.gguf).second) << "GGUF name twice: " << t.gguf;
      EXPECT_TRUE(hf.insert(t.hf).second) << "HF name twice: " << t.hf;
    }
  }
}

TEST(TensorNames, EveryNameMapsOneToOne) {
  expect_one_to_one(dense_tensor_names());
  expect_one_to_one(deepseek2_tensor_names());
}

TEST(TensorNames, LayerAndGlobalNamesTranslateToGguf) {
  const FamilyTensorNames& dense = dense_tensor_names();
  EXPECT_EQ(gguf_tensor_name(dense, "model.layers.0.self_attn.q_proj.weight"),
            "blk.0.attn_q.weight");
  EXPECT_EQ(gguf_tensor_name(dense, "model.layers.17.self_attn.k_proj.bias"), "blk.17.attn_k.bias");
  EXPECT_EQ(gguf_tensor_name(dense, "model.layers.3.post_attention_layernorm.weight"),
            "blk.3.ffn_norm.weight");
  EXPECT_EQ(gguf_tensor_name(dense, "model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(gguf_tensor_name(dense, "lm_head.weight"), "output.weight");
  const FamilyTensorNames& deepseek = deepseek2_tensor_names();
  EXPECT_EQ(gguf_tensor_name(deepseek, "model.layers.2.self_attn.kv_a_proj_with_mqa.weight"),
            "blk.2.attn_kv_a_mqa.weight");
  EXPECT_EQ(gguf_tensor_name(deepseek, "model.layers.5.mlp.gate.e_score_correction_bias"),
            "blk.5.exp_probs_b.bias");
  EXPECT_EQ(gguf_tensor_name(deepseek, "model.norm.weight"), "output_norm.weight");
}

TEST(TensorNames, NamesOutsideTheTableHaveNone) {
  const FamilyTensorNames& dense = dense_tensor_names();
  EXPECT_EQ(gguf_tensor_name(dense, "model.layers.0.self_attn.q_a_proj.weight"), "");  // MLA only
  EXPECT_EQ(gguf_tensor_name(dense, "model.layers.x.self_attn.q_proj.weight"), "");
  EXPECT_EQ(gguf_tensor_name(dense, "model.layers..self_attn.q_proj.weight"), "");
  EXPECT_EQ(gguf_tensor_name(dense, "model.layers.0"), "");
  EXPECT_EQ(gguf_tensor_name(dense, "q_proj.weight"), "");
}

}  // namespace
}  // namespace pagoda
