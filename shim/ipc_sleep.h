/* Legacy-IPC memory across a group sleep (docs/vmmctl.md, "How a group sleeps"). An importer
 * whose exporter sleeps in the same group unmaps and releases what it imported, keeping the range
 * reserved (ipc_sleep_release); the exporter, once every process that opened its exports sleeps,
 * copies its shared handles out and releases them with its own memory (vmm_share_release_allow),
 * so that the driver gets the memory back. At wake the exporter re-creates them at the same
 * addresses first, then each importer asks it again for the pieces as descriptors (share_open)
 * and maps them where they were (ipc_sleep_restore): the program's pointers stay valid. */
#ifndef VMMSHIM_IPC_SLEEP_H
#define VMMSHIM_IPC_SLEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../core/vmm_error.h"
#include "ipc_registry.h"

#define IPC_SLEEP_MAX_GROUP 64

/* "PID,PID,..." into out (at most max); returns how many. */
size_t ipc_sleep_parse_group(const char *s, pid_t *out, size_t max);

/* May this process's shared heap memory go with its sleep: every living process that opened one
 * of its exports is in the group (an exporter none opened qualifies too). */
bool ipc_sleep_exports_releasable(const pid_t *group, size_t n);

/* Unmap and release every import whose exporter is in the group, the ranges kept. On failure
 * nothing stays released (what was, is imported again from its exporter, awake at this point).
 * *count: how many were released (after a failure: nonzero when the undo failed and some stay
 * released; the process must then stay asleep, its device work held). *bytes (unless NULL):
 * what they mapped, the sleep's "imported" (as for the program's own shared handles). */
vmm_status ipc_sleep_release(const pid_t *group, size_t n, size_t *count, uint64_t *bytes,
			     vmm_error *err);

/* Import every released import again from its exporter and map it where it was, each wait
 * bounded by timeout_ms; *bytes: what they map. On failure every one of them is released again
 * (all or nothing). */
vmm_status ipc_sleep_restore(int timeout_ms, uint64_t *bytes, vmm_error *err);

/* The exporters of the released imports (up to max, each once); returns how many. */
size_t ipc_sleep_released_exporters(pid_t *out, size_t max);

#endif
