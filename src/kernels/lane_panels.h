// int8 and int4 weights repacked once at load into the row-interleaved panels that a table's
// W8A8 / W4A8 tiles read (KernelTable::int8_lane_panels / int4_lane_panels name the layout: x86
// without VNNI, int8 only, x86/int8_lane_panels.h; AArch64 with the dot product or i8mm,
// arm/int8_panels.h and arm/int4_panels.h), so that neither prefill, batched decode nor a MoE
// expert's few tokens repack a panel per call, and decode streams the same bytes: the panels
// replace the row-major values, scales and mins (WeightView::lane_panels), they do not sit
// beside them.
//
// Layout of R rows x B bytes (LanePanelLayout{R, B}), panel after panel (panel i holds rows
// [R i, R i + R); rows past the matrix are zero, values, scales and mins):
//   int8 values [cols / B][R][B]: chunk k of row r (w[r][B k .. B k + B)) at (k * R + r) * B,
//          so one vector load of R * B bytes (or a part of it) is every row's next B values;
//   int4 values [cols / 32][16 R] bytes: the int8 panel's order of the run's first 16 columns,
//          each byte holding that value (low nibble) and the one 16 columns on (high nibble),
//          both stored as q ^ 8, i.e. q - 8 as a signed nibble (arm/int4_panels.h): the row-major
//          int4 bytes (util/dtype.h) of each row, chunked as int8 rows of cols / 2 bytes are,
//          xor 0x88;
//   scales [num_groups][R] fp16: group g of row r at g * R + r;
//   mins [num_groups][R] fp16, int4 with zero points only (not symmetric_int4, whose min is
//          -8 * scale: no plane).
// x86's 16 x 2: 16 bytes widened by vpmovsxbw are 8 rows' pairs, one per int32 lane, for
// vpmaddwd. AArch64's 4 x 4: 16 bytes are 4 rows' next 4 values, one row per sdot lane against
// 4 activations broadcast by element. 4 x 8: 16 bytes are a row pair's next 8 values, the
// 2 x 8 operand of smmla.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/kernels.h"

namespace pagoda {

// Bytes of one panel of `w` (kI8, or kI4 with a mins plane unless symmetric_int4).
inline int64_t lane_panel_bytes(const WeightView& w, LanePanelLayout layout) {
  const int64_t planes = w.dtype == DType::kI4 && !w.symmetric_int4 ? 2 : 1;
  return layout.rows * dtype_row_bytes(w.dtype, w.cols) +
         layout.rows * (w.cols / w.group_size) * 2 * planes;
}
inline int64_t num_lane_panels(int64_t rows, LanePanelLayout layout) {
  return (rows + layout.rows - 1) / layout.rows;
}

// The panels of a matrix, owning their bytes.
struct LanePanels {
  std::shared_ptr<int8_t[]> bytes;
  int64_t size_bytes = 0;
};

// Bytes of the panels of `w` ([rows, cols] in groups of w.group_size), the last panel padded
// to layout.rows rows.
inline int64_t lane_panels_bytes(const WeightView& w, LanePanelLayout layout) {
  return num_lane_panels(w.rows, layout) * lane_panel_bytes(w, layout);
}

// Packs row-major kI8 or kI4 weights (cols a multiple of 32, groups a multiple of
// layout.row_bytes; kI4: layout.row_bytes dividing 16) into `dst`, lane_panels_bytes(w, layout)
// bytes (the padding rows are written as zeros), and returns w as the panels say
// (with_lane_panels). Threads over panels. Throws Error for other weights and layouts.
WeightView pack_lane_panels_into(const WeightView& w, LanePanelLayout layout, void* dst);
// The same into bytes of its own.
LanePanels pack_lane_panels(const WeightView& w, LanePanelLayout layout);

// w as the panels say: lane_panels and lane_panel_layout set, data, scales and mins null
// (nothing else reads them).
WeightView with_lane_panels(const WeightView& w, const int8_t* panels, LanePanelLayout layout);

// Row `row` of a panel-packed weight (any layout, either dtype) back in row-major form: a
// one-row WeightView into per-thread storage, valid until the next call on this thread
// (dequantize_row of a packed matrix; not a hot path). A symmetric_int4 row gets its mins back
// as -8 * scale, the bits the plane held.
WeightView unpacked_lane_panel_row(const WeightView& w, int64_t row);

}  // namespace pagoda
