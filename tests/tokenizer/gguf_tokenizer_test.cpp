// Tokenizers built from GGUF metadata (tokenizer/gguf_tokenizer.h) against ground truth: the
// ids HF transformers gives for llama.cpp's 46 test strings (ggml-vocab-*.gguf.inp/.out, no
// BOS), transformers.js's Llama-2 cases (with BOS, and decoded text), and the chat template,
// BOS/EOS handling and errors of the conversion.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "model/gguf_model.h"
#include "tests/tokenizer/testdata.h"
#include "tokenizer/gguf_tokenizer.h"
#include "util/error.h"

namespace pagoda {
namespace {

using testing::read_text_file;
using testing::testdata_dir;

std::string vocab_path(const std::string& name) {
  return (testdata_dir() / "llama.cpp-vocab" / ("ggml-vocab-" + name + ".gguf")).string();
}

std::vector<TokenId> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<TokenId> ids;
  for (TokenId id; in >> id;) ids.push_back(id);
  return ids;
}

struct VocabCases {
  std::vector<std::string> texts;
  std::vector<std::vector<TokenId>> ids;
};

// llama.cpp's test strings (.inp, split on its separator) and HF's ids for them (.out).
VocabCases read_cases(const std::string& base) {
  VocabCases cases;
  const std::string inp = read_text_file(base + ".inp");
  const std::string out = read_text_file(base + ".out");
  const std::string separator = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  for (size_t next; (next = inp.find(separator, pos)) != std::string::npos;
       pos = next + separator.size()) {
    cases.texts.push_back(inp.substr(pos, next - pos));
  }
  std::istringstream out_stream(out);
  for (std::string line; std::getline(out_stream, line);) cases.ids.push_back(parse_ids(line));
  return cases;
}

class GgufVocabFile : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufVocabFile, MatchesEveryLlamaCppCase) {
  const std::string path = vocab_path(GetParam());
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared test data absent: " << path;
  GgufFile file(path);
  const Tokenizer tok = tokenizer_from_gguf(read_gguf_vocab(file));
  const VocabCases cases = read_cases(path);
  ASSERT_EQ(cases.texts.size(), 46u);
  ASSERT_EQ(cases.ids.size(), cases.texts.size());
  for (size_t i = 0; i < cases.texts.size(); ++i) {
    const std::vector<TokenId> got = tok.encode(cases.texts[i], false);
    EXPECT_EQ(got, cases.ids[i]) << GetParam() << " case " << i << ": '" << cases.texts[i] << "'";
    // Decoding gives the text back (HF's SPM decode drops the one leading space it added).
    if (got == cases.ids[i]) {
      EXPECT_EQ(tok.decode(got), cases.texts[i]) << GetParam() << " case " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVocab, GgufVocabFile,
                         ::testing::Values("deepseek-llm", "deepseek-coder", "llama-spm"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// No GGUF files of the Qwen2 and Llama-3 vocabs are at hand, but their .out ids are: a GgufVocab
// is filled from their tokenizer.json the way llama.cpp's converter writes it (tokens by id,
// control/user-defined types, merges as "a b"), so the qwen2 and llama-bpe pre-tokenizers are
// checked against HF's ids.
struct PreCase {
  const char* vocab;
  const char* tokenizer_dir;
  const char* pre;
};

class GgufPreTokenizer : public ::testing::TestWithParam<PreCase> {};

TEST_P(GgufPreTokenizer, MatchesEveryLlamaCppCase) {
  const PreCase& c = GetParam();
  const std::string base = vocab_path(c.vocab);
  const auto json_path = testdata_dir() / c.tokenizer_dir / "tokenizer.json";
  if (!std::filesystem::exists(base + ".inp") || !std::filesystem::exists(json_path)) {
    GTEST_SKIP() << "shared test data absent";
  }
  const auto j = nlohmann::json::parse(read_text_file(json_path));
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  auto put = [&](size_t id, const std::string& text, int64_t type) {
    if (tokens.size() <= id) {
      tokens.resize(id + 1);
      types.resize(id + 1, 1);
    }
    tokens[id] = text;
    types[id] = type;
  };
  for (const auto& [text, id] : j["model"]["vocab"].items()) put(id.get<size_t>(), text, 1);
  for (const auto& a : j["added_tokens"]) {
    put(a["id"].get<size_t>(), a["content"].get<std::string>(), a["special"].get<bool>() ? 3 : 4);
  }
  std::vector<std::string> merges;
  for (const auto& m : j["model"]["merges"]) {
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  GgufVocab v;
  v.origin = json_path.string();
  v.model = "gpt2";
  v.pre = c.pre;
  v.tokens.assign(tokens.begin(), tokens.end());
  v.token_types = types;
  v.merges.assign(merges.begin(), merges.end());
  v.add_bos = false;  // no BOS id given here; the cases are without special tokens anyway
  const Tokenizer tok = tokenizer_from_gguf(v);
  const VocabCases cases = read_cases(base);
  ASSERT_EQ(cases.texts.size(), 46u);
  for (size_t i = 0; i < cases.texts.size(); ++i) {
    EXPECT_EQ(tok.encode(cases.texts[i], false), cases.ids[i])
        << c.pre << " case " << i << ": '" << cases.texts[i] << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(FromTokenizerJson, GgufPreTokenizer,
                         ::testing::Values(PreCase{"qwen2", "tokenizers/qwen3", "qwen2"},
                                           PreCase{"llama-bpe", "tokenizers/llama3", "llama-bpe"}),
                         [](const auto& info) {
                           return std::string(info.param.pre == std::string("qwen2") ? "qwen2"
                                                                                     : "llama_bpe");
                         });

TEST(GgufTokenizer, BosAndEosFromMetadata) {
  const std::string path = vocab_path("deepseek-llm");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared test data absent: " << path;
  GgufFile file(path);
  const Tokenizer tok = tokenizer_from_gguf(read_gguf_vocab(file));
  EXPECT_EQ(tok.bos_id(), 100000);
  EXPECT_EQ(tok.eos_id(), 100001);
  EXPECT_EQ(tok.bos_token(),
            "<\xef\xbd\x9c"
            "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
  const std::vector<TokenId> with = tok.encode("Hello", true);
  const std::vector<TokenId> without = tok.encode("Hello", false);
  ASSERT_EQ(with.size(), without.size() + 1);
  EXPECT_EQ(with[0], 100000);
  // Control tokens are special: matched whole in text, dropped by skip_special_tokens.
  const std::vector<TokenId> ids = tok.encode(tok.bos_token() + "Hi", false);
  EXPECT_EQ(ids.front(), 100000);
  EXPECT_TRUE(tok.is_special(100000));
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "Hi");
}

// The GGUF-built BPE vocab and merges equal those of the tokenizer.json derived (separately,
// with @lenml/tokenizers checks) from the same file. (Its regexes differ only in spelling
// "\r" escapes vs raw characters, so the pre-tokenizer is checked by the 46 cases instead.)
TEST(GgufTokenizer, BpeVocabAndMergesMatchDerivedTokenizerJson) {
  const std::string path = vocab_path("deepseek-coder");
  const auto derived = testdata_dir() / "derived/deepseek-coder-tokenizer-from-gguf/tokenizer.json";
  if (!std::filesystem::exists(path) || !std::filesystem::exists(derived)) {
    GTEST_SKIP() << "shared test data absent";
  }
  GgufFile file(path);
  const GgufTokenizerJson built = gguf_tokenizer_json(read_gguf_vocab(file));
  const auto reference = nlohmann::json::parse(read_text_file(derived));
  EXPECT_EQ(built.tokenizer["model"]["vocab"], reference["model"]["vocab"]);
  EXPECT_EQ(built.tokenizer["model"]["merges"], reference["model"]["merges"]);
}

// transformers.js's Llama-2 (SPM) cases: ids with BOS and the decoded text.
TEST(GgufTokenizer, SpmMatchesTransformersJsLlama2Cases) {
  const std::string path = vocab_path("llama-spm");
  const auto cases_path =
      testdata_dir() / "tokenizer-expected/transformersjs-tokenization-cases.json";
  if (!std::filesystem::exists(path) || !std::filesystem::exists(cases_path)) {
    GTEST_SKIP() << "shared test data absent";
  }
  GgufFile file(path);
  const Tokenizer tok = tokenizer_from_gguf(read_gguf_vocab(file));
  const auto cases = nlohmann::json::parse(read_text_file(cases_path));
  ASSERT_TRUE(cases.contains("Xenova/llama-tokenizer"));
  size_t checked = 0;
  for (const auto& c : cases["Xenova/llama-tokenizer"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<TokenId> want = c["ids"].get<std::vector<TokenId>>();
    EXPECT_EQ(tok.encode(text, true), want) << c["name"] << ": '" << text << "'";
    if (c.contains("decoded")) {
      EXPECT_EQ(tok.decode(want), c["decoded"].get<std::string>()) << c["name"];
    }
    ++checked;
  }
  EXPECT_GE(checked, 30u);
}

TEST(GgufTokenizer, ChatTemplateAndErrors) {
  GgufVocab v;
  v.origin = "/x/model.gguf";
  v.model = "gpt2";
  v.pre = "deepseek-llm";
  v.tokens = {"a", "b", "ab", "<s>"};
  v.token_types = {1, 1, 1, 3};
  v.merges = {"a b"};
  v.bos_id = 3;
  v.chat_template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";
  const Tokenizer tok = tokenizer_from_gguf(v);
  EXPECT_EQ(tok.chat_template(), v.chat_template);
  EXPECT_EQ(tok.encode("ab", false), (std::vector<TokenId>{2}));
  EXPECT_EQ(tok.bos_id(), 3);

  auto error_of = [](const GgufVocab& bad) -> std::string {
    try {
      tokenizer_from_gguf(bad);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  GgufVocab bad = v;
  bad.pre = "mystery";
  EXPECT_NE(error_of(bad).find("/x/model.gguf: tokenizer.ggml.pre 'mystery' is not supported"),
            std::string::npos)
      << error_of(bad);
  bad = v;
  bad.model = "bert";
  EXPECT_NE(error_of(bad).find("tokenizer.ggml.model 'bert' is not supported"), std::string::npos);
  bad = v;
  bad.bos_id = 99;
  EXPECT_NE(error_of(bad).find("tokenizer.ggml.bos_token_id = 99 is not a token id"),
            std::string::npos);
  bad = v;
  bad.token_types = {1};
  EXPECT_NE(error_of(bad).find("token_type has 1 entries for 4 tokens"), std::string::npos);
  bad = v;
  bad.model = "llama";
  EXPECT_NE(error_of(bad).find("tokenizer.ggml.scores has 0 entries"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
