// The grammar IR every front end (JSON Schema, regex, choice, EBNF) produces and the PDA compiler
// consumes: named rules whose bodies are expression trees over byte sets, sequences, alternatives,
// bounded or unbounded repetition and references to rules. Characters are already UTF-8 bytes
// here; the front ends expand code-point classes with utf8_class().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/byte_set.h"

namespace pagoda::grammar {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind { kBytes, kSequence, kChoice, kRepeat, kRuleRef };
  static constexpr int kUnbounded = -1;

  Kind kind = Kind::kSequence;
  ByteSet bytes;                  // kBytes
  std::vector<ExprPtr> children;  // kSequence, kChoice; kRepeat has one
  int min_count = 0;              // kRepeat
  int max_count = kUnbounded;     // kRepeat
  int rule_id = -1;               // kRuleRef
};

ExprPtr bytes(const ByteSet& set);
ExprPtr sequence(std::vector<ExprPtr> items);
ExprPtr choice(std::vector<ExprPtr> options);  // choice({}) is the empty language
ExprPtr repeat(ExprPtr item, int min_count, int max_count);
ExprPtr optional(ExprPtr item);
ExprPtr star(ExprPtr item);
ExprPtr rule_ref(int rule_id);
ExprPtr epsilon();                       // the empty string
ExprPtr literal(std::string_view text);  // its bytes, in order

// A closed range of Unicode scalar values.
struct CodePointRange {
  char32_t first;
  char32_t last;
};
inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

// Any one character whose code point lies in `ranges`, as UTF-8 byte sequences. Surrogates
// (U+D800..U+DFFF) are never produced, so the language stays valid UTF-8.
ExprPtr utf8_class(std::vector<CodePointRange> ranges);
// The complement of `ranges` within U+0000..U+10FFFF (surrogates excluded).
std::vector<CodePointRange> complement(std::vector<CodePointRange> ranges);
// Sorted, merged copy of `ranges`.
std::vector<CodePointRange> normalize(std::vector<CodePointRange> ranges);
void append_utf8(std::string& out, char32_t code_point);

class Grammar {
 public:
  // Declares a rule (its body may come later, so rules can refer to each other).
  int add_rule(std::string name);
  void set_body(int rule_id, ExprPtr body);
  int add_rule(std::string name, ExprPtr body);
  // -1 when there is no rule of that name.
  int find_rule(std::string_view name) const;

  int num_rules() const { return static_cast<int>(names_.size()); }
  const std::string& name(int rule_id) const { return names_[rule_id]; }
  const ExprPtr& body(int rule_id) const { return bodies_[rule_id]; }

  int root() const { return root_; }
  void set_root(int rule_id) { root_ = rule_id; }

 private:
  std::vector<std::string> names_;
  std::vector<ExprPtr> bodies_;
  int root_ = 0;
};

}  // namespace pagoda::grammar
