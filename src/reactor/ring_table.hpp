// A sparse registration table of one io_uring: its registered files or its
// fixed buffers (docs/DESIGN.md, "File I/O", "Registered files and fixed
// buffers"). The ring's loop adds entries (the first transfer of a file or
// buffer); the owners of what is registered remove theirs from their
// destructors, on any thread, before the descriptor is closed or the memory
// freed; the ring marks the table dead before it exits. Every call takes the
// table's mutex: none is made per transfer in steady state.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

struct io_uring;

namespace xrtio::detail {

class ring_table {
 public:
  enum class kind : std::uint8_t { files, buffers };

  /// Registers a sparse table of `slots` empty entries of kind `k` with
  /// `ring` (io_uring_register_files_sparse / _buffers_sparse). Refused
  /// (old kernel, RLIMIT_NOFILE, slots = 0): a table that is off, whose
  /// adds all fail, so that each owner is refused once and remembers it.
  /// Null only without memory.
  static std::shared_ptr<ring_table> make(io_uring* ring, kind k, unsigned slots) noexcept;

  /// `ring` null: off.
  ring_table(io_uring* ring, kind k, unsigned slots);
  ring_table(const ring_table&) = delete;
  ring_table& operator=(const ring_table&) = delete;

  /// Never reused, unlike the table's address: what a registration cache compares.
  std::uint64_t id() const noexcept { return id_; }
  kind what() const noexcept { return kind_; }

  /// The ring's loop: puts `fd` in a free slot for `owner` (a
  /// ring_registrations id); the slot, or -1 (table full, or the kernel
  /// refused: one io_uring_register call).
  int add_file(int fd, std::uint64_t owner) noexcept;
  /// The same for the memory [base, base + length) (pinned by the kernel
  /// until removed).
  int add_buffer(void* base, std::size_t length, std::uint64_t owner) noexcept;
  /// Any thread: empties `slot` if `owner` still holds it (the kernel drops
  /// its reference to the file or unpins the pages) and frees it for reuse.
  /// Nothing once the ring is dead (io_uring_queue_exit drops them all).
  void remove(int slot, std::uint64_t owner) noexcept;
  /// The ring is about to exit: no more register calls on it.
  void kill() noexcept;

  /// Slots holding something now.
  unsigned in_use() const noexcept;

 private:
  bool update(unsigned slot, int fd, void* base, std::size_t length) noexcept;

  const std::uint64_t id_;
  const kind kind_;
  mutable std::mutex mutex_;
  io_uring* ring_;                    // null when off or dead
  std::vector<std::uint64_t> owner_;  // per slot: its owner's id, 0 = free
  std::vector<unsigned> free_;        // free slots (the lowest last)
};

/// Test seam: the number of slots of every table a ring makes from now on
/// (-1: the defaults, ring_file_slots and ring_buffer_slots; 0: none, as if
/// the kernel refused the table).
extern std::atomic<int> ring_table_slots_override;
constexpr unsigned ring_file_slots = 256;
constexpr unsigned ring_buffer_slots = 1024;

}  // namespace xrtio::detail
