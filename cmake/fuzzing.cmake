# XRTIO_FUZZ=ON: the libFuzzer build (tools/fuzz.sh). Every target is
# compiled with libFuzzer's coverage instrumentation, AddressSanitizer and
# UndefinedBehaviorSanitizer (no recovery: a report is a crash libFuzzer
# keeps the input of); tests/fuzz links its targets with -fsanitize=fuzzer.
option(XRTIO_FUZZ "Build the libFuzzer targets in tests/fuzz (clang; see tools/fuzz.sh)" OFF)
if(XRTIO_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "XRTIO_FUZZ=ON needs clang (CXX=clang++), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(NOT XRTIO_SANITIZE STREQUAL "")
    message(FATAL_ERROR "XRTIO_FUZZ=ON brings ASan + UBSan itself: leave XRTIO_SANITIZE empty")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
