// Differential test against Hugging Face `tokenizers` (the Rust library, run from Node by
// tests/node/tokenizer_reference.js as the ctest fixture tokenizer_reference_ids). For every
// tokenizer in the manifest and every text of the generated corpus, our encode (with and without
// special tokens) and decode (with and without skip_special_tokens) must equal HF's exactly, and
// so must the decoding of random id sequences.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "tests/tokenizer/testdata.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

const std::filesystem::path kReferenceDir = pagoda::test::tokenizer_reference_dir();

std::string show(const std::vector<TokenId>& ids) {
  std::string s;
  for (const TokenId id : ids) s += std::to_string(id) + " ";
  return s;
}

TEST(TokenizerDifferential, MatchesHuggingFaceTokenizers) {
  const auto manifest_path = kReferenceDir / "manifest.json";
  if (!std::filesystem::exists(manifest_path)) {
    GTEST_SKIP()
        << "no reference ids at " << manifest_path
        << " (run `npm install` in tests/node and the ctest fixture tokenizer_reference_ids)";
  }
  const auto manifest = nlohmann::json::parse(testing::read_text_file(manifest_path));
  size_t num_texts = 0, num_id_sequences = 0, num_mismatches = 0, num_bytes = 0;
  constexpr size_t kMaxReported = 10;
  for (const auto& entry : manifest["tokenizers"]) {
    const std::string name = entry["name"].get<std::string>();
    const std::filesystem::path config =
        entry["tokenizer_config"].is_null() ? "" : entry["tokenizer_config"].get<std::string>();
    // Variant tokenizer.json files written by the script are named relative to the manifest.
    const Tokenizer tok =
        Tokenizer::from_files(kReferenceDir / entry["tokenizer_json"].get<std::string>(), config);
    size_t tokenizer_mismatches = 0;
    auto report = [&](const std::string& what) {
      ++tokenizer_mismatches;
      if (num_mismatches + tokenizer_mismatches <= kMaxReported)
        ADD_FAILURE() << name << ": " << what;
    };

    std::ifstream texts(kReferenceDir / entry["texts"].get<std::string>());
    for (std::string line; std::getline(texts, line);) {
      if (line.empty()) continue;
      const auto c = nlohmann::json::parse(line);
      const auto text = c["text"].get<std::string>();
      const auto ids = c["ids"].get<std::vector<TokenId>>();
      const auto ids_special = c["ids_special"].get<std::vector<TokenId>>();
      const auto got = tok.encode(text, false);
      if (got != ids) {
        report("encode(" + nlohmann::json(text).dump() + ")\n  ours: " + show(got) +
               "\n  hf:   " + show(ids));
      }
      const auto got_special = tok.encode(text, true);
      if (got_special != ids_special) {
        report("encode(" + nlohmann::json(text).dump() + ", add_special_tokens)\n  ours: " +
               show(got_special) + "\n  hf:   " + show(ids_special));
      }
      const auto decoded = tok.decode(ids, false);
      if (decoded != c["decoded"].get<std::string>()) {
        report("decode(" + show(ids) + ")\n  ours: " + nlohmann::json(decoded).dump() +
               "\n  hf:   " + c["decoded"].dump());
      }
      const auto decoded_skip = tok.decode(ids_special, true);
      if (decoded_skip != c["decoded_skip"].get<std::string>()) {
        report("decode(" + show(ids_special) + ", skip_special_tokens)\n  ours: " +
               nlohmann::json(decoded_skip).dump() + "\n  hf:   " + c["decoded_skip"].dump());
      }
      ++num_texts;
      num_bytes += text.size();
    }

    std::ifstream id_sequences(kReferenceDir / entry["id_sequences"].get<std::string>());
    for (std::string line; std::getline(id_sequences, line);) {
      if (line.empty()) continue;
      const auto c = nlohmann::json::parse(line);
      const auto ids = c["ids"].get<std::vector<TokenId>>();
      const auto decoded = tok.decode(ids, false);
      if (decoded != c["decoded"].get<std::string>()) {
        report("decode(random " + show(ids) + ")\n  ours: " + nlohmann::json(decoded).dump() +
               "\n  hf:   " + c["decoded"].dump());
      }
      const auto decoded_skip = tok.decode(ids, true);
      if (decoded_skip != c["decoded_skip"].get<std::string>()) {
        report("decode(random " + show(ids) + ", skip)\n  ours: " +
               nlohmann::json(decoded_skip).dump() + "\n  hf:   " + c["decoded_skip"].dump());
      }
      ++num_id_sequences;
    }
    std::printf("%-32s mismatches: %zu\n", name.c_str(), tokenizer_mismatches);
    num_mismatches += tokenizer_mismatches;
  }
  std::printf(
      "differential corpus: %zu texts (%zu bytes) and %zu random id sequences over %zu "
      "tokenizers, %zu mismatches\n",
      num_texts, num_bytes, num_id_sequences, manifest["tokenizers"].size(), num_mismatches);
  EXPECT_GT(num_texts, 0u);
  EXPECT_EQ(num_mismatches, 0u);
}

}  // namespace
}  // namespace pagoda
