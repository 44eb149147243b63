# Cross-compiles for aarch64 with Debian's cross toolchain (g++-aarch64-linux-gnu), whose libc, libstdc++ and
# libgomp live in /usr/aarch64-linux-gnu. The other arm64 libraries come from MEMTRAIN_ARM64_SYSROOT, a folder
# the arm64 .deb files were unpacked into (scripts/cross-check-arm64.sh makes it). Test binaries run under
# qemu-aarch64, also when CMake lists the GoogleTest cases after a build.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

if(NOT MEMTRAIN_ARM64_SYSROOT)
  set(MEMTRAIN_ARM64_SYSROOT "$ENV{MEMTRAIN_ARM64_SYSROOT}")
endif()
if(NOT IS_DIRECTORY "${MEMTRAIN_ARM64_SYSROOT}")
  message(FATAL_ERROR "MEMTRAIN_ARM64_SYSROOT='${MEMTRAIN_ARM64_SYSROOT}' is not a folder")
endif()
# try_compile projects get the toolchain file again, without the cache: hand the sysroot on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES MEMTRAIN_ARM64_SYSROOT)

# Libraries, headers and CMake packages only from the arm64 folders; programs (python, qemu) from the host.
set(CMAKE_FIND_ROOT_PATH "${MEMTRAIN_ARM64_SYSROOT}" /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# This compiler also searches the host's /usr/include, whose amd64 dnnl_config.h differs: the arm64 headers
# come first.
string(APPEND CMAKE_CXX_FLAGS_INIT " -isystem ${MEMTRAIN_ARM64_SYSROOT}/usr/include")
# GCC notes that passing std::pair changed ABI in GCC 10.1: nothing here links code built before that.
string(APPEND CMAKE_CXX_FLAGS_INIT " -Wno-psabi")
# The linker has to find what the unpacked libraries need in turn (libopenblas needs libgfortran).
set(_arm64_libdir "${MEMTRAIN_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu")
string(APPEND CMAKE_EXE_LINKER_FLAGS_INIT " -Wl,-rpath-link,${_arm64_libdir}")
string(APPEND CMAKE_SHARED_LINKER_FLAGS_INIT " -Wl,-rpath-link,${_arm64_libdir}")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu -E "LD_LIBRARY_PATH=${_arm64_libdir}")
