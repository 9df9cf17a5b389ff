// Built against an installed xrtio when it was built with XRT: a consumer
// that includes xrtio/xrt_native.hpp links XRT::xrt_coreutil as the README
// says, and finds XRT's headers through it.
#include <xrtio/xrt_native.hpp>
#include <xrtio/xrtio.hpp>
#include <cstdio>
int main() {
  try {
    (void)xrtio::xrt_backend::native_xrt_device(xrtio::sim::open());
  } catch (const xrtio::error& e) {
    bool ok = e.code() == xrtio::errc::not_supported;
    std::printf("native_xrt_device(sim): %s\n", ok ? "not_supported" : e.what());
    return ok ? 0 : 1;
  }
  return 1;
}
