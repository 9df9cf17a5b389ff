# Installs the built xrtio into a scratch prefix, then configures, builds and
# runs a separate project that finds it with find_package(xrtio), and builds
# and runs its program twice more without CMake: with the README's command
# line, and with the flags of the installed xrtio.pc (README, "Use it from
# another CMake project").
set(prefix "${BIN}/package-test/prefix")
file(REMOVE_RECURSE "${BIN}/package-test")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BIN}" --prefix "${prefix}" RESULT_VARIABLE r)
if(r)
  message(FATAL_ERROR "install failed: ${r}")
endif()
set(cross "")
if(TOOLCHAIN)
  set(cross "-DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN}")
endif()
string(REPLACE "|" ";" EMULATOR "${EMULATOR}")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SRC}/tests/package" -B "${BIN}/package-test/build"
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_FLAGS=${FLAGS} -DCMAKE_EXE_LINKER_FLAGS=${FLAGS} ${cross} RESULT_VARIABLE r)
if(r)
  message(FATAL_ERROR "configure of the consumer failed: ${r}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${BIN}/package-test/build" RESULT_VARIABLE r)
if(r)
  message(FATAL_ERROR "build of the consumer failed: ${r}")
endif()
# Runs a built consumer (under the emulator of a cross build); fails the test
# if it fails. LD_LIBRARY_PATH finds a shared libxrtio in the scratch prefix.
function(run_consumer name)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${prefix}/lib:${prefix}/lib64:$ENV{LD_LIBRARY_PATH}"
                          ${EMULATOR} "${BIN}/package-test/build/${name}" RESULT_VARIABLE r OUTPUT_VARIABLE out)
  message(STATUS "${name} printed: ${out}")
  if(r)
    message(FATAL_ERROR "${name} failed: ${r}")
  endif()
endfunction()
run_consumer(consumer)
# The XRT consumer, where xrtio was built with XRT: the package must then
# define XRT::xrt_coreutil, so the consumer exists.
if(WITH_XRT)
  if(NOT EXISTS "${BIN}/package-test/build/consumer_xrt")
    message(FATAL_ERROR "xrtio was built with XRT, but the package defined no XRT::xrt_coreutil for consumer_xrt")
  endif()
  run_consumer(consumer_xrt)
endif()
# The README's command line without CMake: the defines the package would
# have set, the libraries it would have linked, -I/-L for the prefix only.
# That line assumes Asio in the compiler's default path, as Debian installs
# it (main.cpp includes no XRT header); elsewhere (and in a cross build,
# where the README's line is not the toolchain's) it is not tried, and says
# so.
if(TOOLCHAIN)
  message(STATUS "consumer_plain: SKIPPED in a cross build (the README's command line is the host's; the CMake consumer ran)")
elseif(NOT ASIO_INCLUDE STREQUAL "/usr/include")
  message(STATUS "consumer_plain: SKIPPED: Asio's headers are in ${ASIO_INCLUDE}, not /usr/include; the README's line assumes Debian's")
else()
  set(defs -DASIO_DISABLE_STD_ALIGNED_ALLOC)
  set(libs -lxrtio -luring)
  if(WITH_XRT)
    list(APPEND defs -DXRTIO_HAS_XRT=1)
    list(APPEND libs -lxrt_coreutil -luuid)
  endif()
  separate_arguments(flag_list UNIX_COMMAND "${FLAGS}")
  if(IS_ABSOLUTE "${INCLUDEDIR}")
    set(inc "${INCLUDEDIR}")
  else()
    set(inc "${prefix}/${INCLUDEDIR}")
  endif()
  if(IS_ABSOLUTE "${LIBDIR}")
    set(lib "${LIBDIR}")
  else()
    set(lib "${prefix}/${LIBDIR}")
  endif()
  set(cmd ${CXX} -std=c++20 ${flag_list} ${defs} "-I${inc}" "${SRC}/tests/package/main.cpp" "-L${lib}" ${libs}
      -pthread -o "${BIN}/package-test/build/consumer_plain")
  string(REPLACE ";" " " shown "${cmd}")
  message(STATUS "consumer_plain: ${shown}")
  execute_process(COMMAND ${cmd} RESULT_VARIABLE r ERROR_VARIABLE err)
  if(r)
    message(FATAL_ERROR "the README's command line without CMake failed (${r}): ${err}")
  endif()
  run_consumer(consumer_plain)
  # The same through the installed xrtio.pc (README: `pkg-config --cflags
  # --libs xrtio`), found through PKG_CONFIG_PATH as a user of a non-default
  # prefix would.
  if(NOT PKG_CONFIG)
    message(FATAL_ERROR "pkg-config was not found, though the build itself needs it (liburing)")
  endif()
  set(pc_path "${lib}/pkgconfig")
  if(NOT EXISTS "${pc_path}/xrtio.pc")
    message(FATAL_ERROR "the install has no ${pc_path}/xrtio.pc")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pc_path}" ${PKG_CONFIG} --cflags --libs xrtio
    RESULT_VARIABLE r OUTPUT_VARIABLE pc_flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(r)
    message(FATAL_ERROR "pkg-config --cflags --libs xrtio failed (${r}): ${err}")
  endif()
  message(STATUS "consumer_pc: pkg-config --cflags --libs xrtio: ${pc_flags}")
  foreach(d IN LISTS defs)
    string(FIND " ${pc_flags} " " ${d} " at)
    if(at EQUAL -1)
      message(FATAL_ERROR "xrtio.pc's flags lack ${d}: ${pc_flags}")
    endif()
  endforeach()
  separate_arguments(pc_list UNIX_COMMAND "${pc_flags}")
  # Builds `source` with those flags as `name`, then runs it.
  function(build_with_pc name source)
    execute_process(COMMAND ${CXX} -std=c++20 ${flag_list} "${SRC}/tests/package/${source}" ${pc_list}
                            -o "${BIN}/package-test/build/${name}" RESULT_VARIABLE r ERROR_VARIABLE err)
    if(r)
      message(FATAL_ERROR "${name}: the build through pkg-config failed (${r}): ${err}")
    endif()
    run_consumer(${name})
  endfunction()
  build_with_pc(consumer_pc main.cpp)
  # The XRT consumer through the same flags: xrtio/xrt_native.hpp needs
  # XRT's include directory, which xrtio.pc gives with XRT.
  if(WITH_XRT)
    build_with_pc(consumer_pc_xrt xrt_native.cpp)
  endif()
endif()
