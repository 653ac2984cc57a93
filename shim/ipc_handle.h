/* The 64 bytes of a legacy CUDA IPC handle that the shim gives out for its own memory: the
 * exporting process (pid and start time, so that a reused pid is told apart) and the allocation
 * (its base and the export's id, which the exporter never reuses). A magic marks it as ours; any
 * other handle goes to the driver, and a driver given ours answers with its invalid-handle
 * error (an importer that does not run under the shim). */
#ifndef VMMSHIM_IPC_HANDLE_H
#define VMMSHIM_IPC_HANDLE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define IPC_HANDLE_MAGIC "vmmshIPC"

typedef struct ipc_handle {
	char magic[8];
	uint32_t version;       /* 1 */
	uint32_t pid;
	uint64_t start_time;    /* /proc/PID/stat field 22 */
	uint64_t id;
	uint64_t base;          /* the allocation's base in the exporter */
	uint64_t size;
	uint64_t reserved[2];
} ipc_handle;

_Static_assert(sizeof(ipc_handle) == 64, "a legacy IPC handle has 64 bytes");

/* Fill h for this process's export. false when this process's start time cannot be read. */
bool ipc_handle_make(ipc_handle *h, uint64_t id, uint64_t base, uint64_t size);
/* Is bytes[0..64) one of ours (magic and version)? */
bool ipc_handle_parse(const void *bytes, ipc_handle *out);
/* The start time of pid (0 when it does not exist or cannot be read). */
uint64_t ipc_process_start_time(pid_t pid);

#endif
