#!/usr/bin/env bash
# Installs the Debian packages needed to build and test simpler.
# Idempotent: packages that are already installed are left alone, and apt is
# only run when something is missing.
set -euo pipefail

packages=(g++ cmake ninja-build catch2 libfmt-dev libboost-dev libssl-dev clang-format
  clang-14 libclang-rt-14-dev  # clang + libFuzzer for the fuzz preset
  iproute2 util-linux          # ip netns and unshare, for the multi-host tests
  libopenmpi-dev openmpi-bin   # Open MPI: the optional MPI transport (SIMPLER_WITH_MPI) and mpirun
  libtbb-dev libomp-dev)       # bench_engine's oneTBB and libomp (clang) peers; optional

is_installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'
}

if ! command -v dpkg >/dev/null 2>&1; then
  echo "setup.sh: dpkg not found; not a Debian-based system." >&2
  echo "setup.sh: install these (or equivalents) yourself: ${packages[*]}" >&2
  exit 1
fi

missing=()
for pkg in "${packages[@]}"; do
  if is_installed "$pkg"; then
    echo "setup.sh: $pkg is installed"
  elif [[ "$pkg" == clang-format ]] && is_installed clang-format-14; then
    echo "setup.sh: clang-format-14 is installed (used for clang-format)"
  else
    echo "setup.sh: $pkg is missing"
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup.sh: nothing to install"
  exit 0
fi

as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup.sh: running apt-get update"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
echo "setup.sh: installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
echo "setup.sh: installed ${missing[*]}"
