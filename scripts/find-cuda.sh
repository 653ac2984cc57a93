#!/bin/sh
# Prints the CUDA toolkit prefix: $CUDA_HOME, else the prefix of nvcc on PATH, else the standard
# prefix. Prints nothing (and exits 1) when none holds include/cuda.h.
for p in "${CUDA_HOME:-}" "${CUDA_PATH:-}" \
         "$(command -v nvcc 2>/dev/null | sed 's#/bin/nvcc$##')" /usr/local/cuda /opt/cuda; do
  if [ -n "$p" ] && [ -f "$p/include/cuda.h" ]; then echo "$p"; exit 0; fi
done
exit 1
