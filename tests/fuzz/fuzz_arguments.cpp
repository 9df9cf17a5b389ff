// Fuzz target: argument validation (run_core::validate, the one path behind
// start, async_run, prepare and the NPU helpers) with random argument lists
// against random kernel signatures on the simulated device.
//
// Per input: a kernel signature (0-70 arguments, buffers and scalars of 0-16
// bytes) that sim::open accepts or refuses (too_many_arguments over 64,
// invalid_size for a scalar outside 1-8 bytes), then an argument list (0-70
// arguments: whole buffers, views at random offsets, another device's
// buffer, empty handles, read or write access; scalars of 1-16 bytes) with
// or without run_options::cross_context. A reference model written from the
// documented rules says what validation must answer:
// - more than max_arguments given: too_many_arguments; a count other than the
//   kernel's: argument_count;
// - else the first argument at fault, in order: a scalar for a buffer, a
//   buffer for a scalar or a scalar of another size: argument_kind; an empty
//   buffer handle: invalid_size; another context's buffer without
//   cross_context: foreign_context; the message names the kernel and the
//   argument's index;
// - else one lease per buffer argument on its root allocation's range, in
//   its mode, granted together (arguments may alias), then the run starts,
//   and the kernel sees exactly the argument list: each buffer's bytes (the
//   view's address and size), each scalar's bytes; once it is final and
//   released, no lease is left.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "fuzz_input.hpp"
#include "xrtio/detail/run_core.hpp"
#include "xrtio/error.hpp"
#include "xrtio/sim.hpp"

namespace {

using xrtio::errc;
using xrtio::backend::arg_kind;
namespace sim = xrtio::sim;
namespace xd = xrtio::detail;

/// Beyond xrtio::max_arguments (64) on both sides, to reach its checks.
constexpr unsigned max_declared = 70, max_given = 70;
/// The simulated device's scalar limit (sim::make_device) and arg_slot's.
constexpr std::size_t max_sim_scalar = 8, max_slot_scalar = 16;
/// Root allocations per input and their largest size.
constexpr unsigned roots = 3;
constexpr std::size_t max_root_bytes = 256;

/// What the kernel saw, written on the compute unit's thread and read after
/// the run's final state (the device's completion orders the two).
struct observation {
  bool ran = false;
  unsigned arg_count = 0;
  std::vector<std::span<std::byte>> buffers;
  std::vector<std::vector<std::byte>> scalars;
};

xrtio::context& other_device() {
  // Another device's context, for foreign buffers: made once (it has its
  // own compute-unit thread).
  static xrtio::context ctx = sim::open(sim::device_config{.compute_units = 1, .event_fd = false});
  return ctx;
}

struct given_arg {
  enum class what { root, view, foreign, empty, scalar } kind;
  xrtio::buffer buffer;
  xd::access_mode mode = xd::access_mode::write;
  std::vector<std::byte> scalar;
};

std::optional<errc> expected_open_error(const std::vector<xrtio::backend::arg_desc>& sig) {
  if (sig.size() > xrtio::max_arguments) return errc::too_many_arguments;
  for (auto& a : sig)
    if (a.kind == arg_kind::scalar && (a.size == 0 || a.size > max_sim_scalar)) return errc::invalid_size;
  return std::nullopt;
}

// The model's answer: the error, and the index of the argument at fault
// (nullopt when the fault is the count).
struct expectation {
  std::optional<errc> error;
  std::optional<std::size_t> at;
};
expectation expected_validation(const std::vector<xrtio::backend::arg_desc>& sig, const std::vector<given_arg>& args,
                                bool cross_context) {
  if (args.size() > xrtio::max_arguments) return {errc::too_many_arguments, std::nullopt};
  if (args.size() != sig.size()) return {errc::argument_count, std::nullopt};
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool is_scalar = args[i].kind == given_arg::what::scalar;
    const bool is_buffer_handle = !is_scalar && args[i].kind != given_arg::what::empty;
    if (sig[i].kind == arg_kind::buffer) {
      if (is_scalar) return {errc::argument_kind, i};
      if (args[i].kind == given_arg::what::empty) return {errc::invalid_size, i};
      if (args[i].kind == given_arg::what::foreign && !cross_context) return {errc::foreign_context, i};
    } else {
      if (is_buffer_handle || args[i].kind == given_arg::what::empty) return {errc::argument_kind, i};
      if (args[i].scalar.size() != sig[i].size) return {errc::argument_kind, i};
    }
  }
  return {};
}

class harness {
 public:
  explicit harness(xfuzz::fuzz_input& in) : in_(in) {}

  void run() {
    make_signature();
    auto seen = std::make_shared<observation>();
    sim::device_config cfg{.compute_units = 1, .event_fd = false};
    cfg.kernels = {{"k", sig_, [seen](sim::kernel_call& c) { observe(c, *seen); }}};
    std::optional<errc> open_error;
    try {
      ctx_ = sim::open(cfg);
    } catch (const xrtio::error& e) {
      open_error = code_of(e);
      XFUZZ_CHECK(std::string(e.what()).find("sim kernel k") != std::string::npos,
            std::string("open: the message does not name the kernel: ") + e.what());
    }
    const auto want_open = expected_open_error(sig_);
    XFUZZ_CHECK(open_error == want_open, "sim::open of " + std::to_string(sig_.size()) + " arguments: got " +
                                       name(open_error) + ", the model says " + name(want_open));
    if (open_error) return;
    make_roots();
    make_args();
    validate_and_run(*seen);
  }

 private:
  xfuzz::fuzz_input& in_;
  std::vector<xrtio::backend::arg_desc> sig_;
  xrtio::context ctx_;
  std::vector<xrtio::buffer> roots_;
  std::vector<given_arg> args_;
  bool cross_context_ = false;

  static errc code_of(const xrtio::error& e) {
    XFUZZ_CHECK(e.code().category() == xrtio::error_category(), std::string("not an xrtio::errc: ") + e.what());
    return static_cast<errc>(e.code().value());
  }

  static std::string name(std::optional<errc> e) {
    return e ? xrtio::make_error_code(*e).message() : std::string("success");
  }

  static void observe(sim::kernel_call& c, observation& o) {
    o.ran = true;
    o.arg_count = c.arg_count();
    for (unsigned i = 0; i < c.arg_count(); ++i) {
      try {
        o.buffers.push_back(c.buffer(i));
        o.scalars.emplace_back();
      } catch (const xrtio::error&) {
        auto s = c.scalar_bytes(i);
        o.buffers.emplace_back();
        o.scalars.emplace_back(s.begin(), s.end());
      }
    }
  }

  void make_signature() {
    // Mostly within the limits, so that most inputs reach validation.
    const bool wild = in_.byte() % 8 == 0;
    sig_.resize(in_.in_range(0, wild ? max_declared : 8));
    for (std::size_t i = 0; i < sig_.size(); ++i) {
      auto& a = sig_[i];
      a.name = "a" + std::to_string(i);
      a.kind = in_.flag() ? arg_kind::buffer : arg_kind::scalar;
      if (a.kind == arg_kind::scalar) {
        static constexpr std::size_t sizes[] = {1, 2, 4, 8};
        a.size = wild ? in_.in_range(0, max_slot_scalar) : sizes[in_.byte() % 4];
      }
    }
  }

  void make_roots() {
    for (unsigned i = 0; i < roots; ++i) roots_.push_back(ctx_.alloc(in_.in_range(1, max_root_bytes)));
  }

  // Mostly the kernel's count and kinds, with one decision per argument to
  // get it wrong, so that every check is reached.
  void make_args() {
    const bool wild = in_.byte() % 8 == 0;
    const std::size_t n = wild ? in_.in_range(0, max_given) : sig_.size();
    cross_context_ = in_.byte() % 4 == 0;
    for (std::size_t i = 0; i < n; ++i) {
      const bool right_kind = i < sig_.size() && in_.byte() % 8 != 0;
      const bool buffer = right_kind ? sig_[i].kind == arg_kind::buffer : in_.flag();
      given_arg g{};
      if (buffer) make_buffer_arg(g);
      else make_scalar_arg(g, right_kind && in_.byte() % 8 != 0 ? sig_[i].size : in_.in_range(1, max_slot_scalar));
      args_.push_back(std::move(g));
    }
  }

  void make_buffer_arg(given_arg& g) {
    static constexpr xd::access_mode modes[] = {xd::access_mode::read, xd::access_mode::write};
    g.mode = modes[in_.byte() % 2];
    auto& root = roots_[in_.byte() % roots];
    switch (in_.byte() % 8) {
      case 0: g.kind = given_arg::what::empty; return;
      case 1:
        g.kind = given_arg::what::foreign;
        g.buffer = other_device().alloc(in_.in_range(1, max_root_bytes));
        return;
      case 2:
      case 3:
      case 4: {  // a view, maybe of a view: ranges are absolute in the root
        g.kind = given_arg::what::view;
        const std::size_t off = in_.in_range(0, root.size() - 1);
        auto v = root.sub(in_.in_range(1, root.size() - off), off);
        if (in_.flag() && v.size() > 1) {
          const std::size_t off2 = in_.in_range(0, v.size() - 1);
          v = v.sub(in_.in_range(1, v.size() - off2), off2);
        }
        g.buffer = v;
        return;
      }
      default: g.kind = given_arg::what::root; g.buffer = root; return;
    }
  }

  void make_scalar_arg(given_arg& g, std::size_t size) {
    g.kind = given_arg::what::scalar;
    g.scalar.resize(size);
    for (auto& b : g.scalar) b = static_cast<std::byte>(in_.byte());
  }

  void validate_and_run(observation& seen) {
    // Storage sized as async_run sizes it: a slot per argument, a request
    // per buffer-typed argument (empty handles included).
    std::vector<xd::arg_slot> slots(args_.size());
    std::size_t buffer_typed = 0;
    for (std::size_t i = 0; i < args_.size(); ++i) {
      auto& g = args_[i];
      if (g.kind == given_arg::what::scalar) {
        slots[i].scalar_size = static_cast<std::uint8_t>(g.scalar.size());
        std::memcpy(slots[i].scalar.data(), g.scalar.data(), g.scalar.size());
      } else {
        slots[i].buffer = g.buffer;
        slots[i].mode = g.mode;
        ++buffer_typed;
      }
    }
    std::vector<xd::access_request> reqs(buffer_typed);
    const auto want = expected_validation(sig_, args_, cross_context_);
    xd::run_core core(ctx_.kernel("k"), slots, reqs);
    std::optional<errc> got;
    std::string message;
    try {
      core.validate(args_.size(), xrtio::run_options{.cross_context = cross_context_});
    } catch (const xrtio::error& e) {
      got = code_of(e);
      message = e.what();
    }
    XFUZZ_CHECK(got == want.error, std::to_string(args_.size()) + " arguments for " + std::to_string(sig_.size()) +
                                 ": validation says " + name(got) + ", the model " + name(want.error) +
                                 (message.empty() ? "" : " (" + message + ")"));
    if (got) {
      XFUZZ_CHECK(message.find("kernel k") != std::string::npos, "the message does not name the kernel: " + message);
      if (want.at)
        XFUZZ_CHECK(message.find("argument " + std::to_string(*want.at) + " ") != std::string::npos,
              "the message does not name argument " + std::to_string(*want.at) + ": " + message);
      check_no_leases("after a refusal");
      return;
    }
    run_validated(core, seen);
  }

  void run_validated(xd::run_core& core, observation& seen) {
    std::string why;
    XFUZZ_CHECK(core.acquire(&why) == xd::acquire_status::acquired, "one run's own arguments conflicted: " + why);
    for (auto& root : roots_) {
      std::size_t on_root = 0;
      for (auto& g : args_)
        if ((g.kind == given_arg::what::root || g.kind == given_arg::what::view) &&
            xd::access::state(g.buffer)->tracker == xd::access::state(root)->tracker)
          ++on_root;
      XFUZZ_CHECK(xd::access::state(root)->tracker->active_count() == on_root,
            "leases on a root: " + std::to_string(xd::access::state(root)->tracker->active_count()) + ", arguments on it " +
                std::to_string(on_root));
    }
    core.start();
    auto* run = core.native();
    while (!xrtio::is_final(run->state())) run->wait_for(std::chrono::milliseconds(100));
    XFUZZ_CHECK(run->state() == xrtio::run_state::completed, "the run did not complete");
    XFUZZ_CHECK(seen.ran && seen.arg_count == args_.size(), "the kernel saw " + std::to_string(seen.arg_count) +
                                                          " arguments of " + std::to_string(args_.size()));
    for (std::size_t i = 0; i < args_.size(); ++i) {
      auto& g = args_[i];
      if (g.kind == given_arg::what::scalar) {
        XFUZZ_CHECK(seen.scalars[i] == g.scalar, "scalar " + std::to_string(i) + " reached the kernel changed");
      } else {
        auto m = g.buffer.map();
        XFUZZ_CHECK(seen.buffers[i].data() == m.data() && seen.buffers[i].size() == m.size(),
              "buffer " + std::to_string(i) + " reached the kernel as another range");
      }
    }
    core.release();
    check_no_leases("after release");
  }

  void check_no_leases(const char* when) const {
    for (auto& root : roots_)
      XFUZZ_CHECK(xd::access::state(root)->tracker->active_count() == 0, std::string("a lease left ") + when);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  xfuzz::fuzz_input in({data, size});
  harness(in).run();
  return 0;
}
