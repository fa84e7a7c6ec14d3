# Sourced by scripts/setup.sh, test.sh and ci_fuzz.sh: cmake_generator BUILD_DIR sets the array
# `generator` to the -G option for configuring BUILD_DIR.
# A new build directory gets Ninja when it is installed (scripts/setup.sh installs ninja-build):
# Ninja starts a target's compiles as soon as the generated sources they include exist, while
# CMake's Makefiles start them only once every library the target links to is built, so on 2 cores
# one core idles through each library that the next ones wait for (docs/speed.md, fourteenth
# session). The same compile commands either way. An existing build directory keeps its generator
# (CMake refuses to change it), and so does a CMAKE_GENERATOR set in the environment.
cmake_generator() {
  generator=()
  if [ ! -f "$1/CMakeCache.txt" ] && [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null; then
    generator=(-G Ninja)
  fi
}
