// What the README tells coroutine users of async_load_file: name the list
// and the load_options. g++ 12 destroys a member of an aggregate made inside
// a co_await expression twice (with a std::function member holding a
// capturing lambda, a double free), whatever the callee does with it; the
// second case shows that on the compiler at hand without xrtio or Asio.
#include <doctest/doctest.h>

#include <asio.hpp>
#include <coroutine>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "xrtio/load_file.hpp"
#include "xrtio/xrtio.hpp"

namespace fs = std::filesystem;

TEST_CASE("coroutines: async_load_file with a named list and named load_options carrying a capturing progress "
          "callback completes once, with every byte and its progress") {
  auto path = fs::temp_directory_path() / ("xrtio-coro-load-" + std::to_string(::getpid()));
  std::vector<std::byte> content(100000);
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = std::byte(i * 7 + 3);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(content.data()), std::streamsize(content.size()));
    REQUIRE(out.good());
  }
  xrtio::runtime rt;
  auto ctx = xrtio::sim::open();
  ctx.bind(rt);
  auto buf = ctx.alloc(content.size());
  asio::io_context io;
  int reports = 0, completions = 0;
  std::uint64_t last_done = 0;
  std::size_t got = 0;
  std::error_code failure;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::vector<xrtio::load_item> files{{path, buf}};
        // Three references: too large for std::function's local storage, so
        // a double destruction would be a double free (ASan in CI).
        xrtio::load_options opts{.progress = [&reports, &last_done, &completions](const xrtio::load_progress& p) {
          ++reports;
          last_done = p.bytes_done;
          (void)completions;
        }};
        got = co_await xrtio::async_load_file(files, opts, asio::use_awaitable);
        ++completions;
      },
      [&](std::exception_ptr e) {
        if (e) {
          try {
            std::rethrow_exception(e);
          } catch (const std::system_error& se) {
            failure = se.code();
          }
        }
      });
  io.run();
  std::error_code ec;
  fs::remove(path, ec);
  CHECK(!failure);
  CHECK(completions == 1);
  CHECK(got == content.size());
  CHECK(reports >= 1);
  CHECK(last_done == content.size());
  CHECK(std::memcmp(buf.map().data(), content.data(), content.size()) == 0);
}

namespace {
int made = 0, gone = 0;
// Counts its constructions and destructions; made from a callable, as a
// std::function member is made from a lambda.
struct counted {
  int v = 0;
  template <class F>
  counted(F f) : v(f(1)) {
    ++made;
  }
  counted(const counted& o) : v(o.v) { ++made; }
  counted(counted&& o) noexcept : v(o.v) { ++made; }
  ~counted() { ++gone; }
};
struct options_like {
  int a = 1;
  counted c;
};
struct ready_awaiter {
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) noexcept {}
  int await_resume() const noexcept { return 1; }
};
ready_awaiter consume(options_like) { return {}; }
struct eager_task {
  struct promise_type {
    eager_task get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() {}
  };
};
eager_task temporary_form() {
  int x = 2;
  co_await consume(options_like{.c = [&x](int v) { return x + v; }});
}
eager_task named_form() {
  int x = 2;
  options_like o{.c = [&x](int v) { return x + v; }};
  co_await consume(o);
}
}  // namespace

TEST_CASE("coroutines: an aggregate named before the co_await has its members destroyed exactly once (the "
          "README's form), and a temporary one is reported") {
  made = gone = 0;
  named_form();
  CHECK(made == gone);
  made = gone = 0;
  temporary_form();
  // Not a check: this is the compiler's defect the README works around.
  MESSAGE("an aggregate made inside co_await: " << made << " constructions, " << gone << " destructions"
                                                << std::string(gone > made ? " (destroyed twice: this compiler's defect)" : ""));
}
