/* Launches concurrent with the heap's reuse: one thread allocates a block, launches a kernel
 * that writes all of it a little later, and frees it while the kernel may still run; another
 * allocates (reusing those blocks, with or without a synchronization: heap_records.c), writes its
 * own pattern and, once every kernel launched before its allocation has run, checks that the
 * pattern is still there. A kernel that reached memory reused after its free is a failure, as is
 * a run in which no reuse skipped its synchronization (the rule then went untested). The count
 * is simdev's (simdev_submissions). Not Criterion, so that it also runs under TSan.
 * IDLE_SYNC_ROUNDS sets the rounds of each thread (400); IDLE_SYNC_AHEAD=N turns on syncing ahead
 * (heap_ahead.c) at N MiB of quarantine, whose thread then reclaims beside the two (it must
 * have, once at least), and for which the reusing thread then waits (once at least).
 * IDLE_SYNC_REFILL=1 turns on refilling ahead (heap_refill.h) as well: the cuts' free rests are
 * then made on a third thread of the core, beside the other two.
 * A third thread looks up pointers inside blocks of its own all the while (vmm_lookup, which
 * reads the heap without its lock while an allocation waits for the device: heap_reads.h's
 * views); every answer must name the block's base and size. */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "heap.h"
#include "simdev.h"

#define MiB ((size_t)1 << 20)
#define WORD_STEP 4096 /* the pattern: one word per page */

static vmm_core *core;
static CUcontext ctx;
static int rounds = 400;
static atomic_uint launched, finished, damaged;

static uint64_t simdev_count(vmm_backend *be)
{
	(void)be;
	return simdev_submissions();
}

static void sleep_us(long us)
{
	nanosleep(&(struct timespec){ us / 1000000, (us % 1000000) * 1000 }, NULL);
}

struct job {
	vmm_devptr ptr;
	size_t size;
	long delay_us;
	struct job *self;
	void *params[1];
};

/* Writes 0xee over the whole block after a delay (the kernel still running after the free). */
static void late_fill(void **params)
{
	struct job *j = *(struct job **)params[0];

	sleep_us(j->delay_us);
	memset((void *)(uintptr_t)j->ptr, 0xee, j->size);
	free(j);
	atomic_fetch_add(&finished, 1);
}

static atomic_bool workers_done;
static atomic_uint lookups, lookups_beside_wait, wrong_lookups;

/* Pointer queries into long-lived blocks of every kind (slab slots, a granule, large), beside
 * the other threads' allocations and the heap's syncs. */
static void *look_up(void *arg)
{
	static const size_t sizes[] = { 256, 4096, 100000, 2 * MiB + 4096, 24 * MiB };
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	vmm_devptr base[N];
	unsigned seed = 13;

	(void)arg;
	for (int i = 0; i < N; i++)
		if (vmm_malloc(core, 0, sizes[i], 0, NULL, &base[i], NULL))
			return (void *)"no memory to look up";
	while (!atomic_load(&workers_done)) {
		int i = rand_r(&seed) % N;
		vmm_devptr p = base[i] + (vmm_devptr)(rand_r(&seed) % sizes[i]);
		vmm_alloc_info info;
		bool beside_wait = vmm_lock_wait_ms(core) > 0;

		if (!vmm_lookup(core, p, &info) || info.base != base[i] || info.size != sizes[i])
			atomic_fetch_add(&wrong_lookups, 1);
		atomic_fetch_add(&lookups, 1);
		if (beside_wait)
			atomic_fetch_add(&lookups_beside_wait, 1);
		sleep_us(50);
	}
	for (int i = 0; i < N; i++)
		vmm_free(core, base[i], NULL);
	return NULL;
}

static size_t some_size(unsigned *seed)
{
	static const size_t sizes[] = { 16 * MiB, 32 * MiB, 64 * MiB };

	return sizes[rand_r(seed) % 3];
}

static void *launch_and_free(void *arg)
{
	unsigned seed = 7;
	CUstream s;

	(void)arg;
	if (cuCtxSetCurrent(ctx) || cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
		return (void *)"no stream";
	for (int i = 0; i < rounds; i++) {
		struct job *j = calloc(1, sizeof(*j));
		vmm_devptr p;

		if (!j)
			return (void *)"no host memory";
		j->size = some_size(&seed);
		if (vmm_malloc(core, 0, j->size, 0, NULL, &j->ptr, NULL))
			return (void *)"no memory";
		j->delay_us = rand_r(&seed) % 2000;
		j->self = j;
		j->params[0] = &j->self;
		p = j->ptr; /* the kernel frees j */
		if (cuLaunchKernel((CUfunction)(void *)(simdev_kernel_fn)late_fill, 1, 1, 1, 1, 1, 1,
				   0, s, j->params, NULL))
			return (void *)"launch failed";
		atomic_fetch_add(&launched, 1);
		vmm_free(core, p, NULL);
		while (atomic_load(&launched) - atomic_load(&finished) > 4)
			sleep_us(200);
	}
	cuStreamSynchronize(s);
	cuStreamDestroy(s);
	return NULL;
}

static void fill(vmm_devptr p, size_t n, uint64_t seed)
{
	for (size_t o = 0; o + 8 <= n; o += WORD_STEP)
		*(uint64_t *)(uintptr_t)(p + o) = seed ^ o;
}

static bool intact(vmm_devptr p, size_t n, uint64_t seed)
{
	for (size_t o = 0; o + 8 <= n; o += WORD_STEP)
		if (*(uint64_t *)(uintptr_t)(p + o) != (seed ^ o))
			return false;
	return true;
}

static void *reuse_and_check(void *arg)
{
	unsigned seed = 11;

	(void)arg;
	for (int i = 0; i < rounds; i++) {
		vmm_devptr p;
		size_t n;
		unsigned before;

		n = some_size(&seed);
		if (vmm_malloc(core, 0, n, 0, NULL, &p, NULL))
			return (void *)"no memory";
		/* Every kernel that could reach p was launched before p's memory was freed, so
		 * before this allocation: counted here. */
		before = atomic_load(&launched);
		fill(p, n, 0x1234567800000000ull + (uint64_t)i);
		while (atomic_load(&finished) < before)
			sleep_us(100);
		if (!intact(p, n, 0x1234567800000000ull + (uint64_t)i))
			atomic_fetch_add(&damaged, 1);
		vmm_free(core, p, NULL);
	}
	return NULL;
}

/* The heap's synchronizations on device 0: made (syncs) or skipped, made ahead, and the
 * allocations that waited for one made ahead (heap_ahead.h, ahead_wait). */
static void sync_counts(uint64_t *made, uint64_t *skipped, uint64_t *ahead, uint64_t *waited)
{
	vmm_stats st = { 0 };

	vmm_stats_get(core, 0, NULL, &st, NULL);
	*made = st.syncs;
	*skipped = st.syncs_skipped;
	*ahead = st.syncs_ahead;
	*waited = st.syncs_waited;
}

/* With the threads done: the heap's free memory given back, then a 128 MiB block freed and a
 * 4 MiB request that cuts its first 64 MiB; the rest must be made on the core's thread within
 * 10 s while this thread waits outside the heap. *st: the stats after. */
static bool idle_cut_refilled(vmm_stats *st)
{
	uint64_t before = st->pieces_refilled;
	vmm_devptr big, small;
	bool made = false;

	vmm_trim(core, 0, NULL);
	if (vmm_malloc(core, 0, 128 * MiB, 0, NULL, &big, NULL))
		return false;
	vmm_free(core, big, NULL);
	if (vmm_malloc(core, 0, 4 * MiB, 0, NULL, &small, NULL))
		return false;
	for (int i = 0; i < 1000 && !made; i++) {
		sleep_us(10000);
		vmm_stats_get(core, 0, NULL, st, NULL);
		made = st->pieces_refilled > before;
	}
	printf("idle_sync_stress: refills with the program idle: %llu pieces made on the core's "
	       "thread\n", (unsigned long long)(st->pieces_refilled - before));
	vmm_free(core, small, NULL);
	return made;
}

int main(void)
{
	const char *env = getenv("IDLE_SYNC_ROUNDS"), *ahead_env = getenv("IDLE_SYNC_AHEAD");
	vmm_config cfg;
	vmm_backend *be;
	vmm_error err = { 0 };
	pthread_t tl, tr, tk;
	void *rl, *rr, *rk;
	uint64_t made_busy, skipped_busy, made_idle, skipped_idle, ahead, ahead_idle, waited, waited_idle;
	vmm_stats rst = { 0 };

	if (env)
		rounds = atoi(env);
	vmm_config_defaults(&cfg);
	if (ahead_env)
		cfg.sync_ahead_min = (size_t)atoi(ahead_env) * MiB;
	cfg.refill_ahead = getenv("IDLE_SYNC_REFILL") && atoi(getenv("IDLE_SYNC_REFILL"));
	setenv("SIMDEV_MEMORY", "2G", 1);
	if (vmm_backend_cuda_open(&be, &err))
		return fprintf(stderr, "idle_sync_stress: opening on simdev: %s\n", err.msg), 1;
	be->submitted = simdev_count;
	if (vmm_core_create(be, &cfg, &core, &err))
		return fprintf(stderr, "idle_sync_stress: the core: %s\n", err.msg), 1;
	if (cuDevicePrimaryCtxRetain(&ctx, 0))
		return fprintf(stderr, "idle_sync_stress: no primary context\n"), 1;
	if (pthread_create(&tk, NULL, look_up, NULL) ||
	    pthread_create(&tl, NULL, launch_and_free, NULL) ||
	    pthread_create(&tr, NULL, reuse_and_check, NULL))
		return fprintf(stderr, "idle_sync_stress: pthread_create refused\n"), 1;
	pthread_join(tl, &rl);
	pthread_join(tr, &rr);
	atomic_store(&workers_done, true);
	pthread_join(tk, &rk);
	if (rl || rr || rk)
		return fprintf(stderr, "idle_sync_stress: %s\n",
			       rl ? (char *)rl : rr ? (char *)rr : (char *)rk), 1;
	printf("idle_sync_stress: %u lookups beside them, %u while an allocation waited for the "
	       "device, %u wrong\n", atomic_load(&lookups), atomic_load(&lookups_beside_wait),
	       atomic_load(&wrong_lookups));
	if (atomic_load(&wrong_lookups))
		return fprintf(stderr, "idle_sync_stress: a lookup named the wrong block\n"), 1;
	sync_counts(&made_busy, &skipped_busy, &ahead, &waited);
	/* With the launches over, reuses skip: the rule was exercised, not only avoided. */
	for (int i = 0; i < 40; i++) {
		vmm_devptr p;

		if (vmm_malloc(core, 0, 64 * MiB, 0, NULL, &p, NULL))
			return fprintf(stderr, "idle_sync_stress: no memory at the end\n"), 1;
		vmm_free(core, p, NULL);
	}
	sync_counts(&made_idle, &skipped_idle, &ahead_idle, &waited_idle);
	made_idle -= made_busy;
	skipped_idle -= skipped_busy;
	printf("idle_sync_stress: %d rounds each, %u launches, %u damaged; reuses while launching: "
	       "%llu synchronized, %llu skipped, %llu syncs ahead, %llu waited for; after: "
	       "%llu synchronized, %llu skipped\n",
	       rounds, atomic_load(&launched), atomic_load(&damaged),
	       (unsigned long long)made_busy, (unsigned long long)skipped_busy,
	       (unsigned long long)ahead, (unsigned long long)waited, (unsigned long long)made_idle,
	       (unsigned long long)skipped_idle);
	vmm_stats_get(core, 0, NULL, &rst, NULL);
	if (cfg.refill_ahead) {
		printf("idle_sync_stress: refills while launching: %llu pieces made on the core's "
		       "thread, %llu by a request placed on them\n",
		       (unsigned long long)rst.pieces_refilled,
		       (unsigned long long)rst.pieces_refill_claimed);
		/* How many the thread makes beside two busy threads depends on timing (under TSan on
		 * a loaded machine, none): one cut with the program idle makes it work for sure. */
		if (!idle_cut_refilled(&rst))
			return fprintf(stderr, "idle_sync_stress: no refill ran on the core's thread "
				       "with the program idle\n"), 1;
	}
	vmm_core_destroy(core);
	be->close(be);
	if (atomic_load(&damaged))
		return fprintf(stderr, "idle_sync_stress: a kernel wrote into reused memory\n"), 1;
	if (made_idle > 1 || !skipped_idle)
		return fprintf(stderr, "idle_sync_stress: idle reuses still synchronized\n"), 1;
	if (ahead_env && !ahead)
		return fprintf(stderr, "idle_sync_stress: no sync ahead was made\n"), 1;
	if (ahead_env && !waited)
		return fprintf(stderr, "idle_sync_stress: no reuse waited for a sync ahead\n"), 1;
	return 0;
}
