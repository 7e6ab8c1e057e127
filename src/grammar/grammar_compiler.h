// GrammarCompiler: front door of the grammar engine. Turns a JSON schema, json_object, a regex, a
// choice list or an EBNF grammar into a CompiledGrammar for one vocabulary, and caches the result
// by its source (kind, options and text), so requests that repeat a schema — every call of the
// same tool — reuse both the automaton and its warmed token-mask cache.
//
// Thread-safe. Compilation runs outside the lock; two threads compiling the same new key both
// build it and the first to finish is kept.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"

namespace pagoda::grammar {

class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const Vocabulary> vocabulary, size_t max_cached = 256);

  // All throw GrammarError for bad input.
  std::shared_ptr<const CompiledGrammar> json_schema(std::string_view schema,
                                                     const JsonGrammarOptions& options = {});
  std::shared_ptr<const CompiledGrammar> json_object(const JsonGrammarOptions& options = {});
  std::shared_ptr<const CompiledGrammar> regex(std::string_view pattern);
  // Exactly one of `choices`, verbatim.
  std::shared_ptr<const CompiledGrammar> choice(const std::vector<std::string>& choices);
  std::shared_ptr<const CompiledGrammar> ebnf(std::string_view grammar,
                                              std::string_view root = "root");
  // Uncached: any grammar built by hand.
  std::shared_ptr<const CompiledGrammar> compile(const Grammar& grammar) const;

  const std::shared_ptr<const Vocabulary>& vocabulary() const { return vocabulary_; }
  size_t num_cached() const;

 private:
  template <typename Build>
  std::shared_ptr<const CompiledGrammar> cached(const std::string& key, Build&& build);

  std::shared_ptr<const Vocabulary> vocabulary_;
  size_t max_cached_;
  mutable std::mutex mutex_;
  std::list<std::string> lru_;  // front: most recently used
  struct Entry {
    std::shared_ptr<const CompiledGrammar> grammar;
    std::list<std::string>::iterator position;
  };
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace pagoda::grammar
