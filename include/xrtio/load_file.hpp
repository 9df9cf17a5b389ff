// async_load_file: whole files streamed into device buffers, one file after
// another, with progress reports; e.g. a model's weights (docs/DESIGN.md,
// "File I/O").
#pragma once

#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/compose.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>
#include <filesystem>
#include <functional>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "xrtio/file.hpp"

namespace xrtio {

/// One file and the buffer (or view) it is loaded into, from its first byte.
struct load_item {
  std::filesystem::path path;
  xrtio::buffer dst;
};

/// What a progress callback is told after each segment.
struct load_progress {
  std::size_t file_index = 0;       ///< the item being loaded
  std::uint64_t bytes_done = 0;     ///< over all items
  std::uint64_t bytes_total = 0;    ///< the files' sizes, summed when the load began
};

struct load_options {
  /// How each file is opened (file_mode::read) and cut into pieces.
  file_options file{};
  /// Per read: conflict policy, timeout, runtime.
  io_options io{};
  /// Called on the handler's executor after each segment of
  /// chunk_size * queue_depth bytes (and once per empty file).
  std::function<void(const load_progress&)> progress;
};

namespace detail {

struct load_op {
  load_op(std::vector<load_item> i, load_options o) : items(std::move(i)), opts(std::move(o)) {}

  std::vector<load_item> items;
  load_options opts;
  enum class phase { initiated, next_file, reading } ph = phase::initiated;
  std::size_t index = 0;
  std::uint64_t size = 0, off = 0, total = 0, done = 0;
  std::optional<xrtio::file> f;

  template <class Self>
  void operator()(Self& self, std::error_code ec = {}, std::size_t n = 0) {
    switch (ph) {
      case phase::initiated:
        // Terminal and partial cancellation, as async_read_file takes
        // them; a load stopped either way has loaded a prefix of its
        // bytes. Recorded by the state whenever it comes: between two
        // segments (from a progress callback, say) no read is in flight to
        // take it, and next() looks at the state before each segment.
        self.reset_cancellation_state(asio::enable_partial_cancellation());
        // Never complete inside the initiating call: continue on the
        // handler's executor.
        ph = phase::next_file;
        return asio::post(std::move(self));
      case phase::next_file:
        if (index == 0 && (ec = sum_sizes())) return self.complete(ec, 0);
        return next(self);
      case phase::reading:
        if (ec) return self.complete(ec, std::size_t(done));
        off += n;
        done += n;
        report();
        if (n == 0 || off >= size) {  // this file is in (n == 0: it shrank meanwhile)
          ++index;
          f.reset();
        }
        return next(self);
    }
  }

 private:
  std::error_code sum_sizes() {
    for (auto& it : items) {
      std::error_code ec;
      auto s = std::filesystem::file_size(it.path, ec);
      if (ec) return ec;
      if (!it.dst) return make_error_code(errc::invalid_size);
      if (s > it.dst.size()) return make_error_code(errc::out_of_range);  // does not fit
      total += s;
    }
    return {};
  }

  void report() {
    if (opts.progress) opts.progress(load_progress{index, done, total});
  }

  template <class Self>
  void next(Self& self) {
    while (index < items.size()) {
      if (self.get_cancellation_state().cancelled() != asio::cancellation_type::none)
        return self.complete(make_error_code(asio::error::operation_aborted), std::size_t(done));
      if (!f) {
        try {
          f.emplace(file::open(items[index].path, file_mode::read, opts.file));
          size = f->size();
        } catch (const xrtio::error& e) {
          return self.complete(e.code(), std::size_t(done));
        }
        off = 0;
        if (size > items[index].dst.size()) return self.complete(make_error_code(errc::out_of_range), std::size_t(done));
      }
      if (off < size) {
        std::uint64_t seg = std::uint64_t(opts.file.chunk_size) * opts.file.queue_depth;
        std::size_t len = std::size_t(std::min(seg, size - off));
        ph = phase::reading;
        return async_read_file(*f, off, items[index].dst.sub(len, std::size_t(off)), opts.io, std::move(self));
      }
      report();  // an empty file
      ++index;
      f.reset();
    }
    self.complete({}, std::size_t(done));
  }
};

}  // namespace detail

/// Loads each item's file into its buffer, in order, completing through
/// `token` with `void(std::error_code, std::size_t bytes)`. Each file is read
/// in segments of chunk_size * queue_depth bytes through async_read_file
/// (its leases, device syncs, cancellation); `options.progress` is called
/// after each. Terminal and partial cancellation stop the load, whenever
/// they come (between segments too: from a progress callback, say), with
/// asio::error::operation_aborted and the bytes loaded so far, a prefix of
/// the files in order. Errors: a file larger than its buffer (errc::out_of_range,
/// checked for every file before the first byte is read), an empty buffer
/// (invalid_size), a file that cannot be opened or sized (the system's
/// code), and async_read_file's.
template <class Token>
auto async_load_file(std::vector<load_item> items, load_options options, Token&& token) {
  return asio::async_compose<Token, void(std::error_code, std::size_t)>(
      detail::load_op(std::move(items), std::move(options)), token);
}

/// One file into one buffer.
template <class Token>
auto async_load_file(const std::filesystem::path& path, xrtio::buffer dst, load_options options, Token&& token) {
  std::vector<load_item> items;
  items.push_back({path, std::move(dst)});
  return async_load_file(std::move(items), std::move(options), std::forward<Token>(token));
}

}  // namespace xrtio
