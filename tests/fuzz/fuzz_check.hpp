// A fuzz target's property check: a failed one prints what broke and aborts,
// which libFuzzer records as a crash (with the input) and the CTest replay
// as a failed test. A macro, so that the message is built only on failure
// and the place is known (clang 14 has no std::source_location).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace xfuzz {

[[noreturn]] inline void check_failed(const std::string& what, const char* file, int line) {
  std::fprintf(stderr, "xfuzz: check failed at %s:%d: %s\n", file, line, what.c_str());
  std::abort();
}

}  // namespace xfuzz

#define XFUZZ_CHECK(ok, what)                                         \
  do {                                                                \
    if (!(ok)) ::xfuzz::check_failed((what), __FILE__, __LINE__);     \
  } while (false)
