# Toolchain: cross-build for aarch64 Linux with Debian's g++-aarch64-linux-gnu,
# and run the target's programs (CTest, doctest's test discovery) under
# qemu-user. tools/cross-aarch64.sh installs all of it and uses this file:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#
# Target libraries come only from the cross toolchain's sysroot
# (/usr/aarch64-linux-gnu: libc, libstdc++) and from XRTIO_AARCH64_DEPS, where
# the script unpacks Debian's arm64 liburing (installing liburing-dev:arm64
# would drag in libc6-dev:arm64 and upgrade host packages to match). So the
# host's x86-64 libraries, XRT's among them, are never found: XRT is x86-only
# on Debian, and the build leaves out the XRT backend, tools and tests.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(_xrtio_sysroot /usr/aarch64-linux-gnu)
if(DEFINED ENV{XRTIO_AARCH64_DEPS})
  set(XRTIO_AARCH64_DEPS "$ENV{XRTIO_AARCH64_DEPS}")
elseif(NOT XRTIO_AARCH64_DEPS)
  set(XRTIO_AARCH64_DEPS /opt/xrtio-aarch64-deps)
endif()

set(CMAKE_FIND_ROOT_PATH ${_xrtio_sysroot} ${XRTIO_AARCH64_DEPS})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)   # build tools are the host's
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)    # libraries: the target's only
# Headers and CMake packages may also come from the host: Asio and doctest are
# header-only and architecture-independent (Debian: Architecture all). A
# header found without its library (XRT's) finds nothing.
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config (liburing): only the target's .pc files, with their paths under
# the unpacked root.
set(ENV{PKG_CONFIG_LIBDIR} "${XRTIO_AARCH64_DEPS}/usr/lib/aarch64-linux-gnu/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${XRTIO_AARCH64_DEPS}")
unset(ENV{PKG_CONFIG_PATH})

# Test programs run under qemu-user: the toolchain's sysroot for the dynamic
# loader, libc and libstdc++; liburing.so.2 from the unpacked root.
find_program(XRTIO_QEMU_AARCH64 qemu-aarch64)
if(XRTIO_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${XRTIO_QEMU_AARCH64} -L ${_xrtio_sysroot}
      -E LD_LIBRARY_PATH=${XRTIO_AARCH64_DEPS}/usr/lib/aarch64-linux-gnu)
endif()
