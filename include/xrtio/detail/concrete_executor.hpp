// Seeing through a type-erased executor (any_io_executor, use_awaitable's
// executor) to the concrete one it holds, so a completion post can use the
// concrete executor's allocator property (no allocation per post) instead of
// the type-erased wrapper's heap-allocated function.
#pragma once

#include <asio/execution.hpp>
#include <asio/io_context.hpp>
#include <asio/prefer.hpp>
#include <asio/strand.hpp>
#include <typeinfo>
#include <utility>

namespace xrtio::detail {

using io_executor = asio::io_context::executor_type;
/// The type an io_context executor has once outstanding work is tracked
/// (what run_op keeps for the handler), named without asio::detail.
using tracked_io_executor =
    std::decay_t<decltype(asio::prefer(std::declval<io_executor>(), asio::execution::outstanding_work.tracked))>;

/// The target of `ex` if it holds exactly a `T`, else null.
///
/// Asio 1.22's any_executor::target<T>() does not check the type it is asked
/// for: it returns the stored object cast to T* whatever that object is. A
/// strand asked for as an io_context executor came back as one (its first
/// member is the io_context executor), and completions posted through it ran
/// outside the strand (docs/DESIGN.md, invariant 1). So the stored type is
/// compared first, always.
template <class T, class Ex>
const T* exact_target(const Ex& ex) noexcept {
#if !defined(ASIO_NO_TYPEID)
  if (ex.target_type() != typeid(T)) return nullptr;
  return ex.template target<T>();
#else
  (void)ex;
  return nullptr;  // no way to check the type: never guess
#endif
}

/// Calls `f(e)` with the most concrete executor equal to `ex`: the io_context
/// executor or io_context strand a type-erased executor holds, or `ex`
/// itself. Any other target (thread_pool, a user's type) is used through
/// `ex`, which is always correct, only not allocation-free.
template <class Ex, class F>
void with_concrete_executor(const Ex& ex, F&& f) {
  if constexpr (requires { ex.target_type(); ex.template target<io_executor>(); }) {
    if (auto* t = exact_target<tracked_io_executor>(ex)) return f(*t);
    if (auto* t = exact_target<io_executor>(ex)) return f(*t);
    if (auto* t = exact_target<asio::strand<tracked_io_executor>>(ex)) return f(*t);
    if (auto* t = exact_target<asio::strand<io_executor>>(ex)) return f(*t);
  }
  return f(ex);
}

}  // namespace xrtio::detail
