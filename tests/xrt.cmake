# XRT suites (included from tests/CMakeLists.txt). They run against XRT's
# no-op device, set up by the tests themselves (xrt_backend::use_noop_device),
# and synthesize their xclbins with xrtio-mkxclbin.
set(XRTIO_SAMPLE_XCLBIN "${PROJECT_SOURCE_DIR}/../shared/testdata/vadd-noop.xclbin"
    CACHE FILEPATH "A known-good xclbin (kernel vadd) to cross-check xrtio-mkxclbin against; optional")

if(XRTIO_WITH_XRT STREQUAL "OFF")
  message(STATUS "xrtio: XRT tests skipped: XRTIO_WITH_XRT=OFF")
elseif(NOT XRT_FOUND)
  message(STATUS "xrtio: XRT tests skipped: XRT (xrt_coreutil and its headers) was not found")
elseif(NOT TARGET xrtio-mkxclbin OR NOT TARGET xrtio-info)
  message(STATUS "xrtio: XRT tests skipped: they need the XRT tools (XRTIO_BUILD_TOOLS=ON)")
else()
  set(_xrtio_xrt_defs
    XRTIO_MKXCLBIN="$<TARGET_FILE:xrtio-mkxclbin>"
    XRTIO_INFO="$<TARGET_FILE:xrtio-info>")
  if(EXISTS "${XRTIO_SAMPLE_XCLBIN}")
    list(APPEND _xrtio_xrt_defs XRTIO_SAMPLE_XCLBIN="${XRTIO_SAMPLE_XCLBIN}")
  else()
    message(STATUS "xrtio: sample xclbin not found (${XRTIO_SAMPLE_XCLBIN}): cross-check tests not built")
  endif()

  xrtio_test(test_xrt_backend test_xrt_backend.cpp)
  target_compile_definitions(test_xrt_backend PRIVATE ${_xrtio_xrt_defs})
  add_dependencies(test_xrt_backend xrtio-mkxclbin)

  xrtio_test(test_xrt_tools test_xrt_tools.cpp)
  target_compile_definitions(test_xrt_tools PRIVATE ${_xrtio_xrt_defs})
  add_dependencies(test_xrt_tools xrtio-mkxclbin xrtio-info)
endif()
