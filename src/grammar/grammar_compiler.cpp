// Front ends -> Pda -> CompiledGrammar, behind an LRU cache keyed by the source.
#include "grammar/grammar_compiler.h"

#include "grammar/ebnf_parser.h"
#include "grammar/grammar_error.h"
#include "grammar/regex_parser.h"

namespace pagoda::grammar {

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocabulary> vocabulary, size_t max_cached)
    : vocabulary_(std::move(vocabulary)), max_cached_(max_cached) {}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const Grammar& grammar) const {
  return std::make_shared<CompiledGrammar>(Pda::compile(grammar), vocabulary_);
}

template <typename Build>
std::shared_ptr<const CompiledGrammar> GrammarCompiler::cached(const std::string& key,
                                                               Build&& build) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.position);
      return it->second.grammar;
    }
  }
  auto compiled = compile(build());
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) return it->second.grammar;
  lru_.push_front(key);
  entries_.emplace(key, Entry{compiled, lru_.begin()});
  while (entries_.size() > max_cached_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  return compiled;
}

namespace {
std::string json_options_key(const JsonGrammarOptions& options) {
  return std::string(options.any_whitespace ? "ws1" : "ws0") + (options.strict ? "s1" : "s0");
}
}  // namespace

std::shared_ptr<const CompiledGrammar> GrammarCompiler::json_schema(
    std::string_view schema, const JsonGrammarOptions& options) {
  const std::string key = "json_schema\n" + json_options_key(options) + "\n" + std::string(schema);
  return cached(key, [&] { return json_schema_grammar(schema, options); });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::json_object(
    const JsonGrammarOptions& options) {
  return cached("json_object\n" + json_options_key(options),
                [&] { return any_json_grammar(options); });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::regex(std::string_view pattern) {
  return cached("regex\n" + std::string(pattern), [&] { return regex_grammar(pattern); });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::choice(
    const std::vector<std::string>& choices) {
  if (choices.empty()) grammar_fail("the choice list is empty");
  std::string key = "choice";
  for (const auto& c : choices) {
    key += '\n';
    key += std::to_string(c.size());
    key += ':';
    key += c;
  }
  return cached(key, [&] {
    std::vector<ExprPtr> options;
    for (const auto& c : choices) options.push_back(literal(c));
    Grammar grammar;
    grammar.add_rule("root", grammar::choice(std::move(options)));
    return grammar;
  });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::ebnf(std::string_view grammar,
                                                             std::string_view root) {
  const std::string key = "ebnf\n" + std::string(root) + "\n" + std::string(grammar);
  return cached(key, [&] { return parse_ebnf(grammar, root); });
}

size_t GrammarCompiler::num_cached() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace pagoda::grammar
