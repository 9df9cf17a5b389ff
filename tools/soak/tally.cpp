#include "tally.hpp"

#include <asio/error.hpp>

#include "xrtio/error.hpp"

namespace soak {

/// Messages kept per check; the counts go on.
constexpr std::uint64_t kept_messages_per_check = 5;

outcome classify(const std::error_code& ec) noexcept {
  if (!ec) return outcome::ok;
  if (ec == asio::error::operation_aborted) return outcome::aborted;
  if (ec.category() != xrtio::error_category()) return outcome::other;
  switch (static_cast<xrtio::errc>(ec.value())) {
    case xrtio::errc::timed_out: return outcome::timed_out;
    case xrtio::errc::abort_failed: return outcome::abort_failed;
    case xrtio::errc::range_in_use: return outcome::range_in_use;
    case xrtio::errc::range_retained: return outcome::range_retained;
    case xrtio::errc::device_lost: return outcome::device_lost;
    case xrtio::errc::busy: return outcome::busy;
    case xrtio::errc::shut_down: return outcome::shut_down;
    case xrtio::errc::run_error: return outcome::run_error;
    default: return outcome::other;
  }
}

const char* outcome_name(outcome o) noexcept {
  static constexpr const char* names[] = {"ok", "timed_out", "operation_aborted", "abort_failed", "range_in_use",
                                          "range_retained", "device_lost", "busy", "shut_down", "run_error",
                                          "other"};
  return names[static_cast<unsigned>(o)];
}

const char* check_name(check c) noexcept {
  static constexpr const char* names[] = {
      "exactly once",          "on its executor",       "no handler after its io_context died",
      "no late write landed (canary)", "no lease left after the final state", "retained == refused + overlong aborts",
      "retained runs reaped",  "budget back to zero",   "RSS flat over the second half",
      "only planned outcomes", "no run hung"};
  return names[static_cast<unsigned>(c)];
}

void tally::violate(check c, const std::string& what) {
  auto n = violations[static_cast<unsigned>(c)].fetch_add(1);
  if (n >= kept_messages_per_check) return;
  std::lock_guard lock(mutex_);
  messages_.push_back(std::string(check_name(c)) + ": " + what);
}

std::uint64_t tally::total_violations() const noexcept {
  std::uint64_t n = 0;
  for (auto& v : violations) n += v.load();
  return n;
}

std::vector<std::string> tally::messages() const {
  std::lock_guard lock(mutex_);
  return messages_;
}

}  // namespace soak
