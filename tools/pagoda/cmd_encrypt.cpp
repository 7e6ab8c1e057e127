// `pagoda encrypt`: an encrypted copy of a Hugging Face model directory. Weight files
// (*.safetensors) are encrypted (src/crypto/encrypted_file.h); config, tokenizer and index files
// are copied as they are: they describe the public architecture, not the trained weights, and
// the tools read them before any key is at hand. Every command that takes --model reads the copy
// with --model-key-file, --model-key-command or PAGODA_MODEL_KEY.
#include <sys/stat.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "crypto/encrypted_file.h"
#include "crypto/model_key.h"
#include "tools/pagoda/commands.h"
#include "util/error.h"
#include "util/units.h"

namespace pagoda::cli {
namespace {

namespace fs = std::filesystem;

struct EncryptFlags {
  std::string model;
  std::string out;
  std::string key_file;
  std::string key_env;
  std::string new_key_file;
};

crypto::ModelKey key_for(const EncryptFlags& f) {
  const int given = !f.key_file.empty() + !f.key_env.empty() + !f.new_key_file.empty();
  if (given != 1) fail("give the key with exactly one of --key-file, --key-env and --new-key-file");
  if (!f.key_file.empty()) return crypto::load_model_key({.file = f.key_file});
  if (!f.key_env.empty()) return crypto::load_model_key({.environment_variable = f.key_env});
  // A fresh key, written where only its owner reads it; never printed.
  crypto::ModelKey key = crypto::generate_model_key();
  const std::string text = key.hex() + "\n";
  const mode_t old_mask = ::umask(077);
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(f.new_key_file.c_str(), "wx"), &std::fclose);
  ::umask(old_mask);
  if (!out) fail("{}: cannot create (it must not exist yet)", f.new_key_file);
  if (std::fwrite(text.data(), 1, text.size(), out.get()) != text.size()) {
    fail("{}: cannot write", f.new_key_file);
  }
  return key;
}

int run_encrypt(const EncryptFlags& f) {
  if (!fs::is_directory(f.model))
    fail("{}: not a directory (encrypt takes a Hugging Face model directory)", f.model);
  if (fs::exists(f.out) && !fs::is_empty(f.out)) fail("{}: exists and is not empty", f.out);
  const crypto::ModelKey key = key_for(f);
  fs::create_directories(f.out);
  std::vector<fs::path> entries;
  for (const fs::directory_entry& e : fs::directory_iterator(f.model)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  int encrypted = 0;
  uint64_t bytes = 0;
  for (const fs::path& path : entries) {
    const fs::path target = fs::path(f.out) / path.filename();
    if (!fs::is_regular_file(path)) continue;  // the Hub cache's blobs are reached through links
    if (path.extension() == ".safetensors") {
      crypto::encrypt_file(path.string(), target.string(), key);
      ++encrypted;
      bytes += fs::file_size(path);
    } else {
      fs::copy_file(path, target);
    }
  }
  if (encrypted == 0) fail("{}: no *.safetensors file to encrypt", f.model);
  fmt::print("{}: {} weight file(s), {}, encrypted with AES-256-GCM\n", f.out, encrypted,
             format_bytes(bytes));
  return 0;
}

}  // namespace

Command register_encrypt(CLI::App& app) {
  auto flags = std::make_shared<EncryptFlags>();
  CLI::App* sub = app.add_subcommand(
      "encrypt", "Write a copy of a model directory with its weights encrypted (AES-256-GCM)");
  sub->add_option("--model", flags->model, "Hugging Face model directory")->required();
  sub->add_option("--out", flags->out, "Directory to write the encrypted copy into")->required();
  sub->add_option("--key-file", flags->key_file, "File holding the key: 64 hex digits or 32 bytes");
  sub->add_option("--key-env", flags->key_env,
                  "Environment variable holding the key (64 hex digits)");
  sub->add_option("--new-key-file", flags->new_key_file,
                  "Make a random key and write it to this new file (mode 0600)");
  return [flags] { return run_encrypt(*flags); };
}

}  // namespace pagoda::cli
