#!/usr/bin/env bash
# Installs every Debian package mobisim needs (idempotent; sudo only when not root),
# then configures a Release tree in ./build and builds the `mobisim` binary only (the quick start
# needs nothing else; scripts/test.sh builds the tests and benchmarks). Nothing else is downloaded.
#   scripts/setup.sh            # install + build
#   BUILD_DIR=out scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake make pkg-config
  libeigen3-dev libboost-dev libyaml-cpp-dev libhdf5-dev libgsl-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libsentencepiece-dev nlohmann-json3-dev
  libboost-mpi-dev openmpi-bin libopenmpi-dev clang libclang-rt-14-dev lld
  ninja-build python3 python3-matplotlib python3-h5py python3-pandas python3-yaml python3-simpy valgrind ccache
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

build=${BUILD_DIR:-build}
launcher=()
export CCACHE_BASEDIR="$PWD"   # cache hits across clones of the repository
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Unity builds halve a cold build (see CMakeLists.txt); MOBISIM_UNITY=OFF compiles file by file.
unity=(-DCMAKE_UNITY_BUILD="${MOBISIM_UNITY:-ON}")
source scripts/cmake_generator.sh
cmake_generator "$build"
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${unity[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target mobisim
echo "setup: built $build/mobisim"
