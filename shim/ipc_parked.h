/* Imported memory whose unmap the driver refused (ipc_parked.c). A closed import, or a failed
 * re-import of a group wake, is unmapped before its handles are released and its range given
 * back; where the driver refuses the unmap (twice), it stays mapped: releasing the handles under
 * the mapping, or giving the range back for another import to be mapped over, would leave
 * addresses pointing at memory we no longer account for. Such a mapping is parked here, counted
 * in the device's ipc_imported bytes, and unmapped, released and given back by the next
 * ipc_parked_retry (each open, close, group sleep and wake of imports tries). */
#ifndef VMMSHIM_IPC_PARKED_H
#define VMMSHIM_IPC_PARKED_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../core/backend/backend.h"
#include "ipc_registry.h"

/* Unmap [va, va+size), tried twice: false when the driver refused both times. */
bool ipc_unmap_twice(vmm_backend *be, vmm_devptr va, size_t size);

/* [va, va+size) on device would not unmap: keep it mapped with handles[0..n) (released once it
 * unmaps) and, when range_size is not 0, the reserved range [range, range+range_size) (given
 * back then). what says which operation, for the log. Where no host memory is left to keep the
 * record, nothing is released nor given back (held until exit), and that is logged. */
void ipc_parked_add(int device, vmm_devptr va, size_t size, const vmm_phys *handles, size_t n,
		    vmm_devptr range, size_t range_size, pid_t exporter, const char *what);

/* Try the parked mappings again; each one that unmaps leaves the list. */
void ipc_parked_retry(vmm_backend *be);

/* The range [range, range+size) is to be given back, and a parked mapping lies in it: the parked
 * record takes it over (gives it back once unmapped). false: none lies in it; the caller gives it
 * back now. */
bool ipc_parked_adopt_range(vmm_devptr range, size_t size);

/* Bytes still mapped on dev by parked records. */
uint64_t ipc_parked_bytes(int dev);

/* In a forked child: the parent's mappings are not the child's. */
void ipc_parked_after_fork(void);

#endif
