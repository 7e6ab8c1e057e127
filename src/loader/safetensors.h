// Reading the weights of a Hugging Face model directory: one `model.safetensors`, shards
// listed by `model.safetensors.index.json`, or several *.safetensors without an index.
// Files are memory-mapped and tensors point into the maps (zero-copy); every header is
// validated at open so later code can trust offsets and sizes.
//
// Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data section; offsets are relative to the start of the data section.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "crypto/model_key.h"
#include "loader/fp8_checkpoint.h"
#include "util/dtype.h"
#include "util/mapped_file.h"

namespace pagoda {

struct Tensor {
  std::string name;
  std::string path;          // the .safetensors file holding it
  std::string stored_dtype;  // as written in the header: "BF16", "F8_E4M3", ...
  bool dtype_supported = false;
  DType dtype = DType::kF32;      // meaningful only when dtype_supported
  std::vector<int64_t> shape;     // logical: [rows, cols] even for kI4's packed bytes
  const uint8_t* data = nullptr;  // inside the file's memory map (or a converter's buffer)
  int64_t size_bytes = 0;
  // kI8 / kI4 (util/dtype.h): fp16 planes [rows, cols / group_size]; mins for kI4 only.
  const uint16_t* scales = nullptr;
  const uint16_t* mins = nullptr;
  int64_t group_size = 0;

  int64_t num_elements() const;
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data);
  }
};

// "[2, 3]", as error messages print shapes.
std::string format_shape(std::span<const int64_t> shape);

// Bytes per element of a safetensors dtype name, 0 if the name is unknown.
int64_t safetensors_dtype_size(const std::string& dtype);

class TensorStore {
 public:
  // `path` is a model directory or a single .safetensors file. Throws pagoda::Error with one
  // line naming the file (and tensor) and the problem. A directory whose config.json says the
  // weights are AWQ or GPTQ gets them repacked to kI4 (loader/awq_gptq.h).
  // `memory` says how the files get into memory (util/mapped_file.h); a copy advances
  // `progress` (if given) over the files' total size.
  // `key` opens weight files that `pagoda encrypt` wrote (crypto/encrypted_file.h), decrypted
  // into memory whatever `memory` says; an encrypted file without a key, or a key with a plain
  // file, is an error naming the file.
  // FP8 matrices (loader/fp8_checkpoint.h) are converted as `fp8` says.
  static TensorStore open(const std::string& path, FileMemory memory = FileMemory::kMap,
                          Progress* progress = nullptr, const crypto::ModelKey* key = nullptr,
                          Fp8Weights fp8 = Fp8Weights::kInt8);

  // An empty store for a converter (GGUF, AWQ/GPTQ repacking) to fill with `add`.
  static TensorStore empty(std::string path);

  TensorStore(TensorStore&&) noexcept = default;
  TensorStore& operator=(TensorStore&&) noexcept = default;

  // Tensor lookup. The checked versions throw "tensor NAME not found in DIR", "FILE: tensor
  // NAME has dtype F8_E4M3, which Pagoda does not read (...)" or "FILE: tensor NAME has shape
  // [a, b], expected [c, d]".
  const Tensor& get(const std::string& name) const;
  const Tensor& get(const std::string& name, std::initializer_list<int64_t> expected_shape) const;
  const Tensor& get(const std::string& name, std::span<const int64_t> expected_shape) const;
  const Tensor* find(const std::string& name) const;  // nullptr if absent; no dtype check
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }

  const std::string& path() const { return path_; }
  size_t num_tensors() const { return tensors_.size(); }
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  std::vector<std::string> files() const;  // the mapped .safetensors paths
  int64_t total_bytes() const;             // sum of tensor sizes

  // Adds a tensor whose bytes `keep_alive` owns (or maps); the store holds it as long as the
  // store lives, or until release_converted(name). Throws pagoda::Error if the name is taken.
  void add(Tensor tensor, std::shared_ptr<const void> keep_alive);
  // Replaces the tensor of the same name (a converter's result for a stored tensor), whose
  // bytes `keep_alive` owns as add's do; the old tensor's bytes stay mapped. Throws
  // pagoda::Error if there is none.
  void replace(Tensor tensor, std::shared_ptr<const void> keep_alive);
  // Drops `t`'s pages from resident memory when they come straight from a mapped file (see
  // MappedFile::drop_pages): for a converter's source, once converted, so that a model loads
  // in about its final size rather than source plus result. Returns the bytes dropped.
  size_t drop_source_pages(const Tensor& t) const;
  // True when `t`'s bytes come straight from a mapped file (drop_source_pages releases them);
  // false for bytes a converter made in memory or a file read into memory.
  bool maps_from_file(const Tensor& t) const;
  // Keeps more bytes alive: a second plane of tensor `of` (added with `add` or `replace`),
  // released with it; for as long as the store lives when `of` is empty.
  void add_keep_alive(std::shared_ptr<const void> keep_alive, const std::string& of = "");

  // True when a converter's buffers hold `name`'s bytes (the keep_alive of `add` or `replace`:
  // GGUF's repacked blocks, FP8 or AWQ/GPTQ converted at open), which release_converted frees.
  bool holds_converted(const std::string& name) const;
  // For the one reader of `name` that keeps its own form of the bytes (the weight loader's lane
  // panels, model/weights.h): the store lets go of the buffers holding them, so that a model
  // is held once. A buffer is freed with the last tensor that shares it (the parts of a
  // stacked GGUF tensor share their repack). From then on get() and find() of `name` throw;
  // tensors() still lists it, with pointers to bytes that are gone.
  void release_converted(const std::string& name) const;

 private:
  TensorStore() = default;
  void add_files(const std::vector<std::string>& file_paths, Progress* progress);
  void add_file(const std::string& file_path, Progress* progress);
  std::unique_ptr<MappedFile> read_file(const std::string& file_path, Progress* progress) const;
  // Pagoda's own quantized checkpoints (`pagoda quantize`): NAME as I8 (int8) or U8 (packed
  // int4) plus NAME_scale and, for int4, NAME_min, both F16 [rows, groups]. Folds the planes
  // into NAME's Tensor so models see one kI8/kI4 tensor.
  void fold_quantized_tensors();

  std::string path_;
  FileMemory memory_ = FileMemory::kMap;
  const crypto::ModelKey* key_ = nullptr;  // set only while open() runs
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, Tensor> tensors_;
  std::vector<std::shared_ptr<const void>> keep_alive_;  // for as long as the store lives
  // A converter's buffers by the tensor whose bytes they hold, and the tensors released. Mutable
  // because a model loads from the const store it is given: letting go of bytes once their
  // reader has its own copy changes no tensor that anyone may still read.
  mutable std::map<std::string, std::vector<std::shared_ptr<const void>>> converted_;
  mutable std::set<std::string> released_;
};

}  // namespace pagoda
