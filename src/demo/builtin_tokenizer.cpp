// The built-in byte-level BPE tokenizer: alphabet, trainer and the two JSON files.
// Format as Hugging Face `tokenizers` writes it (tokenizer.json "version": "1.0"); the
// structure mirrors DeepSeek-V3's own tokenizer.json except for the simpler pre-tokenizer.
#include "demo/builtin_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "util/error.h"

namespace pagoda {
namespace {

using nlohmann::json;

// Written for Pagoda; any plain English works. It covers common words, digits and
// punctuation so the learned merges look like a real small vocabulary.
const char* const kTrainingText =
    "The old pagoda stands at the bend of the river, where the water slows and the town begins. "
    "Every morning the keeper climbs its nine floors, opens the shutters one by one, and looks "
    "out over the roofs, the market and the boats that wait for the tide. She has done this for "
    "thirty-two years, and she says that the view is never the same twice.\n\n"
    "In spring the hills turn green and the fishermen mend their nets on the stones below. In "
    "summer the air is heavy, the children swim from the steps, and the bells ring late into "
    "the evening. In autumn the wind comes from the north and carries the smell of rain; in "
    "winter the river freezes at the edges and the keeper lights a small fire on the ground "
    "floor for the travellers who knock at the door.\n\n"
    "People ask her what the pagoda is for. It is not a temple any more, and it was never a "
    "fortress. \"It is for remembering,\" she answers. \"Each floor holds the names of those who "
    "built the town: the masons, the carpenters, the farmers, the teachers and the engineers. "
    "When a child is born, we write the name on a strip of paper and tie it to the railing of "
    "the first floor. When someone finishes a great piece of work, we move their name one floor "
    "higher.\"\n\n"
    "A young engineer once asked how many names the tower could hold. The keeper laughed and "
    "took him to the top. There were 1,024 strips of paper on the ninth floor alone, some of "
    "them so old that the ink had faded to a pale brown. \"It holds as many as we need,\" she "
    "said. \"When a floor is full, we learn to write smaller.\"\n\n"
    "The engineer went home and built a machine that could read. It read the names, the dates "
    "and the small notes beside them, and it learned which words came after which. After a "
    "while it could write new sentences of its own: short ones at first, then longer ones, "
    "then whole stories about the river and the town. It was not always right, but it was "
    "patient, and it worked through the night while everyone slept.\n\n"
    "Some people were afraid of the machine. Others asked it questions: When will the rain "
    "come? How much rice should we plant? Why does the river bend here and not there? The "
    "machine answered as well as it could, and when it did not know, it said so. The keeper "
    "liked that most of all. \"A good answer,\" she said, \"begins with knowing what you do not "
    "know.\"\n\n"
    "Today the pagoda still stands, the strips of paper still move in the wind, and the machine "
    "runs in a small room at its foot, reading, writing and counting tokens: one, two, three, "
    "four, five, six, seven, eight, nine, ten. Visitors come from far away to see it. They "
    "climb the stairs, they read the names, and before they leave they write a question on a "
    "card and drop it into a wooden box. The machine reads every card. The answers are posted "
    "on the door the next morning, between 7:00 and 8:30, weather permitting.\n\n"
    "Questions arrive about everything. A baker wants to know why her bread rises faster in "
    "July; a sailor asks which stars point north; a student wonders whether numbers ever end. "
    "Musicians, doctors, gardeners, painters and shopkeepers all bring their puzzles. The "
    "machine explains that warm kitchens wake the yeast, that the pole star hangs above the "
    "northern horizon, and that after every number there is always another one, so counting "
    "never finishes. Once, a quiet girl simply wrote: \"Are you happy?\" The machine thought "
    "about it for a long time and replied: \"I am useful, and that is close enough tonight.\"\n\n"
    "In the library beside the market, volunteers copy the best answers into heavy notebooks "
    "with green covers. They sort them by subject: weather, farming, medicine, history, "
    "mathematics, language, cooking, building and travel. Researchers visit from universities "
    "to study how the machine reasons, measuring its memory, its speed and its mistakes. They "
    "discover that it remembers recent conversations better than older ones, that it prefers "
    "simple words to complicated phrases, and that its errors usually happen when a question "
    "is ambiguous. Their reports recommend patience, careful testing and honest documentation.\n\n"
    "Years later, nobody remembers exactly who first climbed the stairs with a question. The "
    "keeper has retired, yet every evening she still walks along the riverbank, greeting "
    "neighbours, feeding pigeons and listening to the water. Her granddaughter now opens the "
    "shutters, repairs the wooden railings and checks the machine's cables. \"Nothing stays "
    "exactly the same,\" the granddaughter says, smiling, \"but the river keeps its promise: "
    "it always comes back around the bend.\"\n";

bool is_letter(unsigned char c) {
  return std::isalpha(c) != 0 || c >= 0x80;
}
bool is_digit(unsigned char c) {
  return std::isdigit(c) != 0;
}
bool is_space(unsigned char c) {
  return std::isspace(c) != 0;
}

// Splits a UTF-8 string into its characters (each a byte-level unicode symbol).
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

std::string to_byte_level(const std::string& word) {
  std::string out;
  for (unsigned char c : word) out += byte_to_unicode(c);
  return out;
}

json added_token(int64_t id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

json config_token(const std::string& content) {
  return {{"__type", "AddedToken"}, {"content", content}, {"lstrip", false},
          {"normalized", true},     {"rstrip", false},    {"single_word", false}};
}

// DeepSeek-V3's template reduced to system / user / assistant turns (no tool calls): the
// system prompts first, then <｜User｜>text and <｜Assistant｜>text<｜end▁of▁sentence｜>.
const char* const kChatTemplate =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
    "{% endif %}"
    "{% set ns = namespace(system_prompt='') %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{% set ns.system_prompt = ns.system_prompt + message['content'] %}"
    "{%- endif %}{%- endfor %}"
    "{{ bos_token }}{{ ns.system_prompt }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}";

}  // namespace

const std::string& builtin_training_text() {
  static const std::string text = kTrainingText;
  return text;
}

std::string byte_to_unicode(uint8_t byte) {
  // GPT-2 (openai/gpt-2 encoder.py bytes_to_unicode): printable bytes keep their code point;
  // the others, in byte order, take U+0100, U+0101, ...
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  };
  uint32_t code = byte;
  if (!printable(byte)) {
    int n = 0;
    for (int b = 0; b < byte; ++b) {
      if (!printable(b)) ++n;
    }
    code = 256 + static_cast<uint32_t>(n);
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {  // all codes here are below U+0800: two UTF-8 bytes
    out += static_cast<char>(0xc0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
  return out;
}

std::vector<std::string> pretokenize_gpt2(const std::string& text) {
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  std::vector<std::string> out;
  const size_t n = text.size();
  auto at = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  size_t i = 0;
  while (i < n) {
    if (text[i] == '\'') {
      bool matched = false;
      for (const char* suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        const size_t len = std::char_traits<char>::length(suffix);
        if (text.compare(i + 1, len, suffix) == 0) {
          out.push_back(text.substr(i, len + 1));
          i += len + 1;
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    const size_t start = i;
    const size_t body = (text[i] == ' ' && i + 1 < n && !is_space(at(i + 1))) ? i + 1 : i;
    if (body < n && !is_space(at(body))) {
      size_t j = body;
      if (is_letter(at(j))) {
        while (j < n && is_letter(at(j))) ++j;
      } else if (is_digit(at(j))) {
        while (j < n && is_digit(at(j))) ++j;
      } else {
        while (j < n && !is_space(at(j)) && !is_letter(at(j)) && !is_digit(at(j))) ++j;
      }
      out.push_back(text.substr(start, j - start));
      i = j;
      continue;
    }
    // Whitespace run: all of it, except that a final space before a word is left to that word.
    size_t j = i;
    while (j < n && is_space(at(j))) ++j;
    if (j < n && j - i > 1) --j;
    out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> train_bpe(const std::string& text,
                                                           int64_t max_merges) {
  std::map<std::string, int64_t> word_counts;
  for (const std::string& piece : pretokenize_gpt2(text)) ++word_counts[to_byte_level(piece)];
  std::vector<std::vector<std::string>> words;
  std::vector<int64_t> counts;
  for (const auto& [word, count] : word_counts) {
    words.push_back(utf8_chars(word));
    counts.push_back(count);
  }

  using Pair = std::pair<std::string, std::string>;
  std::map<Pair, int64_t> pair_counts;
  auto count_pairs = [&](const std::vector<std::string>& word, int64_t weight) {
    for (size_t k = 0; k + 1 < word.size(); ++k) pair_counts[{word[k], word[k + 1]}] += weight;
  };
  for (size_t w = 0; w < words.size(); ++w) count_pairs(words[w], counts[w]);

  std::vector<Pair> merges;
  while (static_cast<int64_t>(merges.size()) < max_merges) {
    // std::map iterates pairs in lexicographic order, so the first maximum wins ties.
    auto best = pair_counts.end();
    for (auto it = pair_counts.begin(); it != pair_counts.end(); ++it) {
      if (it->second > 0 && (best == pair_counts.end() || it->second > best->second)) best = it;
    }
    if (best == pair_counts.end()) break;
    const Pair pair = best->first;
    merges.push_back(pair);
    const std::string joined = pair.first + pair.second;
    // Only words containing the pair change: take their pairs out, merge, put them back.
    for (size_t w = 0; w < words.size(); ++w) {
      std::vector<std::string>& word = words[w];
      bool contains = false;
      for (size_t k = 0; k + 1 < word.size() && !contains; ++k) {
        contains = word[k] == pair.first && word[k + 1] == pair.second;
      }
      if (!contains) continue;
      count_pairs(word, -counts[w]);
      std::vector<std::string> merged;
      merged.reserve(word.size());
      for (size_t k = 0; k < word.size(); ++k) {
        if (k + 1 < word.size() && word[k] == pair.first && word[k + 1] == pair.second) {
          merged.push_back(joined);
          ++k;
        } else {
          merged.push_back(word[k]);
        }
      }
      word = std::move(merged);
      count_pairs(word, counts[w]);
    }
  }
  return merges;
}

BuiltinTokenizer build_builtin_tokenizer(int64_t max_vocab_size, int64_t model_max_length) {
  if (max_vocab_size < kBuiltinMinVocabSize) {
    fail(
        "vocab size {} is too small for the built-in tokenizer (needs at least {}: 4 special "
        "tokens and 256 bytes)",
        max_vocab_size, kBuiltinMinVocabSize);
  }
  const std::vector<std::string> specials = {kBuiltinBosToken, kBuiltinEosToken, kBuiltinUserToken,
                                             kBuiltinAssistantToken};
  json vocab = json::object();
  std::set<std::string> known;
  int64_t next_id = 0;
  auto add = [&](const std::string& token) {
    if (known.insert(token).second) vocab[token] = next_id++;
  };
  for (const std::string& s : specials) add(s);
  for (int b = 0; b < 256; ++b) add(byte_to_unicode(static_cast<uint8_t>(b)));

  // A merge whose result already exists (reached by another split) adds no id, so train
  // more merges than ids are left and stop once the vocabulary is full.
  const auto candidates = train_bpe(builtin_training_text(), max_vocab_size - next_id + 256);
  json merges = json::array();
  for (const auto& [left, right] : candidates) {
    const std::string joined = left + right;
    if (!known.count(joined) && next_id >= max_vocab_size) break;
    add(joined);
    merges.push_back(left + " " + right);
  }

  BuiltinTokenizer tok;
  tok.vocab_size = next_id;
  json added = json::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    added.push_back(added_token(static_cast<int64_t>(i), specials[i]));
  }
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  tok.tokenizer_json = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      // As in DeepSeek-V3: BOS comes from tokenizer_config's add_bos_token, not from here.
      {"post_processor",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", false},
        {"use_regex", true}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  tok.tokenizer_config_json = {
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"bos_token", config_token(kBuiltinBosToken)},
      {"eos_token", config_token(kBuiltinEosToken)},
      {"pad_token", config_token(kBuiltinEosToken)},
      {"unk_token", nullptr},
      {"clean_up_tokenization_spaces", false},
      {"legacy", true},
      {"model_max_length", model_max_length},
      {"tokenizer_class", "LlamaTokenizerFast"},
      {"chat_template", kChatTemplate},
  };
  return tok;
}

}  // namespace pagoda
