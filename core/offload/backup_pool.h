/* Host backups for many handles, carved from a few large host buffers.
 *
 * A buffer of its own per handle costs one mmap and one registration (pinning) per handle: on the
 * H200 the first sleep of 96 GiB held in 46805 small handles took 54.7 s that way, against ~4.6 s
 * once pinned. A pool maps and pins host memory in chunks (64 MiB growing to 1 GiB; a request
 * larger than a chunk gets a chunk of its own size) and hands out pieces of whole 2 MiB units, so
 * the driver's per-call cost is paid per chunk. Any unit-aligned part of a piece can be given back
 * on its own (a sleep may back a run of handles with one piece and the handles go one by one); a
 * chunk whose units are all free is unmapped.
 *
 * Not thread-safe by itself beyond its own lock: every call takes it. */
#ifndef VMM_BACKUP_POOL_H
#define VMM_BACKUP_POOL_H

#include <stddef.h>

#include "copy_engine.h"

typedef struct vmm_backup_pool vmm_backup_pool;

/* NULL when the host has no memory for the pool's record. */
vmm_backup_pool *vmm_backup_pool_create(vmm_backend *be);
/* Frees every chunk, pieces still handed out included. */
void vmm_backup_pool_destroy(vmm_backup_pool *pool);

/* A piece of at least size bytes (whole units). VMM_E_HOST_OOM when the host cannot hold a new
 * chunk; `provision_now` touches and pins the piece's chunk segments before returning. */
vmm_status vmm_backup_get(vmm_backup_pool *pool, size_t size, int provision_now,
			  vmm_host_buf *out, vmm_error *err);
/* Give back a piece, or a unit-aligned part of one; clears *buf. */
void vmm_backup_put(vmm_backup_pool *pool, vmm_host_buf *buf);

/* What the pool holds: host bytes mapped in chunks, and bytes handed out. */
void vmm_backup_pool_bytes(vmm_backup_pool *pool, size_t *mapped, size_t *in_use);

#endif
