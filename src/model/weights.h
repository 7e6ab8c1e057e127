// Binding stored tensors to what the forward pass computes with, in the execution context's
// device memory. Float matrices stay in their stored dtype and are mapped from the checkpoint
// (Device::map_host: in place on the CPU device, copied in by a device with memory of its own)
// unless the model is quantized at load (`--quantization int8|int4`), in which case they are
// quantized into device memory the loader allocates. Already-quantized tensors (pagoda quantize
// checkpoints, AWQ/GPTQ, GGUF) are mapped as they come. Small vectors (norms, biases) are
// widened to fp32 once, into device memory. Where the kernel table reads int8 W8A8 or int4 W4A8
// matrices as lane panels (KernelTable::int8_lane_panels / int4_lane_panels name their layout,
// kernels/lane_panels.h) the loader packs them in that layout on the host, in place of their
// row-major bytes, and the panels go to the device like any other converted weight; row-major bytes
// a converter holds are packed only when the store can let go of them
// (WeightOptions::release_converted). Every byte a model computes with is a buffer this loader
// holds, so weight_bytes() is what the device holds for the model's weights.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/execution_context.h"
#include "kernels/kernels.h"
#include "util/progress.h"

namespace pagoda {

class TensorStore;

// How matrices are quantized at load. Carried in ModelOptions.
struct WeightOptions {
  // kI8 or kI4 to quantize float matrices at load; any float type keeps them as stored.
  DType quantize_to = DType::kF32;
  int64_t group_size = 0;  // 0: the default (per output channel for int8, 32 for int4)
  // Quantized matrices multiply int8-quantized activations (integer dot products); false keeps
  // fp32 activations and widens the weights instead (weight-only quantization).
  bool int8_activations = true;
  // Called with each matrix quantized at load (by its tensor name): `pagoda quantize` writes
  // what the model would compute with.
  std::function<void(const std::string& name, const WeightView& quantized)> on_quantized;
  // Advanced by the stored bytes of each matrix quantized at load (the slow part of loading a
  // float checkpoint with --quantization); optional.
  Progress* progress = nullptr;
  // The model is its store's one reader: bytes a converter holds in host memory (GGUF's
  // repacked blocks, FP8 or AWQ/GPTQ converted at open) that the table reads as lane panels are
  // packed, and the store lets go of them (TensorStore::release_converted), so that the model
  // is held once. The engine sets it; where several models load from one store (bench quality),
  // or the store is read after the load, the CPU device keeps using those bytes in place.
  bool release_converted = false;
};

// Rows [first, first + count) of `w` as a matrix of their own (a head's or an expert's slice of
// a stacked matrix); scale planes follow for quantized types.
WeightView weight_rows(const WeightView& w, int64_t first, int64_t count);

// Columns [first, first + count) of `w` as a matrix of its own, copied into `owned` (values,
// scales, mins). Float types take any range. Quantized rows are cut where the groups allow it:
// first and count multiples of 32 (the kernels' runs, and int4's packing), and either whole
// groups (count a multiple of the group size) or a part of one group (the group a multiple of
// count, as a per-channel scale is): the part keeps that group's scale. Throws Error naming
// `name` otherwise.
WeightView slice_columns(const WeightView& w, int64_t first, int64_t count, const std::string& name,
                         std::vector<std::shared_ptr<const void>>& owned);
// The same into `dst`, sliced_columns_bytes() bytes (values, then scales, then mins; 2-byte
// aligned). sliced_columns_bytes checks the range as slice_columns does.
int64_t sliced_columns_bytes(const WeightView& w, int64_t first, int64_t count,
                             const std::string& name);
WeightView slice_columns_into(const WeightView& w, int64_t first, int64_t count,
                              const std::string& name, void* dst);

// "int8" / "int4" / "" (none) → WeightOptions::quantize_to; throws on anything else.
DType parse_quantization(const std::string& name);
int64_t default_group_size(DType quantize_to, int64_t cols);

class WeightLoader {
 public:
  // Weights go to `ctx`'s device, and are prepared for its kernel table: with fp16 arithmetic
  // (KernelTable::f16_arithmetic) an f16 matrix with a weight beyond kF16ArithmeticMaxWeight
  // is widened to fp32 at load. The loader keeps the device and table, not `ctx`.
  WeightLoader(const TensorStore& store, const WeightOptions& options, const ExecutionContext& ctx);

  // A [rows, cols] matrix the forward pass multiplies by, quantized per the options.
  WeightView matrix(const std::string& name, int64_t rows, int64_t cols);
  // A matrix exactly as stored: tables read by rows (embeddings), routers, matrices the model
  // copies or splits itself.
  WeightView matrix_as_stored(const std::string& name, int64_t rows, int64_t cols);
  // `loaded`, a view this loader returned (e.g. a tied embedding reused as lm_head), quantized
  // per the options; `loaded` itself when kept as stored. A quantized copy counts towards
  // weight_bytes.
  WeightView prepare(const WeightView& loaded, const std::string& name);
  // A [n] vector widened to fp32, in device memory the loader holds.
  std::span<const float> vector(const std::string& name, int64_t n);

  // Tensor-parallel shards (docs/parallel.md). Rows [first, first + count) of the [rows, cols]
  // matrix `name`, quantized per the options: the shard of a column-parallel linear (its heads,
  // its intermediate rows, its vocabulary range). Rows are independent in every format, so the
  // shard is a view of the stored rows, or the quantization of just those rows, which gives the
  // same values as quantizing the whole matrix.
  WeightView matrix_rows(const std::string& name, int64_t rows, int64_t cols, int64_t first,
                         int64_t count);
  // Rows [first, first + count) of `name` exactly as stored (a tensor-parallel shard of a matrix
  // the model splits itself, MLA's kv_b_proj); only those rows count as this rank's weights.
  WeightView matrix_rows_as_stored(const std::string& name, int64_t rows, int64_t cols,
                                   int64_t first, int64_t count);
  // Columns [first, first + count) of the [rows, cols] matrix `name`, quantized per the options:
  // the shard of a row-parallel linear. A copy the loader owns. Quantizing at load happens on
  // the whole matrix first (a per-channel int8 scale depends on the whole row); quantized columns
  // are cut at group boundaries (see slice_columns). Throws Error otherwise.
  WeightView matrix_columns(const std::string& name, int64_t rows, int64_t cols, int64_t first,
                            int64_t count);
  // Elements [first, first + count) of the [n] vector `name`, widened to fp32.
  std::span<const float> vector_range(const std::string& name, int64_t n, int64_t first,
                                      int64_t count);

  // For a layer that computes a weight of its own from stored ones (MLA's transposed W_uk):
  // rows [first, first + count) of `name` as stored, on the host, neither loaded nor counted...
  WeightView stored_rows(const std::string& name, int64_t rows, int64_t cols, int64_t first,
                         int64_t count) const;
  // ... and `size_bytes` of device memory for the result, which `fill` writes on the host (in
  // place on a host-accessible device, else into a host copy that is then copied in). Counts
  // towards weight_bytes. Returns the device memory.
  void* derived(const std::string& name, size_t size_bytes, const std::function<void(void*)>& fill);

  const TensorStore& store() const { return store_; }
  int64_t num_parameters() const { return num_parameters_; }
  // Bytes of every device buffer the loader holds: mapped tensors, quantized and widened copies,
  // derived weights.
  int64_t weight_bytes() const { return weight_bytes_; }
  // Matrices left in their float type because their columns do not split into groups.
  int64_t num_kept_float() const { return num_kept_float_; }

 private:
  WeightView view_of(const std::string& name, int64_t rows, int64_t cols) const;
  // The group a float matrix is quantized with at load, or 0 when it is kept as stored.
  int64_t load_group_size(const WeightView& stored);
  // `stored` (a host view) quantized, widened or packed into device memory per the options and
  // the kernel table; nothing when it is used as stored.
  std::optional<WeightView> converted(const WeightView& stored, const std::string& name);
  // The table reads `w` (row-major int8 W8A8 or int4 W4A8) as lane panels: it is packed at load.
  bool packs_lane_panels(const WeightView& w) const;
  // `host` (row-major int8 or int4 on the host) packed into lane panels in device memory, counted.
  // `drop_as_packed` (for rows of tensor `name` from a mapped file): a few MiB at a time, each
  // step's source pages dropped once packed, so that the load never holds the whole matrix
  // twice.
  WeightView lane_panels(const WeightView& host, const std::string& name,
                         bool drop_as_packed = false);
  // The values of `stored` (rows of tensor `name`) come straight from a mapped file, whose
  // pages can be dropped once they are packed.
  bool from_file_map(const WeightView& stored, const std::string& name) const;
  // Tensor `name`'s bytes are a converter's that the store lets go of once they are packed.
  bool releases_converted(const std::string& name) const;
  // Drops the pages of `stored` (rows of tensor `name`) that come straight from a mapped file:
  // its values and, for a quantized matrix, its scale planes.
  void drop_source_pages(const WeightView& stored, const std::string& name) const;
  // After rows of `stored` (tensor `name`, as stored) went to the device in another form: the
  // pages of a mapped file are dropped, and a converter's buffers released once the table
  // reads the stored matrix as panels.
  void done_with_source(const WeightView& stored, const std::string& name);
  // `stored` (a host view of the checkpoint) as device memory, through Device::map_host.
  WeightView mapped(const WeightView& stored, const std::string& name);
  const void* map_plane(const void* host, int64_t size_bytes, const std::string& name);
  // The host bytes behind device memory that mapped() returned; nullptr for other memory.
  const void* host_of(const void* device) const;
  // Device memory for a weight, the allocation failure named after it.
  DeviceBuffer allocate(const std::string& name, size_t size_bytes);

  const TensorStore& store_;
  WeightOptions options_;
  Device* device_;
  const KernelTable* kernels_;
  std::vector<DeviceBuffer> buffers_;  // every weight byte the model computes with
  // Mapped planes by their device address: the host address and size.
  std::map<const uint8_t*, std::pair<const uint8_t*, int64_t>> host_planes_;
  int64_t num_parameters_ = 0;
  int64_t weight_bytes_ = 0;
  int64_t num_kept_float_ = 0;
};

}  // namespace pagoda
