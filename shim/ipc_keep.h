/* Exports made ahead (vmm_share_keep): cuIpcGetMemHandle queues its allocation here, and a thread
 * of the shim (vmmshim-ipc, started at the first get) exports the physical handles under it and
 * keeps the descriptors, so that an open is answered with duplicates instead of waiting for the
 * driver's export (about a millisecond per GiB). An open that comes first exports as before
 * (share_open.c); nobody ever waits for this thread. The queue holds IPC_KEEP_QUEUE entries;
 * beyond that a get queues nothing (its first open exports). */
#ifndef VMMSHIM_IPC_KEEP_H
#define VMMSHIM_IPC_KEEP_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/heap.h"

#define IPC_KEEP_QUEUE 256

/* Export the allocation at base (export id) ahead, on the shim's thread. Never blocks on it. */
void ipc_keep_queue(vmm_core *core, vmm_devptr base, uint64_t id);

/* Exit: stop the thread, waiting at most wait_ms for the export it is doing. true when it does
 * nothing any more (the core may be destroyed). */
bool ipc_keep_shutdown(int wait_ms);

/* In a forked child: no thread, nothing queued; the parent's kept descriptors are closed. */
void ipc_keep_after_fork(vmm_core *core);

#endif
