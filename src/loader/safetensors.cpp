// Opening and validating safetensors files; see safetensors.h for the format.
#include "loader/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "crypto/encrypted_file.h"
#include "loader/awq_gptq.h"
#include "util/error.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// nlohmann's parse errors quote the input they stopped at, which may span lines; the message
// we throw must stay one line.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return text;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string json_type(const json& j) {
  return j.type_name();
}

struct Range {
  uint64_t begin;
  uint64_t end;
  const std::string* name;
};

// A checkpoint quantized by a method we do not read would otherwise fail later on a tensor
// name or dtype, far from the cause; name the key instead.
void require_known_quant_method(const fs::path& config_path, const json& qc) {
  if (!qc.is_object() || !qc.contains("quant_method")) return;
  const json& method = qc["quant_method"];
  if (method.is_string()) {
    const std::string name = method.get<std::string>();
    // "pagoda" is what `pagoda quantize` writes; "compressed-tensors" (float-quantized) and
    // "fbgemm_fp8" are per-tensor and per-row FP8 exports, which the FP8 converter recognises
    // by the tensors' dtype and scale shapes.
    if (name == "awq" || name == "gptq" || name == "fp8" || name == "pagoda" ||
        name == "fbgemm_fp8") {
      return;
    }
    if (name == "compressed-tensors" &&
        qc.value("format", "float-quantized") == "float-quantized") {
      return;
    }
  }
  fail(
      "{}: quantization_config.quant_method {} is not supported (Pagoda reads awq, gptq, fp8, "
      "fbgemm_fp8, float-quantized compressed-tensors and its own checkpoints; or convert from "
      "an unquantized checkpoint with --quantization)",
      config_path.string(), method.dump());
}

}  // namespace

int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string format_shape(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},
  };
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

void TensorStore::add_files(const std::vector<std::string>& file_paths, Progress* progress) {
  if (progress != nullptr && (memory_ == FileMemory::kHugePageCopy || key_ != nullptr)) {
    uint64_t total = 0;
    std::error_code ec;
    for (const std::string& file_path : file_paths) {
      const uintmax_t size = fs::file_size(file_path, ec);
      if (!ec) total += size;
    }
    progress->set_total(total);
  } else {
    progress = nullptr;  // a map reads nothing now
  }
  for (const std::string& file_path : file_paths) add_file(file_path, progress);
}

// Encrypted files are decrypted into memory, whatever memory_ says: a map would be ciphertext.
std::unique_ptr<MappedFile> TensorStore::read_file(const std::string& file_path,
                                                   Progress* progress) const {
  const bool encrypted = crypto::is_encrypted_file(file_path);
  if (encrypted && key_ == nullptr) {
    fail(
        "{}: the weights are encrypted (pagoda encrypt): give their key with --model-key-file, "
        "--model-key-command or PAGODA_MODEL_KEY",
        file_path);
  }
  if (!encrypted && key_ != nullptr) {
    fail("{}: a model key was given, but this weight file is not encrypted", file_path);
  }
  if (!encrypted) return std::make_unique<MappedFile>(file_path, memory_, progress);
  crypto::DecryptedFile plain = crypto::decrypt_file(file_path, *key_, progress);
  if (!plain.locked) {
    spdlog::warn(
        "{}: decrypted weights are not locked in memory and could be swapped out: reserve "
        "huge pages or raise the memlock limit (ulimit -l, LimitMEMLOCK=)",
        file_path);
  }
  return std::make_unique<MappedFile>(file_path, std::move(plain.bytes), plain.size);
}

void TensorStore::add_file(const std::string& file_path, Progress* progress) {
  auto file = read_file(file_path, progress);
  const std::string& path = file->path();
  const uint64_t file_size = file->size();
  if (file_size < 8) {
    fail("{}: file is {} bytes, too short for a safetensors header (needs at least 8)", path,
         file_size);
  }
  const uint64_t header_len = read_u64_le(file->data());
  if (header_len > file_size - 8) {
    fail(
        "{}: header length {} exceeds the file size ({} bytes after the 8-byte prefix); the "
        "file is truncated or not safetensors",
        path, header_len, file_size - 8);
  }
  const char* header_begin = reinterpret_cast<const char*>(file->data() + 8);
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::parse_error& e) {
    fail("{}: header is not valid JSON: {}", path, one_line(e.what()));
  }
  if (!header.is_object()) {
    fail("{}: header is a JSON {}, expected an object of tensors", path, json_type(header));
  }

  const uint8_t* data_section = file->data() + 8 + header_len;
  const uint64_t data_size = file_size - 8 - header_len;
  std::vector<Tensor> parsed;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object() && !entry.is_null()) {
        fail("{}: __metadata__ is a JSON {}, expected an object", path, json_type(entry));
      }
      continue;
    }
    if (!entry.is_object()) {
      fail("{}: tensor {}: entry is a JSON {}, expected an object", path, name, json_type(entry));
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) fail("{}: tensor {}: missing '{}'", path, name, key);
    }
    Tensor t;
    t.name = name;
    t.path = path;
    const json& dtype = entry["dtype"];
    if (!dtype.is_string()) {
      fail("{}: tensor {}: 'dtype' is a JSON {}, expected a string", path, name, json_type(dtype));
    }
    t.stored_dtype = dtype.get<std::string>();
    if (t.stored_dtype == "F32") {
      t.dtype = DType::kF32;
      t.dtype_supported = true;
    } else if (t.stored_dtype == "F16") {
      t.dtype = DType::kF16;
      t.dtype_supported = true;
    } else if (t.stored_dtype == "BF16") {
      t.dtype = DType::kBF16;
      t.dtype_supported = true;
    }

    const json& shape = entry["shape"];
    if (!shape.is_array()) {
      fail("{}: tensor {}: 'shape' is a JSON {}, expected an array", path, name, json_type(shape));
    }
    // Element counts are bounded by the file size, so a product beyond it is an error
    // already; checking against the limit first keeps the multiplication from overflowing.
    uint64_t num_elements = 1;
    for (const json& dim : shape) {
      if (!dim.is_number_unsigned()) {
        fail("{}: tensor {}: shape {} has an entry that is not a non-negative integer", path, name,
             one_line(shape.dump()));
      }
      const uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("{}: tensor {}: shape {} is too large", path, name, one_line(shape.dump()));
      }
      t.shape.push_back(static_cast<int64_t>(d));
      if (d != 0 && num_elements > file_size / d) {
        fail("{}: tensor {}: shape {} has more elements than the file has bytes", path, name,
             one_line(shape.dump()));
      }
      num_elements *= d;
    }

    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      fail("{}: tensor {}: 'data_offsets' is {}, expected [begin, end] as non-negative integers",
           path, name, one_line(offsets.dump()));
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end) {
      fail("{}: tensor {}: data_offsets [{}, {}] end before they begin", path, name, begin, end);
    }
    if (end > data_size) {
      fail("{}: tensor {}: data_offsets [{}, {}] lie outside the data section ({} bytes)", path,
           name, begin, end, data_size);
    }
    const int64_t element_size = safetensors_dtype_size(t.stored_dtype);
    // An unknown dtype name cannot be size-checked; it is reported if the tensor is used.
    if (element_size != 0 && num_elements * static_cast<uint64_t>(element_size) != end - begin) {
      fail("{}: tensor {}: shape {} of {} needs {} bytes but data_offsets [{}, {}] cover {}", path,
           name, format_shape(t.shape), t.stored_dtype,
           num_elements * static_cast<uint64_t>(element_size), begin, end, end - begin);
    }
    t.data = data_section + begin;
    t.size_bytes = static_cast<int64_t>(end - begin);
    parsed.push_back(std::move(t));
  }

  // Overlap check: sorted by start, each range must end before the next begins.
  std::vector<Range> ranges;
  for (const Tensor& t : parsed) {
    if (t.size_bytes == 0) continue;  // an empty tensor occupies no bytes
    const uint64_t begin = static_cast<uint64_t>(t.data - data_section);
    ranges.push_back({begin, begin + static_cast<uint64_t>(t.size_bytes), &t.name});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& a = ranges[i - 1];
    const Range& b = ranges[i];
    if (b.begin < a.end) {
      fail("{}: tensors {} [{}, {}] and {} [{}, {}] overlap", path, *a.name, a.begin, a.end,
           *b.name, b.begin, b.end);
    }
  }

  for (Tensor& t : parsed) {
    const auto existing = tensors_.find(t.name);
    if (existing != tensors_.end()) {
      fail("{}: tensor {} is also in {}", path, t.name, existing->second.path);
    }
    std::string name = t.name;
    tensors_.emplace(std::move(name), std::move(t));
  }
  files_.push_back(std::move(file));
}

TensorStore TensorStore::open(const std::string& path, FileMemory memory, Progress* progress,
                              const crypto::ModelKey* key, Fp8Weights fp8) {
  TensorStore store;
  store.path_ = path;
  store.memory_ = memory;
  store.key_ = key;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) fail("{}: no such file or directory", path);
  if (!fs::is_directory(status)) {
    store.add_files({path}, progress);
    store.key_ = nullptr;
    convert_fp8_weights(store, nullptr, fp8);  // a lone file: per-tensor or 128 x 128 scales
    return store;
  }

  const fs::path dir(path);
  const fs::path index_path = dir / kIndexFile;
  const fs::path single_path = dir / kSingleFile;
  if (fs::exists(index_path)) {
    const std::string index_name = index_path.string();
    std::ifstream in(index_path);
    if (!in) fail("{}: cannot open", index_name);
    json index;
    try {
      index = json::parse(in);
    } catch (const json::parse_error& e) {
      fail("{}: not valid JSON: {}", index_name, one_line(e.what()));
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail("{}: key 'weight_map' is missing or not an object", index_name);
    }
    const json& weight_map = index["weight_map"];
    std::set<std::string> shards;
    for (const auto& [name, shard] : weight_map.items()) {
      if (!shard.is_string()) {
        fail("{}: weight_map entry for tensor {} is a JSON {}, expected a file name", index_name,
             name, json_type(shard));
      }
      shards.insert(shard.get<std::string>());
    }
    std::vector<std::string> shard_paths;
    for (const std::string& shard : shards) {
      const fs::path shard_path = dir / shard;
      if (!fs::exists(shard_path)) {
        fail("{}: weight_map names shard '{}', which does not exist in {}", index_name, shard,
             path);
      }
      shard_paths.push_back(shard_path.string());
    }
    store.add_files(shard_paths, progress);
    for (const auto& [name, shard] : weight_map.items()) {
      const auto it = store.tensors_.find(name);
      const std::string shard_path = (dir / shard.get<std::string>()).string();
      if (it == store.tensors_.end() || it->second.path != shard_path) {
        fail("{}: weight_map puts tensor {} in {}, but that shard does not contain it", index_name,
             name, shard.get<std::string>());
      }
    }
  } else if (fs::exists(single_path)) {
    store.add_files({single_path.string()}, progress);
  } else {
    std::vector<std::string> found;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".safetensors") found.push_back(entry.path().string());
    }
    if (found.empty()) {
      fail("{}: no {}, {} or other *.safetensors file", path, kSingleFile, kIndexFile);
    }
    std::sort(found.begin(), found.end());
    store.add_files(found, progress);
  }
  store.key_ = nullptr;
  store.fold_quantized_tensors();
  // AWQ/GPTQ layers and FP8 block sizes are announced in config.json, not in the tensors; a
  // config.json that does not parse is left for ModelConfig to report.
  json quantization_config;
  std::ifstream config_in(dir / "config.json");
  if (config_in) {
    const json config = json::parse(config_in, nullptr, /*allow_exceptions=*/false);
    if (config.is_object() && config.contains("quantization_config")) {
      quantization_config = config["quantization_config"];
      require_known_quant_method(dir / "config.json", quantization_config);
      repack_awq_gptq(store, quantization_config);
    }
  }
  convert_fp8_weights(store, quantization_config, fp8);
  return store;
}

size_t TensorStore::drop_source_pages(const Tensor& t) const {
  size_t dropped = 0;
  for (const auto& file : files_) dropped += file->drop_pages(t.data, t.data + t.size_bytes);
  return dropped;
}

bool TensorStore::maps_from_file(const Tensor& t) const {
  for (const auto& file : files_) {
    if (file->maps(t.data, t.data + t.size_bytes)) return true;
  }
  return false;
}

TensorStore TensorStore::empty(std::string path) {
  TensorStore store;
  store.path_ = std::move(path);
  return store;
}

void TensorStore::add(Tensor tensor, std::shared_ptr<const void> keep_alive) {
  if (tensors_.count(tensor.name) != 0) fail("{}: tensor {} added twice", path_, tensor.name);
  std::string name = tensor.name;
  tensors_.emplace(name, std::move(tensor));
  add_keep_alive(std::move(keep_alive), name);
}

void TensorStore::replace(Tensor tensor, std::shared_ptr<const void> keep_alive) {
  const auto it = tensors_.find(tensor.name);
  if (it == tensors_.end()) fail("{}: tensor {} replaced but never added", path_, tensor.name);
  // The old bytes stay: a converter may have read them for the new ones and still point there.
  if (auto old = converted_.extract(tensor.name)) {
    for (auto& buffer : old.mapped()) keep_alive_.push_back(std::move(buffer));
  }
  const std::string name = tensor.name;
  it->second = std::move(tensor);
  add_keep_alive(std::move(keep_alive), name);
}

void TensorStore::add_keep_alive(std::shared_ptr<const void> keep_alive, const std::string& of) {
  if (!keep_alive) return;
  if (of.empty()) {
    keep_alive_.push_back(std::move(keep_alive));
  } else {
    converted_[of].push_back(std::move(keep_alive));
  }
}

bool TensorStore::holds_converted(const std::string& name) const {
  return converted_.count(name) != 0;
}

void TensorStore::release_converted(const std::string& name) const {
  converted_.erase(name);
  released_.insert(name);
}

void TensorStore::fold_quantized_tensors() {
  for (auto& [name, t] : tensors_) {
    if (t.stored_dtype != "I8" && t.stored_dtype != "U8") continue;
    const auto scale_it = tensors_.find(name + "_scale");
    if (scale_it == tensors_.end()) continue;  // a plain integer tensor, not a weight
    const Tensor& scale = scale_it->second;
    const bool int4 = t.stored_dtype == "U8";
    if (t.shape.size() != 2 || scale.shape.size() != 2 || scale.stored_dtype != "F16") {
      fail("{}: quantized tensor {} must be 2-D with an F16 2-D {}_scale (got {} and {} {})",
           t.path, name, name, format_shape(t.shape), scale.stored_dtype,
           format_shape(scale.shape));
    }
    const int64_t rows = t.shape[0], cols = int4 ? t.shape[1] * 2 : t.shape[1];
    const int64_t groups = scale.shape[1];
    if (scale.shape[0] != rows || groups <= 0 || cols % groups != 0 || (cols / groups) % 32 != 0) {
      fail("{}: {}_scale has shape {}, which does not give groups of a multiple of 32 over {}",
           t.path, name, format_shape(scale.shape), format_shape(std::vector<int64_t>{rows, cols}));
    }
    t.scales = scale.data_as<uint16_t>();
    t.group_size = cols / groups;
    if (int4) {
      const Tensor* min = find(name + "_min");
      if (min == nullptr || min->stored_dtype != "F16" || min->shape != scale.shape) {
        fail("{}: int4 tensor {} needs {}_min, F16 {}", t.path, name, name,
             format_shape(scale.shape));
      }
      t.mins = min->data_as<uint16_t>();
    }
    t.shape = {rows, cols};
    t.dtype = int4 ? DType::kI4 : DType::kI8;
    t.dtype_supported = true;
  }
}

const Tensor* TensorStore::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) return nullptr;
  if (released_.count(name) != 0) {
    fail("{}: tensor {} was released once the model held it in a form of its own", path_, name);
  }
  return &it->second;
}

const Tensor& TensorStore::get(const std::string& name) const {
  const Tensor* t = find(name);
  if (t == nullptr) fail("tensor {} not found in {}", name, path_);
  if (!t->dtype_supported) {
    fail(
        "{}: tensor {} has dtype {}, which Pagoda does not read (supported: F32, F16, BF16, "
        "F8_E4M3 matrices with _scale_inv or _scale, and Pagoda's quantized I8/U8 with _scale)",
        t->path, name, t->stored_dtype);
  }
  return *t;
}

const Tensor& TensorStore::get(const std::string& name,
                               std::initializer_list<int64_t> expected_shape) const {
  return get(name, std::span<const int64_t>(expected_shape.begin(), expected_shape.size()));
}

const Tensor& TensorStore::get(const std::string& name,
                               std::span<const int64_t> expected_shape) const {
  const Tensor& t = get(name);
  if (!std::equal(t.shape.begin(), t.shape.end(), expected_shape.begin(), expected_shape.end())) {
    fail("{}: tensor {} has shape {}, expected {}", t.path, name, format_shape(t.shape),
         format_shape(expected_shape));
  }
  return t;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

std::vector<std::string> TensorStore::files() const {
  std::vector<std::string> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

int64_t TensorStore::total_bytes() const {
  int64_t total = 0;
  for (const auto& [name, t] : tensors_) total += t.size_bytes;
  return total;
}

}  // namespace pagoda
