// xrtio::file: opening (O_DIRECT where the file system allows it), adopting
// a descriptor, and checking a transfer before it reaches the reactor
// (docs/DESIGN.md, "File I/O").
#include "file/file_state.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "xrtio/detail/context_state.hpp"
#include "xrtio/error.hpp"
#include "xrtio/runtime.hpp"

namespace xrtio {

namespace detail {

file_state::~file_state() {
  // First: a registered slot holds its own reference to the open file
  // description (a pipe's reader would see no EOF, a deleted file's space
  // would stay used).
  rings.release();
  if (buffered_fd >= 0) ::close(buffered_fd);
  if (fd >= 0) ::close(fd);
}

namespace {

constexpr unsigned max_queue_depth = 64;

void check(const file_options& o) {
  if (o.chunk_size == 0) throw error(errc::invalid_option, "file_options::chunk_size is 0");
  if (o.queue_depth == 0 || o.queue_depth > max_queue_depth)
    throw error(errc::invalid_option, "file_options::queue_depth is " + std::to_string(o.queue_depth) +
                                          ": outside 1.." + std::to_string(max_queue_depth));
}

std::error_code sys(int e) { return {e, std::system_category()}; }

// The same file without O_DIRECT, for misaligned pieces (bounce policy).
// Throws the system's error: without it, every misaligned transfer would
// fail with misaligned although the caller asked for bounce (it used to be
// -1 silently; test "file io: an O_DIRECT file whose descriptor for
// misaligned pieces cannot be made...").
int reopen_buffered(int fd, int flags, const std::string& what) {
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  int b = ::open(self.c_str(), (flags & ~(O_DIRECT | O_CREAT | O_TRUNC | O_EXCL)) | O_CLOEXEC);
  if (b < 0)
    throw error(sys(errno), what + ": the descriptor without O_DIRECT for misaligned pieces (misaligned_policy::bounce)");
  return b;
}

bool is_aligned(std::uint64_t v) { return v % file::direct_alignment == 0; }

}  // namespace

std::shared_ptr<reactor> file_io_reactor(const file_state* fs, const buffer_arg& b, const io_options& o) {
  // As for runs: the transfer's runtime, the file's, the one the buffer's
  // context is bound to, else the default runtime (which may fail to start:
  // the caller gets its exception, as async_run's does).
  runtime* rt = o.runtime ? o.runtime : fs && fs->options.runtime ? fs->options.runtime : nullptr;
  if (rt) return access::reactor(*rt);
  if (b.buffer && access::state(b.buffer)->context && access::state(b.buffer)->context->bound_reactor)
    return access::state(b.buffer)->context->bound_reactor;
  return access::reactor(default_runtime());
}

std::error_code prepare_file_io(file_op_base& op, std::shared_ptr<file_state> fs, std::uint64_t offset, buffer_arg b,
                                 file_op_base::direction d, const io_options& o, arg_slot& slot,
                                 access_request& req) noexcept {
  if (!fs) return errc::invalid_size;  // empty file handle
  if (!b.buffer) return errc::invalid_size;
  bool reading = d == file_op_base::direction::read;
  // A read writes the buffer, a write reads it: in() for a read, or out()
  // for a write, is a mistake (argument_kind).
  if (b.mode != (reading ? access_mode::write : access_mode::read)) return errc::argument_kind;
  if (o.timeout.count() < 0) return errc::invalid_option;
  std::size_t length = b.buffer.size();
  if (offset > std::uint64_t(INT64_MAX) || length > std::uint64_t(INT64_MAX) - offset) return errc::invalid_size;
  std::byte* mem = nullptr;
  try {
    mem = b.buffer.map().data();
  } catch (const error& e) {
    return e.code();
  } catch (...) {
    return errc::backend_failure;
  }
  if (fs->direct && fs->options.on_misaligned == misaligned_policy::fail &&
      !(is_aligned(offset) && is_aligned(length) && is_aligned(reinterpret_cast<std::uintptr_t>(mem))))
    return errc::misaligned;
  op.dir = d;
  op.offset = offset;
  op.length = length;
  op.memory = mem;
  op.native = access::state(b.buffer)->native.get();
  buffer_state* root = access::state(b.buffer).get();
  while (root->parent) root = root->parent.get();
  op.memory_owner = root;
  std::size_t chunk = fs->options.chunk_size;
  // io_uring and pread take at most 2 GiB - 1 per request.
  chunk = std::min<std::size_t>(chunk, std::size_t(1) << 30);
  if (fs->direct) chunk = std::max(file::direct_alignment, chunk / file::direct_alignment * file::direct_alignment);
  op.chunk = chunk;
  // A stream's pieces must follow one another: one in flight.
  op.depth = fs->stream ? 1 : fs->options.queue_depth;
  // What file_try_inline may do at once (it checks the rest at submission);
  // counted in the handler's context's completion_registry from the op's
  // registration (launch_run) until it is removed (before its handler runs).
  op.inline_candidate = reading && !fs->direct && !fs->stream && length > 0 && length <= fs->options.inline_read_limit;
  op.file = std::move(fs);
  req.tracker = access::state(b.buffer)->tracker.get();
  req.begin = b.buffer.offset();
  req.end = b.buffer.offset() + length;
  req.mode = reading ? access_mode::write : access_mode::read;
  slot.buffer = std::move(b.buffer);
  slot.mode = req.mode;
  op.options.on_conflict = o.on_conflict;
  op.options.timeout = o.timeout;
  return {};
}

}  // namespace detail

file::file() noexcept = default;
file::file(file&&) noexcept = default;
file& file::operator=(file&&) noexcept = default;
file::~file() = default;
file::file(std::shared_ptr<detail::file_state> s) noexcept : state_(std::move(s)) {}

file file::open(const std::filesystem::path& path, file_mode mode, file_options options) {
  detail::check(options);
  int flags = O_CLOEXEC;
  bool r = has(mode, file_mode::read), w = has(mode, file_mode::write);
  if (r && w) flags |= O_RDWR;
  else if (w) flags |= O_WRONLY;
  else if (r) flags |= O_RDONLY;
  else throw error(errc::invalid_option, "file::open " + path.string() + ": the mode has no read or write access");
  if (has(mode, file_mode::create)) flags |= O_CREAT;
  if (has(mode, file_mode::truncate)) flags |= O_TRUNC;
  auto s = std::make_shared<detail::file_state>();
  s->options = options;
  if (options.direct) {
    s->fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
    if (s->fd >= 0) {
      s->direct = true;
    } else if (errno == EINVAL) {
      s->fallback_reason = "O_DIRECT refused by the file system (EINVAL)";
    } else {
      throw error(detail::sys(errno), "file::open " + path.string());
    }
  }
  if (s->fd < 0) {
    s->fd = ::open(path.c_str(), flags, 0644);
    if (s->fd < 0) throw error(detail::sys(errno), "file::open " + path.string());
  }
  struct stat st{};
  if (::fstat(s->fd, &st) == 0) s->stream = S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISCHR(st.st_mode);
  if (s->direct && options.on_misaligned == misaligned_policy::bounce)
    s->buffered_fd = detail::reopen_buffered(s->fd, flags, "file::open " + path.string());
  return file(std::move(s));
}

file file::adopt(int fd, file_options options) {
  if (fd < 0) throw error(errc::invalid_option, "file::adopt: negative descriptor " + std::to_string(fd));
  detail::check(options);
  auto s = std::make_shared<detail::file_state>();
  s->fd = fd;
  s->options = options;
  int flags = ::fcntl(fd, F_GETFL);
  s->direct = flags >= 0 && (flags & O_DIRECT);
  if (options.direct && !s->direct) s->fallback_reason = "adopted descriptor was not opened with O_DIRECT";
  struct stat st{};
  if (::fstat(fd, &st) == 0) s->stream = S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISCHR(st.st_mode);
  if (s->direct && options.on_misaligned == misaligned_policy::bounce) {
    try {
      s->buffered_fd = detail::reopen_buffered(fd, flags, "file::adopt");
    } catch (...) {
      s->fd = -1;  // a throw leaves the descriptor the caller's (file.hpp)
      throw;
    }
  }
  return file(std::move(s));
}

bool file::direct() const noexcept { return state_ && state_->direct; }
std::string_view file::direct_fallback_reason() const noexcept {
  return state_ ? std::string_view(state_->fallback_reason) : std::string_view();
}
std::uint64_t file::size() const {
  if (!state_) throw error(errc::invalid_size, "file::size on an empty file handle");
  struct stat st{};
  if (::fstat(state_->fd, &st) != 0) throw error(detail::sys(errno), "file::size: fstat");
  return S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) ? std::uint64_t(st.st_size) : 0;
}
int file::native_handle() const noexcept { return state_ ? state_->fd : -1; }
const file_options& file::options() const noexcept {
  static const file_options none{};
  return state_ ? state_->options : none;
}

}  // namespace xrtio
