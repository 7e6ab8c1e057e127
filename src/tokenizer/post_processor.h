// Post-processors of HF tokenizer.json ("post_processor" key) reduced to what they do to the ids
// of a single sequence: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel (offsets
// only, so no ids) and Sequence. The result is the ids placed before and after the sequence when
// add_special_tokens is true.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/bpe_model.h"

namespace pagoda {

struct SpecialTokensTemplate {
  std::vector<TokenId> prefix;
  std::vector<TokenId> suffix;
};

// Throws pagoda::Error naming `file` for an unknown type or a malformed template.
SpecialTokensTemplate parse_post_processor(const nlohmann::json& spec, std::string_view file);

}  // namespace pagoda
