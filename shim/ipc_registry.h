/* Who shares which memory through legacy CUDA IPC under the shim, queryable by anyone in the
 * process (status, a group sleep): on the exporting side, which pids opened which export (the
 * exported allocations themselves are the core's, vmm_share_list); on the importing side, every
 * handle opened here and where it is mapped. Thread-safe; fixed capacity (IPC_REGISTRY_MAX each). */
#ifndef VMMSHIM_IPC_REGISTRY_H
#define VMMSHIM_IPC_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../core/backend/backend.h"
#include "../core/offload/copy_engine.h"

#define IPC_REGISTRY_MAX 4096
#define IPC_IMPORT_MAX_PIECES 1024  /* VMM_SHARE_MAX_PIECES */

/* Exporting side: pid opened export id (recorded once per pair). */
void ipc_registry_importer(uint64_t id, pid_t pid);
/* The living pids that opened export id (up to max; some may have closed it since); returns how
 * many there are. */
size_t ipc_registry_importers(uint64_t id, pid_t *out, size_t max);

/* Importing side: one opened handle. */
typedef struct ipc_import {
	pid_t exporter;
	uint64_t start_time;        /* the exporter's, to tell a reused pid */
	uint64_t id;                /* the export's id there */
	vmm_devptr remote_base;     /* the allocation's base there */
	int device;                 /* here */
	int opener_device;          /* current when it was opened: granted access too */
	vmm_devptr span;            /* reserved and mapped here */
	size_t span_size;
	vmm_devptr base;            /* what the program got: span + (remote base - remote span) */
	size_t size;
	vmm_phys handles[IPC_IMPORT_MAX_PIECES];
	size_t nhandles;
	unsigned opens;             /* cuIpcOpenMemHandle calls not closed yet */
	/* A group sleep unmapped and released it (nhandles 0), the span kept reserved; the wake
	 * imports it again from the exporter (ipc_sleep.h). */
	bool released;
	/* While released: this process's own copy of [base, base + size), taken before the
	 * release (pinned host memory, owned by the table, taken with ipc_registry_take_backup;
	 * ptr NULL when none). Natively an import keeps the memory when its exporter dies; here
	 * the exporter's copy of it goes with the exporter, so the wake fills fresh memory from
	 * this one then. */
	vmm_host_buf backup;
	/* A wake has said that its exporter ended: once, although a wake undone (a later part
	 * failed) re-creates the memory from the copy at each try. */
	bool loss_said;
} ipc_import;

/* Find the import of (exporter, start_time, id) and count one more open: true with *out a copy. */
bool ipc_registry_reopen(pid_t exporter, uint64_t start_time, uint64_t id, ipc_import *out);
/* Record a new import (opens = 1). false when the table is full. */
bool ipc_registry_add(const ipc_import *imp);
/* One open fewer of the import whose base is base: true when there was one; *last and *out (a
 * copy, removed from the table) when that was its last open. */
bool ipc_registry_close(vmm_devptr base, bool *last, ipc_import *out);
/* The imports (up to max); returns how many there are. */
size_t ipc_registry_imports(ipc_import *out, size_t max);
/* The same without the handles (small enough for a reply's stack). */
typedef struct ipc_import_summary {
	pid_t exporter;
	uint64_t id;
	int device;
	vmm_devptr base;
	size_t span_size;
	unsigned opens;
} ipc_import_summary;
size_t ipc_registry_summaries(ipc_import_summary *out, size_t max);
/* Bytes mapped from other processes on dev, closed ones that would not unmap included
 * (ipc_parked.h). */
uint64_t ipc_registry_imported_bytes(int dev);

/* Every living pid that opened any export of ours (up to max); returns how many there are. */
size_t ipc_registry_all_importers(pid_t *out, size_t max);

/* Group sleep (ipc_sleep.c). Mark the import at span released (its handles gone) or mapped
 * again with handles[0..n): false when no import is at span any more (closed meanwhile). */
bool ipc_registry_set_released(vmm_devptr span, bool released, const vmm_phys *handles,
			       size_t n);

/* The copy of the import at span (ipc_import.backup): set, the table owning it from then on (freed
 * here when no import is at span: closed meanwhile), or taken out of the table into *out (ptr NULL
 * when there is none). */
void ipc_registry_set_backup(vmm_devptr span, const vmm_host_buf *backup);
void ipc_registry_take_backup(vmm_devptr span, vmm_host_buf *out);
/* Whether the loss of the exporter of the import at span is to be said now: true the first
 * time only. */
bool ipc_registry_loss_first_said(vmm_devptr span);

/* In a forked child: the parent's imports are not the child's to close. */
void ipc_registry_after_fork(void);

#endif
