// The execution context of the host: the CPU device with the kernel table chosen for this CPU
// (or forced by --isa, which must be set before the context is made).
#pragma once

#include "device/cpu_device.h"
#include "device/execution_context.h"
#include "kernels/kernels.h"

namespace pagoda {

inline ExecutionContext host_execution_context() {
  return ExecutionContext(cpu_device(), kernels());
}

}  // namespace pagoda
