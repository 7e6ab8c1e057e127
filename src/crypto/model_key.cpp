#include "crypto/model_key.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "util/error.h"

namespace pagoda::crypto {
namespace {

// Longest key text read from a file or a command: a key is 64 characters; more is a mistake
// (a wrong file), not a key.
constexpr size_t kMaxKeyText = 4096;

// Wipes a string that held key material before it is freed.
struct WipeOnExit {
  std::string& text;
  ~WipeOnExit() { OPENSSL_cleanse(text.data(), text.size()); }
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string read_key_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("model key file {}: cannot open: {}", path, std::strerror(errno));
  std::string text;
  text.resize(kMaxKeyText + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

std::string run_key_command(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr)
    fail("model key command '{}': cannot start: {}", command, std::strerror(errno));
  std::string text(kMaxKeyText + 1, '\0');
  const size_t n = std::fread(text.data(), 1, text.size(), pipe);
  // Drain the rest so that the command does not die of SIGPIPE before we see its status.
  char sink[256];
  while (std::fread(sink, 1, sizeof sink, pipe) > 0) {
  }
  text.resize(n);
  const int status = ::pclose(pipe);
  if (status == -1)
    fail("model key command '{}': cannot wait for it: {}", command, std::strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    OPENSSL_cleanse(text.data(), text.size());
    if (WIFSIGNALED(status))
      fail("model key command '{}' was killed by signal {}", command, WTERMSIG(status));
    fail("model key command '{}' failed with exit status {}", command, WEXITSTATUS(status));
  }
  return text;
}

}  // namespace

ModelKey::ModelKey() {
  // A page of its own: mlock covers exactly it, and MADV_DONTDUMP keeps it out of core dumps.
  const long page = ::sysconf(_SC_PAGESIZE);
  void* p = ::mmap(nullptr, static_cast<size_t>(page), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("model key: cannot map a page: {}", std::strerror(errno));
  (void)::mlock(p, static_cast<size_t>(page));  // best effort: RLIMIT_MEMLOCK may be 0
  (void)::madvise(p, static_cast<size_t>(page), MADV_DONTDUMP);
  bytes_ = static_cast<uint8_t*>(p);
}

ModelKey::~ModelKey() {
  release();
}

void ModelKey::release() {
  if (bytes_ == nullptr) return;
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  OPENSSL_cleanse(bytes_, kModelKeyBytes);
  ::munlock(bytes_, page);
  ::munmap(bytes_, page);
  bytes_ = nullptr;
}

ModelKey::ModelKey(ModelKey&& other) noexcept : bytes_(other.bytes_) {
  other.bytes_ = nullptr;
}

ModelKey& ModelKey::operator=(ModelKey&& other) noexcept {
  if (this != &other) {
    release();
    bytes_ = other.bytes_;
    other.bytes_ = nullptr;
  }
  return *this;
}

ModelKey ModelKey::from_bytes(const std::array<uint8_t, kModelKeyBytes>& bytes) {
  ModelKey key;
  std::memcpy(key.bytes_, bytes.data(), kModelKeyBytes);
  return key;
}

ModelKey ModelKey::parse(const std::string& text, const std::string& origin) {
  size_t begin = 0;
  size_t end = text.size();
  auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (begin < end && space(text[begin])) ++begin;
  while (end > begin && space(text[end - 1])) --end;
  ModelKey key;
  if (end - begin == 2 * kModelKeyBytes) {
    bool all_hex = true;
    for (size_t i = 0; i < kModelKeyBytes && all_hex; ++i) {
      const int hi = hex_value(text[begin + 2 * i]);
      const int lo = hex_value(text[begin + 2 * i + 1]);
      all_hex = hi >= 0 && lo >= 0;
      key.bytes_[i] = static_cast<uint8_t>(hi * 16 + lo);
    }
    if (all_hex) return key;
  }
  if (text.size() == kModelKeyBytes) {
    std::memcpy(key.bytes_, text.data(), kModelKeyBytes);
    return key;
  }
  fail("{}: a model key is 64 hexadecimal digits or 32 raw bytes, got {} bytes that are neither",
       origin, text.size());
}

std::string ModelKey::hex() const {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < kModelKeyBytes; ++i) {
    out += kDigits[bytes_[i] >> 4];
    out += kDigits[bytes_[i] & 15];
  }
  return out;
}

ModelKey load_model_key(const ModelKeySource& source) {
  const int given =
      !source.file.empty() + !source.command.empty() + !source.environment_variable.empty();
  if (given == 0)
    fail("no model key given (--model-key-file, --model-key-command or PAGODA_MODEL_KEY)");
  if (given > 1) {
    fail(
        "more than one model key given: use one of --model-key-file, --model-key-command and "
        "PAGODA_MODEL_KEY");
  }
  if (!source.file.empty()) {
    std::string text = read_key_file(source.file);
    WipeOnExit wipe{text};
    return ModelKey::parse(text, "model key file " + source.file);
  }
  if (!source.command.empty()) {
    std::string text = run_key_command(source.command);
    WipeOnExit wipe{text};
    return ModelKey::parse(text, "output of model key command '" + source.command + "'");
  }
  const char* value = std::getenv(source.environment_variable.c_str());
  if (value == nullptr) fail("model key variable {} is not set", source.environment_variable);
  std::string text = value;
  WipeOnExit wipe{text};
  return ModelKey::parse(text, "model key variable " + source.environment_variable);
}

ModelKey generate_model_key() {
  std::array<uint8_t, kModelKeyBytes> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1)
    fail("model key: RAND_bytes failed");
  ModelKey key = ModelKey::from_bytes(bytes);
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return key;
}

}  // namespace pagoda::crypto
