// Run initiating functions take (args..., [run_options], token): this splits
// such a pack into the options (default ones when absent), the completion
// token and the arguments, for async_run and the NPU helpers alike.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "xrtio/run_options.hpp"

namespace xrtio::detail {

template <class... Ts>
constexpr bool options_before_token() {
  constexpr std::size_t n = sizeof...(Ts);
  if constexpr (n < 2) return false;
  else return std::is_same_v<std::remove_cvref_t<std::tuple_element_t<n - 2, std::tuple<Ts...>>>, run_options>;
}

template <class F, class Tuple, std::size_t... I>
decltype(auto) call_split(F&& f, const run_options& o, Tuple&& t, std::index_sequence<I...>) {
  constexpr std::size_t n = std::tuple_size_v<std::remove_reference_t<Tuple>>;
  return std::forward<F>(f)(o, std::get<n - 1>(std::forward<Tuple>(t)), std::get<I>(std::forward<Tuple>(t))...);
}

/// Calls f(options, token, args...) for ts = (args..., [options], token).
template <class F, class... Ts>
decltype(auto) split_options_and_token(F&& f, Ts&&... ts) {
  constexpr std::size_t n = sizeof...(Ts);
  static_assert(n >= 1, "a run's initiating function needs a completion token last");
  auto t = std::forward_as_tuple(std::forward<Ts>(ts)...);
  if constexpr (options_before_token<Ts...>()) {
    run_options o = std::get<n - 2>(t);
    return call_split(std::forward<F>(f), o, std::move(t), std::make_index_sequence<n - 2>{});
  } else {
    return call_split(std::forward<F>(f), run_options{}, std::move(t), std::make_index_sequence<n - 1>{});
  }
}

}  // namespace xrtio::detail
