// Human-readable sizes and counts on the command line ("4GiB", "512MB", "2k").
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

// Accepts an integer or decimal number followed by an optional unit: B, KB/MB/GB/TB (powers
// of 1000), KiB/MiB/GiB/TiB (powers of 1024), case-insensitive. Throws pagoda::Error.
uint64_t parse_byte_size(const std::string& text);

// A count as vLLM's command line takes it (--max-model-len 2k): a plain integer, or a number
// with a lowercase decimal suffix k/m/g/t (powers of 1000, decimals allowed: "25.6k") or an
// uppercase binary one K/M/G/T (powers of 1024, integers only: "32K"). Throws pagoda::Error.
int64_t parse_count(const std::string& text);

// "1.50 GiB" style, for logs and `pagoda info`.
std::string format_bytes(uint64_t bytes);

}  // namespace pagoda
