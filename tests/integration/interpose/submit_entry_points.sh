#!/bin/sh
# Every entry point of the driver that submits device work must be the shim's: a submission that
# went around it would run while a sleep has the memory unmapped, and would not be counted, so
# the heap could reuse freed memory without the synchronization that work needs. The driver's
# exports are read from the toolkit's stub libcuda.so (the same names as the driver's), the
# shim's from libvmmshim.so.
#
# Usage: submit_entry_points.sh LIBVMMSHIM CUDA_HOME
# Exempt: the memcpy/memset entry points of the pre-3.2 ABI (32-bit sizes; their _v2 forms are
# the ones every runtime since calls), which the shim leaves to the driver on purpose.
shim=$1
stub=$2/lib64/stubs/libcuda.so
[ -f "$stub" ] || stub=$2/targets/x86_64-linux/lib/stubs/libcuda.so
if [ ! -f "$stub" ]; then
	echo "no stub libcuda.so under $2: skipped"
	exit 77
fi
command -v nm >/dev/null || { echo "nm not found: skipped"; exit 77; }

exports() { nm -D --defined-only "$1" | awk '{ print $NF }' | sort -u; }
driver=$(exports "$stub")
ours=$(exports "$shim")
submitting='^cu(Launch|GraphLaunch|Memcpy|Memset|StreamWaitValue|StreamWriteValue|StreamBatchMemOp|StreamAddCallback|MemBatchDecompressAsync)'
missing=0
checked=0
for name in $(echo "$driver" | grep -E "$submitting"); do
	case $name in
	cuMemcpy* | cuMemset*)
		# pre-3.2: the driver also exports NAME_v2
		echo "$driver" | grep -qx "${name}_v2" && continue ;;
	esac
	checked=$((checked + 1))
	if ! echo "$ours" | grep -qx "$name"; then
		echo "not wrapped: $name"
		missing=$((missing + 1))
	fi
done
echo "$checked submitting entry points of the driver, $missing not wrapped"
[ "$checked" -gt 50 ] || { echo "too few found: is $stub the driver's stub?"; exit 1; }
[ "$missing" -eq 0 ]
