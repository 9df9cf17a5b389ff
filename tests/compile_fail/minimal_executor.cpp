// Must not compile: an executor with execute() and == alone cannot be asked
// for blocking.never, which a completion needs (invariant 1). The CTest
// "compile fail: ..." builds it and expects xrtio's static_assert.
#include <asio.hpp>
#include <xrtio/xrtio.hpp>

struct minimal_executor {
  asio::io_context* io;
  template <class F>
  void execute(F&& f) const {
    asio::post(*io, std::forward<F>(f));
  }
  bool operator==(const minimal_executor& o) const noexcept { return io == o.io; }
  bool operator!=(const minimal_executor& o) const noexcept { return io != o.io; }
};

int main() {
  asio::io_context io;
  auto ctx = xrtio::sim::open();
  xrtio::async_run(ctx.kernel("noop"),
                   asio::bind_executor(minimal_executor{&io}, [](std::error_code, xrtio::run_result) {}));
}
