#include "engine/weights_memory.h"

#include "engine/parallel_groups.h"
#include "loader/fp8_checkpoint.h"
#include "loader/pagoda_checkpoint.h"
#include "model/gguf_model.h"

namespace pagoda {

bool packs_stored_matrices(const KernelTable& kernels, DType dtype) {
  // Float matrices are packed only when quantized at load (lane_panel_layout names none).
  return static_cast<bool>(kernels.lane_panel_layout(dtype));
}

FileMemory weights_memory_for(const EngineArgs& args, const std::string& model_path,
                              const KernelTable& kernels) {
  if (args.weights_memory != "auto") return parse_file_memory(args.weights_memory);
  // A tensor-parallel rank uses a part of each matrix: mapped, it faults in only its part's
  // pages (shared with the other ranks through the page cache), where a copy would be whole.
  if (parallel_world_size(args) > 1) return FileMemory::kMap;
  // Quantized at load (-q), repacked (GGUF) or converted as the store opens (FP8).
  if (!args.quantization.empty() || is_gguf_path(model_path) || is_fp8_checkpoint(model_path))
    return FileMemory::kMap;
  // A Pagoda-quantized checkpoint (int8 or int4) whose matrices the table reads as lane panels:
  // each is packed from the map and its file pages dropped (WeightLoader::done_with_source), so
  // that the panels alone stay resident. A copy would be used in place, row-major (the loader does
  // not hold a matrix twice), the whole file resident and prefill repacking panels per call.
  const std::optional<DType> stored = pagoda_checkpoint_weight_type(model_path);
  if (stored && args.int8_activations && packs_stored_matrices(kernels, *stored))
    return FileMemory::kMap;
  return FileMemory::kHugePageCopy;
}

}  // namespace pagoda
