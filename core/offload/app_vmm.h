/* Programs that use the VMM API themselves (PyTorch expandable segments, NCCL) create handles and
 * map them where they like. The shim passes those calls through and records them here, so that
 * sleep can copy out, unmap and release them, and wake can re-create, re-map at the same
 * addresses, re-grant the same access and copy back.
 *
 * Handles are translated: the program keeps the handle value it was given; after a wake the
 * registry maps it to the new real handle (vmm_app_real_handle). Handles that were exported as
 * shareable handles cannot be released (another process may map them): sleep leaves them mapped
 * and reports their bytes as not released. */
#ifndef VMM_APP_VMM_H
#define VMM_APP_VMM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../backend/backend.h"
#include "../stats_fields.h"
#include "transfer.h"
#include "../vmm_error.h"

typedef struct vmm_app_registry vmm_app_registry;

/* Access granted on a mapping: one bit per device ordinal with read/write access. */
typedef uint32_t vmm_access_mask;

vmm_status vmm_app_registry_create(vmm_backend *be, vmm_app_registry **out, vmm_error *err);
void vmm_app_registry_destroy(vmm_app_registry *reg);

/* Recording, called by the shim after the real call succeeded. `prop` is the program's
 * CUmemAllocationProp (or ACL equivalent) copied verbatim, so wake can create the same kind.
 * Prefer vmm_app_created_value: after a wake the driver may hand out a value that the program
 * still holds for a re-created handle, and only a value from the registry keeps them apart. */
void vmm_app_created(vmm_app_registry *reg, vmm_phys handle, size_t size, int device,
		     const void *prop, size_t prop_size);
/* As vmm_app_created, and returns the value to give the program. That is the real handle itself
 * unless an earlier handle's program-side value (kept across a wake, while its real handle
 * changed) already equals it; then the registry picks a value of its own, so that two program
 * handles never share a value. The shim should hand the program this value. 0: not recorded (no
 * host memory); the program then gets the real handle, which the registry does not know. */
vmm_phys vmm_app_created_value(vmm_app_registry *reg, vmm_phys real, size_t size, int device,
			       const void *prop, size_t prop_size);
void vmm_app_exported(vmm_app_registry *reg, vmm_phys handle);   /* shareable handle handed out */
/* A handle imported from another process (cuMemImportFromShareableHandle): never released by a
 * sleep (the exporter owns the memory), reported as unreleasable with the bytes mapped from it. */
void vmm_app_imported(vmm_app_registry *reg, vmm_phys handle, int device);
void vmm_app_released(vmm_app_registry *reg, vmm_phys handle);
/* The program exported handle (its value) as, or imported it from, the POSIX descriptor fd: the
 * registry keeps a duplicate (close-on-exec) until the handle goes, so that vmmctl can tell
 * which handles of which processes are one memory (kcmp(KCMP_FILE) on the duplicates) and a
 * group sleep knows who holds it. The duplicate keeps nothing alive longer than the handle
 * record (closed with it). Other descriptor types are not kept. */
void vmm_app_share_keep(vmm_app_registry *reg, vmm_phys handle, int fd);

#define VMM_APP_SHARE_FDS 8   /* duplicates listed per handle; more are counted */
typedef struct vmm_app_share {
	vmm_phys app;                     /* the program's value */
	int dev;
	uint64_t size;
	bool imported;                    /* false: this process created and exported it */
	unsigned nfds;                    /* the shim's duplicates, listed up to VMM_APP_SHARE_FDS */
	int fds[VMM_APP_SHARE_FDS];
	/* Descriptors of this process other than the shim's that are the same open file: the
	 * program holds the memory open, and no sleep can release it. -1 when that could not be
	 * told (kcmp refused or missing: kcmp_errno). */
	int program_fds;
	int program_fd;                   /* the first of them, or -1 */
	int kcmp_errno;                   /* 0, or why kcmp could not compare (EPERM, ENOSYS) */
	bool released;                    /* asleep, released by a group sleep (nfds is then 0) */
} vmm_app_share;
/* In a forked child: close the inherited duplicates, so that a child (a data-loader worker) does
 * not keep the parent's shared memory alive after the parent let it go. Takes no lock another
 * thread may have held at the fork: a fork waits for any change of the duplicates to end. */
void vmm_app_share_after_fork(vmm_app_registry *reg);
/* Up to cap shared handles (those with kept descriptors, and those a group sleep released), in
 * value order; the count of all. */
size_t vmm_app_share_list(vmm_app_registry *reg, vmm_app_share *out, size_t cap);

/* Releasing shared memory across a group sleep (docs/vmmctl.md, "How a group sleeps"). vmmctl
 * names, in each member's sleep, the shared handles whose every holder is a member: the next
 * sleep releases them too. An importer copies nothing (its exporter has the contents), unmaps
 * and releases its handle; an exporter copies its handle out and releases it like its own. Once
 * the sleep has succeeded the shim's duplicates of their descriptors are closed, so that the
 * driver frees the memory when the last member has let it go. At wake the exporter re-creates
 * it (same address, contents back); an importer asks its exporter for a new descriptor (the
 * refetch function), imports it and maps it where it was, under the program's handle value. */
typedef struct vmm_app_release {
	vmm_phys app;             /* the program's value in this process */
	pid_t exporter;           /* an import: the exporting process, and its value there; 0 for */
	vmm_phys exporter_value;  /* this process's own export */
	uint64_t exporter_start;  /* an import: the exporter's start time (0: unknown, unchecked) */
} vmm_app_release;
/* Mark the handles of list for the next sleep (a mark replaces the previous ones); those not
 * known, not shared or of the wrong role are skipped and counted in *skipped. */
void vmm_app_group_release(vmm_app_registry *reg, const vmm_app_release *list, size_t n,
			   size_t *skipped);
/* A new descriptor (owned by the caller) for the program's exported handle `app`, awake: what an
 * importer fetches at its wake. The registry keeps a duplicate, as for the program's exports. */
vmm_status vmm_app_share_export(vmm_app_registry *reg, vmm_phys app, int *fd, uint64_t *size,
				vmm_error *err);
/* Ask exporter (a pid) for a new descriptor of its handle exporter_value, giving up at deadline
 * (vmm_now_s time; 0: the function's own bound): 0 and *fd (owned by the caller), or a failure
 * with err filled: VMM_E_NOT_OURS when the exporter has ended (it took the
 * memory it released with it: the wake then maps fresh memory there, so that the program's
 * pointers do not fault, and logs that the contents are lost), also when its pid now names a
 * process of another start time (exporter_start, when not 0). Set by the shim, which talks to
 * other processes. */
typedef vmm_status (*vmm_app_refetch_fn)(pid_t exporter, uint64_t exporter_start,
					 vmm_phys exporter_value, double deadline, int *fd,
					 vmm_error *err);
void vmm_app_set_refetch(vmm_app_registry *reg, vmm_app_refetch_fn fn);
/* While on, a wake leaves the imports a group sleep released asleep (a member that exports and
 * imports wakes its exports first, so that its peers can fetch them, and its imports in a
 * second wake, once its peers' exports are back). */
void vmm_app_defer_imports(vmm_app_registry *reg, bool on);
   /* program dropped a reference */
/* References. The program holds one per cuMemCreate (or import) and one per
 * cuMemRetainAllocationHandle, and drops one per cuMemRelease; only when the last goes has it
 * released the handle. The driver keeps a single reference for all of them while the program
 * holds any (a wake re-creates a handle with one reference, whatever the program held before),
 * so only the last cuMemRelease may reach the driver.
 *
 * vmm_app_retained: the program retains the handle mapped at va. Counts the reference and
 * returns the program's value for it; 0 when va is in no tracked mapping (the call is then the
 * driver's alone). *driver_ref is set when the driver must take a reference too (the program had
 * released them all and the handle is awake): the caller retains from the driver and, should
 * that fail, takes the count back with vmm_app_released. */
vmm_phys vmm_app_retained(vmm_app_registry *reg, vmm_devptr va, bool *driver_ref);

enum vmm_app_release_action {
	VMM_APP_RELEASE_DRIVER,   /* call the driver with *real, then vmm_app_released on success */
	VMM_APP_RELEASE_COUNTED,  /* done: not the driver's reference, or an asleep handle */
	VMM_APP_RELEASE_INVALID,  /* the program holds no reference to this handle any more */
};
/* What the program's cuMemRelease of handle must do. Handles the registry does not know go to
 * the driver unchanged (*real = handle). COUNTED has already been recorded. */
enum vmm_app_release_action vmm_app_release_ref(vmm_app_registry *reg, vmm_phys handle,
						vmm_phys *real);
/* The program's allocation properties for a handle value, as recorded (answers
 * cuMemGetAllocationPropertiesFromHandle while the handle is asleep). false when unknown or
 * recorded with another size. */
bool vmm_app_prop_of(vmm_app_registry *reg, vmm_phys handle, void *prop, size_t prop_size);
void vmm_app_mapped(vmm_app_registry *reg, vmm_devptr va, size_t size, size_t offset,
		    vmm_phys handle);
void vmm_app_unmapped(vmm_app_registry *reg, vmm_devptr va, size_t size);
/* After a cuMemSetAccess over [va, va+size): rw is every device that has read/write access there
 * now (the shim asks the driver, since the call leaves devices it does not name as they were).
 * It replaces what the mappings inside the range had. */
void vmm_app_access_set(vmm_app_registry *reg, vmm_devptr va, size_t size, vmm_access_mask rw);
/* The devices in mask lost access (PROT_NONE) on the mappings inside [va, va+size). */
void vmm_app_access_revoke(vmm_app_registry *reg, vmm_devptr va, size_t size,
			   vmm_access_mask mask);

/* The real handle behind a program's handle value (itself unless a wake replaced it, or the
 * registry gave the program a value of its own). While that handle is asleep there is no real
 * handle: 0, and the call must not reach the driver. Values the registry does not know are
 * returned unchanged. */
vmm_phys vmm_app_real_handle(vmm_app_registry *reg, vmm_phys app_handle);
/* The program's value for a real handle (e.g. what cuMemRetainAllocationHandle answered);
 * unknown values are returned unchanged. */
vmm_phys vmm_app_program_handle(vmm_app_registry *reg, vmm_phys real);
/* Is va inside a tracked app mapping? */
bool vmm_app_contains(vmm_app_registry *reg, vmm_devptr va);

/* The fields and what each means are in stats_fields.h (VMM_APP_STATS). */
typedef struct vmm_app_stats {
	VMM_APP_STATS(VMM_STAT_U64_MEMBER)
} vmm_app_stats;
void vmm_app_stats_get(vmm_app_registry *reg, int dev, vmm_app_stats *out);

/* Same contract as vmm_sleep / vmm_wake (heap_offload.h), for the program's own mappings, and the
 * same within limits (the drain bounded, the limits looked at between steps). `opts->tag` must
 * be NULL: app mappings belong to no tag (VMM_E_ALREADY otherwise). The undo of a sleep is a
 * wake of the same device selection, and the undo of a wake a sleep of it that keeps contents. */
vmm_status vmm_app_sleep(vmm_app_registry *reg, const vmm_sleep_opts *opts,
			 vmm_transfer_result *res, vmm_error *err);
vmm_status vmm_app_wake(vmm_app_registry *reg, const vmm_sleep_opts *opts,
			vmm_transfer_result *res, vmm_error *err);
vmm_status vmm_app_sleep_within(vmm_app_registry *reg, const vmm_sleep_opts *opts,
				const vmm_limits *lim, vmm_transfer_result *res, vmm_error *err);
vmm_status vmm_app_wake_within(vmm_app_registry *reg, const vmm_sleep_opts *opts,
			       const vmm_limits *lim, vmm_transfer_result *res, vmm_error *err);
bool vmm_app_is_asleep(vmm_app_registry *reg, int device);
/* Allocate and provision (touch and pin) the host backup of every selected handle that lacks one,
 * so that the first sleep runs at link speed (the "provision ahead" setting). VMM_E_HOST_OOM,
 * before anything is allocated, when the host cannot hold them all. */
vmm_status vmm_app_provision_backup(vmm_app_registry *reg, const vmm_sleep_opts *opts,
				    vmm_error *err);

#endif
