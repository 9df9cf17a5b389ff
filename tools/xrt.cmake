# XRT tools (included from tools/CMakeLists.txt): the xclbin synthesizer and
# the device/xclbin inspector. Built only when CMake found XRT.
if(XRT_FOUND)
  # Needs only XRT's xclbin.h (struct layouts); links nothing from XRT.
  add_executable(xrtio-mkxclbin
    mkxclbin/main.cpp mkxclbin/description.cpp mkxclbin/fields.cpp mkxclbin/uuid.cpp
    mkxclbin/sections.cpp mkxclbin/metadata_xml.cpp mkxclbin/xclbin_writer.cpp)
  target_include_directories(xrtio-mkxclbin PRIVATE ${XRT_INCLUDE_DIR})
  target_compile_options(xrtio-mkxclbin PRIVATE -Wall -Wextra)

  add_executable(xrtio-info xrtio-info.cpp)
  target_link_libraries(xrtio-info PRIVATE xrtio::xrtio)
  target_compile_options(xrtio-info PRIVATE -Wall -Wextra)

  install(TARGETS xrtio-mkxclbin xrtio-info)
else()
  message(STATUS "xrtio: xrtio-mkxclbin and xrtio-info not built (XRT not found or XRTIO_WITH_XRT=OFF)")
endif()
