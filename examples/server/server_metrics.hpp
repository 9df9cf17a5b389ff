// GET /metrics: the runtime's counters, histograms and budget
// (xrtio::metrics_text) in the Prometheus text exposition format, followed by
// the server's own counters (responses by status, disconnects, connections).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "xrtio/xrtio.hpp"

namespace server {

/// The server's counters: relaxed atomics, one increment per response.
class server_counters {
 public:
  void response(int status) noexcept;
  void disconnected() noexcept { disconnects_.fetch_add(1, std::memory_order_relaxed); }
  void connection_opened() noexcept { connections_.fetch_add(1, std::memory_order_relaxed); }
  void connection_closed() noexcept { connections_.fetch_sub(1, std::memory_order_relaxed); }
  std::int64_t connections() const noexcept { return connections_.load(std::memory_order_relaxed); }
  void append_to(std::string& out) const;

 private:
  static constexpr std::array<int, 9> statuses{200, 400, 404, 405, 413, 500, 503, 504, 0};  // 0: any other
  std::array<std::atomic<std::uint64_t>, statuses.size()> by_status_{};
  std::atomic<std::uint64_t> disconnects_{0};
  std::atomic<std::int64_t> connections_{0};
};

/// The whole page.
std::string metrics_page(const xrtio::runtime& rt, const xrtio::memory_budget& budget, const server_counters& c,
                         std::uint64_t heap_trims);

}  // namespace server
