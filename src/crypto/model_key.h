// The 256-bit key that opens encrypted weights, and where it comes from: a file, an environment
// variable, or a command (the hook for a TEE, a KMS or an HSM: whatever prints the key). The
// key lives in one locked page, wiped when it goes away; it never reaches a log or a file.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pagoda::crypto {

inline constexpr size_t kModelKeyBytes = 32;  // AES-256

class ModelKey {
 public:
  // Takes 32 raw bytes, or 64 hexadecimal digits (surrounding whitespace ignored); throws
  // pagoda::Error naming `origin` (never the text) otherwise.
  static ModelKey parse(const std::string& text, const std::string& origin);
  static ModelKey from_bytes(const std::array<uint8_t, kModelKeyBytes>& bytes);

  ~ModelKey();
  ModelKey(ModelKey&& other) noexcept;
  ModelKey& operator=(ModelKey&& other) noexcept;
  ModelKey(const ModelKey&) = delete;
  ModelKey& operator=(const ModelKey&) = delete;

  const uint8_t* data() const { return bytes_; }
  std::string hex() const;  // for `pagoda encrypt --new-key` to print once; nothing else

 private:
  ModelKey();
  void release();
  uint8_t* bytes_ = nullptr;  // kModelKeyBytes in a page of their own, mlock'ed where allowed
};

// Where a command line said the key is; at most one set. `environment_variable` names a variable
// that the caller saw set (the edge decides which variables count).
struct ModelKeySource {
  std::string file{};
  std::string command{};
  std::string environment_variable{};

  bool empty() const { return file.empty() && command.empty() && environment_variable.empty(); }
};

// Reads the key: the file's content, the variable's value, or the standard output of
// `/bin/sh -c COMMAND` (which must exit 0). Throws pagoda::Error naming the source and the
// problem when there is more than one source, none, or it yields no valid key.
ModelKey load_model_key(const ModelKeySource& source);

// A fresh random key (OpenSSL's RAND_bytes).
ModelKey generate_model_key();

}  // namespace pagoda::crypto
