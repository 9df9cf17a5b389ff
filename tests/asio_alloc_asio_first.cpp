// Asio's configuration read before any standard header, as in every xrtio
// file that starts with an Asio include (src/reactor/inloop.cpp through
// xrtio/inloop.hpp): <bits/c++config.h> has not defined
// _GLIBCXX_HAVE_ALIGNED_ALLOC yet. See test_soak_regressions.cpp.
#include <asio/detail/config.hpp>

namespace soak_regression {
#if defined(ASIO_HAS_STD_ALIGNED_ALLOC)
extern const bool asio_aligned_alloc_asio_first = true;
#else
extern const bool asio_aligned_alloc_asio_first = false;
#endif
}  // namespace soak_regression
