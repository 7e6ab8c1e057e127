// Letting the quantized matmul quantize a call's activations once for many calls. W8A8 / W4A8
// kernels quantize x at the start of every call (kernels.h: a call is a row range). When ops
// splits a matmul into many row chunks, or runs several matmuls on the same x (q, k and v;
// gate and up), each thread would quantize the same x again and again. Inside an
// ActivationReuseScope the caller promises that no x read by a matmul changes, so a thread
// may keep the last activations it quantized and reuse them for a call with the same x,
// shape and layout. Every scope gets a fresh id, so nothing kept survives its scope.
#pragma once

#include <cstdint>

namespace pagoda {

// Opens a scope on the calling thread until destruction (scopes nest: the inner one wins).
class ActivationReuseScope {
 public:
  ActivationReuseScope();
  ~ActivationReuseScope();
  ActivationReuseScope(const ActivationReuseScope&) = delete;
  ActivationReuseScope& operator=(const ActivationReuseScope&) = delete;

 private:
  uint64_t enclosing_;
};

// The id of the calling thread's open scope, 0 outside every scope (no reuse).
uint64_t activation_reuse_scope();

}  // namespace pagoda
