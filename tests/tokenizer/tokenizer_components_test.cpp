// Component tests: UTF-8 repair, the Oniguruma->PCRE2 translation, Split behaviours, the BPE
// merge loop against a plain quadratic reference, added-token rules, invalid UTF-8 input, and
// the error for each kind of bad tokenizer file.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/tokenizer/testdata.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace pagoda {
namespace {

using pagoda::testing::read_text_file;
using pagoda::testing::testdata_dir;

const std::string kFffd = "\xEF\xBF\xBD";

// ---- UTF-8 ---------------------------------------------------------------------------------

TEST(Utf8, SanitizeReplacesMaximalSubpartsLikeRust) {
  // Expected values are what Rust's String::from_utf8_lossy (and Python's errors="replace") give.
  EXPECT_EQ(sanitize_utf8("abc"), "abc");
  EXPECT_EQ(sanitize_utf8("\xFF"), kFffd);
  EXPECT_EQ(sanitize_utf8("\xE4\xB8"), kFffd);  // truncated 3-byte: one
  EXPECT_EQ(sanitize_utf8("\xE4\xB8"
                          "a"),
            kFffd + "a");
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), kFffd + kFffd);                          // overlong: two
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);              // surrogate: three
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(sanitize_utf8("a\x80\x80"
                          "b"),
            "a" + kFffd + kFffd + "b");
  EXPECT_EQ(sanitize_utf8(std::string("\0x", 2)), std::string("\0x", 2));
}

TEST(Utf8, IncompleteSuffix) {
  EXPECT_EQ(incomplete_utf8_suffix("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE4\xB8"), 2u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xFF"), 0u);  // invalid, not incomplete
}

// ---- Regex ---------------------------------------------------------------------------------

TEST(Regex, WhitespaceMeansUnicodeWhiteSpace) {
  EXPECT_EQ(translate_onig_pattern(R"(\s+)"), R"([\t-\r\x{85}\p{Z}]+)");
  EXPECT_EQ(translate_onig_pattern(R"([^\s\p{L}])"), R"([^\t-\r\x{85}\p{Z}\p{L}])");
  EXPECT_EQ(translate_onig_pattern(R"(\S|\\s)"), R"([^\t-\r\x{85}\p{Z}]|\\s)");
  Regex ws(R"(\s+)");
  std::vector<ByteRange> m;
  ws.find_all("a \xE1\xA0\x8E b\xE3\x80\x80", m);  // U+180E is not White_Space; U+3000 is
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0], ByteRange(1, 2));
  EXPECT_EQ(m[1], ByteRange(5, 6));
  EXPECT_EQ(m[2], ByteRange(7, 10));
}

TEST(Regex, DollarIsEndOfLineAndEmptyMatchesAdvance) {
  Regex trailing(R"(\s+$)");
  std::vector<ByteRange> m;
  trailing.find_all("a  \nb ", m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], ByteRange(1, 3));  // the spaces before "\n": Ruby's $ matches before a newline
  EXPECT_EQ(m[1], ByteRange(5, 6));
  Regex empty("x*");
  m.clear();
  empty.find_all("\xC3\xA9x", m);  // empty match at 0 must skip the whole 2-byte char
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0], ByteRange(0, 0));
  EXPECT_EQ(m[1], ByteRange(2, 3));
  EXPECT_THROW(Regex("(unclosed"), Error);
}

// ---- Split behaviours ----------------------------------------------------------------------

std::vector<std::string> cut(const std::string& text, const std::vector<ByteRange>& matches,
                             SplitBehavior behavior, bool invert) {
  std::vector<ByteRange> pieces;
  split_with_behavior(text.size(), matches, behavior, invert, pieces);
  std::vector<std::string> out;
  for (const auto& [b, e] : pieces) out.push_back(text.substr(b, e - b));
  return out;
}

TEST(SplitBehavior, MatchesHfDocumentedExamples) {
  // HF docs: "the-final--countdown" split on '-'.
  const std::string text = "the-final--countdown";
  const std::vector<ByteRange> dashes = {{3, 4}, {9, 10}, {10, 11}};
  using V = std::vector<std::string>;
  EXPECT_EQ(cut(text, dashes, SplitBehavior::kRemoved, false), (V{"the", "final", "countdown"}));
  EXPECT_EQ(cut(text, dashes, SplitBehavior::kIsolated, false),
            (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(cut(text, dashes, SplitBehavior::kMergedWithPrevious, false),
            (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(cut(text, dashes, SplitBehavior::kMergedWithNext, false),
            (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(cut(text, dashes, SplitBehavior::kContiguous, false),
            (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(cut(text, dashes, SplitBehavior::kRemoved, true), (V{"-", "-", "-"}));
}

// ---- BPE against a plain reference ---------------------------------------------------------

// The textbook algorithm: repeatedly merge the adjacent pair of lowest rank, leftmost first.
std::vector<TokenId> reference_bpe(const std::vector<std::string>& chars,
                                   const std::map<std::pair<std::string, std::string>, int>& ranks,
                                   const std::map<std::string, TokenId>& vocab) {
  std::vector<std::string> symbols = chars;
  while (symbols.size() > 1) {
    int best_rank = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = ranks.find({symbols[i], symbols[i + 1]});
      if (it != ranks.end() && (best_rank < 0 || it->second < best_rank)) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank < 0) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
  std::vector<TokenId> ids;
  for (const auto& s : symbols) ids.push_back(vocab.at(s));
  return ids;
}

TEST(BpeModel, MatchesQuadraticReferenceOnRandomWords) {
  const auto path = testdata_dir() / "derived/deepseek-coder-tokenizer-from-gguf/tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "deepseek-coder tokenizer missing";
  const auto spec = nlohmann::json::parse(read_text_file(path));
  const BpeModel model(spec["model"], path.string());
  std::map<std::string, TokenId> vocab;
  for (const auto& [token, id] : spec["model"]["vocab"].items()) vocab[token] = id.get<TokenId>();
  std::map<std::pair<std::string, std::string>, int> ranks;
  int rank = 0;
  for (const auto& merge : spec["model"]["merges"]) {
    const auto line = merge.get<std::string>();
    const size_t space = line.find(' ');
    ranks.emplace(std::make_pair(line.substr(0, space), line.substr(space + 1)), rank++);
  }
  // Words over a small alphabet (so merges fire often), including long repetitive runs.
  const std::vector<std::string> alphabet = {"a", "b", "e", "n", "t", "s", "Ġ", "i", "o", "r"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t length = 1 + rng() % (trial % 10 == 0 ? 200 : 12);
    std::vector<std::string> chars;
    std::string word;
    for (size_t i = 0; i < length; ++i) {
      chars.push_back(alphabet[rng() % alphabet.size()]);
      word += chars.back();
    }
    std::vector<TokenId> ours;
    model.tokenize(word, ours);
    ASSERT_EQ(ours, reference_bpe(chars, ranks, vocab)) << word;
  }
}

// ---- Tiny hand-written tokenizers ----------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("pagoda-tok-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// A character-level BPE over a-z, space and '▁' with a few merges, plus added tokens.
nlohmann::json tiny_spec() {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = id++;
  vocab[" "] = id++;
  vocab["ab"] = id++;
  vocab["abc"] = id++;
  vocab["<unk>"] = id++;  // 29
  return {
      {"version", "1.0"},
      {"added_tokens",
       nlohmann::json::array(
           {{{"id", 100}, {"content", "<S>"}, {"special", true}, {"normalized", false}},
            {{"id", 101},
             {"content", "<L>"},
             {"special", false},
             {"lstrip", true},
             {"normalized", false}},
            {{"id", 102},
             {"content", "<R>"},
             {"special", false},
             {"rstrip", true},
             {"normalized", false}},
            {{"id", 103},
             {"content", "word"},
             {"special", false},
             {"single_word", true},
             {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", nlohmann::json::array({"a b", "ab c"})},
        {"unk_token", "<unk>"},
        {"fuse_unk", true}}},
  };
}

Tokenizer load_spec(const TempDir& dir, const nlohmann::json& spec) {
  dir.write("tokenizer.json", spec.dump());
  return Tokenizer::from_directory(dir.path());
}

TEST(AddedTokens, StripAndSingleWordRules) {
  TempDir dir;
  const Tokenizer tok = load_spec(dir, tiny_spec());
  using V = std::vector<TokenId>;
  const TokenId space = 26, a = 0, b = 1, x = 23, abc = 28, unk = 29;
  EXPECT_EQ(tok.encode("abc"), (V{abc}));
  EXPECT_EQ(tok.encode("a<S>b"), (V{a, 100, b}));
  EXPECT_EQ(tok.encode("a  <L>  b"), (V{a, 101, space, space, b}));  // lstrip eats the left spaces
  EXPECT_EQ(tok.encode("a  <R>  b"), (V{a, space, space, 102, b}));  // rstrip eats the right ones
  EXPECT_EQ(tok.encode("a word b"), (V{a, space, 103, space, b}));
  EXPECT_EQ(tok.encode("swords"), (V{18, 22, 14, 17, 3, 18}));  // inside a word: not matched
  EXPECT_EQ(tok.encode("x\xE2\x82\xAC\xE2\x82\xAC"
                       "x"),
            (V{x, unk, x}));  // fuse_unk: one <unk>
  EXPECT_TRUE(tok.is_special(100));
  EXPECT_FALSE(tok.is_special(101));
  EXPECT_EQ(tok.decode(V{a, 100, b}, true), "a b");  // no decoder: tokens joined by spaces
  EXPECT_EQ(tok.vocab_size(), 104u);
}

// ---- Invalid UTF-8 input ---------------------------------------------------------------------

TEST(InvalidUtf8, ReplacedByFffdBeforeTokenizing) {
  const auto dir = testdata_dir() / "tokenizers/deepseek-v3";
  if (!std::filesystem::exists(dir / "tokenizer.json")) GTEST_SKIP() << "deepseek-v3 missing";
  const Tokenizer tok = Tokenizer::from_directory(dir);
  EXPECT_EQ(tok.encode("ab\xFF\xFE"
                       "cd"),
            tok.encode("ab" + kFffd + kFffd + "cd"));
  EXPECT_EQ(tok.encode("\xE4\xB8"), tok.encode(kFffd));
  EXPECT_EQ(tok.decode(tok.encode("x\xC0\xAFy")), "x" + kFffd + kFffd + "y");
  // Random bytes never crash, and decode(encode(x)) is the repaired x (byte-level, no normalizer).
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::string bytes(rng() % 40, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    const auto ids = tok.encode(bytes, true);
    EXPECT_EQ(tok.decode(ids, true), sanitize_utf8(bytes));
  }
}

// ---- Bad tokenizer files -------------------------------------------------------------------

void expect_error(const std::function<void()>& load, const std::vector<std::string>& parts) {
  try {
    load();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  }
}

TEST(BadInput, EachProblemIsNamedWithItsFile) {
  TempDir dir;
  const std::string file = (dir.path() / "tokenizer.json").string();
  auto load_text = [&](const std::string& text) {
    return [&dir, text] {
      dir.write("tokenizer.json", text);
      Tokenizer::from_directory(dir.path());
    };
  };
  auto load_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json spec = tiny_spec();
    edit(spec);
    return load_text(spec.dump());
  };
  expect_error([&] { Tokenizer::from_directory(dir.path() / "nope"); },
               {"nope/tokenizer.json", "cannot open"});
  expect_error(load_text("{\"model\": "), {file, "malformed JSON"});
  expect_error(load_text("[1, 2]"), {file, "JSON object"});
  expect_error(load_with([](auto& s) { s.erase("model"); }), {file, "missing key 'model'"});
  expect_error(load_with([](auto& s) { s["model"]["type"] = "WordPiece"; }),
               {file, "model type 'WordPiece' is not supported"});
  expect_error(load_with([](auto& s) {
                 s["pre_tokenizer"] = {{"type", "Fancy"}};
               }),
               {file, "pre_tokenizer type 'Fancy' is not supported"});
  expect_error(load_with([](auto& s) {
                 s["normalizer"] = {{"type", "Precompiled"}};
               }),
               {file, "normalizer type 'Precompiled' is not supported"});
  expect_error(load_with([](auto& s) {
                 s["decoder"] = {{"type", "CTC"}};
               }),
               {file, "decoder type 'CTC' is not supported"});
  expect_error(load_with([](auto& s) {
                 s["post_processor"] = {{"type", "Magic"}};
               }),
               {file, "post_processor type 'Magic' is not supported"});
  expect_error(load_with([](auto& s) {
                 s["pre_tokenizer"] = {
                     {"type", "Split"}, {"pattern", {{"Regex", "(["}}}, {"behavior", "Isolated"}};
               }),
               {file, "regex '(['"});
  expect_error(load_with([](auto& s) { s["model"]["merges"].push_back("q zz"); }),
               {file, "merges[2]", "not in the vocab"});
  expect_error(load_with([](auto& s) { s["model"]["vocab"] = 3; }), {file, "vocab"});
  expect_error(load_with([](auto& s) { s["added_tokens"][0].erase("id"); }),
               {file, "added_tokens"});
  // A malformed tokenizer_config.json is named too.
  dir.write("tokenizer.json", tiny_spec().dump());
  dir.write("tokenizer_config.json", "{oops");
  expect_error([&] { Tokenizer::from_directory(dir.path()); },
               {"tokenizer_config.json", "malformed JSON"});
  dir.write("tokenizer_config.json",
            R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true})");
  expect_error([&] { Tokenizer::from_directory(dir.path()); },
               {"tokenizer_config.json", "add_bos_token"});
}

TEST(Config, ChatTemplateFormsAndBosPolicy) {
  TempDir dir;
  dir.write("tokenizer.json", tiny_spec().dump());
  dir.write("tokenizer_config.json", R"({
    "tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "add_eos_token": true,
    "bos_token": {"__type": "AddedToken", "content": "<S>"}, "eos_token": "<R>",
    "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
    "model_max_length": 1000000000000000019884624838656})");
  const Tokenizer tok = Tokenizer::from_directory(dir.path());
  EXPECT_EQ(tok.chat_template(), "D");
  EXPECT_EQ(tok.chat_templates().at("tool_use"), "T");
  EXPECT_EQ(tok.bos_id(), 100);
  EXPECT_EQ(tok.eos_id(), 102);
  EXPECT_FALSE(tok.model_max_length().has_value());
  EXPECT_EQ(tok.encode("ab", true), (std::vector<TokenId>{100, 27, 102}));
  EXPECT_EQ(tok.encode("ab", false), (std::vector<TokenId>{27}));
}

}  // namespace
}  // namespace pagoda
