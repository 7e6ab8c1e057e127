# Cross-compiling for AArch64 Linux with Debian's g++-aarch64-linux-gnu, against Debian's arm64
# libraries installed with multiarch (libfmt-dev:arm64 ...; scripts/install_deps.sh --tests):
# their headers are in /usr/include and /usr/include/aarch64-linux-gnu, which the Debian cross
# compiler searches itself, and their libraries and CMake packages in /usr/lib/aarch64-linux-gnu.
# Used by scripts/cross-build.sh; tests run under qemu-user (scripts/qemu-run.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# gtest_discover_tests runs each test binary at build time to list its cases.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/aarch64-linux-gnu)
# pkg-config (PCRE2, utf8proc) reads the arm64 packages' .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
