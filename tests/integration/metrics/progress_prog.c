/* progress_prog: the in-process progress API (vmmshim.h) as a program uses it, under the shim on
 * simdev with slowed device-to-host copies (SIMDEV_DELAY, set by meson): the callback sees a
 * sleep begin, copy and end with every byte counted, in order; another thread reads the same
 * progress with vmmshim_get_progress while the copy runs; the callback cannot replace itself;
 * removing it stops the calls; the data survives. Exit 0, or 1 with what went wrong. */
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../shim/vmmshim.h"
#include "../interpose/prog_common.h"

#define NBUF 4
#define BUF_BYTES ((size_t)8 << 20)    /* four 2 MiB handles each on simdev */
#define MAX_EVENTS 8192

static struct {
	int (*set_tag)(const char *);
	int (*sleep)(const char *, int);
	int (*wake)(const char *);
	int (*set_cb)(vmmshim_progress_fn, void *, double);
	int (*get)(vmmshim_progress_t *);
	const char *(*last_error)(void);
} api;

static vmmshim_progress_t events[MAX_EVENTS];
static int nevents;
static int inner_rc = -1;

static void on_progress(const vmmshim_progress_t *p, void *arg)
{
	int *calls = arg;

	(*calls)++;
	if (nevents < MAX_EVENTS)
		events[nevents++] = *p;
	if (inner_rc < 0)
		inner_rc = api.set_cb(NULL, NULL, 0); /* refused: from inside the callback */
}

static atomic_bool polling;
static uint64_t polled_max_done;
static int polled_copying;

static void *poller(void *arg)
{
	(void)arg;
	while (atomic_load(&polling)) {
		vmmshim_progress_t p;

		if (api.get(&p) == 0 && p.phase == VMMSHIM_PHASE_COPYING) {
			polled_copying++;
			if (p.bytes_done > polled_max_done)
				polled_max_done = p.bytes_done;
			if (p.bytes_done > p.bytes_total)
				FAIL("polled %llu done of %llu", (unsigned long long)p.bytes_done,
				     (unsigned long long)p.bytes_total);
		}
		usleep(5000);
	}
	return NULL;
}

#define FIND(field, name)                                               \
	do {                                                            \
		*(void **)&api.field = dlsym(RTLD_DEFAULT, name);       \
		if (!api.field)                                         \
			FAIL("%s not found: run me under libvmmshim.so", name); \
	} while (0)

/* The events of one operation: begin, copying, monotonic bytes, done with every byte. */
static void check_events(int from, int sleeping, uint64_t bytes)
{
	int n = nevents - from, copying = 0;
	const vmmshim_progress_t *e = events + from, *last = e + n - 1;

	if (n < 3)
		FAIL("%s: %d progress calls, expected at least begin, copying and done",
		     sleeping ? "sleep" : "wake", n);
	if (e[0].phase != VMMSHIM_PHASE_PREPARING || e[0].bytes_done != 0)
		FAIL("first call: phase %d, %llu done", e[0].phase,
		     (unsigned long long)e[0].bytes_done);
	for (int i = 0; i < n; i++) {
		if (e[i].sleeping != sleeping)
			FAIL("call %d says sleeping=%d", i, e[i].sleeping);
		if (i && e[i].bytes_done < e[i - 1].bytes_done)
			FAIL("bytes done went back: %llu after %llu",
			     (unsigned long long)e[i].bytes_done,
			     (unsigned long long)e[i - 1].bytes_done);
		if (e[i].bytes_done > e[i].bytes_total)
			FAIL("call %d: %llu done of %llu", i, (unsigned long long)e[i].bytes_done,
			     (unsigned long long)e[i].bytes_total);
		copying += e[i].phase == VMMSHIM_PHASE_COPYING;
		if (i < n - 1 && e[i].phase == VMMSHIM_PHASE_DONE)
			FAIL("a call after done");
	}
	if (!copying)
		FAIL("no call while copying");
	if (last->phase != VMMSHIM_PHASE_DONE || last->bytes_done != bytes ||
	    last->bytes_total != bytes)
		FAIL("last call: phase %d, %llu of %llu, expected done with %llu", last->phase,
		     (unsigned long long)last->bytes_done, (unsigned long long)last->bytes_total,
		     (unsigned long long)bytes);
	if (!(last->gbps > 0) || !(last->seconds > 0))
		FAIL("last call: %.3f GB/s over %.3f s", last->gbps, last->seconds);
}

int main(void)
{
	void *bufs[NBUF];
	void *host = malloc(BUF_BYTES);
	int calls = 0, before;
	vmmshim_progress_t p;
	pthread_t th;

	if (!host)
		FAIL("no host memory");
	FIND(set_tag, "vmmshim_set_tag");
	FIND(sleep, "vmmshim_sleep");
	FIND(wake, "vmmshim_wake");
	FIND(set_cb, "vmmshim_set_progress_callback");
	FIND(get, "vmmshim_get_progress");
	FIND(last_error, "vmmshim_last_error");

	if (api.set_cb(on_progress, &calls, -1) != VMMSHIM_E_INVALID || !api.last_error()[0])
		FAIL("a negative interval was not refused with a message");
	CHECK_CU(api.set_tag("kv"));
	for (int i = 0; i < NBUF; i++) {
		CHECK_CU(cudaMalloc(&bufs[i], BUF_BYTES));
		pattern_fill(host, BUF_BYTES, (uint32_t)i + 1);
		CHECK_CU(cudaMemcpy(bufs[i], host, BUF_BYTES, cudaMemcpyHostToDevice));
	}
	CHECK_CU(cudaDeviceSynchronize());
	if (api.get(&p) || p.phase != VMMSHIM_PHASE_NONE)
		FAIL("progress before any sleep: phase %d", p.phase);
	CHECK_CU(api.set_cb(on_progress, &calls, 0));

	atomic_store(&polling, true);
	if (pthread_create(&th, NULL, poller, NULL))
		FAIL("no thread");
	if (api.sleep("kv", 0))
		FAIL("sleep: %s", api.last_error());
	atomic_store(&polling, false);
	pthread_join(th, NULL);
	check_events(0, 1, (uint64_t)NBUF * BUF_BYTES);
	if (inner_rc != VMMSHIM_E_BUSY)
		FAIL("setting the callback from inside it returned %d, expected busy", inner_rc);
	if (!polled_copying || !polled_max_done)
		FAIL("another thread never saw the copy in progress (%d polls while copying)",
		     polled_copying);
	if (api.get(&p) || p.phase != VMMSHIM_PHASE_NONE)
		FAIL("progress after the sleep: phase %d", p.phase);

	before = nevents;
	if (api.wake("kv"))
		FAIL("wake: %s", api.last_error());
	check_events(before, 0, (uint64_t)NBUF * BUF_BYTES);

	/* Removed: the next sleep and wake call nothing. */
	CHECK_CU(api.set_cb(NULL, NULL, 0));
	before = calls;
	if (api.sleep("kv", 0) || api.wake("kv"))
		FAIL("second cycle: %s", api.last_error());
	if (calls != before)
		FAIL("%d calls after the callback was removed", calls - before);

	for (int i = 0; i < NBUF; i++) {
		CHECK_CU(cudaMemcpy(host, bufs[i], BUF_BYTES, cudaMemcpyDeviceToHost));
		if (pattern_check(host, BUF_BYTES, (uint32_t)i + 1))
			FAIL("buffer %d corrupt after sleep and wake", i);
		CHECK_CU(cudaFree(bufs[i]));
	}
	free(host);
	printf("progress ok: %d calls\n", calls);
	return 0;
}
