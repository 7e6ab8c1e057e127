// Parsing and validating GGUF files; see gguf.h for the format.
#include "loader/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "util/error.h"

namespace pagoda {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;        // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;  // nested arrays; real files use none
constexpr uint64_t kMaxKeyBytes = 65535;

// ggml.h's type table (block size, bytes per block), indexed by type id; ids ggml removed
// (4, 5, 31-33, 36-38) have no entry.
struct TypeEntry {
  uint32_t id;
  GgmlTypeTraits traits;
};
constexpr TypeEntry kTypes[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};

// Bytes of one element of a fixed-size metadata type; 0 for string/array/unknown.
uint64_t scalar_size(uint32_t type) {
  switch (static_cast<GgufValueType>(type)) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool known_value_type(uint32_t type) {
  return type <= static_cast<uint32_t>(GgufValueType::kFloat64);
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // GGUF is little-endian, as are the hosts we run on
  return v;
}

// Reads one element of a numeric/bool type at `p` into the scalar fields of `v`.
void decode_scalar(GgufValueType type, const uint8_t* p, GgufValue& v) {
  v.type = type;
  switch (type) {
    case GgufValueType::kUint8:
      v.uint_value = load<uint8_t>(p);
      break;
    case GgufValueType::kUint16:
      v.uint_value = load<uint16_t>(p);
      break;
    case GgufValueType::kUint32:
      v.uint_value = load<uint32_t>(p);
      break;
    case GgufValueType::kUint64:
      v.uint_value = load<uint64_t>(p);
      break;
    case GgufValueType::kInt8:
      v.int_value = load<int8_t>(p);
      break;
    case GgufValueType::kInt16:
      v.int_value = load<int16_t>(p);
      break;
    case GgufValueType::kInt32:
      v.int_value = load<int32_t>(p);
      break;
    case GgufValueType::kInt64:
      v.int_value = load<int64_t>(p);
      break;
    case GgufValueType::kFloat32:
      v.float_value = load<float>(p);
      break;
    case GgufValueType::kFloat64:
      v.float_value = load<double>(p);
      break;
    case GgufValueType::kBool:
      v.bool_value = load<uint8_t>(p) != 0;
      break;
    default:
      break;
  }
}

bool is_unsigned(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 || t == GgufValueType::kUint32 ||
         t == GgufValueType::kUint64;
}

// A bounds-checked cursor over the mapped file; every failure names the file, the offset and
// what was being read.
class Reader {
 public:
  Reader(const std::string& path, const uint8_t* data, uint64_t size)
      : path_(path), data_(data), size_(size) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  const uint8_t* take(uint64_t num_bytes, const std::string& what) {
    if (num_bytes > remaining()) {
      fail("{}: truncated: {} needs {} bytes at offset {}, but the file has {} bytes", path_, what,
           num_bytes, pos_, size_);
    }
    const uint8_t* p = data_ + pos_;
    pos_ += num_bytes;
    return p;
  }
  template <typename T>
  T read(const std::string& what) {
    return load<T>(take(sizeof(T), what));
  }
  std::string_view read_string(const std::string& what) {
    const uint64_t length = read<uint64_t>(what + " length");
    if (length > remaining()) {
      fail("{}: {} has length {} at offset {}, beyond the end of the file ({} bytes)", path_, what,
           length, pos_ - 8, size_);
    }
    const uint8_t* p = take(length, what);
    return {reinterpret_cast<const char*>(p), static_cast<size_t>(length)};
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

GgufValue read_value(Reader& in, uint32_t type, const std::string& what, const std::string& path,
                     int depth) {
  if (!known_value_type(type)) {
    fail("{}: {} has unknown value type {}", path, what, type);
  }
  GgufValue v;
  v.type = static_cast<GgufValueType>(type);
  if (v.type == GgufValueType::kString) {
    v.string_value = in.read_string(what);
    return v;
  }
  if (v.type != GgufValueType::kArray) {
    decode_scalar(v.type, in.take(scalar_size(type), what), v);
    return v;
  }
  if (depth >= kMaxArrayDepth) fail("{}: {} nests arrays deeper than {}", path, what, depth);
  const uint32_t element_type = in.read<uint32_t>(what + " element type");
  if (!known_value_type(element_type)) {
    fail("{}: {} is an array of unknown value type {}", path, what, element_type);
  }
  v.element_type = static_cast<GgufValueType>(element_type);
  v.num_elements = in.read<uint64_t>(what + " element count");
  // Every element takes at least one byte (strings eight), so a count beyond the bytes left
  // is malformed; checking first also keeps reserve() from allocating absurd amounts.
  const uint64_t min_element_bytes = std::max<uint64_t>(scalar_size(element_type), 1) *
                                     (v.element_type == GgufValueType::kString ? 8 : 1);
  if (v.num_elements > in.remaining() / min_element_bytes) {
    fail("{}: {} claims {} elements of type {}, more than the {} bytes left in the file", path,
         what, v.num_elements, gguf_value_type_name(v.element_type), in.remaining());
  }
  if (v.element_type == GgufValueType::kString) {
    v.strings.reserve(v.num_elements);
    for (uint64_t i = 0; i < v.num_elements; ++i) {
      v.strings.push_back(in.read_string(fmt::format("{}[{}]", what, i)));
    }
  } else if (v.element_type == GgufValueType::kArray) {
    v.arrays.reserve(v.num_elements);
    for (uint64_t i = 0; i < v.num_elements; ++i) {
      v.arrays.push_back(
          read_value(in, element_type, fmt::format("{}[{}]", what, i), path, depth + 1));
    }
  } else {
    v.elements = in.take(v.num_elements * scalar_size(element_type), what + " elements");
  }
  return v;
}

std::string describe(const GgufValue& v) {
  if (v.type == GgufValueType::kArray) {
    return fmt::format("array of {}", gguf_value_type_name(v.element_type));
  }
  return gguf_value_type_name(v.type);
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static const char* const kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                       "int32",  "float32", "bool",   "string", "array",
                                       "uint64", "int64",   "float64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

const GgmlTypeTraits* ggml_type_traits(uint32_t type) {
  for (const TypeEntry& e : kTypes) {
    if (e.id == type) return &e.traits;
  }
  return nullptr;
}

std::string ggml_type_name(uint32_t type) {
  const GgmlTypeTraits* t = ggml_type_traits(type);
  return t ? std::string(t->name) : fmt::format("type {}", type);
}

bool GgufValue::is_integer() const {
  return is_unsigned(type) || type == GgufValueType::kInt8 || type == GgufValueType::kInt16 ||
         type == GgufValueType::kInt32 || type == GgufValueType::kInt64;
}

bool GgufValue::is_float() const {
  return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t GgufTensorInfo::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

std::vector<int64_t> GgufTensorInfo::shape() const {
  return {dims.rbegin(), dims.rend()};
}

GgufFile::GgufFile(const std::string& path, FileMemory memory)
    : file_(std::make_unique<MappedFile>(path, memory)) {
  const std::string& p = file_->path();
  const uint64_t file_size = file_->size();
  Reader in(p, file_->data(), file_size);
  if (file_size < 4 || load<uint32_t>(file_->data()) != kMagic) {
    fail("{}: not a GGUF file (the first 4 bytes are not \"GGUF\")", p);
  }
  in.take(4, "magic");
  version_ = in.read<uint32_t>("version");
  if (version_ == 1) {
    fail(
        "{}: GGUF version 1 (32-bit counts) is not supported; convert it with a current "
        "llama.cpp",
        p);
  }
  if (version_ != 2 && version_ != 3) {
    // A big-endian file reads as a byte-swapped version (e.g. 3 << 24).
    fail("{}: unsupported GGUF version {}{}", p, version_,
         (version_ & 0xffff) == 0 ? " (a big-endian file?)" : "");
  }
  const uint64_t num_tensors = in.read<uint64_t>("tensor count");
  const uint64_t num_kv = in.read<uint64_t>("metadata count");
  // Each metadata entry takes at least 13 bytes (key length, type, one byte of value), each
  // tensor info at least 24 (name length, n_dims, type, offset).
  if (num_kv > in.remaining() / 13) {
    fail("{}: metadata count {} is impossible for a file of {} bytes", p, num_kv, file_size);
  }
  if (num_tensors > in.remaining() / 24) {
    fail("{}: tensor count {} is impossible for a file of {} bytes", p, num_tensors, file_size);
  }

  for (uint64_t i = 0; i < num_kv; ++i) {
    const std::string_view key = in.read_string(fmt::format("metadata key #{}", i));
    if (key.empty() || key.size() > kMaxKeyBytes) {
      fail("{}: metadata key #{} has length {} (must be 1..{})", p, i, key.size(), kMaxKeyBytes);
    }
    const std::string name(key);
    const uint32_t type = in.read<uint32_t>(fmt::format("type of metadata key '{}'", name));
    GgufValue value = read_value(in, type, fmt::format("metadata key '{}'", name), p, 0);
    if (!metadata_.emplace(name, std::move(value)).second) {
      fail("{}: metadata key '{}' appears twice", p, name);
    }
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufValueType::kUint32) {
      fail("{}: metadata key 'general.alignment' is a {}, expected uint32", p, describe(*a));
    }
    alignment_ = a->uint_value;
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
      fail("{}: general.alignment {} is not a power of two", p, alignment_);
    }
  } else {
    alignment_ = kDefaultAlignment;
  }

  tensors_.reserve(num_tensors);
  for (uint64_t i = 0; i < num_tensors; ++i) {
    GgufTensorInfo t;
    t.name = std::string(in.read_string(fmt::format("name of tensor #{}", i)));
    const std::string what = fmt::format("tensor {}", t.name);
    const uint32_t num_dims = in.read<uint32_t>(what + " dimension count");
    if (num_dims == 0 || num_dims > kMaxDims) {
      fail("{}: {} has {} dimensions (must be 1..{})", p, what, num_dims, kMaxDims);
    }
    uint64_t num_elements = 1;
    for (uint32_t d = 0; d < num_dims; ++d) {
      const uint64_t dim = in.read<uint64_t>(what + " dimensions");
      // No ggml type packs more than 8 elements into a byte, so elements are bounded by
      // 8 x the file size; checking against that keeps the product from overflowing.
      if (dim == 0 || dim > file_size * 8 || num_elements > file_size * 8 / dim) {
        fail("{}: {} has dimension {} = {}, impossible for a file of {} bytes", p, what, d, dim,
             file_size);
      }
      num_elements *= dim;
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    t.type = in.read<uint32_t>(what + " type");
    const GgmlTypeTraits* traits = ggml_type_traits(t.type);
    if (!traits) fail("{}: {} has unknown ggml type id {}", p, what, t.type);
    if (t.dims[0] % traits->block_size != 0) {
      fail("{}: {} has {} elements per row, not a multiple of the {} block size {}", p, what,
           t.dims[0], traits->name, traits->block_size);
    }
    t.size_bytes = static_cast<int64_t>(num_elements / traits->block_size * traits->type_size);
    t.offset = in.read<uint64_t>(what + " offset");
    if (t.offset % alignment_ != 0) {
      fail("{}: {} has offset {}, not a multiple of the alignment {}", p, what, t.offset,
           alignment_);
    }
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      fail("{}: tensor {} appears twice", p, t.name);
    }
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment (a file with no tensors may
  // end right after the infos).
  const uint64_t infos_end = in.offset();
  data_offset_ = (infos_end + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_offset_ > file_size) {
    fail("{}: data section would start at offset {}, beyond the end of the file ({} bytes)", p,
         data_offset_, file_size);
  }
  const uint64_t data_size = tensors_.empty() ? 0 : file_size - data_offset_;

  std::vector<const GgufTensorInfo*> by_offset;
  for (GgufTensorInfo& t : tensors_) {
    const uint64_t size = static_cast<uint64_t>(t.size_bytes);
    if (t.offset > data_size || size > data_size - t.offset) {
      fail(
          "{}: tensor {} ({} {}, {} bytes at data offset {}) extends past the end of the file "
          "(data section is {} bytes)",
          p, t.name, ggml_type_name(t.type), fmt::format("[{}]", fmt::join(t.dims, ", ")), size,
          t.offset, data_size);
    }
    t.data = file_->data() + data_offset_ + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    if (prev.offset + static_cast<uint64_t>(prev.size_bytes) > by_offset[i]->offset) {
      fail("{}: tensors {} and {} overlap in the data section", p, prev.name, by_offset[i]->name);
    }
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::kString) {
    fail("{}: metadata key '{}' is a {}, expected a string", path(), key, describe(*v));
  }
  return std::string(v->string_value);
}

std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) {
    fail("{}: metadata key '{}' is a {}, expected an integer", path(), key, describe(*v));
  }
  if (is_unsigned(v->type)) {
    if (v->uint_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail("{}: metadata key '{}' = {} is out of range", path(), key, v->uint_value);
    }
    return static_cast<int64_t>(v->uint_value);
  }
  return v->int_value;
}

std::optional<double> GgufFile::find_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->float_value;
  if (v->is_integer()) return static_cast<double>(*find_int(key));
  fail("{}: metadata key '{}' is a {}, expected a number", path(), key, describe(*v));
}

std::optional<bool> GgufFile::find_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::kBool) {
    fail("{}: metadata key '{}' is a {}, expected a bool", path(), key, describe(*v));
  }
  return v->bool_value;
}

std::string GgufFile::get_string(const std::string& key) const {
  auto v = find_string(key);
  if (!v) fail("{}: metadata key '{}' is missing", path(), key);
  return *v;
}

int64_t GgufFile::get_int(const std::string& key) const {
  auto v = find_int(key);
  if (!v) fail("{}: metadata key '{}' is missing", path(), key);
  return *v;
}

double GgufFile::get_float(const std::string& key) const {
  auto v = find_float(key);
  if (!v) fail("{}: metadata key '{}' is missing", path(), key);
  return *v;
}

std::vector<std::string_view> GgufFile::string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  if (v->type != GgufValueType::kArray || v->element_type != GgufValueType::kString) {
    fail("{}: metadata key '{}' is a {}, expected an array of string", path(), key, describe(*v));
  }
  return v->strings;
}

std::vector<int64_t> GgufFile::int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  GgufValue element;
  element.type = v->element_type;
  if (v->type != GgufValueType::kArray || !element.is_integer()) {
    fail("{}: metadata key '{}' is a {}, expected an array of integers", path(), key, describe(*v));
  }
  const uint64_t size = scalar_size(static_cast<uint32_t>(v->element_type));
  std::vector<int64_t> out(v->num_elements);
  for (uint64_t i = 0; i < v->num_elements; ++i) {
    decode_scalar(v->element_type, v->elements + i * size, element);
    out[i] =
        is_unsigned(element.type) ? static_cast<int64_t>(element.uint_value) : element.int_value;
  }
  return out;
}

std::vector<float> GgufFile::float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return {};
  GgufValue element;
  element.type = v->element_type;
  if (v->type != GgufValueType::kArray || !element.is_float()) {
    fail("{}: metadata key '{}' is a {}, expected an array of floats", path(), key, describe(*v));
  }
  const uint64_t size = scalar_size(static_cast<uint32_t>(v->element_type));
  std::vector<float> out(v->num_elements);
  for (uint64_t i = 0; i < v->num_elements; ++i) {
    decode_scalar(v->element_type, v->elements + i * size, element);
    out[i] = static_cast<float>(element.float_value);
  }
  return out;
}

}  // namespace pagoda
