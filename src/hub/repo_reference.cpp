// Parsing `org/name[:TAG]`; see repo_reference.h.
#include "hub/repo_reference.h"

#include <algorithm>
#include <cctype>

namespace pagoda::hub {
namespace {

bool valid_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
}

// One part of `org/name`: the Hub's rule, roughly (its regex also caps the length at 96).
bool valid_name(const std::string& part) {
  if (part.empty() || part.size() > 96) return false;
  if (!std::all_of(part.begin(), part.end(), valid_name_char)) return false;
  if (part.front() == '.' || part.front() == '-' || part.back() == '.' || part.back() == '-')
    return false;
  return part.find("..") == std::string::npos && part.find("--") == std::string::npos;
}

}  // namespace

std::optional<RepoReference> parse_repo_reference(const std::string& text) {
  RepoReference ref;
  std::string id = text;
  if (const size_t colon = text.find(':'); colon != std::string::npos) {
    ref.quant_tag = text.substr(colon + 1);
    id = text.substr(0, colon);
    if (ref.quant_tag.empty() ||
        !std::all_of(ref.quant_tag.begin(), ref.quant_tag.end(), valid_name_char))
      return std::nullopt;
  }
  const size_t slash = id.find('/');
  if (slash == std::string::npos || id.find('/', slash + 1) != std::string::npos)
    return std::nullopt;
  if (!valid_name(id.substr(0, slash)) || !valid_name(id.substr(slash + 1))) return std::nullopt;
  // A file name is meant as a path even when it has the shape of a repo id.
  if (id.size() > 5 && id.compare(id.size() - 5, 5, ".gguf") == 0) return std::nullopt;
  ref.repo_id = id;
  return ref;
}

std::string default_revision(const std::string& revision, bool modelscope) {
  if (!revision.empty()) return revision;
  return modelscope ? "master" : "main";
}

bool is_commit_hash(const std::string& revision) {
  return revision.size() == 40 && std::all_of(revision.begin(), revision.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) != 0 || (c >= 'a' && c <= 'f');
         });
}

}  // namespace pagoda::hub
