// --weights-memory: how the model's weight files get into memory (util/mapped_file.h), with
// "auto" resolved from what the model is and what the kernel table does with it. Weights that
// decode streams as stored go into huge pages (measured faster, docs/kernels.md); files that
// are read once, to be quantized, converted or repacked into memory of the loader's own, are
// mapped, and their pages dropped as each tensor is done with, since a copy would only cost
// memory and load time.
#pragma once

#include <string>

#include "kernels/kernels.h"
#include "pagoda/engine.h"
#include "util/mapped_file.h"

namespace pagoda {

// True when a weight loader for `kernels` (model/weights.h) packs matrices stored as `dtype`
// into lane panels (kernels/lane_panels.h) that replace their stored bytes: then a checkpoint
// stored so is read once, at load: kI8 on the tables with KernelTable::int8_lane_panels (x86
// avx2 and avx512 without VNNI; AArch64 with the dot product or i8mm), kI4 on those with
// int4_lane_panels (AArch64 with the dot product or i8mm). The loader packs only
// for int8 activations (EngineArgs::int8_activations), which the caller checks.
bool packs_stored_matrices(const KernelTable& kernels, DType dtype);

// args.weights_memory for the model at `model_path` (a resolved directory or GGUF file) loaded
// with `kernels`, "auto" resolved. Throws pagoda::Error for a name other than auto, mmap and
// huge-pages.
FileMemory weights_memory_for(const EngineArgs& args, const std::string& model_path,
                              const KernelTable& kernels);

}  // namespace pagoda
