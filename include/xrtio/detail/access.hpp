// How xrtio's own code (and its test-support header) reaches the shared state
// behind the public handles (buffer, context, kernel, runtime,
// prepared_run) without public getters that would expose detail types: each
// handle befriends this one type.
#pragma once

namespace xrtio::detail {

struct access {
  /// buffer -> buffer_state, context -> context_state, prepared_run -> prepared_state.
  template <class Handle>
  static const auto& state(const Handle& h) noexcept {
    return h.state_;
  }
  /// kernel -> its context's context_state.
  template <class Kernel>
  static const auto& context_state(const Kernel& k) noexcept {
    return k.context_;
  }
  /// runtime -> its reactor.
  template <class Runtime>
  static const auto& reactor(const Runtime& r) noexcept {
    return r.reactor_;
  }
};

}  // namespace xrtio::detail
