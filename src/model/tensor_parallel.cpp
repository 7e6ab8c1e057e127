#include "model/tensor_parallel.h"

#include <algorithm>

#include "util/error.h"

namespace pagoda {

DimShard TensorParallel::even_split(int64_t total, const char* what) const {
  if (total % size() != 0) {
    fail(
        "tensor parallelism: {} {} do not split over {} ranks; use a tensor-parallel size that "
        "divides {}",
        total, what, size(), total);
  }
  const int64_t part = total / size();
  return {rank() * part, part};
}

DimShard TensorParallel::padded_split(int64_t total) const {
  const int64_t part = padded_part(total);
  const int64_t first = rank() * part;
  const int64_t count = std::min(part, total - first);
  if (count <= 0) {
    fail("tensor parallelism: a vocabulary of {} leaves rank {} of {} nothing", total, rank(),
         size());
  }
  return {first, count};
}

}  // namespace pagoda
