/* simdev internals shared by the simulated libcuda.so.1 and libascendcl.so. Each library links
 * its own copy (a static library of hidden symbols), so each has its own devices, counters and
 * stats file. Nothing here is exported. */
#ifndef SIMDEV_INTERNAL_H
#define SIMDEV_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define SIM_MAX_DEVICES 16
#define SIM_GRANULARITY ((size_t)2 << 20)
#define SIM_DEFAULT_MEMORY ((size_t)16 << 30)

/* One per exported function: how often it was called. Linked into a list on first call. */
struct sim_counter {
	const char *name;
	atomic_ulong calls;
	atomic_int linked;
	struct sim_counter *next;
};

struct sim_config {
	size_t memory;  /* capacity per device, bytes (a SIMDEV_SHARED group's, when in one) */
	int devices;    /* number of devices */
	const char *stats_path;
	const char *shared;      /* SIMDEV_SHARED: the group's name, or NULL */
	unsigned lock_stall_ms;  /* SIMDEV_LOCK_STALL: tests hold the group lock this long */
	unsigned copy_delay_ms;  /* SIMDEV_COPY_DELAY: a stream's copies and memsets start this late */
	bool partial_map;        /* SIMDEV_PARTIAL_MAP=1: cuMemMap takes part of a handle, as its
				  * documentation leaves open; the H100's driver does not */
};

/* Reads the environment once (at first use), then counts the call and says whether SIMDEV_FAIL
 * asks this call to fail. */
bool sim_enter(struct sim_counter *c);
const struct sim_config *sim_config(void);
/* Defined by each library: "cuda" or "acl" (acl prefers SIMDEV_ACL_STATS for its stats file). */
extern const char sim_lib_name[];

/* Count the call of exported function `fname_`; return `failcode` from the caller when an injected
 * failure is due. */
#define SIM_BEGIN(fname_, failcode)                                              \
	do {                                                                   \
		static struct sim_counter sim_ctr_ = { .name = (fname_) };       \
		if (sim_enter(&sim_ctr_))                                      \
			return (failcode);                                     \
	} while (0)

/* ---- capacity: per process, or shared by a SIMDEV_SHARED group (sim_group.c) ---- */

/* Names one allocation in a memory file: the file's device and inode, and where it starts. */
struct sim_key {
	uint64_t dev, ino, off;
};

/* An object in the group's table: memory more than one process may hold, counted once. */
struct sim_objref {
	int idx; /* -1: not in the group (memory of a process outside it) */
	uint64_t gen;
};

/* Joins SIMDEV_SHARED's group (or makes this process's own); may change cfg->memory to the
 * group's capacity. Called once, from the configuration. */
void sim_group_init(struct sim_config *cfg);
/* Charge/uncharge device bytes held by this process alone; false when over the capacity or the
 * group could not be reached in time (a message says which). */
bool sim_charge(int dev, size_t bytes);
void sim_uncharge(int dev, size_t bytes);
/* Memory a forked child inherited: its own copy of the counters holds it, a group member does not. */
void sim_uncharge_inherited(int dev, size_t bytes);
/* Device bytes in use (the whole group's); false when the group could not be reached in time. */
bool sim_used(int dev, size_t *out);
/* A new memory file for this process: in a group, a file beside the table that any member can
 * open (*k numbers it); -2 when the process keeps its memory in memfds; -1 on failure. */
int sim_group_new_file(int *k);
/* Move `size` bytes charged to this process into a shared object that it holds (first export);
 * its memory is in this process's file number `file` (-1: a memfd), open as `fd`. */
bool sim_group_share(const struct sim_key *k, int dev, size_t size, int file, int fd,
		     struct sim_objref *out);
/* Hold the group's object for k, if the group has one (an import); else out->idx = -1. */
void sim_group_hold(const struct sim_key *k, struct sim_objref *out);
/* This process no longer holds the memory (it released its locks on fd's range first). True when
 * nobody does any more: the caller frees the bytes. */
bool sim_group_drop(const struct sim_objref *ref, int fd, const struct sim_key *k);
/* For SIMDEV_STATS: device bytes this process holds now, and the most it held. */
void sim_group_bytes(size_t *live, size_t *peak);
/* The most held starts again from what is held now (simdev_memory_peak_reset). */
void sim_group_peak_reset(void);

/* ---- where device memory lives: ranges of memory files (sim_store.c) ---- */

struct sim_file {
	int fd;            /* this process's own open file description of it */
	uint64_t kdev, kino;
	uint64_t next;     /* created here: where the next allocation goes */
	int gidx;          /* its number among this process's files in the group, or -1 */
	unsigned gen;      /* the fork generation that opened it */
	bool created;      /* this process (or its parent) made it: kept open to the end */
	size_t refs;       /* struct sim_mem in it */
};

/* Device memory: a header page at `off` of a file, then `size` bytes. Charged to its creator
 * until shared; then a group object (sim_group.c) counts it until nobody holds it. */
struct sim_mem {
	struct sim_file *file;
	uint64_t off;
	size_t size;
	int dev;
	uint64_t id;
	unsigned users;    /* handles and native allocations of this process that use it */
	unsigned gen;      /* fork generation: memory of another one was inherited */
	bool charged;      /* created here and charged to this process alone */
	bool shared;       /* holds its holder lock and is known to the group (obj) */
	bool alive_lock;   /* holds the lock that says its creator has not freed it */
	struct sim_objref obj;
	struct sim_mem *prev, *next;
};

/* The 64 bytes of a legacy IPC handle: the exporting process, its file and the allocation. */
struct sim_ipc {
	char magic[8];
	int32_t pid;
	int32_t fd;
	uint64_t kdev, kino, off;
	uint64_t size;     /* what cuMemAlloc was asked for */
	uint64_t id;
	int32_t dev;
};

enum sim_err { SIM_OK, SIM_E_OOM, SIM_E_INVALID, SIM_E_HANDLE, SIM_E_UNSUPPORTED };

/* All of these: caller holds sim_lock. */
struct sim_mem *sim_mem_create(int dev, size_t size, enum sim_err *err);
/* An exported file descriptor (the caller keeps it); its memory, held by this process. */
struct sim_mem *sim_mem_import_fd(int fd, enum sim_err *err);
/* A legacy IPC handle of another process. */
struct sim_mem *sim_mem_open_ipc(const struct sim_ipc *h, enum sim_err *err);
/* A new file descriptor for m that another process can import (the caller owns it); -1: err. */
int sim_mem_export(struct sim_mem *m, enum sim_err *err);
/* Make m openable through a legacy IPC handle and fill it in. */
enum sim_err sim_mem_ipc_handle(struct sim_mem *m, size_t asked, struct sim_ipc *h);
/* mmap [offset, offset+size) of m at va (MAP_FIXED); 0 or -1. */
int sim_mem_map(struct sim_mem *m, uintptr_t va, size_t size, size_t offset, int prot);
void sim_mem_put(struct sim_mem *m); /* the last user gone: frees it unless others hold it */
/* Whether another open file description than fd holds the allocation at off (a holder's or an
 * export's lock), or its creator's live lock (alive). Errors count as held. */
bool sim_range_held(int fd, uint64_t off);
bool sim_range_alive(int fd, uint64_t off);
void sim_range_punch(int fd, uint64_t off, size_t size); /* the allocation of `size` at off */
void sim_punch_bytes(int fd, uint64_t off, uint64_t len);
size_t sim_store_span(size_t size); /* what an allocation of size takes in its file */
uint64_t sim_store_file_span(void);
/* fork: the child makes a new file for its allocations; what it inherited is the parent's. */
void sim_store_forked(void);

/* ---- physical handles, address space, mappings (sim_mem.c) ---- */

/* A physical memory handle (cuMemCreate, an import, aclrtMallocPhysical). The handle value is
 * valid while refs > 0; the handle lives on while mappings made through it remain. */
struct sim_phys {
	struct sim_mem *mem;
	size_t size;
	int dev;
	unsigned refs;    /* create/import 1, each retain +1, each release -1 */
	unsigned maps;    /* mappings made through this handle */
	unsigned long long handle_types;
	uint64_t id;
};

struct sim_reservation {
	uintptr_t va;
	size_t size;
};

/* A VMM mapping: [va, va+size) shows phys at offset. Access per device (CU_MEM_ACCESS_FLAGS_*). */
struct sim_mapping {
	uintptr_t va;
	size_t size;
	size_t offset;
	struct sim_phys *phys;
	unsigned char access[SIM_MAX_DEVICES];
};

enum sim_native_kind {
	SIM_NATIVE_DEVICE,
	SIM_NATIVE_MANAGED,
	SIM_NATIVE_HOST,
	SIM_NATIVE_REGISTERED,
};

/* A native allocation (cuMemAlloc and friends) or a host range the driver knows. */
struct sim_native {
	uintptr_t va;
	size_t size;     /* what was asked */
	size_t span;     /* what is mapped (device kinds: rounded to the granularity) */
	enum sim_native_kind kind;
	int dev;
	void *ctx;
	void *pool;      /* the memory pool of a stream-ordered allocation, else NULL */
	struct sim_mem *mem;   /* device kinds */
	uint64_t id;
	void *graph;     /* allocated during stream capture: owned by this graph */
	bool freeing;    /* a stream-ordered free is queued */
	bool ipc;        /* opened with cuIpcOpenMemHandle: closed, not freed */
	unsigned ipc_opens; /* opens not yet closed (the same context opening it again) */
	struct sim_ipc ipc_from; /* the handle it was opened with: reopening finds it even after
				  * the exporter freed the allocation, as on the driver */
};

/* What an address belongs to. */
struct sim_region {
	uintptr_t base;
	size_t size;
	int dev;
	struct sim_mapping *map;   /* VMM memory: the mapping */
	struct sim_native *native; /* native memory */
};

extern pthread_mutex_t sim_lock; /* guards every table below; never held while user code runs */

size_t sim_round_up(size_t n, size_t to);
int sim_device_count(void);
uint64_t sim_next_id(void);
/* A context was made on dev (for SIMDEV_STATS: contexts_on_device_<dev>). */
void sim_note_context(int dev);

/* Physical handles (caller holds sim_lock). */
struct sim_phys *sim_phys_create(int dev, size_t size, int *err_oom);
struct sim_phys *sim_phys_of(struct sim_mem *m, unsigned long long handle_types);
struct sim_phys *sim_phys_lookup(uint64_t handle);
uint64_t sim_phys_handle(struct sim_phys *p);
void sim_phys_retain(struct sim_phys *p);
void sim_phys_release(struct sim_phys *p); /* frees it once no mapping uses it */

/* Address space (caller holds sim_lock). */
void *sim_va_reserve(size_t size, size_t align, uintptr_t hint);
int sim_reservation_add(uintptr_t va, size_t size);
struct sim_reservation *sim_reservation_find(uintptr_t va, size_t size);
struct sim_reservation *sim_reservation_exact(uintptr_t va);
bool sim_reservation_has_mappings(struct sim_reservation *r);
void sim_reservation_remove(struct sim_reservation *r);

struct sim_mapping *sim_mapping_at(uintptr_t p);
bool sim_mapping_overlaps(uintptr_t va, size_t size);
struct sim_mapping *sim_mapping_add(uintptr_t va, size_t size, size_t offset, struct sim_phys *ph);
void sim_mapping_remove(struct sim_mapping *m); /* caller already restored the reservation */
size_t sim_mapping_count(void);
struct sim_mapping *sim_mapping_get(size_t i);
int sim_mapping_protect(struct sim_mapping *m); /* apply the access bits to the host protection */
int sim_va_unmap_to_reservation(uintptr_t va, size_t size);

struct sim_native *sim_native_add(struct sim_native *n);
struct sim_native *sim_native_at(uintptr_t p);
struct sim_native *sim_native_exact(uintptr_t p);
void sim_native_remove(struct sim_native *n);
size_t sim_native_count(void);
struct sim_native *sim_native_get(size_t i);

/* Device memory of `size` bytes with full access, charged rounded to the granularity. */
struct sim_native *sim_native_device_alloc(int dev, size_t size, enum sim_native_kind kind,
					   int *err_oom);
void sim_native_device_free(struct sim_native *n);

bool sim_find(uintptr_t p, struct sim_region *out);
bool sim_in_reservation(uintptr_t p);

/* Peer access between devices for native memory: peer[from][to]. */
extern bool sim_peer_enabled[SIM_MAX_DEVICES][SIM_MAX_DEVICES];
/* 0 when device `dev` may access [p, p+n) (all of it device memory) for reading (write=false)
 * or writing; 1 when p is not device memory (host memory); -1 when access is illegal. */
int sim_access(int dev, uintptr_t p, size_t n, bool write);

#pragma GCC visibility pop

#endif /* SIMDEV_INTERNAL_H */
