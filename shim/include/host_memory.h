// Host memory mapped for transfers (the ABI's host_memory table;
// src/host_memory.cc says why).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rlx {

// Maps the len bytes at data: 0; 1 when the range overlaps a mapped one,
// 2 when the GPU driver cannot lock that much memory (nothing changed).
// Throws when the driver refuses the range otherwise.
std::uint32_t dma_map(std::size_t data, std::size_t len);

// Unmaps the range that starts at data: 0, or 1 when none does.
std::uint32_t dma_unmap(std::size_t data);

namespace host_memory {

// Whether the n bytes at p lie inside one page-locked mapped range (for
// the shim's own copies; any thread).
bool pinned(const void* p, std::size_t n);

}  // namespace host_memory
}  // namespace rlx
