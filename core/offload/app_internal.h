/* The registry of the program's own VMM handles and mappings, shared by app_registry.c (the
 * records) and app_offload.c (sleep and wake). Not a public contract. */
#ifndef VMM_APP_INTERNAL_H
#define VMM_APP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "app_vmm.h"
#include "copy_engine.h"

struct app_handle {
	vmm_phys app;            /* the value the program holds */
	vmm_phys real;           /* the driver's handle now; 0 while asleep */
	vmm_phys stale;          /* asleep: a failed wake's handle whose mappings (those marked
	                          * stuck) would not unmap, not released under them; unmapped and
	                          * released first at the next wake (app_offload.c); 0: none */
	size_t size;
	int dev;
	void *prop;              /* the program's allocation properties, verbatim */
	size_t prop_size;
	bool exported;           /* another process may map it: never released by us */
	bool imported;           /* another process's memory; size grows with its mappings */
	unsigned refs;           /* the program's references: 1 at create/import, +1 per retain */
	bool app_released;       /* refs reached 0; it lives while mapped */
	bool asleep;
	bool has_backup;         /* backup holds the contents (not a discard sleep); an import's:
	                          * the bytes this process maps, its own copy through a group
	                          * sleep, freed once the import is fetched again */
	bool refill;             /* an import whose exporter ended asleep: its wake made fresh
	                          * memory, which the copy back fills from backup */
	vmm_host_buf backup;     /* kept across cycles: pinned once, reused */
	unsigned nmaps;
	vmm_devptr tmp_va;       /* a temporary whole-handle mapping during a copy, or 0 */
	int *share_fds;          /* the shim's duplicates of the descriptors exported or imported
	                          * (app_share.c), closed with the handle */
	unsigned nshare_fds;
	/* A group sleep of every process that holds this shared memory (app_share.c). */
	bool group_release;      /* this sleep releases it (set for one sleep, then cleared) */
	bool group_released;     /* asleep, released by a group sleep: an import is fetched again
	                          * from its exporter at wake */
	pid_t exporter;          /* an import: the exporting process and its handle value */
	vmm_phys exporter_value;
	uint64_t exporter_start;  /* its start time, to tell a reused pid (0: unchecked) */
	/* On the registry's sharing list while share_fds holds any (app_share.c). */
	struct app_handle *share_next, **share_pprev;
};

struct app_map {
	vmm_devptr va;
	size_t size, offset;
	struct app_handle *h;
	vmm_access_mask rw;
	bool stuck;              /* asleep: still mapped to h->stale, the handle of a failed wake
	                          * that would not unmap here; the next wake unmaps it first */
};

struct vmm_app_registry {
	vmm_backend *be;
	pthread_mutex_t lock;
	struct app_handle **hs;  /* sorted by app value */
	size_t nh, caph;
	struct app_map *maps;    /* sorted by va */
	size_t nm, capm;
	vmm_phys next_value;     /* the registry's own program-side values */
	struct app_handle *sharing; /* the handles with duplicates: what a forked child closes */
	vmm_copy_engine *ce[VMM_MAX_DEVICES];
	vmm_app_refetch_fn refetch;  /* asks an exporter for its memory again (the shim's) */
	bool defer_imports;          /* wakes leave imports a group released asleep */
	double wake_deadline;        /* the running wake's (vmm_now_s), bounding its fetches; 0: none */
	/* Exports a group wake re-created, exported ahead for the importers' fetches (the fd is
	 * one of the handle's kept duplicates; app_reshare.c): answered under ready_lock alone, so
	 * that two members fetching from each other while each holds its own registry lock do not
	 * wait for each other. Entries go before their duplicates are closed. */
	pthread_mutex_t ready_lock;
	struct app_ready { vmm_phys app; uint64_t size; int fd; } *ready;
	size_t nready;
};

struct app_handle *app_find(vmm_app_registry *reg, vmm_phys app);
/* Sleep must leave h resident: exported or imported, or mapped in part where the backend cannot
 * map part of a handle again (no map_at). */
bool app_unreleasable(vmm_app_registry *reg, struct app_handle *h);
/* The mappings of h, in offset order (caller frees); NULL with *n = 0 when it has none. */
struct app_map **app_maps_of(vmm_app_registry *reg, struct app_handle *h, size_t *n);

/* Close the shim's duplicates of h's shareable descriptors (app_share.c). */
void app_share_fds_close(struct app_handle *h);
/* Keep a close-on-exec duplicate of fd with h (the registry locked), where a forked child finds
 * and closes it (app_share.c): the duplicate's number, or -1 (*no_memory says why). */
int app_share_fd_add(vmm_app_registry *reg, struct app_handle *h, int fd, bool *no_memory);
/* Sleep and wake of a handle a group sleep releases (app_share.c). The release of an import
 * keeps nothing (the exporter has the contents): its undo within the sleep imports the kept
 * duplicate again; at wake the exporter is asked for a new descriptor. */
vmm_status app_share_reimport(vmm_app_registry *reg, struct app_handle *h, vmm_error *err);
/* After a sleep that released hs[0..n): close the duplicates of those a group released (the
 * driver frees the memory once every holder has let it go). */
void app_share_released(vmm_app_registry *reg, struct app_handle **hs, size_t n);
/* Does the program itself hold one of h's shareable descriptors open (or can that not be told)?
 * Then the driver cannot free the memory, and no sleep releases it. */
bool app_share_program_holds(const struct app_handle *h);
/* After a wake restored hs[0..n): export ahead the group-released exports among them. */
void app_share_publish(vmm_app_registry *reg, struct app_handle **hs, size_t n);
/* Answer fetches of h from fd, one of its kept duplicates (the program's export, or one made
 * ahead at a wake), without the registry's lock. */
void app_share_ready_add(vmm_app_registry *reg, const struct app_handle *h, int fd);
/* Forget the descriptors made ahead for h (before its duplicates close). */
void app_share_unpublish(vmm_app_registry *reg, vmm_phys app);
#endif
