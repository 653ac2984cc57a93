/* The registry of the program's own VMM handles and mappings, shared by app_registry.c (the
 * records) and app_offload.c (sleep and wake). Not a public contract. */
#ifndef VMM_APP_INTERNAL_H
#define VMM_APP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "app_vmm.h"
#include "copy_engine.h"

struct app_handle {
	vmm_phys app;            /* the value the program holds */
	vmm_phys real;           /* the driver's handle now; 0 while asleep */
	vmm_phys stale;          /* asleep: a failed wake's handle whose mappings would not unmap,
	                          * not released under them; unmapped and released first at the
	                          * next wake (app_offload.c); 0: none */
	size_t size;
	int dev;
	void *prop;              /* the program's allocation properties, verbatim */
	size_t prop_size;
	bool exported;           /* another process may map it: never released by us */
	bool imported;           /* another process's memory; size grows with its mappings */
	unsigned refs;           /* the program's references: 1 at create/import, +1 per retain */
	bool app_released;       /* refs reached 0; it lives while mapped */
	bool asleep;
	bool has_backup;         /* backup holds the contents (not a discard sleep) */
	vmm_host_buf backup;     /* kept across cycles: pinned once, reused */
	unsigned nmaps;
	vmm_devptr tmp_va;       /* a temporary whole-handle mapping during a copy, or 0 */
	int *share_fds;          /* the shim's duplicates of the descriptors exported or imported
	                          * (app_share.c), closed with the handle */
	unsigned nshare_fds;
};

struct app_map {
	vmm_devptr va;
	size_t size, offset;
	struct app_handle *h;
	vmm_access_mask rw;
};

struct vmm_app_registry {
	vmm_backend *be;
	pthread_mutex_t lock;
	struct app_handle **hs;  /* sorted by app value */
	size_t nh, caph;
	struct app_map *maps;    /* sorted by va */
	size_t nm, capm;
	vmm_phys next_value;     /* the registry's own program-side values */
	vmm_copy_engine *ce[VMM_MAX_DEVICES];
};

struct app_handle *app_find(vmm_app_registry *reg, vmm_phys app);
/* Sleep must leave h resident: exported or imported, or mapped in part where the backend cannot
 * map part of a handle again (no map_at). */
bool app_unreleasable(vmm_app_registry *reg, struct app_handle *h);
/* The mappings of h, in offset order (caller frees); NULL with *n = 0 when it has none. */
struct app_map **app_maps_of(vmm_app_registry *reg, struct app_handle *h, size_t *n);

/* Close the shim's duplicates of h's shareable descriptors (app_share.c). */
void app_share_fds_close(struct app_handle *h);
#endif
