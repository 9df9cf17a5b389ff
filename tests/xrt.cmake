# XRT suites (included from tests/CMakeLists.txt). They run against XRT's
# no-op device, set up by the tests themselves (xrt_backend::use_noop_device),
# and synthesize their xclbins with xrtio-mkxclbin.
# tests/data/vadd-noop.xclbin: a known-good xclbin made by other tools
# (kernel vadd, buffers a, b, c on bank 0, scalar n, one compute unit vadd_1)
# that xrtio-mkxclbin's output is cross-checked against.
set(XRTIO_SAMPLE_XCLBIN "${CMAKE_CURRENT_SOURCE_DIR}/data/vadd-noop.xclbin"
    CACHE FILEPATH "A known-good xclbin (kernel vadd) to cross-check xrtio-mkxclbin against")

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

  # The hw_context branch of the backend, compiled against declarations of
  # current XRT's API (tests/xrt_current_api/README.md): never linked.
  # -isystem on an implicit directory (Asio in /usr/include) would break
  # libstdc++'s #include_next: pass only the others.
  set(_xrtio_syntax_sys ${ASIO_INCLUDE_DIR} ${XRT_INCLUDE_DIR})
  list(REMOVE_ITEM _xrtio_syntax_sys ${CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES})
  # Both checks compile with their own fixed flags (check_syntax.cmake), not
  # the build's: a sanitizer build would repeat the plain build's check
  # exactly, at 15-19 s each (CI runs all three builds on 2 cores).
  if(NOT XRTIO_SANITIZE STREQUAL "")
    message(STATUS "xrtio: xrt.current_api_syntax* left to the build without sanitizers: they do not use the build's flags")
  else()
  add_test(NAME xrt.current_api_syntax
    COMMAND ${CMAKE_COMMAND}
      -DCXX=${CMAKE_CXX_COMPILER}
      "-DSRC=${XRTIO_XRT_SOURCES}"
      -DSHIM=${CMAKE_CURRENT_SOURCE_DIR}/xrt_current_api
      "-DINCLUDES=${PROJECT_SOURCE_DIR}/include"
      "-DSRC_ROOT=${PROJECT_SOURCE_DIR}/src"
      "-DSYSTEM_INCLUDES=${_xrtio_syntax_sys}"
      -DXRT_INCLUDE_DIR=${XRT_INCLUDE_DIR}
      -P ${CMAKE_CURRENT_SOURCE_DIR}/xrt_current_api/check_syntax.cmake)
  set_tests_properties(xrt.current_api_syntax PROPERTIES TIMEOUT 300)
  # The same check without the declarations (XRT 2.13's headers only) must
  # fail: the check cannot pass by compiling the 2.13 branch. Meaningless
  # where the installed XRT has hw_context itself.
  if(EXISTS "${XRT_INCLUDE_DIR}/xrt/xrt_hw_context.h" OR EXISTS "${XRT_INCLUDE_DIR}/experimental/xrt_hw_context.h")
    message(STATUS "xrtio: xrt.current_api_syntax_refuses_xrt_2_13 skipped: the installed XRT has hw_context")
  else()
  add_test(NAME xrt.current_api_syntax_refuses_xrt_2_13
    COMMAND ${CMAKE_COMMAND}
      -DCXX=${CMAKE_CXX_COMPILER}
      "-DSRC=${XRTIO_XRT_SOURCES}"
      -DSHIM=${CMAKE_CURRENT_SOURCE_DIR}/xrt_current_api/no-such-directory
      "-DINCLUDES=${PROJECT_SOURCE_DIR}/include"
      "-DSRC_ROOT=${PROJECT_SOURCE_DIR}/src"
      "-DSYSTEM_INCLUDES=${_xrtio_syntax_sys}"
      -DXRT_INCLUDE_DIR=${XRT_INCLUDE_DIR}
      -P ${CMAKE_CURRENT_SOURCE_DIR}/xrt_current_api/check_syntax.cmake)
  set_tests_properties(xrt.current_api_syntax_refuses_xrt_2_13 PROPERTIES
    TIMEOUT 300 PASS_REGULAR_EXPRESSION "XRTIO_EXPECT_HW_CONTEXT: xrt_hw_context.h was not found")
  endif()
  endif()

  # The backend's bounded wait (wait2 where present) with stand-in run types.
  xrtio_test(test_xrt_wait test_xrt_wait.cpp)
  target_include_directories(test_xrt_wait PRIVATE ${PROJECT_SOURCE_DIR}/src/backends/xrt)
  target_link_libraries(test_xrt_wait PRIVATE XRT::xrt_coreutil)

  xrtio_test(test_xrt_backend test_xrt_backend.cpp)
  # xrtio/xrt_native.hpp includes XRT's headers: users of it link XRT::xrt_coreutil too.
  target_link_libraries(test_xrt_backend PRIVATE XRT::xrt_coreutil)
  target_compile_definitions(test_xrt_backend PRIVATE ${_xrtio_xrt_defs})
  add_dependencies(test_xrt_backend xrtio-mkxclbin)

  # The backend's failure paths through its test seam (src/backends/xrt/xrt_fault_hook.hpp).
  xrtio_test(test_xrt_hook test_xrt_hook.cpp)
  target_include_directories(test_xrt_hook PRIVATE ${PROJECT_SOURCE_DIR}/src/backends/xrt)
  # XRT's headers, for the backend's xrt_api.hpp (which XRT, which version).
  target_link_libraries(test_xrt_hook PRIVATE XRT::xrt_coreutil)
  target_compile_definitions(test_xrt_hook PRIVATE ${_xrtio_xrt_defs})
  add_dependencies(test_xrt_hook xrtio-mkxclbin)

  # The backend when memory runs out. Replaces the global operator new: its own executable.
  xrtio_test(test_xrt_alloc test_xrt_alloc.cpp)
  # The backend's private types (xrt_types.hpp includes backends/run_pool.hpp).
  target_include_directories(test_xrt_alloc PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/src/backends/xrt)
  target_link_libraries(test_xrt_alloc PRIVATE XRT::xrt_coreutil)
  target_compile_definitions(test_xrt_alloc PRIVATE ${_xrtio_xrt_defs})
  add_dependencies(test_xrt_alloc xrtio-mkxclbin)

  # use_noop_device's temporary root, set up in forked children (the setup
  # is once per process): the parent process never sets it up.
  xrtio_test(test_xrt_noop_root test_xrt_noop_root.cpp)

  # XRT's no-op device completing at once (delay 0: its own process).
  xrtio_test(test_xrt_wakeups test_xrt_wakeups.cpp)
  target_compile_definitions(test_xrt_wakeups PRIVATE ${_xrtio_xrt_defs})
  add_dependencies(test_xrt_wakeups xrtio-mkxclbin)

  xrtio_test(test_xrt_tools test_xrt_tools.cpp)
  target_compile_definitions(test_xrt_tools PRIVATE ${_xrtio_xrt_defs})
  add_dependencies(test_xrt_tools xrtio-mkxclbin xrtio-info)
endif()
