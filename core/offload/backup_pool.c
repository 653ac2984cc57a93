/* Host backups carved from pooled chunks (backup_pool.h): a chunk is one vmm_host_buf, its units
 * (2 MiB each) tracked in a bitmap, pieces found first-fit from a hint. */
#include "backup_pool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "offload_internal.h"

#define UNIT HB_ALIGN
/* Chunks start small, so that a program with little to back pins little, and double with the
 * pool up to where the driver's per-registration cost no longer shows (offload_internal.h). */
#define CHUNK_MIN ((size_t)64 << 20)
#define CHUNK_MAX ((size_t)1 << 30)

struct chunk {
	vmm_host_buf buf;
	size_t nunits, nused;
	size_t hint;            /* no free unit below it */
	uint64_t *used;         /* one bit per unit */
	struct chunk *next;
};

struct vmm_backup_pool {
	vmm_backend *be;
	pthread_mutex_t lock;
	struct chunk *chunks;
	size_t mapped, in_use;
};

vmm_backup_pool *vmm_backup_pool_create(vmm_backend *be)
{
	vmm_backup_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->be = be;
	pthread_mutex_init(&p->lock, NULL);
	return p;
}

static void chunk_free(vmm_backup_pool *p, struct chunk *c)
{
	p->mapped -= c->buf.size;
	vmm_host_buf_free(p->be, &c->buf);
	free(c->used);
	free(c);
}

void vmm_backup_pool_destroy(vmm_backup_pool *pool)
{
	if (!pool)
		return;
	for (struct chunk *c = pool->chunks, *n; c; c = n) {
		n = c->next;
		chunk_free(pool, c);
	}
	pthread_mutex_destroy(&pool->lock);
	free(pool);
}

static bool unit_used(const struct chunk *c, size_t u)
{
	return c->used[u / 64] >> (u % 64) & 1;
}

/* Set units [first, first+n) used or free; returns how many changed (a part given back twice
 * changes nothing the second time). */
static size_t mark(struct chunk *c, size_t first, size_t n, bool used)
{
	size_t changed = 0;

	for (size_t u = first; u < first + n; u++) {
		uint64_t bit = (uint64_t)1 << (u % 64);

		if (((c->used[u / 64] & bit) != 0) == used)
			continue;
		c->used[u / 64] ^= bit;
		changed++;
	}
	c->nused = used ? c->nused + changed : c->nused - changed;
	return changed;
}

/* First run of n free units at or after the hint; SIZE_MAX when there is none. */
static size_t find_run(const struct chunk *c, size_t n)
{
	size_t run = 0;

	if (c->nunits - c->nused < n)
		return SIZE_MAX;
	for (size_t u = c->hint; u < c->nunits; u++) {
		/* Whole words in use are skipped at once: a full pool is scanned fast. */
		if (!run && u % 64 == 0 && c->used[u / 64] == UINT64_MAX) {
			u += 63;
			continue;
		}
		run = unit_used(c, u) ? 0 : run + 1;
		if (run == n)
			return u + 1 - n;
	}
	return SIZE_MAX;
}

static size_t next_hint(const struct chunk *c, size_t from)
{
	while (from < c->nunits && unit_used(c, from))
		from++;
	return from;
}

static struct chunk *chunk_new(vmm_backup_pool *p, size_t units, vmm_error *err)
{
	size_t want = p->mapped < CHUNK_MIN ? CHUNK_MIN : p->mapped;
	struct chunk *c = calloc(1, sizeof(*c));
	vmm_status st;

	if (want > CHUNK_MAX)
		want = CHUNK_MAX;
	if (want < units * UNIT)
		want = units * UNIT;
	if (!c) {
		vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a backup chunk record");
		return NULL;
	}
	c->nunits = want / UNIT;
	c->used = calloc((c->nunits + 63) / 64, sizeof(*c->used));
	if (!c->used) {
		free(c);
		vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a backup chunk bitmap");
		return NULL;
	}
	/* Provisioned by the first copy into it, or by a piece that asks for it now. Where the
	 * host cannot hold a whole chunk, one of just the piece's size may still fit. */
	st = vmm_host_buf_alloc(p->be, want, 0, &c->buf, err);
	if (st == VMM_E_HOST_OOM && want > units * UNIT) {
		want = units * UNIT;
		c->nunits = units;
		st = vmm_host_buf_alloc(p->be, want, 0, &c->buf, err);
	}
	if (st) {
		free(c->used);
		free(c);
		return NULL;
	}
	p->mapped += want;
	c->next = p->chunks;
	p->chunks = c;
	return c;
}

vmm_status vmm_backup_get(vmm_backup_pool *pool, size_t size, int provision_now,
			  vmm_host_buf *out, vmm_error *err)
{
	size_t units, first = SIZE_MAX;
	struct chunk *c;

	if (!out)
		return vmm_fail(err, VMM_E_INVALID, 0, "no host buffer to fill");
	memset(out, 0, sizeof(*out));
	if (!pool || !size)
		return vmm_fail(err, VMM_E_INVALID, 0, "a backup of %zu bytes from %s", size,
				pool ? "a pool" : "no pool");
	if (size > SIZE_MAX - UNIT)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "a backup of %zu bytes is impossible", size);
	units = (size + UNIT - 1) / UNIT;
	pthread_mutex_lock(&pool->lock);
	for (c = pool->chunks; c; c = c->next)
		if ((first = find_run(c, units)) != SIZE_MAX)
			break;
	if (!c) {
		c = chunk_new(pool, units, err);
		first = 0;
	}
	if (c) {
		mark(c, first, units, true);
		if (first == c->hint)
			c->hint = next_hint(c, first + units);
		pool->in_use += units * UNIT;
		out->ptr = (char *)c->buf.ptr + first * UNIT;
		out->size = size;
	}
	pthread_mutex_unlock(&pool->lock);
	if (!c)
		return err ? err->status : VMM_E_HOST_OOM;
	if (provision_now)
		vmm_host_buf_provision(out);
	return VMM_OK;
}

void vmm_backup_put(vmm_backup_pool *pool, vmm_host_buf *buf)
{
	struct chunk **pc, *c;

	if (!pool || !buf || !buf->ptr)
		return;
	pthread_mutex_lock(&pool->lock);
	for (pc = &pool->chunks; (c = *pc); pc = &c->next) {
		char *base = c->buf.ptr;

		if ((char *)buf->ptr >= base && (char *)buf->ptr < base + c->nunits * UNIT)
			break;
	}
	if (c) {
		size_t first = (size_t)((char *)buf->ptr - (char *)c->buf.ptr) / UNIT;
		size_t units = (buf->size + UNIT - 1) / UNIT;

		if (first + units > c->nunits)
			units = c->nunits - first;
		pool->in_use -= mark(c, first, units, false) * UNIT;
		if (first < c->hint)
			c->hint = first;
		if (!c->nused) {
			*pc = c->next;
			chunk_free(pool, c);
		}
	}
	pthread_mutex_unlock(&pool->lock);
	memset(buf, 0, sizeof(*buf));
}

void vmm_backup_pool_bytes(vmm_backup_pool *pool, size_t *mapped, size_t *in_use)
{
	pthread_mutex_lock(&pool->lock);
	*mapped = pool->mapped;
	*in_use = pool->in_use;
	pthread_mutex_unlock(&pool->lock);
}
