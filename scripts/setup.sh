#!/usr/bin/env bash
# Installs what building and testing vmmshim needs on a Debian machine, only what is missing:
# meson, ninja, pkg-config, Criterion, clang with its fuzzer runtime; for the Python package's
# tests Debian's python3 with pytest, setuptools, wheel and pip (pip install --no-build-isolation,
# offline); python3-prometheus-client, whose parser checks `vmmctl metrics`; man-db to render
# the man pages. Sourced by demo.sh and test.sh.
# The CUDA toolkit's headers are not installed here: they are found through CUDA_HOME, nvcc on
# PATH or /usr/local/cuda (scripts/find-cuda.sh), with a clear error when absent.
set -euo pipefail

need=()
command -v meson >/dev/null || need+=(meson)
command -v ninja >/dev/null || need+=(ninja-build)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v cc >/dev/null || need+=(gcc)
if [ "${VMMSHIM_SETUP_TESTS:-0}" = 1 ]; then
  pkg-config --exists criterion 2>/dev/null || need+=(libcriterion-dev)
  command -v clang >/dev/null || need+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 \
    || need+=(libclang-rt-14-dev)
  # Debian's own interpreter: its packages are what the Python tests and the offline pip use.
  for m in pytest:python3-pytest setuptools:python3-setuptools wheel:python3-wheel \
           pip:python3-pip prometheus_client:python3-prometheus-client; do
    /usr/bin/python3 -c "import ${m%%:*}" 2>/dev/null || need+=("${m#*:}")
  done
  command -v man >/dev/null || need+=(man-db)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
      echo "setup: need root to install: ${need[*]} (run: apt-get install -y ${need[*]})" >&2; exit 1; fi
  else SUDO=""; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! CUDA_HOME_FOUND=$("$(dirname "$0")/find-cuda.sh"); then
  echo "setup: the CUDA toolkit's headers (include/cuda.h) were not found." >&2
  echo "       Set CUDA_HOME to the toolkit prefix, put nvcc on PATH, or install the toolkit" >&2
  echo "       under /usr/local/cuda. Only its headers are needed; no GPU is needed." >&2
  exit 1
fi
export CUDA_HOME="$CUDA_HOME_FOUND"
