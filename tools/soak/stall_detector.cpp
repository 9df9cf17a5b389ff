#include "stall_detector.hpp"

namespace soak {
namespace {
constexpr auto tick = std::chrono::milliseconds(5);
}

stall_detector::stall_detector(std::chrono::nanoseconds threshold) {
  thread_ = std::thread([this, threshold] {
    auto before = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      std::this_thread::sleep_for(tick);
      auto now = std::chrono::steady_clock::now();
      auto late = now - before - tick;
      before = now;
      if (late > threshold) {
        stalls_.fetch_add(1);
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(late).count();
        if (ns > longest_ns_.load()) longest_ns_.store(ns);
      }
    }
  });
}

stall_detector::~stall_detector() {
  stop_.store(true);
  thread_.join();
}

}  // namespace soak
