/* Host backup buffers: page-aligned anonymous memory, huge pages requested where the system allows
 * them, checked against MemAvailable before anything is mapped, provisioned (touched and pinned)
 * either at once or segment by segment by the copy engine on first use. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "copy_engine.h"
#include "../lib_thread.h"
#include "../log.h"
#include "offload_internal.h"

/* Left to the rest of the system when a backup is sized against MemAvailable. */
static _Atomic size_t seg_bytes = HB_SEG_DEFAULT;

size_t hb_seg_bytes(void)
{
	return atomic_load_explicit(&seg_bytes, memory_order_relaxed);
}

vmm_status vmm_host_buf_set_segment_bytes(size_t bytes, vmm_error *err)
{
	if (bytes < HB_ALIGN || bytes % HB_ALIGN)
		return vmm_fail(err, VMM_E_INVALID, 0,
				"backup segment of %zu bytes: must be a non-zero multiple of %zu",
				bytes, HB_ALIGN);
	atomic_store(&seg_bytes, bytes);
	return VMM_OK;
}

#define HOST_HEADROOM ((uint64_t)64 << 20)

static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tab_cond = PTHREAD_COND_INITIALIZER;
static struct hb_rec **tab;   /* sorted by base */
static size_t tab_n, tab_cap;

int hb_default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		n = 1;
	return n > HB_THREADS_MAX ? HB_THREADS_MAX : (int)n;
}

static bool read_u64(const char *path, uint64_t *v)
{
	FILE *f = fopen(path, "re");
	unsigned long long x;
	bool ok;

	if (!f)
		return false;
	ok = fscanf(f, "%llu", &x) == 1;   /* "max" (no limit) does not parse */
	fclose(f);
	if (ok)
		*v = x;
	return ok;
}

/* Room left under the memory limits of this process's cgroup and its ancestors (v2, else v1's
 * memory controller); UINT64_MAX when there is no limit. A container's limit can be far below
 * the machine's MemAvailable, and going past it gets the program killed, not refused. */
static uint64_t cgroup_room(void)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[512], path[512] = "", dir[640], file[700];
	const char *root = NULL, *max_name = NULL, *cur_name = NULL;
	uint64_t room = UINT64_MAX;

	if (!f)
		return room;
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (!c2)
			continue;
		line[strcspn(line, "\n")] = '\0';
		*c1 = '\0';
		*c2 = '\0';
		/* "hierarchy:controllers:path"; cgroup v2 is "0::path". */
		if (!strcmp(line, "0") && c1[1] == '\0' && !root) {
			snprintf(path, sizeof(path), "%s", c2 + 1);
			root = "/sys/fs/cgroup";
			max_name = "memory.max";
			cur_name = "memory.current";
		} else if (strstr(c1 + 1, "memory")) {
			snprintf(path, sizeof(path), "%s", c2 + 1);
			root = "/sys/fs/cgroup/memory";
			max_name = "memory.limit_in_bytes";
			cur_name = "memory.usage_in_bytes";
			break;   /* v1's memory controller wins over a v2 line without it */
		}
	}
	fclose(f);
	if (!root)
		return room;
	for (;;) {
		uint64_t max, cur;
		char *slash;

		snprintf(dir, sizeof(dir), "%s%s", root, strcmp(path, "/") ? path : "");
		snprintf(file, sizeof(file), "%s/%s", dir, max_name);
		if (read_u64(file, &max)) {
			snprintf(file, sizeof(file), "%s/%s", dir, cur_name);
			if (read_u64(file, &cur) && max < ((uint64_t)1 << 62))
				room = cur < max ? (max - cur < room ? max - cur : room) : 0;
		}
		slash = strrchr(path, '/');
		if (!slash || !strcmp(path, "/") || !path[0])
			break;
		if (slash == path)
			strcpy(path, "/");
		else
			*slash = '\0';
	}
	return room;
}

uint64_t vmm_host_available_bytes(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	unsigned long long kb = 0;
	char line[128];
	int found = 0;
	uint64_t avail, room;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
			found = 1;
			break;
		}
	fclose(f);
	avail = found ? (uint64_t)kb * 1024 : 0;
	room = cgroup_room();
	return room < avail ? room : avail;
}

/* Index of the first record whose base is > p. */
static size_t tab_upper(const void *p)
{
	size_t lo = 0, hi = tab_n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if ((const char *)tab[mid]->base <= (const char *)p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct hb_rec *hb_find(const void *p)
{
	struct hb_rec *r = NULL;
	size_t i;

	pthread_mutex_lock(&tab_lock);
	i = tab_upper(p);
	if (i > 0 && (const char *)p < tab[i - 1]->base + tab[i - 1]->size)
		r = tab[i - 1];
	pthread_mutex_unlock(&tab_lock);
	return r;
}

static bool tab_insert(struct hb_rec *r)
{
	size_t i;

	pthread_mutex_lock(&tab_lock);
	if (tab_n == tab_cap) {
		size_t c = tab_cap ? tab_cap * 2 : 64;
		struct hb_rec **nt = realloc(tab, c * sizeof(*nt));

		if (!nt) {
			pthread_mutex_unlock(&tab_lock);
			return false;
		}
		tab = nt;
		tab_cap = c;
	}
	i = tab_upper(r->base);
	memmove(tab + i + 1, tab + i, (tab_n - i) * sizeof(*tab));
	tab[i] = r;
	tab_n++;
	pthread_mutex_unlock(&tab_lock);
	return true;
}

/* Removes r once no segment is being provisioned. */
static void tab_remove(struct hb_rec *r)
{
	pthread_mutex_lock(&tab_lock);
	for (size_t s = 0; s < r->nseg; s++)
		while (r->seg[s] == HB_BUSY)
			pthread_cond_wait(&tab_cond, &tab_lock);
	for (size_t i = 0; i < tab_n; i++) {
		if (tab[i] == r) {
			memmove(tab + i, tab + i + 1, (tab_n - i - 1) * sizeof(*tab));
			tab_n--;
			break;
		}
	}
	pthread_mutex_unlock(&tab_lock);
}

size_t hb_seg_index(const struct hb_rec *r, const void *p)
{
	return (size_t)((const char *)p - r->base) / hb_seg_bytes();
}

void hb_seg_bounds(const struct hb_rec *r, size_t seg, char **start, size_t *len)
{
	size_t off = seg * hb_seg_bytes();

	*start = r->base + off;
	*len = r->size - off < hb_seg_bytes() ? r->size - off : hb_seg_bytes();
}

bool hb_claim(struct hb_rec *r, size_t seg)
{
	bool mine;

	pthread_mutex_lock(&tab_lock);
	mine = r->seg[seg] == HB_RAW;
	if (mine)
		r->seg[seg] = HB_BUSY;
	pthread_mutex_unlock(&tab_lock);
	return mine;
}

void hb_settle(struct hb_rec *r, size_t seg, enum hb_seg_state st)
{
	pthread_mutex_lock(&tab_lock);
	r->seg[seg] = (uint8_t)st;
	pthread_cond_broadcast(&tab_cond);
	pthread_mutex_unlock(&tab_lock);
}

enum hb_seg_state hb_wait(struct hb_rec *r, size_t seg, double *waited_s)
{
	enum hb_seg_state st;
	double t0 = 0;

	pthread_mutex_lock(&tab_lock);
	if (r->seg[seg] == HB_BUSY) {
		t0 = vmm_now_s();
		while (r->seg[seg] == HB_BUSY)
			pthread_cond_wait(&tab_cond, &tab_lock);
		*waited_s += vmm_now_s() - t0;
	}
	st = (enum hb_seg_state)r->seg[seg];
	pthread_mutex_unlock(&tab_lock);
	return st;
}

void hb_touch(char *p, size_t n)
{
	long pg = sysconf(_SC_PAGESIZE);

#ifdef MADV_POPULATE_WRITE
	/* Faults the range in writable without writing to it (Linux 5.14+). */
	if (madvise(p, n, MADV_POPULATE_WRITE) == 0)
		return;
#endif
	if (pg <= 0)
		pg = 4096;
	/* Fallback: rewrite one byte per page with its own value (contents unchanged). */
	for (size_t off = 0; off < n; off += (size_t)pg) {
		volatile char *b = p + off;

		*b = *b;
	}
}

enum hb_seg_state hb_register(struct hb_rec *r, size_t seg)
{
	static int warned;
	vmm_error err = { 0 };
	char *start;
	size_t len;

	hb_seg_bounds(r, seg, &start, &len);
	if (!r->be || !r->be->host_register)
		return HB_TOUCHED;
	if (r->be->host_register(r->be, start, len, &err) == VMM_OK)
		return HB_PINNED;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		vmm_log(VMM_LOG_WARN,
			"host backup not pinned (%s): copies go through the staging ring", err.msg);
	return HB_TOUCHED;
}

/* Provision every segment of r now (provision_now), with short-lived threads touching pieces
 * in parallel, then registering segment by segment (what free and the copy engine expect). */
#define NOW_PIECE ((size_t)8 << 20)
#define NOW_MAX_THREADS 64

struct now_arg {
	struct hb_rec *r;
	size_t next, end;       /* offsets in r still to touch */
	pthread_mutex_t lock;
};

static void *now_worker(void *a)
{
	struct now_arg *na = a;

	for (;;) {
		size_t off;

		pthread_mutex_lock(&na->lock);
		off = na->next;
		na->next += NOW_PIECE;
		pthread_mutex_unlock(&na->lock);
		if (off >= na->end)
			return NULL;
		hb_touch(na->r->base + off, na->end - off < NOW_PIECE ? na->end - off : NOW_PIECE);
	}
}

/* Provision segments [first, end) of r now, those this call claims (RAW ones), with
 * short-lived threads touching pieces in parallel, then registering segment by segment (what
 * free and the copy engine expect). Segments another thread provisions are waited for. */
static void provision_segments(struct hb_rec *r, size_t first, size_t end)
{
	size_t lo = end, hi = first, pieces;
	int nt = hb_default_threads(), started = 0;
	pthread_t th[NOW_MAX_THREADS];
	struct now_arg na = { .r = r };
	bool *mine = calloc(end - first, sizeof(*mine));
	double ignored = 0;
	char *start;
	size_t len;

	if (!mine)
		return;   /* the first copy provisions them instead */
	for (size_t s = first; s < end; s++) {
		if (!(mine[s - first] = hb_claim(r, s)))
			continue;
		lo = s < lo ? s : lo;
		hi = s + 1;
	}
	if (lo < hi) {
		/* Segments in between that others provision are touched again: that changes
		 * nothing (contents are kept). */
		hb_seg_bounds(r, lo, &start, &len);
		na.next = (size_t)(start - r->base);
		hb_seg_bounds(r, hi - 1, &start, &len);
		na.end = (size_t)(start - r->base) + len;
		pieces = (na.end - na.next + NOW_PIECE - 1) / NOW_PIECE;
		if ((size_t)nt > pieces)
			nt = (int)pieces;
		if (nt > NOW_MAX_THREADS)
			nt = NOW_MAX_THREADS;
		pthread_mutex_init(&na.lock, NULL);
		for (int i = 1; i < nt; i++)
			if (vmm_thread_create(&th[started], NULL, now_worker, &na) == 0)
				started++;
		now_worker(&na);
		for (int i = 0; i < started; i++)
			pthread_join(th[i], NULL);
		pthread_mutex_destroy(&na.lock);
	}
	for (size_t s = first; s < end; s++) {
		if (mine[s - first])
			hb_settle(r, s, hb_register(r, s));
		else
			hb_wait(r, s, &ignored);
	}
	free(mine);
}

vmm_status vmm_host_buf_alloc(vmm_backend *be, size_t size, int provision_now, vmm_host_buf *out,
			      vmm_error *err)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t avail;
	size_t len, map_len;
	struct hb_rec *r;
	char *raw, *base;

	if (!out)
		return vmm_fail(err, VMM_E_INVALID, 0, "no host buffer to fill");
	memset(out, 0, sizeof(*out));
	if (size == 0)
		return vmm_fail(err, VMM_E_INVALID, 0, "a host buffer of 0 bytes");
	if (pg <= 0)
		pg = 4096;
	if (size > SIZE_MAX - HB_ALIGN * 2)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "a host buffer of %zu bytes is impossible",
				size);
	len = (size + (size_t)pg - 1) & ~((size_t)pg - 1);
	map_len = (len + HB_ALIGN - 1) & ~(HB_ALIGN - 1);
	avail = vmm_host_available_bytes();
	if ((uint64_t)map_len + HOST_HEADROOM > avail)
		return vmm_fail(err, VMM_E_HOST_OOM, 0,
				"a host backup of %zu bytes does not fit: %llu bytes available",
				size, (unsigned long long)avail);
	r = calloc(1, sizeof(*r));
	if (!r)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a buffer record");
	r->nseg = (len + hb_seg_bytes() - 1) / hb_seg_bytes();
	r->seg = calloc(r->nseg, 1);
	raw = mmap(NULL, map_len + HB_ALIGN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (!r->seg || raw == MAP_FAILED) {
		int e = errno;

		if (raw != MAP_FAILED)
			munmap(raw, map_len + HB_ALIGN);
		free(r->seg);
		free(r);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "mmap of %zu bytes of host backup: %s",
				map_len, strerror(e));
	}
	/* Trim to an HB_ALIGN boundary so that whole huge pages fit. */
	base = (char *)(((uintptr_t)raw + HB_ALIGN - 1) & ~(uintptr_t)(HB_ALIGN - 1));
	if (base > raw)
		munmap(raw, (size_t)(base - raw));
	if (raw + map_len + HB_ALIGN > base + map_len)
		munmap(base + map_len, (size_t)(raw + map_len + HB_ALIGN - (base + map_len)));
#ifdef MADV_HUGEPAGE
	madvise(base, map_len, MADV_HUGEPAGE);   /* advisory: refused where THP is off */
#endif
	r->be = be;
	r->base = base;
	r->size = len;
	r->map_len = map_len;
	if (!tab_insert(r)) {
		munmap(base, map_len);
		free(r->seg);
		free(r);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the buffer table");
	}
	out->ptr = base;
	out->size = size;
	if (provision_now)
		vmm_host_buf_provision(out);
	return VMM_OK;
}

void vmm_host_buf_provision(vmm_host_buf *buf)
{
	struct hb_rec *r = buf && buf->ptr && buf->size ? hb_find(buf->ptr) : NULL;
	size_t first, end;

	if (!r)
		return;
	first = hb_seg_index(r, buf->ptr);
	end = hb_seg_index(r, (char *)buf->ptr + buf->size - 1) + 1;
	provision_segments(r, first, end);
	buf->pinned = vmm_host_buf_pinned_bytes(buf) >= buf->size;
}

void vmm_host_buf_free(vmm_backend *be, vmm_host_buf *buf)
{
	struct hb_rec *r;

	(void)be;   /* the buffer remembers the backend that pinned it */
	if (!buf || !buf->ptr)
		return;
	r = hb_find(buf->ptr);
	if (r && r->base == buf->ptr) {
		tab_remove(r);
		for (size_t s = 0; s < r->nseg; s++) {
			char *start;
			size_t len;

			hb_seg_bounds(r, s, &start, &len);
			if (r->seg[s] == HB_PINNED && r->be->host_unregister(r->be, start, NULL))
				vmm_log(VMM_LOG_WARN, "host backup segment %p: unregister failed",
					(void *)start);
		}
		munmap(r->base, r->map_len);
		free(r->seg);
		free(r);
	}
	memset(buf, 0, sizeof(*buf));
}

size_t vmm_host_buf_pins_lost(vmm_backend *be)
{
	size_t n = 0;

	pthread_mutex_lock(&tab_lock);
	for (size_t i = 0; i < tab_n; i++) {
		struct hb_rec *r = tab[i];

		for (size_t s = 0; r->be == be && s < r->nseg; s++) {
			char *start;
			size_t len;

			if (r->seg[s] != HB_PINNED)
				continue;
			hb_seg_bounds(r, s, &start, &len);
			/* One made in another context is still there: let it go before it is made
			 * again. One that went with the reset fails, and nothing is lost. */
			if (r->be->host_unregister)
				r->be->host_unregister(r->be, start, NULL);
			r->seg[s] = HB_RAW;
			n++;
		}
	}
	pthread_mutex_unlock(&tab_lock);
	return n;
}

size_t vmm_host_buf_pinned_bytes(const vmm_host_buf *buf)
{
	struct hb_rec *r = buf && buf->ptr ? hb_find(buf->ptr) : NULL;
	char *lo, *hi;
	size_t bytes = 0;

	if (!r)
		return 0;
	/* A buffer may be a piece of a larger one (backup_pool.c): only its own bytes count. */
	lo = buf->ptr;
	hi = lo + buf->size;
	pthread_mutex_lock(&tab_lock);
	for (size_t s = 0; s < r->nseg; s++) {
		char *start, *a, *b;
		size_t len;

		hb_seg_bounds(r, s, &start, &len);
		a = start > lo ? start : lo;
		b = start + len < hi ? start + len : hi;
		if (r->seg[s] == HB_PINNED && a < b)
			bytes += (size_t)(b - a);
	}
	pthread_mutex_unlock(&tab_lock);
	return bytes;
}
