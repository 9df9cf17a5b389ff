// A sparse registration table of one io_uring (ring_table.hpp).
#include "ring_table.hpp"

#include <liburing.h>
#include <sys/uio.h>

namespace xrtio::detail {

std::atomic<int> ring_table_slots_override{-1};

namespace {
std::atomic<std::uint64_t> next_table_id{1};
}

std::shared_ptr<ring_table> ring_table::make(io_uring* ring, kind k, unsigned slots) noexcept {
  bool on = slots > 0 && (k == kind::files ? io_uring_register_files_sparse(ring, slots)
                                            : io_uring_register_buffers_sparse(ring, slots)) == 0;
  try {
    return std::make_shared<ring_table>(on ? ring : nullptr, k, on ? slots : 0);
  } catch (...) {
    return nullptr;  // a kernel table stays empty: nothing is put in it
  }
}

ring_table::ring_table(io_uring* ring, kind k, unsigned slots)
    : id_(next_table_id.fetch_add(1, std::memory_order_relaxed)), kind_(k), ring_(ring), owner_(slots, 0) {
  free_.reserve(slots);
  for (unsigned i = slots; i > 0; --i) free_.push_back(i - 1);
}

bool ring_table::update(unsigned slot, int fd, void* base, std::size_t length) noexcept {
  if (kind_ == kind::files) return io_uring_register_files_update(ring_, slot, &fd, 1) == 1;
  iovec v{base, length};
  __u64 tag = 0;
  return io_uring_register_buffers_update_tag(ring_, slot, &v, &tag, 1) == 1;
}

int ring_table::add_file(int fd, std::uint64_t owner) noexcept {
  std::lock_guard lock(mutex_);
  if (!ring_ || free_.empty()) return -1;
  unsigned slot = free_.back();
  if (!update(slot, fd, nullptr, 0)) return -1;
  free_.pop_back();
  owner_[slot] = owner;
  return int(slot);
}

int ring_table::add_buffer(void* base, std::size_t length, std::uint64_t owner) noexcept {
  std::lock_guard lock(mutex_);
  if (!ring_ || free_.empty()) return -1;
  unsigned slot = free_.back();
  if (!update(slot, -1, base, length)) return -1;  // ENOMEM, RLIMIT_MEMLOCK, EFAULT (memory the kernel cannot pin)
  free_.pop_back();
  owner_[slot] = owner;
  return int(slot);
}

void ring_table::remove(int slot, std::uint64_t owner) noexcept {
  std::lock_guard lock(mutex_);
  if (!ring_ || slot < 0 || std::size_t(slot) >= owner_.size() || owner_[std::size_t(slot)] != owner) return;
  // An empty entry: fd -1, or a null buffer of length 0. If the kernel
  // refused even that, the slot keeps its file or pages until the ring
  // exits and is not handed out again.
  if (!update(unsigned(slot), -1, nullptr, 0)) return;
  owner_[std::size_t(slot)] = 0;
  free_.push_back(unsigned(slot));
}

void ring_table::kill() noexcept {
  std::lock_guard lock(mutex_);
  ring_ = nullptr;
}

unsigned ring_table::in_use() const noexcept {
  std::lock_guard lock(mutex_);
  unsigned n = 0;
  for (auto o : owner_) n += o != 0;
  return n;
}

}  // namespace xrtio::detail
