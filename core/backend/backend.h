/* The device primitives core/ needs, and nothing else. This is the only door to a device driver:
 * cuda.c implements it over libcuda.so.1, acl.c over libascendcl.so. Both resolve the *real* driver
 * functions with dlopen + vmm_real_dlsym, never through the shim's exported hooks, so the heap and
 * the offload engine keep working while the shim's submission gate is closed.
 *
 * Conventions: every call returns a vmm_status and fills err on failure; an allocation that fails
 * for lack of device memory returns VMM_E_OOM (with the driver's code), any other driver failure
 * VMM_E_DRIVER. Device numbers are the driver's ordinals. Addresses are plain integers. */
#ifndef VMM_BACKEND_H
#define VMM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../vmm_error.h"

typedef uint64_t vmm_devptr;   /* a device virtual address */
typedef uint64_t vmm_phys;     /* a backend physical-memory handle (CUmemGenericAllocationHandle / aclrtDrvMemHandle) */
typedef void *vmm_stream;      /* a backend stream (CUstream / aclrtStream) */

#define VMM_MAX_DEVICES 16

typedef struct vmm_backend vmm_backend;

struct vmm_backend {
	const char *name; /* "cuda" or "acl": for messages only, never to decide anything */
	void *impl;       /* the implementation's own state */

	/* Abilities, set by the backend's open function; the core decides by these. (The optional
	 * entry points below are abilities too: NULL where the backend lacks them.) */
	bool parallel_release;  /* releasing handles from several threads at once is faster */

	/* Queries. */
	vmm_status (*device_count)(vmm_backend *be, int *count, vmm_error *err);
	/* Physical-memory granularity: every create/map size and reserve alignment is a multiple. */
	vmm_status (*granularity)(vmm_backend *be, int dev, size_t *bytes, vmm_error *err);
	/* The device's free and total memory as the driver reports them. */
	vmm_status (*mem_info)(vmm_backend *be, int dev, size_t *free_bytes, size_t *total_bytes,
			       vmm_error *err);
	/* The device the calling thread works on (cuCtxGetDevice / aclrtGetDevice); 0 if none yet. */
	vmm_status (*current_device)(vmm_backend *be, int *dev, vmm_error *err);

	/* Virtual address space. */
	vmm_status (*reserve)(vmm_backend *be, int dev, size_t size, size_t align, vmm_devptr *va,
			      vmm_error *err);
	vmm_status (*unreserve)(vmm_backend *be, int dev, vmm_devptr va, size_t size, vmm_error *err);

	/* Physical memory: create a handle of `size` bytes on dev; release it. */
	vmm_status (*create)(vmm_backend *be, int dev, size_t size, vmm_phys *handle, vmm_error *err);
	vmm_status (*release)(vmm_backend *be, vmm_phys handle, vmm_error *err);

	/* Map a whole handle at va (offset 0, as Ascend requires); unmap a run of whole mappings
	 * [va, va+size) (CUDA may cover several mappings in one call; Ascend unmaps one at a time). */
	vmm_status (*map)(vmm_backend *be, vmm_devptr va, size_t size, vmm_phys handle, vmm_error *err);
	vmm_status (*unmap)(vmm_backend *be, vmm_devptr va, size_t size, vmm_error *err);

	/* Grant read/write access to [va, va+size) to dev and to each device in peers (one call per
	 * contiguous range; Ascend grants the owner implicitly and ignores this for it). */
	vmm_status (*set_access)(vmm_backend *be, int dev, vmm_devptr va, size_t size,
				 const int *peers, int npeers, vmm_error *err);

	/* Wait for all work on dev: the primary (default) context, the green contexts (which the
	 * primary context's synchronization covers), every context the program made itself
	 * (reported with vmm_*_context_created below) and the calling thread's own context. */
	vmm_status (*synchronize)(vmm_backend *be, int dev, vmm_error *err);
	/* Optional (NULL: unknown): how many calls that submit device work the program has made,
	 * each counted after the driver accepted it (its call returned), read with acquire order.
	 * Set by whoever sees the program's calls (the shim), not by the backend: while it has not
	 * moved since a synchronization began, that synchronization still covers all the work there
	 * is, and the heap reuses freed memory without another one (heap_records.c). */
	uint64_t (*submitted)(vmm_backend *be);

	/* Host memory and copies, for the offload engine. */
	vmm_status (*host_alloc_pinned)(vmm_backend *be, size_t size, void **ptr, vmm_error *err);
	vmm_status (*host_free_pinned)(vmm_backend *be, void *ptr, vmm_error *err);
	vmm_status (*host_register)(vmm_backend *be, void *ptr, size_t size, vmm_error *err);
	vmm_status (*host_unregister)(vmm_backend *be, void *ptr, vmm_error *err);
	vmm_status (*stream_create)(vmm_backend *be, int dev, vmm_stream *stream, vmm_error *err);
	vmm_status (*stream_destroy)(vmm_backend *be, vmm_stream stream, vmm_error *err);
	vmm_status (*stream_synchronize)(vmm_backend *be, vmm_stream stream, vmm_error *err);
	vmm_status (*copy_d2h_async)(vmm_backend *be, void *dst, vmm_devptr src, size_t n,
				     vmm_stream stream, vmm_error *err);
	vmm_status (*copy_h2d_async)(vmm_backend *be, vmm_devptr dst, const void *src, size_t n,
				     vmm_stream stream, vmm_error *err);

	/* Release everything the backend holds itself (not the core's handles). */
	void (*close)(vmm_backend *be);

	/* Optional (CUDA only). The backend retains a device's primary context for its threads that
	 * have none (the control server's, the heap's own): then the program's last release of it is
	 * not the last, and the context would outlive the program's use of it. Called after a
	 * release of the program's that left the context active: lets go of the backend's retain
	 * and, when the context is still active (the program, or a library in it, holds another),
	 * retains it again. 0: that ended the context; 1: it is still active, as before; -1: the
	 * backend held no retain of it (or cannot tell), nothing changed. */
	int (*release_own_context)(vmm_backend *be, int dev);

	/* Optional (NULL where a backend lacks them), for the program's own VMM handles that sleep
	 * releases and wake re-creates (app_vmm.h): create a handle from the program's own
	 * allocation properties (prop: its CUmemAllocationProp, prop_size bytes, verbatim), and map
	 * [offset, offset + size) of a handle at va (the CUDA API takes an offset, but the driver
	 * refuses anything but the whole handle: tests/gpu/PROBE.md (k); Ascend as well).
	 * Without them the registry uses create and map, which covers whole handles at offset 0. */
	vmm_status (*create_with_prop)(vmm_backend *be, int dev, size_t size, const void *prop,
				       size_t prop_size, vmm_phys *handle, vmm_error *err);
	vmm_status (*map_at)(vmm_backend *be, vmm_devptr va, size_t size, size_t offset,
			     vmm_phys handle, vmm_error *err);

	/* Optional (NULL where a backend lacks them), for memory shared with other processes
	 * (legacy IPC, a pointer's handle exported by the program) and for giving an allocation
	 * a handle of its own:
	 * - shareable: do the handles create() makes on dev export as POSIX file descriptors?
	 *   (CUDA: asked of the driver once per device, and create() then requests that type;
	 *   Ascend exports a 64-bit token for listed pids instead, which is not supported);
	 * - export_fd: a new descriptor for handle, owned by the caller;
	 * - import_fd: a new handle (reference) for the memory behind fd, which the caller still
	 *   owns, and the device that memory is on;
	 * - copy_d2d_async: copy n bytes between device addresses on stream. */
	bool (*shareable)(vmm_backend *be, int dev);
	vmm_status (*export_fd)(vmm_backend *be, int dev, vmm_phys handle, int *fd,
				vmm_error *err);
	vmm_status (*import_fd)(vmm_backend *be, int fd, vmm_phys *handle, int *dev,
				vmm_error *err);
	vmm_status (*copy_d2d_async)(vmm_backend *be, vmm_devptr dst, vmm_devptr src, size_t n,
				     vmm_stream stream, vmm_error *err);
};

/* Open the CUDA backend over the real libcuda.so.1 (dlopen, cuInit). VMM_E_UNSUPPORTED when no
 * driver can be loaded; the caller then stays a pass-through. */
vmm_status vmm_backend_cuda_open(vmm_backend **out, vmm_error *err);

/* Open the Ascend backend over libascendcl.so. */
vmm_status vmm_backend_acl_open(vmm_backend **out, vmm_error *err);

/* The contexts the program makes itself, which no driver call lists: the shim reports each one
 * the driver made (cuCtxCreate_v2/_v3/_v4, aclrtCreateContext) with its device, and brackets each
 * destroy (begin before the driver's call, end after it with whether it succeeded). Every backend
 * of that kind drains them in synchronize; a context being destroyed is never touched (see
 * contexts.h). Process-wide, usable before any backend is open. created returns -1 when host
 * memory is out (the context would not be drained: the caller should refuse it). */
typedef enum vmm_ctx_kind { VMM_CTX_CUDA, VMM_CTX_ACL, VMM_CTX_KINDS } vmm_ctx_kind;
int vmm_context_created(vmm_ctx_kind kind, void *ctx, int dev);
void vmm_context_destroy_begin(vmm_ctx_kind kind, void *ctx);
void vmm_context_destroy_end(vmm_ctx_kind kind, void *ctx, bool destroyed);

/* Stream captures against device synchronizations (captures.c): a synchronization while the
 * program captures a stream breaks the capture. The shim brackets each capture (begin before
 * the driver's begin, which waits for the synchronizations in progress; end once the driver
 * ended one, or refused to begin it); a backend's synchronize runs between vmm_sync_begin, false
 * while any capture is in progress (do not synchronize then), and vmm_sync_end. Process-wide;
 * a forked child starts with none (vmm_captures_after_fork). */
void vmm_capture_begin(void);
void vmm_capture_end(void);
bool vmm_sync_begin(void);
/* Is any stream capture in progress in the process? (The heap then makes its memory on the
 * program's own thread, as it always did during a capture.) */
bool vmm_capture_active(void);
void vmm_sync_end(void);
void vmm_captures_after_fork(void);

#endif
