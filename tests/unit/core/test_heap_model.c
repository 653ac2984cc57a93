/* A randomized model test: thousands of random allocations and frees (sizes across every class,
 * random tags, plain and stream-ordered, occasional trims) checked against a reference model:
 * no two live allocations overlap, contents stay intact, and the per-tag accounting equals the
 * model's. Seeded and reproducible: the seed is printed; VMM_MODEL_SEED=<n> replays it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "heap_offload.h"

#define OPS 6000
#define MAXLIVE 600
#define NTAGS 4
#define LIVE_CAP (1500 * MiB)

struct obj {
	vmm_devptr p;
	size_t n;
	int tag;
	vmm_stream stream;
};

static const char *tags[NTAGS] = { NULL, "model-a", "model-b", "model-c" };
static struct obj live[MAXLIVE];
static int nlive;

static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static size_t random_size(void)
{
	uint64_t r = rnd() % 100;

	if (r < 45)
		return rnd() % 4097;                  /* tiny */
	if (r < 70)
		return rnd() % (256 * KiB);           /* small classes */
	if (r < 90)
		return rnd() % (4 * MiB);             /* medium: large path */
	if (r < 98)
		return 2 * MiB * (1 + rnd() % 8);     /* exact granules */
	return rnd() % (96 * MiB);                /* big */
}

static void check_no_overlap(vmm_devptr p, size_t n, uint64_t seed)
{
	size_t len = n ? n : 1;

	for (int i = 0; i < nlive; i++) {
		size_t ln = live[i].n ? live[i].n : 1;

		cr_assert(p + len <= live[i].p || live[i].p + ln <= p,
			  "seed %llu: new 0x%llx+%zu overlaps live 0x%llx+%zu",
			  (unsigned long long)seed, (unsigned long long)p, n,
			  (unsigned long long)live[i].p, live[i].n);
	}
}

static void check_model(struct tctx *t, uint64_t seed, int op)
{
	uint64_t bytes[NTAGS] = { 0 }, count[NTAGS] = { 0 }, all = 0;

	for (int i = 0; i < nlive; i++) {
		cr_assert(t_check(live[i].p, live[i].n, live[i].p ^ seed),
			  "seed %llu op %d: contents of 0x%llx+%zu lost", (unsigned long long)seed,
			  op, (unsigned long long)live[i].p, live[i].n);
		bytes[live[i].tag] += live[i].n;
		count[live[i].tag]++;
		all += live[i].n;
	}
	for (int k = 0; k < NTAGS; k++) {
		vmm_stats s = t_stats(t, 0, tags[k] ? tags[k] : VMM_DEFAULT_TAG);

		cr_assert_eq(s.live_bytes, bytes[k], "seed %llu op %d: tag %d live bytes",
			     (unsigned long long)seed, op, k);
		cr_assert_eq(s.live_count, count[k], "seed %llu op %d: tag %d live count",
			     (unsigned long long)seed, op, k);
	}
	vmm_stats s = t_stats(t, 0, NULL);

	cr_assert_eq(s.live_bytes, all);
	cr_assert_eq(s.mapped_bytes, t_dev_used(t, 0), "seed %llu op %d: mapped vs driver",
		     (unsigned long long)seed, op);
	cr_assert_geq(s.mapped_bytes, s.cached_bytes);
}

Test(heap_model, random_operations_match_the_model, .timeout = 170)
{
	const char *env = getenv("VMM_MODEL_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
	uint64_t live_bytes = 0;
	struct tctx t;
	vmm_error err;

	rng = seed ? seed : 1;
	fprintf(stderr, "heap_model: seed %llu (replay with VMM_MODEL_SEED=%llu)\n",
		(unsigned long long)seed, (unsigned long long)seed);
	t_simdev_env("3G", NULL, NULL);
	t_open(&t, NULL);
	for (int op = 0; op < OPS; op++) {
		uint64_t r = rnd() % 100;

		if (r < 1 && rnd() % 16 == 0) {
			/* One tag sleeps and wakes: its contents and everyone else's survive. */
			int k = (int)(rnd() % NTAGS);
			vmm_sleep_opts o = { .tag = tags[k] ? tags[k] : VMM_DEFAULT_TAG, .device = 0 };
			uint64_t held = t_stats(&t, 0, o.tag).mapped_bytes;
			vmm_transfer_result slept = { 0 };
			vmm_status st = vmm_sleep(t.core, &o, &slept, &err), woke;

			cr_assert(st == VMM_OK || st == VMM_E_ALREADY, "seed %llu op %d: sleep: %s",
				  (unsigned long long)seed, op, err.msg);
			cr_assert_eq(t_stats(&t, 0, o.tag).mapped_bytes, 0);
			/* A tag that never allocated here has no arena: its sleep is "nothing to do"
			 * (VMM_OK, nothing released) and its wake finds nothing asleep
			 * (VMM_E_ALREADY), as heap_offload.h says. Anything that held memory wakes. */
			woke = st == VMM_OK ? vmm_wake(t.core, &o, NULL, &err) : VMM_OK;
			cr_assert(woke == VMM_OK || (woke == VMM_E_ALREADY && held == 0 &&
						     slept.bytes_released == 0),
				  "seed %llu op %d: wake: %s", (unsigned long long)seed, op, err.msg);
			check_model(&t, seed, op);
		} else if (r < 1) {
			cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK, "%s", err.msg);
		} else if (nlive && (r < 45 || nlive == MAXLIVE || live_bytes > LIVE_CAP)) {
			int i = (int)(rnd() % (uint64_t)nlive);
			vmm_status st;

			cr_assert(t_check(live[i].p, live[i].n, live[i].p ^ seed),
				  "seed %llu op %d: contents lost before free", (unsigned long long)seed,
				  op);
			st = live[i].stream ? vmm_free_on_stream(t.core, live[i].p, live[i].stream, &err)
					    : vmm_free(t.core, live[i].p, &err);
			cr_assert_eq(st, VMM_OK, "seed %llu op %d: free: %s", (unsigned long long)seed,
				     op, err.msg);
			live_bytes -= live[i].n;
			live[i] = live[--nlive];
		} else {
			struct obj o = { .n = random_size(), .tag = (int)(rnd() % NTAGS) };
			size_t align = rnd() % 10 == 0 ? (size_t)256 << (rnd() % 8) : 0;
			vmm_status st;

			if (rnd() % 5 == 0) {
				o.stream = (vmm_stream)(uintptr_t)(1 + rnd() % 3);
				st = vmm_malloc_on_stream(t.core, 0, o.n, tags[o.tag], o.stream, &o.p,
							  &err);
			} else {
				st = vmm_malloc(t.core, 0, o.n, align, tags[o.tag], &o.p, &err);
				if (align)
					cr_assert_eq(o.p % align, 0);
			}
			cr_assert_eq(st, VMM_OK, "seed %llu op %d: malloc(%zu): %s",
				     (unsigned long long)seed, op, o.n, err.msg);
			cr_assert_eq(o.p % 256, 0);
			check_no_overlap(o.p, o.n, seed);
			t_fill(o.p, o.n, o.p ^ seed);
			live[nlive++] = o;
			live_bytes += o.n;
		}
		if (op % 500 == 499)
			check_model(&t, seed, op);
	}
	check_model(&t, seed, OPS);
	while (nlive) {
		cr_assert_eq(vmm_free(t.core, live[nlive - 1].p, NULL), VMM_OK);
		nlive--;
	}
	cr_assert_eq(vmm_trim(t.core, -1, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&t, 0), 0, "seed %llu: everything goes back at trim",
		     (unsigned long long)seed);
	t_close(&t);
}
