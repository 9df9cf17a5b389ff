// Asio's configuration read after a standard header, as in most files
// (tools/soak/round.cpp): _GLIBCXX_HAVE_ALIGNED_ALLOC is defined by then.
// See test_soak_regressions.cpp.
#include <cstddef>

#include <asio/detail/config.hpp>

namespace soak_regression {
#if defined(ASIO_HAS_STD_ALIGNED_ALLOC)
extern const bool asio_aligned_alloc_std_first = true;
#else
extern const bool asio_aligned_alloc_std_first = false;
#endif
}  // namespace soak_regression
