// A file transfer as an asynchronous operation: the same run_op (allocation,
// registration, completion batches, cancellation slot) as a kernel run, with
// file_op_base in place of run_op_base (docs/DESIGN.md, "File I/O").
// Included by xrtio/file.hpp after file, file_options and io_options.
#pragma once

#include <asio/async_result.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <system_error>
#include <tuple>
#include <type_traits>

#include "xrtio/detail/launch_run.hpp"
#include "xrtio/detail/run_op.hpp"

namespace xrtio::detail {

struct file_state;
struct file_piece;
struct buffer_state;

/// What the reactor's file engine needs of a transfer. Written at initiation
/// (caller's thread), then only by the loop (reactor thread or driver).
class file_op_base : public run_op_base {
 public:
  enum class direction : std::uint8_t { read, write };

  file_op_base(const vtable* vt, xrtio::kernel k, std::span<arg_slot> s, std::span<access_request> r) noexcept
      : run_op_base(vt, std::move(k), s, r) {
    file_io = true;
  }

  /// The handler's second argument: bytes transferred.
  std::size_t completion_value() const noexcept { return bytes; }

  std::shared_ptr<file_state> file;
  direction dir = direction::read;
  std::uint64_t offset = 0;     // file offset of the first byte
  std::size_t length = 0;       // bytes asked for
  std::byte* memory = nullptr;  // host mapping of the buffer range
  backend::native_buffer* native = nullptr;  // the buffer's (slot 0 keeps it alive): device syncs
  buffer_state* memory_owner = nullptr;      // the root allocation's state (slot 0 keeps it alive)
  int ring_file = -1;                        // the file's slot in the ring's file table, -1: plain
  int ring_buffer = -1;                      // the memory's fixed buffer in the ring, -1: plain
  std::size_t chunk = 0;        // piece size (file_options::chunk_size, aligned)
  unsigned depth = 1;           // pieces in flight at most
  std::size_t issued = 0;       // bytes handed to pieces so far
  std::size_t done = 0;         // bytes the pieces reported, in total
  std::size_t end = std::numeric_limits<std::size_t>::max();  // reads: relative end of file, once seen
  unsigned pieces = 0;          // pieces in flight
  std::error_code io_error;     // the first piece that failed
  bool stopping = false;        // no new pieces: cancelled, timed out, failed or shutting down
  bool incomplete = false;      // a piece was cancelled or cut short
  bool starved = false;         // wanted a piece when the engine had no room
  bool tried_at_once = false;   // read_at_once read it, not whole: the page cache not tried again at submission
  bool leased_at_once = false;  // ... with bytes in the buffer: its lease kept for submit, which takes none
  file_piece* live = nullptr;   // pieces in flight, linked through file_piece::op_next
  std::size_t bytes = 0;        // the result
};

/// The reactor a transfer completes through: io_options::runtime, the
/// file's, the buffer's context's bound one, else the default runtime's.
/// Throws if the default runtime cannot start.
std::shared_ptr<reactor> file_io_reactor(const file_state* f, const buffer_arg& b, const io_options& o);

/// Checks the transfer and fills the op (file, range, the buffer in slot 0,
/// its access request, options). op.rx is set by the caller, before. Returns
/// the error to complete with at once, if any. Never throws (allocation
/// failure of an error message aside).
std::error_code prepare_file_io(file_op_base& op, std::shared_ptr<file_state> f, std::uint64_t offset, buffer_arg b,
                                 file_op_base::direction d, const io_options& o, arg_slot& slot,
                                 access_request& req) noexcept;

struct initiate_file_io_op {
  template <class Handler>
  void operator()(Handler&& h, xrtio::file* f, std::uint64_t offset, buffer_arg b, file_op_base::direction d,
                  const io_options& o) const {
    using op_t = run_op<std::decay_t<Handler>, 1, 1, file_op_base>;
    // Before the handler moves: the file may live in it (a composed
    // operation's state, async_load_file's).
    std::shared_ptr<file_state> fs = access::state(*f);
    // Before the op is made, as for runs: a default runtime that cannot
    // start throws to the caller, with the handler untouched.
    auto rx = file_io_reactor(fs.get(), b, o);
    op_t* op = op_t::create(std::move(h), xrtio::kernel{});
    op->rx = std::move(rx);
    std::error_code early =
        prepare_file_io(*op, std::move(fs), offset, std::move(b), d, o, op->slots()[0], op->requests()[0]);
    launch_run(op, early);
  }
};

/// (f, offset, buffer, [io_options], token) -> async_initiate.
template <class... Ts>
auto initiate_file_io(xrtio::file& f, std::uint64_t offset, buffer_arg b, file_op_base::direction d, Ts&&... ts) {
  constexpr std::size_t n = sizeof...(Ts);
  static_assert(n == 1 || n == 2, "file transfers take ([io_options], token) after the buffer");
  auto t = std::forward_as_tuple(std::forward<Ts>(ts)...);
  using sig = void(std::error_code, std::size_t);
  if constexpr (n == 2) {
    static_assert(std::is_same_v<std::remove_cvref_t<std::tuple_element_t<0, std::tuple<Ts...>>>, io_options>,
                  "the argument before the completion token must be io_options");
    return asio::async_initiate<std::tuple_element_t<1, std::tuple<Ts&&...>>, sig>(
        initiate_file_io_op{}, std::get<1>(t), &f, offset, std::move(b), d, io_options(std::get<0>(t)));
  } else {
    return asio::async_initiate<std::tuple_element_t<0, std::tuple<Ts&&...>>, sig>(
        initiate_file_io_op{}, std::get<0>(t), &f, offset, std::move(b), d, io_options{});
  }
}

}  // namespace xrtio::detail
