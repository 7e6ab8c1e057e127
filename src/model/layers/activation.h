// One activation tensor of a model: rows of fp32 values of a fixed width, in memory from the
// execution context's device. It grows to the largest batch seen and is reused by every later
// step: no allocation per token, and a short run never pays for rows it does not use.
#pragma once

#include <cstdint>

#include "device/execution_context.h"

namespace pagoda {

class Activation {
 public:
  explicit Activation(int64_t row_size = 0) : row_size_(row_size) {}

  void set_row_size(int64_t row_size) {
    row_size_ = row_size;
    buffer_.release();
    capacity_rows_ = 0;
  }

  // Room for num_rows rows. Growing discards the contents (every user rewrites its rows in each
  // step before reading them).
  void reserve(const ExecutionContext& ctx, int64_t num_rows) {
    if (num_rows <= capacity_rows_ || row_size_ == 0) return;
    buffer_.release();  // the old rows go before the new ones come: no peak of both
    buffer_ = ctx.allocate_activations(static_cast<size_t>(num_rows * row_size_) * sizeof(float));
    capacity_rows_ = num_rows;
  }

  float* data() const { return buffer_.as<float>(); }
  float* row(int64_t r) const { return data() + r * row_size_; }
  int64_t row_size() const { return row_size_; }

 private:
  int64_t row_size_ = 0;
  int64_t capacity_rows_ = 0;
  DeviceBuffer buffer_;
};

}  // namespace pagoda
