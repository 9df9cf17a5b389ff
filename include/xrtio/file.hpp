// Files read into and written from device buffers asynchronously, over the
// runtime's io_uring or, where io_uring is refused, a small pread/pwrite
// thread pool (docs/DESIGN.md, "File I/O").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>

#include "xrtio/run_options.hpp"

namespace xrtio {

class runtime;
namespace detail {
struct file_state;
struct access;
}  // namespace detail

/// How a file is opened. `create` and `truncate` add to the access mode:
/// `file_mode::write | file_mode::create | file_mode::truncate`.
enum class file_mode : unsigned {
  read = 1,
  write = 2,
  read_write = 3,
  create = 4,    ///< O_CREAT (mode 0644)
  truncate = 8,  ///< O_TRUNC
};
constexpr file_mode operator|(file_mode a, file_mode b) noexcept {
  return static_cast<file_mode>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
constexpr bool has(file_mode m, file_mode bit) noexcept {
  return (static_cast<unsigned>(m) & static_cast<unsigned>(bit)) == static_cast<unsigned>(bit);
}

/// What a transfer does with a range that O_DIRECT cannot take (file offset,
/// length or memory address not a multiple of file::direct_alignment).
enum class misaligned_policy {
  bounce,  ///< those pieces go through the page cache (a buffered descriptor of the same file)
  fail,    ///< the transfer completes with errc::misaligned, nothing done
};

struct file_options {
  /// Try O_DIRECT; where the file system refuses it, the file is buffered
  /// and direct_fallback_reason() says why.
  bool direct = true;
  /// Transfers are split into pieces of at most this many bytes (on an
  /// O_DIRECT file rounded down to direct_alignment, at least one alignment
  /// unit; on a buffered file used as given, down to 1 byte).
  std::size_t chunk_size = std::size_t(1) << 20;
  /// Pieces of one transfer in flight at once (1..64).
  unsigned queue_depth = 8;
  misaligned_policy on_misaligned = misaligned_policy::bounce;
  /// On the runtime's io_uring: register the descriptor with the ring at the
  /// file's first transfer there (IOSQE_FIXED_FILE), and the memory of the
  /// buffers its transfers use where that memory allows it (simulated
  /// buffers: allocated, or imported user memory; IORING_OP_READ_FIXED /
  /// WRITE_FIXED). Released when
  /// the file closes or the allocation is freed. Refusals (full tables, the
  /// kernel) leave the plain path, counted in runtime_stats (docs/DESIGN.md,
  /// "Registered files and fixed buffers").
  bool register_with_ring = true;
  /// Buffered reads of at most this many bytes are first tried on the
  /// calling thread with preadv2(RWF_NOWAIT), which only copies what the
  /// page cache already holds and never blocks: a read the cache holds
  /// whole then completes without the reactor (its handler is still posted
  /// to its executor, never called inline), one it does not goes on as
  /// usual. 0 = never. Not used while the runtime records a trace, nor, for
  /// reads of at most 64 KiB on a runtime whose file engine is io_uring,
  /// while other such candidate reads whose handlers run in the same
  /// execution context are in flight (registered, handler not yet run):
  /// those go to the ring together, where the reads of one pass share one
  /// system call.
  /// The default, one default chunk (1 MiB), spares cached reads up to that
  /// size the two thread hops through the reactor, at the price of the
  /// copy on the calling thread: about 40 us for 1 MiB, during which that
  /// thread (an io_context's) runs no other handler. A thread that must not
  /// stall that long sets a smaller limit (64 KiB: a few us); in-loop mode
  /// copies on that thread either way (docs/DESIGN.md, "File I/O").
  std::size_t inline_read_limit = std::size_t(1) << 20;
  /// On the io_uring engine, buffered read pieces of at least this many
  /// bytes issued while other pieces are in flight go to the kernel's
  /// io_uring workers (IOSQE_ASYNC), so that copies out of the page cache
  /// run on several cores at once instead of all on the thread that submits
  /// (on a bare ring, 128 reads in flight on a 2-core host: 512 KiB pieces
  /// 1.4-1.5x the bandwidth of one copying thread, 1 MiB 1.6-1.7x, at
  /// 1.1-1.4x the CPU per byte; 256 KiB gained 1-22 %, in most runs under
  /// 5 %, for 1.6-1.9x the CPU), and only while the read pieces in flight
  /// hold worker_in_flight_min bytes or more. Such a read within
  /// inline_read_limit is then not done on the calling thread while other
  /// candidate reads of its context are in flight and, with it, reach
  /// worker_in_flight_min: it goes to the ring with them. A piece alone,
  /// direct reads and writes are never handed over.
  /// 0 = never (docs/DESIGN.md, "File I/O", "Copies on the kernel's workers").
  std::size_t worker_read_min = std::size_t(512) << 10;
  /// The floor on bytes in flight for worker_read_min: a piece goes to the
  /// workers only if the runtime's buffered read pieces in flight, this one
  /// included, hold at least this many bytes. Fewer destinations stay
  /// largely in the CPU's caches, where one thread copies about as fast as
  /// two (through xrtio, 16 reads of 1 MiB in flight: no more bandwidth in
  /// the default mode, 13 % more in-loop, for 1.6-1.8x the CPU per byte;
  /// 128 of them gained 1.6-1.7x). For a candidate read at submission,
  /// its context's candidate reads in flight times its length stand in for
  /// the ring's bytes: an upper bound (reads done whose handlers have not
  /// run count too), so a declined read may still be copied by the loop's
  /// thread, not the workers. 0 (the default) = no floor: at 128 reads of
  /// 1 MiB a 32 MiB floor cost 5-20 % of the bandwidth, so it is for users
  /// who would rather save the CPU at moderate depths.
  std::size_t worker_in_flight_min = 0;
  /// The runtime whose reactor performs this file's transfers; null: the
  /// runtime the buffer's context is bound to (context::bind), else
  /// default_runtime(). io_options::runtime overrides it per transfer.
  xrtio::runtime* runtime = nullptr;
};

/// Options of one transfer.
struct io_options {
  /// A range held by a run or another transfer: fail with
  /// errc::range_in_use, or wait in FIFO order.
  conflict_policy on_conflict = conflict_policy::fail;
  /// Cancel the transfer's pieces after this long (errc::timed_out); 0 = no
  /// deadline. The lease is still held until the kernel has reported every piece.
  std::chrono::nanoseconds timeout{0};
  /// Overrides file_options::runtime for this transfer.
  xrtio::runtime* runtime = nullptr;
};

/// An open file for asynchronous transfers. Move-only; the descriptor is
/// closed when the last handle and every transfer in flight are gone.
class file {
 public:
  /// O_DIRECT needs offsets, lengths and addresses that are multiples of this.
  static constexpr std::size_t direct_alignment = 4096;

  file() noexcept;
  file(file&&) noexcept;
  file& operator=(file&&) noexcept;
  ~file();

  /// Opens `path`. Throws xrtio::error: invalid_option (no access mode in
  /// `mode`, chunk_size 0, queue_depth outside 1..64), or the system's code
  /// (std::system_category: ENOENT, EACCES, EISDIR for write access to a
  /// directory, EMFILE, ...) naming the path. Under O_DIRECT with
  /// misaligned_policy::bounce it opens the file twice (the second time
  /// without O_DIRECT, for misaligned pieces); either failing throws.
  static file open(const std::filesystem::path& path, file_mode mode, file_options options = {});
  /// Takes ownership of `fd` (a file, a pipe, a socket). O_DIRECT is in
  /// effect only if the descriptor already has it. Throws xrtio::error
  /// invalid_option for fd < 0 or bad options, the system's code when an
  /// O_DIRECT descriptor under misaligned_policy::bounce cannot be reopened
  /// without O_DIRECT (EMFILE, ...), or std::bad_alloc; after any throw the
  /// descriptor is still the caller's, open.
  static file adopt(int fd, file_options options = {});

  explicit operator bool() const noexcept { return state_ != nullptr; }
  /// Whether O_DIRECT is in effect.
  bool direct() const noexcept;
  /// Why the file is buffered although direct was asked for; empty if direct
  /// or not asked for.
  std::string_view direct_fallback_reason() const noexcept;
  /// The file's size now (fstat); 0 for pipes.
  std::uint64_t size() const;
  int native_handle() const noexcept;
  const file_options& options() const noexcept;

 private:
  friend struct detail::access;
  explicit file(std::shared_ptr<detail::file_state> s) noexcept;
  std::shared_ptr<detail::file_state> state_;
};

}  // namespace xrtio

#include "xrtio/detail/file_op.hpp"

namespace xrtio {

/// Reads [file_offset, file_offset + dst.size()) of `f` into `dst` (a buffer
/// or view, plain or out()/inout()), completing through `token` with
/// `void(std::error_code, std::size_t bytes)`.
///
/// Takes a write lease on dst's range (conflict policy per io_options) and
/// holds it until the kernel reported every piece, cancelled ones included;
/// syncs the range to the device before completing. A read that reaches the
/// end of the file completes with the bytes read; one starting at or past
/// it with errc::out_of_range. Same executor, allocator and cancellation
/// rules as async_run (terminal or partial cancellation cancels the pieces
/// in flight: asio::error::operation_aborted unless all of them had already
/// completed).
///
/// Errors: invalid_size (empty file or buffer handle, offset + size
/// overflows), argument_kind (dst given as in()), misaligned
/// (misaligned_policy::fail under O_DIRECT), invalid_option (negative
/// timeout), range_in_use, range_retained, out_of_range, timed_out,
/// operation_aborted, shut_down, abort_failed (pieces still in flight when
/// the runtime's shutdown_grace ended: buffer and lease retained), and the
/// system's codes from the read itself (EBADF, EISDIR, EIO, ...).
template <class... Ts>
auto async_read_file(file& f, std::uint64_t file_offset, buffer_arg dst, Ts&&... ts) {
  return detail::initiate_file_io(f, file_offset, std::move(dst), detail::file_op_base::direction::read,
                                  std::forward<Ts>(ts)...);
}
template <class... Ts>
auto async_read_file(file& f, std::uint64_t file_offset, const buffer& dst, Ts&&... ts) {
  return async_read_file(f, file_offset, buffer_arg{dst, access_mode::write}, std::forward<Ts>(ts)...);
}

/// Writes `src` (a buffer or view, plain or in()) to `f` at `file_offset`,
/// completing with `void(std::error_code, std::size_t bytes)`. Takes a read
/// lease on src's range and syncs it from the device before the first byte
/// is written. Errors as async_read_file (argument_kind for out()/inout(),
/// no out_of_range: writes extend the file).
template <class... Ts>
auto async_write_file(file& f, std::uint64_t file_offset, buffer_arg src, Ts&&... ts) {
  return detail::initiate_file_io(f, file_offset, std::move(src), detail::file_op_base::direction::write,
                                  std::forward<Ts>(ts)...);
}
template <class... Ts>
auto async_write_file(file& f, std::uint64_t file_offset, const buffer& src, Ts&&... ts) {
  return async_write_file(f, file_offset, buffer_arg{src, access_mode::read}, std::forward<Ts>(ts)...);
}

}  // namespace xrtio
