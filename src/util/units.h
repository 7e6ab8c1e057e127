// Human-readable sizes on the command line ("4GiB", "512MB", "1073741824").
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

// Accepts an integer or decimal number followed by an optional unit: B, KB/MB/GB/TB (powers
// of 1000), KiB/MiB/GiB/TiB (powers of 1024), case-insensitive. Throws pagoda::Error.
uint64_t parse_byte_size(const std::string& text);

// "1.50 GiB" style, for logs and `pagoda info`.
std::string format_bytes(uint64_t bytes);

}  // namespace pagoda
