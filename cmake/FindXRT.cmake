# FindXRT: AMD/Xilinx XRT user-space library (xrt_coreutil only).
#
# Handles Debian's layout (headers in /usr/include/xrt, library in the
# multiarch dir, no CMake package, a broken xrt.pc) and upstream's
# (/opt/xilinx/xrt or $XILINX_XRT, include/xrt/xrt_bo.h). Links xrt_coreutil
# alone: xrt_core would shadow the no-op device (docs/DESIGN.md, "Testing without hardware").
#
# Defines XRT_FOUND, XRT_INCLUDE_DIR, XRT_COREUTIL_LIBRARY and the imported
# target XRT::xrt_coreutil.
set(_xrt_hints "$ENV{XILINX_XRT}" /opt/xilinx/xrt /usr)
find_path(XRT_INCLUDE_DIR
  NAMES xrt/xrt_bo.h
  HINTS ${_xrt_hints}
  PATH_SUFFIXES include/xrt include)
find_library(XRT_COREUTIL_LIBRARY
  NAMES xrt_coreutil
  HINTS ${_xrt_hints}
  PATH_SUFFIXES lib lib64 lib/${CMAKE_LIBRARY_ARCHITECTURE})
find_library(XRT_UUID_LIBRARY NAMES uuid)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(XRT REQUIRED_VARS XRT_INCLUDE_DIR XRT_COREUTIL_LIBRARY XRT_UUID_LIBRARY)
if(XRT_FOUND AND NOT TARGET XRT::xrt_coreutil)
  find_package(Threads REQUIRED)
  add_library(XRT::xrt_coreutil UNKNOWN IMPORTED)
  set_target_properties(XRT::xrt_coreutil PROPERTIES
    IMPORTED_LOCATION "${XRT_COREUTIL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${XRT_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${XRT_UUID_LIBRARY};Threads::Threads")
endif()
mark_as_advanced(XRT_INCLUDE_DIR XRT_COREUTIL_LIBRARY XRT_UUID_LIBRARY)
