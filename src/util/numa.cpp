#include "util/numa.h"

#include <numa.h>

namespace pagoda {

int numa_node_count() {
  if (numa_available() < 0) return 1;
  const int nodes = numa_num_task_nodes();
  return nodes > 0 ? nodes : 1;
}

bool interleave_over_numa_nodes(void* data, size_t bytes) {
  if (data == nullptr || bytes == 0 || numa_node_count() < 2) return false;
  bitmask* nodes = numa_get_mems_allowed();  // a fresh mask the caller frees
  numa_interleave_memory(data, bytes, nodes);
  numa_bitmask_free(nodes);
  return true;
}

}  // namespace pagoda
