/* Replay of a recorded allocation trace (trace_replay.h). A line is what the shim wrote:
 *   a SIZE PTR          cuMemAlloc of SIZE bytes that returned PTR (hex)
 *   A SIZE PTR STREAM   the stream-ordered form, on STREAM (hex)
 *   f PTR / F PTR       cuMemFree / cuMemFreeAsync of PTR (on its allocation's stream)
 * PTR names an allocation until its free; the replay's own addresses differ. */
#include "trace_replay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


struct live_alloc {
	uint64_t key;           /* the recorded PTR; 0: an empty slot */
	vmm_devptr ptr;
	uint64_t size;
	vmm_stream stream;      /* a stream-ordered one's stream (its free is ordered there too) */
	bool dead;              /* freed: a tombstone, so that later keys in its chain are found */
};

struct live_table {
	struct live_alloc *slot;
	size_t mask, used;
};

static struct live_alloc *table_find(struct live_table *t, uint64_t key, bool for_insert)
{
	size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->mask;

	for (;; i = (i + 1) & t->mask) {
		struct live_alloc *s = &t->slot[i];

		if (!s->key)
			return for_insert ? s : NULL;
		if (s->key == key && !s->dead)
			return s;
		if (s->dead && for_insert)
			return s;
	}
}

/* Twice the size when over half full (tombstones count), so that lookups stay short. */
static int table_grow(struct live_table *t)
{
	struct live_table n = { calloc((t->mask + 1) * 2, sizeof(*n.slot)), t->mask * 2 + 1, 0 };

	if (!n.slot)
		return -1;
	for (size_t i = 0; i <= t->mask; i++)
		if (t->slot[i].key && !t->slot[i].dead) {
			*table_find(&n, t->slot[i].key, true) = t->slot[i];
			n.used++;
		}
	free(t->slot);
	*t = n;
	return 0;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double host_gap_ns;

void trace_replay_host_gap(double us)
{
	host_gap_ns = us * 1e3;
}

/* The program's own work between two requests. */
static void host_gap(void)
{
	if (host_gap_ns > 0)
		for (double end = now_ns() + host_gap_ns; now_ns() < end;)
			;
}

struct replay {
	vmm_core *core;
	struct live_table t;
	struct trace_result *out;
	uint64_t native;        /* what cudaMalloc would hold now */
	double ns;
	uint64_t line;
};

/* Keep the malloc among the costliest when its driver calls cost more than the last kept. */
static void note_cost(struct trace_result *out, uint64_t size, uint64_t line,
		      struct driver_counts calls)
{
	struct costly_request *c = out->costliest;
	int i = REPLAY_COSTLIEST - 1;

	if (calls.us <= c[i].calls.us)
		return;
	for (; i > 0 && calls.us > c[i - 1].calls.us; i--)
		c[i] = c[i - 1];
	c[i] = (struct costly_request){ .size = size, .line = line, .calls = calls };
}

static void sample(struct replay *r)
{
	phys_peak_sample(&r->out->phys, r->core, 0, r->native);
}

static void replay_malloc(struct replay *r, uint64_t size, uint64_t key, bool on_stream,
			  uint64_t stream)
{
	struct driver_counts d0;
	struct live_alloc *s;
	vmm_devptr p;
	vmm_status st;
	double a;

	driver_model_op_begin();
	d0 = driver_model_get();
	a = now_ns();

	if ((r->t.used + 1) * 2 > r->t.mask + 1 && table_grow(&r->t)) {
		r->out->failed++;
		return;
	}
	st = on_stream ? vmm_malloc_on_stream(r->core, 0, size, NULL, (vmm_stream)stream, &p, NULL)
		       : vmm_malloc(r->core, 0, size, 0, NULL, &p, NULL);
	r->ns += now_ns() - a;
	note_cost(r->out, size, r->line, driver_counts_sub(driver_model_get(), d0));
	if (st) {
		r->out->failed++;
		return;
	}
	r->out->mallocs++;
	s = table_find(&r->t, key, true);
	if (!s->key)
		r->t.used++;
	*s = (struct live_alloc){ .key = key, .ptr = p, .size = size,
				    .stream = on_stream ? (vmm_stream)stream : NULL };
	r->native += native_size(size);
	if (r->native > r->out->peak_native)
		r->out->peak_native = r->native;
	sample(r);
}

static void replay_free(struct replay *r, uint64_t key, bool on_stream)
{
	struct live_alloc *s = table_find(&r->t, key, false);
	double a;

	if (!s) {
		r->out->skipped++;
		return;
	}
	driver_model_op_begin();
	a = now_ns();
	if (on_stream)
		vmm_free_on_stream(r->core, s->ptr, s->stream, NULL);
	else
		vmm_free(r->core, s->ptr, NULL);
	r->ns += now_ns() - a;
	r->out->frees++;
	r->native -= native_size(s->size);
	s->dead = true;
	sample(r);
}

/* The stream one_stream orders on: any key but NULL, which a trace's own may use. */
#define ONE_STREAM 0x1u

int trace_replay(vmm_core *core, const char *path, bool one_stream, struct trace_result *out)
{
	struct replay r = { .core = core, .out = out };
	unsigned long long size, key, stream;
	FILE *f = fopen(path, "r");
	char line[256];
	vmm_stats s;

	memset(out, 0, sizeof(*out));
	if (!f)
		return -1;
	r.t.mask = 4095;
	r.t.slot = calloc(r.t.mask + 1, sizeof(*r.t.slot));
	if (!r.t.slot) {
		fclose(f);
		errno = ENOMEM;
		return -1;
	}
	phys_peak_start(&out->phys);
	while (fgets(line, sizeof(line), f)) {
		r.line++;
		host_gap();
		if (line[0] == 'a' && sscanf(line + 1, "%llu %llx", &size, &key) == 2 && key)
			replay_malloc(&r, size, key, one_stream, ONE_STREAM);
		else if (line[0] == 'A' && sscanf(line + 1, "%llu %llx %llx", &size, &key,
						  &stream) == 3 && key)
			replay_malloc(&r, size, key, true, stream);
		else if ((line[0] == 'f' || line[0] == 'F') && sscanf(line + 1, "%llx", &key) == 1)
			replay_free(&r, key, line[0] == 'F' || one_stream);
		else
			out->skipped++;
	}
	fclose(f);
	vmm_stats_get(core, 0, NULL, &s, NULL);
	phys_peak_finish(&out->phys);
	out->peak_live = s.peak_live_bytes;
	out->peak_mapped = s.peak_mapped_bytes;
	out->syncs = s.syncs;
	out->syncs_ahead = s.syncs_ahead;
	out->moved = s.handles_moved;
	out->cut = s.handles_cut;
	out->uncut = s.cuts_avoided;
	out->given_back = s.pieces_given_back;
	out->refilled = s.pieces_refilled;
	out->refill_claimed = s.pieces_refill_claimed;
	out->ns_per_call = out->mallocs + out->frees ?
		r.ns / (double)(out->mallocs + out->frees) : 0;
	out->heap_ms = r.ns / 1e6;
	for (size_t i = 0; i <= r.t.mask; i++)
		if (r.t.slot[i].key && !r.t.slot[i].dead)
			vmm_free(core, r.t.slot[i].ptr, NULL);
	free(r.t.slot);
	return 0;
}
