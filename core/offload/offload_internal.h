/* Shared by host_buf.c, provision.c and copy_engine.c (not a public contract).
 *
 * Every host buffer from vmm_host_buf_alloc is entered in one process-wide table, so that the copy
 * engine can tell, from a plain host address in a vmm_copy_range, which buffer it lies in and
 * whether that part is provisioned yet. A buffer is provisioned in segments of HB_SEG_BYTES from
 * its start: each is first touched (faulted in without changing its contents) and then registered
 * (pinned) on its own, so that provisioning can overlap with the copy of earlier segments. */
#ifndef VMM_OFFLOAD_INTERNAL_H
#define VMM_OFFLOAD_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../mono_wait.h"
#include "copy_engine.h"

/* Host backups are pinned segment by segment. On the H200 cudaHostRegister ran at 6.8 GB/s in
 * 128 MiB pieces, 28 GB/s in 1 GiB pieces and 40 GB/s in 4 GiB pieces (tests/gpu/probe_register.cu):
 * the cost is per call, so segments are large; the pipeline still overlaps pinning segment i+1 with
 * copying segment i. */
#define HB_SEG_DEFAULT ((size_t)1 << 30)
size_t hb_seg_bytes(void);   /* HB_SEG_DEFAULT unless vmm_host_buf_set_segment_bytes changed it */
#define HB_ALIGN ((size_t)2 << 20)   /* THP-sized, so that huge pages can back the buffer */

enum hb_seg_state {
	HB_RAW = 0,     /* never touched by us (may hold data the caller wrote) */
	HB_BUSY,        /* being provisioned now */
	HB_PINNED,      /* touched and registered: DMA straight into it */
	HB_TOUCHED,     /* touched, registering failed: copies are staged */
};

struct hb_rec {
	vmm_backend *be;
	char *base;
	size_t size;         /* the caller's size, page-rounded */
	size_t map_len;      /* what mmap gave, HB_ALIGN-rounded */
	size_t nseg;
	uint8_t *seg;        /* enum hb_seg_state, per segment; guarded by the table lock */
};

/* The buffer that holds p, or NULL (not ours: the caller provides usable memory itself). */
struct hb_rec *hb_find(const void *p);
/* Segment index of p inside r and that segment's bounds. */
size_t hb_seg_index(const struct hb_rec *r, const void *p);
void hb_seg_bounds(const struct hb_rec *r, size_t seg, char **start, size_t *len);

/* State transitions, under the table lock. claim: RAW -> BUSY and returns true (the caller must
 * provision and call hb_settle); any other state returns false. wait: blocks while BUSY and
 * returns the settled state, adding the time it blocked to *waited_s. */
bool hb_claim(struct hb_rec *r, size_t seg);
void hb_settle(struct hb_rec *r, size_t seg, enum hb_seg_state st);
enum hb_seg_state hb_wait(struct hb_rec *r, size_t seg, double *waited_s);

/* Fault in [p, p+n) for writing without changing its contents. */
void hb_touch(char *p, size_t n);
/* Register one touched segment; HB_PINNED or HB_TOUCHED (registering failed, logged once). */
enum hb_seg_state hb_register(struct hb_rec *r, size_t seg);

/* A small pool of worker threads that provisions segments: each segment is split into pieces
 * touched in parallel; the worker that finishes a segment's last piece registers it, so that the
 * registration of segment i overlaps the touching of segment i+1. */
struct prov_pool;
struct prov_pool *prov_pool_create(int threads);
void prov_pool_destroy(struct prov_pool *p);
/* Queue the claimed segments (r[i], seg[i]) in this order; returns at once. */
bool prov_pool_submit(struct prov_pool *p, struct hb_rec *const *r, const size_t *seg, size_t n);
/* Wait until everything submitted is settled; returns the seconds the pool was busy since the
 * last call. */
double prov_pool_drain(struct prov_pool *p);

/* Threads that touch host memory side by side: one per online CPU, at most HB_THREADS_MAX (the
 * provisioning pool's and provision_now's default). */
#define HB_THREADS_MAX 16
int hb_default_threads(void);

#endif
