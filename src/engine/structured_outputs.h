// Structured outputs in the engine: compiling a request's StructuredOutputsParams into a
// CompiledGrammar over the model's vocabulary (at admission, on the caller's thread, so the
// engine step never waits for a compile), and the logits processor that masks each step to the
// tokens the grammar allows. After vLLM v1's StructuredOutputManager and its bitmask step.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "pagoda/sampling_params.h"
#include "sampling/logits_processor.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

// The bytes each id of a `vocab_size`-row model emits: byte-level BPE tokens through GPT-2's
// table, SentencePiece ones with "▁" as a space and "<0xNN>" as that byte. Special tokens and
// ids past the tokenizer get no bytes, so a grammar never allows them.
std::vector<std::string> vocabulary_token_bytes(const Tokenizer& tokenizer, size_t vocab_size);

class StructuredOutputCompiler {
 public:
  // `tokenizer` must outlive this. The vocabulary is built on the first compile, not here: a
  // server that never sees a constrained request never pays for it.
  StructuredOutputCompiler(const Tokenizer& tokenizer, int32_t vocab_size,
                           std::vector<int32_t> stop_token_ids);

  // Thread-safe; cached by the spec. Throws pagoda::Error naming the field when the spec sets
  // other than one constraint, grammar::GrammarError (naming the place in the schema, regex or
  // grammar) when it does not compile.
  std::shared_ptr<const grammar::CompiledGrammar> compile(const StructuredOutputsParams& params);

 private:
  grammar::GrammarCompiler& compiler();

  const Tokenizer& tokenizer_;
  int32_t vocab_size_;
  std::vector<int32_t> stop_token_ids_;
  std::once_flag built_;
  std::unique_ptr<grammar::GrammarCompiler> compiler_;
};

// What a request adds to its grammar's own rules.
struct GrammarRequestOptions {
  // The request's stop_token_ids: like the model's EOS, each is allowed where the grammar may
  // end (and ends it), so a client that stops on its own token still gets a complete answer.
  std::vector<int32_t> stop_token_ids;
  // The tokens that end a reasoning model's thinking ("</think>"): the grammar applies only after
  // the output has emitted them, so the reasoning stays free. Empty: from the first token.
  std::vector<int32_t> reasoning_end_token_ids;
  // With ignore_eos the model's EOS would not end the request: it is kept out of the free
  // reasoning too, since the grammar, not EOS, decides where a constrained output ends.
  std::vector<int32_t> masked_eos_token_ids;
};

// Masks the logits to the grammar's next tokens and advances with each accepted token. When the
// grammar is complete and nothing may follow, only the stop tokens remain, so the request ends
// with finish_reason "stop" (the scheduler ends a grammar's request on EOS even with ignore_eos,
// as EOS is then only ever drawn where the grammar is complete).
class GrammarLogitsProcessor : public LogitsProcessor {
 public:
  explicit GrammarLogitsProcessor(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                  GrammarRequestOptions options = {});

  void apply(float* logits, int64_t vocab_size) override;
  void accept(int32_t token_id) override;
  bool rollback(int num_tokens) override;

  const grammar::GrammarMatcher& matcher() const { return matcher_; }
  // The grammar applies (the reasoning, if any, has ended).
  bool active() const { return !reasoning_; }

 private:
  bool is_request_stop(int32_t token_id) const;

  grammar::GrammarMatcher matcher_;
  GrammarRequestOptions options_;
  std::vector<uint32_t> bitmask_;
  std::vector<float> stop_logits_;  // scratch: the request stop ids' logits before the mask
  // What each accept() did, for rollback: a step of the matcher, or none (a reasoning token, or
  // a token forced past the mask, e.g. every logit -inf).
  std::vector<bool> matcher_steps_;
  // Still reasoning; the tokens accepted while it was (the first steps, the end tokens last).
  bool reasoning_ = false;
  std::vector<int32_t> reasoning_tokens_;
};

}  // namespace pagoda
