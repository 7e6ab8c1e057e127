// NUMA placement of the big buffers (weights copied into huge pages, the KV pool). Decode streams
// every weight each step, so on a multi-socket server memory placed on one node leaves the other
// sockets' memory controllers idle and their cores reading across the interconnect; spreading
// the pages over all nodes uses every controller. On one node (or without kernel NUMA support)
// every function here is a no-op that costs one call.
#pragma once

#include <cstddef>

namespace pagoda {

// Nodes this process may allocate on; 1 when the kernel has no NUMA support.
int numa_node_count();

// Interleaves the pages of [data, data + bytes) over the allowed nodes, page by page. Call it
// before the pages are first touched: placement happens at the first fault. Returns whether
// anything was done (false on one node).
bool interleave_over_numa_nodes(void* data, size_t bytes);

}  // namespace pagoda
