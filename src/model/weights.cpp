#include "model/weights.h"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "kernels/lane_panels.h"
#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "util/error.h"
#include "util/half.h"

namespace pagoda {

WeightView weight_rows(const WeightView& w, int64_t first, int64_t count) {
  WeightView r = w;
  r.rows = count;
  r.data = static_cast<const uint8_t*>(w.data) + first * dtype_row_bytes(w.dtype, w.cols);
  if (w.group_size > 0) {
    const int64_t groups = w.cols / w.group_size;
    if (w.scales) r.scales = w.scales + first * groups;
    if (w.mins) r.mins = w.mins + first * groups;
  }
  return r;
}

namespace {

// The checks and plane sizes of a column slice.
struct ColumnSlice {
  int64_t value_bytes = 0;  // per row
  int64_t groups = 0;       // per row, in the slice (quantized types)
  int64_t group_size = 0;   // of the slice
  int64_t total_bytes = 0;
};

ColumnSlice plan_columns(const WeightView& w, int64_t first, int64_t count,
                         const std::string& name) {
  if (first < 0 || count <= 0 || first + count > w.cols)
    fail("{}: columns [{}, {}) are outside its {} columns", name, first, first + count, w.cols);
  ColumnSlice s;
  s.value_bytes = dtype_row_bytes(w.dtype, count);
  s.total_bytes = w.rows * s.value_bytes;
  if (is_quantized(w.dtype)) {
    const int64_t g = w.group_size;
    const bool runs = first % 32 == 0 && count % 32 == 0;
    const bool whole_groups = count % g == 0 && first % g == 0;
    const bool part_of_group = g % count == 0 && first / g == (first + count - 1) / g;
    if (!runs || !(whole_groups || part_of_group)) {
      fail(
          "{}: a tensor-parallel shard of columns [{}, {}) does not fall on its quantization "
          "groups of {} columns (each shard needs a multiple of 32 columns and whole groups, or a "
          "part of one group); use another --tensor-parallel-size or group size",
          name, first, first + count, g);
    }
    s.groups = whole_groups ? count / g : 1;
    s.group_size = whole_groups ? g : count;
    const int64_t planes = (w.scales ? 1 : 0) + (w.mins ? 1 : 0);
    s.total_bytes += planes * w.rows * s.groups * static_cast<int64_t>(sizeof(uint16_t));
  }
  return s;
}

}  // namespace

int64_t sliced_columns_bytes(const WeightView& w, int64_t first, int64_t count,
                             const std::string& name) {
  return plan_columns(w, first, count, name).total_bytes;
}

WeightView slice_columns_into(const WeightView& w, int64_t first, int64_t count,
                              const std::string& name, void* dst) {
  const ColumnSlice plan = plan_columns(w, first, count, name);
  auto* values = static_cast<uint8_t*>(dst);
  const auto* src = static_cast<const uint8_t*>(w.data);
  const int64_t src_row_bytes = dtype_row_bytes(w.dtype, w.cols);
  const int64_t first_byte = dtype_row_bytes(w.dtype, first);
  for (int64_t r = 0; r < w.rows; ++r) {
    std::memcpy(values + r * plan.value_bytes, src + r * src_row_bytes + first_byte,
                static_cast<size_t>(plan.value_bytes));
  }
  WeightView out = w;
  out.cols = count;
  out.data = values;
  if (is_quantized(w.dtype)) {
    const int64_t g = w.group_size;
    const int64_t src_groups = w.cols / g;
    out.group_size = plan.group_size;
    auto* next = reinterpret_cast<uint16_t*>(values + w.rows * plan.value_bytes);
    auto copy_plane = [&](const uint16_t* plane) -> const uint16_t* {
      if (plane == nullptr) return nullptr;
      uint16_t* dst_plane = next;
      for (int64_t r = 0; r < w.rows; ++r) {
        std::memcpy(dst_plane + r * plan.groups, plane + r * src_groups + first / g,
                    static_cast<size_t>(plan.groups) * sizeof(uint16_t));
      }
      next += w.rows * plan.groups;
      return dst_plane;
    };
    out.scales = copy_plane(w.scales);
    out.mins = copy_plane(w.mins);
  }
  return out;
}

WeightView slice_columns(const WeightView& w, int64_t first, int64_t count, const std::string& name,
                         std::vector<std::shared_ptr<const void>>& owned) {
  const int64_t bytes = sliced_columns_bytes(w, first, count, name);
  auto memory = std::shared_ptr<uint16_t[]>(new uint16_t[static_cast<size_t>(bytes + 1) / 2]);
  owned.push_back(memory);
  return slice_columns_into(w, first, count, name, memory.get());
}

DType parse_quantization(const std::string& name) {
  if (name == "int8") return DType::kI8;
  if (name == "int4") return DType::kI4;
  if (name.empty() || name == "none") return DType::kF32;
  fail("unknown quantization '{}': expected int8 or int4", name);
}

int64_t default_group_size(DType quantize_to, int64_t cols) {
  // int8 keeps one scale per output channel (vLLM's W8A8 convention); int4 needs small groups
  // to stay accurate (32, as GGUF's Q4_0 and Q4_K sub-blocks).
  return quantize_to == DType::kI8 ? cols : 32;
}

namespace {

// `w`, written on the host at `host`, as it lies at `device` (the same place on a
// host-accessible device).
WeightView rebased(const WeightView& w, const void* host, const void* device) {
  auto move = [&](const void* p) -> const void* {
    if (p == nullptr) return nullptr;
    return static_cast<const uint8_t*>(device) +
           (static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(host));
  };
  WeightView out = w;
  out.data = move(w.data);
  out.scales = static_cast<const uint16_t*>(move(w.scales));
  out.mins = static_cast<const uint16_t*>(move(w.mins));
  out.lane_panels = static_cast<const int8_t*>(move(w.lane_panels));
  return out;
}

}  // namespace

WeightLoader::WeightLoader(const TensorStore& store, const WeightOptions& options,
                           const ExecutionContext& ctx)
    : store_(store), options_(options), device_(&ctx.device()), kernels_(&ctx.kernels()) {}

DeviceBuffer WeightLoader::allocate(const std::string& name, size_t size_bytes) {
  AllocationOptions options;
  options.purpose = MemoryPurpose::kWeights;
  try {
    return device_->allocate(size_bytes, options);
  } catch (const Error& e) {
    fail("{}: cannot allocate {} bytes of weights on device {}: {}", name, size_bytes,
         device_->name(), e.what());
  }
}

void* WeightLoader::derived(const std::string& name, size_t size_bytes,
                            const std::function<void(void*)>& fill) {
  DeviceBuffer buffer = allocate(name, size_bytes);
  if (device_->host_accessible()) {
    fill(buffer.data());
  } else {
    std::vector<uint8_t> host(size_bytes);
    fill(host.data());
    device_->copy(buffer.data(), host.data(), size_bytes, CopyKind::kHostToDevice);
    device_->synchronize();
  }
  weight_bytes_ += static_cast<int64_t>(size_bytes);
  void* data = buffer.data();
  buffers_.push_back(std::move(buffer));
  return data;
}

const void* WeightLoader::map_plane(const void* host, int64_t size_bytes, const std::string& name) {
  AllocationOptions options;
  options.purpose = MemoryPurpose::kWeights;
  DeviceBuffer buffer;
  try {
    buffer = device_->map_host(host, static_cast<size_t>(size_bytes), options);
  } catch (const Error& e) {
    fail("{}: cannot map {} bytes of weights onto device {}: {}", name, size_bytes, device_->name(),
         e.what());
  }
  const auto* data = static_cast<const uint8_t*>(buffer.data());
  host_planes_[data] = {static_cast<const uint8_t*>(host), size_bytes};
  weight_bytes_ += size_bytes;
  buffers_.push_back(std::move(buffer));
  return data;
}

WeightView WeightLoader::mapped(const WeightView& stored, const std::string& name) {
  WeightView w = stored;
  w.data = map_plane(stored.data, dtype_row_bytes(stored.dtype, stored.cols) * stored.rows, name);
  if (is_quantized(stored.dtype)) {
    const int64_t plane_bytes =
        stored.rows * (stored.cols / stored.group_size) * static_cast<int64_t>(sizeof(uint16_t));
    if (stored.scales)
      w.scales = static_cast<const uint16_t*>(map_plane(stored.scales, plane_bytes, name));
    if (stored.mins)
      w.mins = static_cast<const uint16_t*>(map_plane(stored.mins, plane_bytes, name));
  }
  return w;
}

const void* WeightLoader::host_of(const void* device) const {
  const auto* p = static_cast<const uint8_t*>(device);
  auto it = host_planes_.upper_bound(p);
  if (it == host_planes_.begin()) return nullptr;
  --it;
  if (p >= it->first + it->second.second) return nullptr;
  return it->second.first + (p - it->first);
}

WeightView WeightLoader::view_of(const std::string& name, int64_t rows, int64_t cols) const {
  const Tensor& t = store_.get(name, {rows, cols});
  WeightView w;
  w.data = t.data;
  w.dtype = t.dtype;
  w.rows = rows;
  w.cols = cols;
  w.scales = t.scales;
  w.mins = t.mins;
  w.group_size = t.group_size;
  w.int8_activations = is_quantized(t.dtype) && options_.int8_activations;
  w.symmetric_int4 = symmetric_int4_mins(w);
  return w;
}

WeightView WeightLoader::matrix_as_stored(const std::string& name, int64_t rows, int64_t cols) {
  num_parameters_ += rows * cols;
  return mapped(view_of(name, rows, cols), name);
}

WeightView WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const WeightView w = view_of(name, rows, cols);
  num_parameters_ += rows * cols;
  const std::optional<WeightView> out = converted(w, name);
  if (!out) return mapped(w, name);
  done_with_source(w, name);
  return *out;
}

int64_t WeightLoader::load_group_size(const WeightView& stored) {
  const DType to = options_.quantize_to;
  if (!is_quantized(to) || is_quantized(stored.dtype)) return 0;
  const int64_t group =
      options_.group_size > 0 ? options_.group_size : default_group_size(to, stored.cols);
  // Kernels work on runs of 32 values: a matrix whose rows do not split into whole groups
  // (e.g. stories260K's 172-wide MLP) stays in its float type, as llama.cpp falls back too.
  if (stored.cols % group != 0 || group % 32 != 0) {
    ++num_kept_float_;
    return 0;
  }
  return group;
}

bool WeightLoader::packs_lane_panels(const WeightView& w) const {
  const LanePanelLayout layout = kernels_->lane_panel_layout(w.dtype);
  return layout && w.int8_activations && w.lane_panels == nullptr && w.cols % 32 == 0 &&
         w.group_size % layout.row_bytes == 0 && (w.dtype != DType::kI4 || w.group_size % 32 == 0);
}

namespace {

// Bytes [data, data + size_bytes) of the store's tensor `name` (its values or a plane of
// them), as TensorStore::maps_from_file and drop_source_pages take them.
Tensor bytes_of(const TensorStore& store, const std::string& name, const void* data,
                int64_t size_bytes) {
  Tensor bytes = store.get(name);
  bytes.data = static_cast<const uint8_t*>(data);
  bytes.size_bytes = size_bytes;
  return bytes;
}

// The store's tensor `name` cut down to the values of `stored`, rows of it.
Tensor values_of(const TensorStore& store, const WeightView& stored, const std::string& name) {
  return bytes_of(store, name, stored.data,
                  dtype_row_bytes(stored.dtype, stored.cols) * stored.rows);
}

// Stored bytes packed at a time when their file pages are dropped as they are packed: a few
// MiB, so that loading peaks at the panels plus that much instead of plus the largest matrix
// (the lm_head: 63 MiB of int8 at DeepSeek-Coder's 32256 x 2048, 223 MiB at Qwen2's
// 151936 x 1536), and still a hundred panels or more to share among the threads.
constexpr int64_t kPackStepBytes = int64_t{8} << 20;

}  // namespace

bool WeightLoader::from_file_map(const WeightView& stored, const std::string& name) const {
  return store_.maps_from_file(values_of(store_, stored, name));
}

bool WeightLoader::releases_converted(const std::string& name) const {
  return options_.release_converted && store_.holds_converted(name);
}

void WeightLoader::drop_source_pages(const WeightView& stored, const std::string& name) const {
  store_.drop_source_pages(values_of(store_, stored, name));
  // A stored quantized matrix went whole into its converted form (lane panels hold their own
  // scales), its scale planes with it; theirs are a 16th of the values' bytes in groups of 32.
  if (!is_quantized(stored.dtype)) return;
  const int64_t plane_bytes =
      stored.rows * (stored.cols / stored.group_size) * static_cast<int64_t>(sizeof(uint16_t));
  if (stored.scales) store_.drop_source_pages(bytes_of(store_, name, stored.scales, plane_bytes));
  if (stored.mins) store_.drop_source_pages(bytes_of(store_, name, stored.mins, plane_bytes));
}

void WeightLoader::done_with_source(const WeightView& stored, const std::string& name) {
  drop_source_pages(stored, name);
  if (packs_lane_panels(stored) && releases_converted(name)) store_.release_converted(name);
}

WeightView WeightLoader::lane_panels(const WeightView& host, const std::string& name,
                                     bool drop_as_packed) {
  const void* at = nullptr;
  const LanePanelLayout layout = kernels_->lane_panel_layout(host.dtype);
  const int64_t panel_bytes = lane_panel_bytes(host, layout);
  // Whole panels per step, so that each step's panels lie where the whole matrix's would.
  const int64_t step_rows =
      drop_as_packed
          ? std::max<int64_t>(
                1, kPackStepBytes / (layout.rows * dtype_row_bytes(host.dtype, host.cols))) *
                layout.rows
          : host.rows;
  void* device =
      derived(name, static_cast<size_t>(lane_panels_bytes(host, layout)), [&](void* dst) {
        at = dst;
        auto* panels = static_cast<int8_t*>(dst);
        for (int64_t first = 0; first < host.rows; first += step_rows) {
          const WeightView rows = weight_rows(host, first, std::min(step_rows, host.rows - first));
          pack_lane_panels_into(rows, layout, panels + first / layout.rows * panel_bytes);
          if (drop_as_packed) drop_source_pages(rows, name);
        }
      });
  return rebased(with_lane_panels(host, static_cast<const int8_t*>(at), layout), at, device);
}

std::optional<WeightView> WeightLoader::converted(const WeightView& stored,
                                                  const std::string& name) {
  if (const int64_t group = load_group_size(stored); group > 0) {
    const DType to = options_.quantize_to;
    if (kernels_->lane_panel_layout(to) && options_.int8_activations) {
      // Quantized on the host, then packed: the row-major copy is freed on return, so the
      // device holds the panels alone.
      QuantizedMatrix whole = quantize_matrix(stored, to, group);
      whole.view.int8_activations = true;
      if (options_.progress != nullptr)
        options_.progress->advance(static_cast<uint64_t>(pagoda::weight_bytes(stored)));
      if (options_.on_quantized) options_.on_quantized(name, whole.view);
      return lane_panels(whole.view, name);
    }
    WeightView q;
    const void* host = nullptr;
    void* device = derived(name, static_cast<size_t>(quantized_matrix_bytes(stored, to, group)),
                           [&](void* dst) {
                             host = dst;
                             q = quantize_matrix_into(stored, to, group, dst);
                           });
    q = rebased(q, host, device);
    if (options_.progress != nullptr)
      options_.progress->advance(static_cast<uint64_t>(pagoda::weight_bytes(stored)));
    q.int8_activations = options_.int8_activations;
    if (options_.on_quantized) options_.on_quantized(name, q);
    return q;
  }
  // Stored int8 or int4 (a pagoda quantize checkpoint, GGUF's Q8_0 or Q4_0 / Q4_K / Q4_1, AWQ /
  // GPTQ): the panels take the place of the rows where nothing else holds them: a mapped
  // file's pages, or a converter's buffers the store lets go of (GGUF's repacked blocks). Other
  // bytes in host memory (a file read or decrypted into memory, a converter's when other models
  // load from the store) stay for as long as the model runs: the CPU device uses them in place
  // rather than hold them twice, and a device with memory of its own copies them in anyway, so it
  // takes panels for the same bytes.
  if (packs_lane_panels(stored)) {
    // From a file map, each step's pages are dropped once packed.
    if (from_file_map(stored, name)) return lane_panels(stored, name, /*drop_as_packed=*/true);
    if (!device_->host_accessible() || releases_converted(name)) return lane_panels(stored, name);
  }
  if (stored.dtype != DType::kF16 || !kernels_->f16_arithmetic) return std::nullopt;
  // One pass over the bits (NaN and inf count as large): the pages are read at the first
  // forward anyway, and a model whose weights all fit pays nothing else.
  const uint16_t max_bits = f32_to_f16(kF16ArithmeticMaxWeight);
  const auto* h = static_cast<const f16_t*>(stored.data);
  const int64_t n = stored.rows * stored.cols;
  int64_t large = 0;
  for (int64_t i = 0; i < n; ++i) large += (h[i] & 0x7fffu) > max_bits;
  if (large == 0) return std::nullopt;
  spdlog::warn(
      "{}: {} of its f16 weights exceed {} in magnitude, which the {} kernels' fp16 "
      "products could overflow; using an fp32 copy",
      name, large, kF16ArithmeticMaxWeight, kernels_->isa);
  WeightView out = stored;
  out.dtype = DType::kF32;
  out.data = derived(name, static_cast<size_t>(n) * sizeof(float), [&](void* dst) {
    kernels_->to_f32(stored.data, DType::kF16, n, static_cast<float*>(dst));
  });
  return out;
}

WeightView WeightLoader::prepare(const WeightView& loaded, const std::string& name) {
  WeightView stored = loaded;
  stored.data = host_of(loaded.data);
  if (stored.data == nullptr) return loaded;  // a converted copy already
  if (loaded.scales) stored.scales = static_cast<const uint16_t*>(host_of(loaded.scales));
  if (loaded.mins) stored.mins = static_cast<const uint16_t*>(host_of(loaded.mins));
  // A stored int8 / int4 table that is also read by rows (a tied embedding) stays as it is rather
  // than be held twice, row-major and in panels.
  if (packs_lane_panels(stored)) return loaded;
  const std::optional<WeightView> out = converted(stored, name);
  return out ? *out : loaded;
}

WeightView WeightLoader::matrix_rows(const std::string& name, int64_t rows, int64_t cols,
                                     int64_t first, int64_t count) {
  const WeightView w = stored_rows(name, rows, cols, first, count);
  num_parameters_ += count * cols;
  const std::optional<WeightView> out = converted(w, name);
  if (!out) return mapped(w, name);
  done_with_source(w, name);  // this rank's rows
  return *out;
}

WeightView WeightLoader::stored_rows(const std::string& name, int64_t rows, int64_t cols,
                                     int64_t first, int64_t count) const {
  if (first < 0 || count <= 0 || first + count > rows)
    fail("{}: rows [{}, {}) are outside its {} rows", name, first, first + count, rows);
  return weight_rows(view_of(name, rows, cols), first, count);
}

WeightView WeightLoader::matrix_rows_as_stored(const std::string& name, int64_t rows, int64_t cols,
                                               int64_t first, int64_t count) {
  const WeightView w = stored_rows(name, rows, cols, first, count);
  num_parameters_ += count * cols;
  return mapped(w, name);
}

WeightView WeightLoader::matrix_columns(const std::string& name, int64_t rows, int64_t cols,
                                        int64_t first, int64_t count) {
  const WeightView stored = view_of(name, rows, cols);
  num_parameters_ += rows * count;
  WeightView source = stored;
  QuantizedMatrix whole;  // the whole matrix quantized, dropped once its columns are copied
  if (const int64_t group = load_group_size(stored); group > 0) {
    whole = quantize_matrix(stored, options_.quantize_to, group);
    whole.view.int8_activations = options_.int8_activations;
    source = whole.view;
  }
  if (packs_lane_panels(source)) {
    // The columns are cut on the host and packed; the cut copy is freed on return.
    std::vector<std::shared_ptr<const void>> cut;
    const WeightView packed = lane_panels(slice_columns(source, first, count, name, cut), name);
    done_with_source(stored, name);  // this rank's columns are all it reads
    return packed;
  }
  WeightView out;
  const void* host = nullptr;
  void* device = derived(
      name, static_cast<size_t>(sliced_columns_bytes(source, first, count, name)), [&](void* dst) {
        host = dst;
        out = slice_columns_into(source, first, count, name, dst);
      });
  return rebased(out, host, device);
}

std::span<const float> WeightLoader::vector_range(const std::string& name, int64_t n, int64_t first,
                                                  int64_t count) {
  const Tensor& t = store_.get(name, {n});
  if (is_quantized(t.dtype))
    fail("{}: vector {} is quantized; expected a float type", t.path, name);
  if (first < 0 || count <= 0 || first + count > n)
    fail("{}: elements [{}, {}) are outside its {}", name, first, first + count, n);
  const uint8_t* src = t.data + first * dtype_size(t.dtype);
  auto* out = static_cast<const float*>(
      derived(name, static_cast<size_t>(count) * sizeof(float),
              [&](void* dst) { kernels_->to_f32(src, t.dtype, count, static_cast<float*>(dst)); }));
  num_parameters_ += count;
  return {out, static_cast<size_t>(count)};
}

std::span<const float> WeightLoader::vector(const std::string& name, int64_t n) {
  return vector_range(name, n, 0, n);
}

}  // namespace pagoda
