// Decoders of HF tokenizer.json ("decoder" key): ByteLevel, Metaspace, ByteFallback, Fuse, Strip,
// Replace, BPEDecoder and Sequence. A decoder rewrites the list of token strings; the decoded
// text is their concatenation. Mirrors tokenizers/src/decoders/*.rs.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pagoda {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builds the decoder described by `spec`; nullptr for JSON null (tokens are then joined with
// spaces, as HF does). Throws pagoda::Error naming `file` for an unknown type.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, std::string_view file);

}  // namespace pagoda
