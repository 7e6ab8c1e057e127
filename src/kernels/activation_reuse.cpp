#include "kernels/activation_reuse.h"

#include <atomic>

namespace pagoda {
namespace {

std::atomic<uint64_t> next_scope{1};
thread_local uint64_t current_scope = 0;

}  // namespace

ActivationReuseScope::ActivationReuseScope() : enclosing_(current_scope) {
  current_scope = next_scope.fetch_add(1, std::memory_order_relaxed);
}

ActivationReuseScope::~ActivationReuseScope() {
  current_scope = enclosing_;
}

uint64_t activation_reuse_scope() {
  return current_scope;
}

}  // namespace pagoda
