// The simulated device's memory: sim_buffer (host memory shared coherently
// with the simulated kernels) and the device entry points that make one:
// alloc, import_user_memory and import_dmabuf.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "sim_types.hpp"
#include "xrtio/error.hpp"

namespace xrtio::sim::detail {

/// Allocations are page-aligned and page-sized like DMA-able device memory.
constexpr std::size_t dma_alignment = 4096;

sim_buffer::~sim_buffer() {
  if (own_ == ownership::owned) std::free(data_);
  if (own_ == ownership::mapped) ::munmap(data_, size_);
}

void sim_buffer::sync(backend::sync_direction, std::size_t size, std::size_t offset) {
  if (offset > size_ || size > size_ - offset)
    throw error(errc::out_of_range, "sim buffer sync [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                        ") exceeds " + std::to_string(size_) + " bytes");
  // Host and simulated device share coherent memory: nothing to flush.
}

std::unique_ptr<backend::native_buffer> sim_buffer::sub(std::size_t size, std::size_t offset) {
  if (offset > size_ || size > size_ - offset)
    throw error(errc::out_of_range, "sim sub-buffer out of range");
  return std::make_unique<sim_buffer>(data_ + offset, size, ownership::borrowed);
}

std::unique_ptr<backend::native_buffer> sim_device_impl::alloc(std::size_t size, backend::buffer_kind, int) {
  if (lost_.load()) throw error(errc::device_lost, "sim device lost: cannot allocate " + std::to_string(size));
  // Rounded up to whole DMA pages, which a size within a page of SIZE_MAX
  // cannot be: it wrapped to 0, and a buffer of that size had no memory.
  if (size > std::numeric_limits<std::size_t>::max() - (dma_alignment - 1))
    throw error(errc::invalid_size, "sim device: size " + std::to_string(size) + " overflows when rounded up to " +
                                        std::to_string(dma_alignment) + "-byte pages");
  std::size_t rounded = (size + dma_alignment - 1) & ~(dma_alignment - 1);
  void* p = std::aligned_alloc(dma_alignment, rounded);
  if (!p) throw error(errc::backend_failure, "sim device: out of host memory for " + std::to_string(size));
  std::memset(p, 0, rounded);  // zeroed like fresh pages
  try {
    return std::make_unique<sim_buffer>(static_cast<std::byte*>(p), size, sim_buffer::ownership::owned);
  } catch (...) {
    std::free(p);
    throw;
  }
}

std::unique_ptr<backend::native_buffer> sim_device_impl::import_user_memory(void* ptr, std::size_t size) {
  return std::make_unique<sim_buffer>(static_cast<std::byte*>(ptr), size, sim_buffer::ownership::borrowed);
}

std::unique_ptr<backend::native_buffer> sim_device_impl::import_dmabuf(int fd, std::size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw error(errc::backend_failure, "sim device: mmap of dma-buf fd " + std::to_string(fd) + " for " +
                                           std::to_string(size) + " bytes failed");
  try {
    return std::make_unique<sim_buffer>(static_cast<std::byte*>(p), size, sim_buffer::ownership::mapped);
  } catch (...) {
    ::munmap(p, size);
    throw;
  }
}

}  // namespace xrtio::sim::detail
