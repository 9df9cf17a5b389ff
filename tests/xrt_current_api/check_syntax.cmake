# CTest xrt.current_api_syntax: compiles every src/backends/xrt/ source with
# -fsyntax-only against the declaration-only current-XRT headers in this
# directory (README.md), so its hw_context branch is compiled in CI although
# only XRT 2.13 is installed. Fails when:
#  - the compile fails;
#  - the hw_context branch was not the one compiled (XRTIO_EXPECT_HW_CONTEXT
#    makes xrt_api.hpp #error), or xrt::run's wait2 was not detected
#    (XRTIO_EXPECT_WAIT2 makes it static_assert);
#  - any of the installed (2.13) XRT C++ headers was used instead of these.
#
# Inputs: CXX, SRC (the source file), SHIM (this directory), INCLUDES (the
# project's include dirs, ';'-separated), SYSTEM_INCLUDES (Asio's and XRT's),
# XRT_INCLUDE_DIR.
foreach(v CXX SRC SHIM INCLUDES SYSTEM_INCLUDES XRT_INCLUDE_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_syntax.cmake: ${v} not set")
  endif()
endforeach()

# The library's own definitions (CMakeLists.txt: no ASIO_NO_DEPRECATED).
set(flags -std=c++20 -Wall -Wextra -DXRTIO_HAS_XRT=1 -DASIO_DISABLE_STD_ALIGNED_ALLOC
          -DXRTIO_EXPECT_HW_CONTEXT=1 -DXRTIO_EXPECT_WAIT2=1 -I${SHIM})
foreach(d IN LISTS INCLUDES)
  list(APPEND flags -I${d})
endforeach()
if(SRC_ROOT)  # the library's private headers (src/backends/run_pool.hpp, ...)
  list(APPEND flags -I${SRC_ROOT})
endif()
foreach(d IN LISTS SYSTEM_INCLUDES)
  list(APPEND flags -isystem ${d})
endforeach()

execute_process(COMMAND ${CXX} ${flags} -fsyntax-only ${SRC}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the XRT backend does not compile against current XRT's API (${SHIM}):\n${out}${err}")
endif()
if(err)
  message(STATUS "compiler diagnostics:\n${err}")
endif()

# Which headers did that compile read?
execute_process(COMMAND ${CXX} ${flags} -M ${SRC}
                RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dependency scan failed:\n${err}")
endif()
string(REPLACE "\\\n" " " deps "${deps}")
string(REGEX REPLACE "[ \t\r\n]+" ";" deps "${deps}")
set(shim_used 0)
set(version_used 0)
foreach(d IN LISTS deps)
  if(d MATCHES "xrt_current_api/xrt/detail/version-slim.h$")
    set(version_used 1)
  endif()
  if(d MATCHES "^${XRT_INCLUDE_DIR}/((xrt|experimental)/|version\\.h$)")
    message(FATAL_ERROR "the syntax check read the installed XRT C++ header ${d}: "
                        "a header the XRT backend includes is missing from ${SHIM}")
  endif()
  if(d MATCHES "xrt_current_api/xrt/xrt_hw_context.h$")
    set(shim_used 1)
  endif()
endforeach()
if(NOT version_used)
  message(FATAL_ERROR "the syntax check did not read ${SHIM}/xrt/detail/version-slim.h (current XRT's version)")
endif()
if(NOT shim_used)
  message(FATAL_ERROR "the syntax check did not read ${SHIM}/xrt/xrt_hw_context.h")
endif()
message(STATUS "the XRT backend compiles against current XRT's API (hw_context, wait2)")
