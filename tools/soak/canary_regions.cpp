#include "canary_regions.hpp"

#include <array>
#include <string>

#include "plan.hpp"
#include "tally.hpp"
#include "xrtio/error.hpp"

namespace soak {
namespace {
constexpr std::size_t words = canary_regions::bytes / 8;
std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}
}  // namespace

canary_regions::canary_regions(xrtio::context& ctx, std::uint64_t salt)
    : root_(ctx.alloc(count * bytes)), slots_(new slot[count]) {
  for (unsigned i = 0; i < count; ++i) {
    views_.push_back(root_.sub(bytes, i * bytes));
    slots_[i].pattern = mix(salt + i);
    std::array<std::uint64_t, words> v;
    v.fill(slots_[i].pattern);
    views_[i].write(std::span<const std::uint64_t>(v));
  }
}

int canary_regions::take(std::uint64_t hint) noexcept {
  for (unsigned k = 0; k < count; ++k) {
    unsigned i = static_cast<unsigned>((hint + k) % count);
    int expected = free_;
    if (slots_[i].st.compare_exchange_strong(expected, busy)) return static_cast<int>(i);
  }
  return -1;
}

bool canary_regions::check(tally& t, int i) {
  std::array<std::uint64_t, words> v{};
  try {
    views_[i].read(std::span<std::uint64_t>(v));
  } catch (const xrtio::error& e) {
    t.violate(check::lease_leaked, "canary region " + std::to_string(i) + " unreadable before its run: " + e.what());
    return false;
  }
  t.canary_checks.fetch_add(1, std::memory_order_relaxed);
  for (auto w : v)
    if (w != slots_[i].pattern) {
      t.violate(check::lease_early, "canary region " + std::to_string(i) + " holds " + hex(w) +
                                        ", not the host's " + hex(slots_[i].pattern));
      return false;
    }
  return true;
}

bool canary_regions::write_pattern(tally& t, int i, std::uint64_t pattern, retention r) {
  std::array<std::uint64_t, words> v;
  v.fill(pattern);
  try {
    views_[i].write(std::span<const std::uint64_t>(v));
  } catch (const xrtio::error& e) {
    if (e.code() == xrtio::errc::range_retained) {
      if (r == retention::no)
        t.violate(check::unexpected, "canary region " + std::to_string(i) + " retained, its run did not say so");
      slots_[i].st.store(dead);
      return false;
    }
    t.violate(check::lease_leaked, "canary region " + std::to_string(i) + " after its run's final state: " + e.what());
    slots_[i].st.store(dead);  // unknown holder: out of the game
    return false;
  }
  if (r == retention::yes)
    t.violate(check::lease_early, "canary region " + std::to_string(i) + " of a retained run was writable");
  slots_[i].pattern = pattern;
  return true;
}

void canary_regions::settle(tally& t, int i, retention r, std::uint64_t salt) {
  if (write_pattern(t, i, mix(salt), r)) slots_[i].st.store(free_);
}

void canary_regions::orphan(int i) noexcept { slots_[i].st.store(orphaned); }

unsigned canary_regions::final_check(tally& t, std::uint64_t salt) {
  unsigned checked = 0;
  for (unsigned i = 0; i < count; ++i) {
    int s = slots_[i].st.load();
    if (s == orphaned) {
      // Its handler never ran; the device is final now, so the region is free or retained.
      std::array<std::uint64_t, words> v;
      v.fill(mix(salt + i));
      try {
        views_[i].write(std::span<const std::uint64_t>(v));
        slots_[i].pattern = v[0];
        s = free_;
      } catch (const xrtio::error& e) {
        if (e.code() != xrtio::errc::range_retained)
          t.violate(check::lease_leaked, "orphaned canary region " + std::to_string(i) + ": " + e.what());
        s = dead;
      }
      slots_[i].st.store(s);
    }
    if (s == busy) t.violate(check::unexpected, "canary region " + std::to_string(i) + " still busy at the round's end");
    if (s == free_ && check(t, static_cast<int>(i))) ++checked;
  }
  return checked;
}

}  // namespace soak
