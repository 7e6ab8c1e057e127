// Normalizers of HF tokenizer.json ("normalizer" key): NFC, NFKC, NFD, NFKD, Lowercase, Strip,
// Prepend, Replace and Sequence. They rewrite one text segment in place; added tokens are split
// off before normalization, so a normalizer never sees them.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace pagoda {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Builds the normalizer described by `spec`; returns nullptr for JSON null. Throws pagoda::Error
// naming `file` for an unknown type or a malformed entry.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, std::string_view file);

}  // namespace pagoda
