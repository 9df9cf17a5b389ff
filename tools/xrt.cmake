# XRT tools (included from tools/CMakeLists.txt): the xclbin synthesizer and
# the device/xclbin inspector. Built only when CMake found XRT.
if(XRT_FOUND)
  # Needs only XRT's xclbin.h (struct layouts); links nothing from XRT.
  # The parser and writer are a library of their own: the fuzz targets
  # (tests/fuzz) call parse_description and build_xclbin too.
  add_library(xrtio_mkxclbin STATIC
    mkxclbin/description.cpp mkxclbin/fields.cpp mkxclbin/uuid.cpp
    mkxclbin/sections.cpp mkxclbin/metadata_xml.cpp mkxclbin/xclbin_writer.cpp)
  target_include_directories(xrtio_mkxclbin PUBLIC ${XRT_INCLUDE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/mkxclbin)
  target_compile_options(xrtio_mkxclbin PRIVATE -Wall -Wextra)
  add_executable(xrtio-mkxclbin mkxclbin/main.cpp)
  target_link_libraries(xrtio-mkxclbin PRIVATE xrtio_mkxclbin)
  target_compile_options(xrtio-mkxclbin PRIVATE -Wall -Wextra)

  add_executable(xrtio-info xrtio-info.cpp)
  target_link_libraries(xrtio-info PRIVATE xrtio::xrtio)
  target_compile_options(xrtio-info PRIVATE -Wall -Wextra)

  install(TARGETS xrtio-mkxclbin xrtio-info)
else()
  message(STATUS "xrtio: xrtio-mkxclbin and xrtio-info not built (XRT not found or XRTIO_WITH_XRT=OFF)")
endif()
