/* Benchmark of the core allocator over whatever libcuda.so.1 the loader finds (simdev in CI, the
 * real driver on a GPU machine). Prints, all measured in this run:
 *   1. median ns per malloc/free pair by size, warm, beside the native cuMemAlloc/cuMemFree pair;
 *   2. growth cost per GiB (cold: physical memory created, mapped, access granted), beside a
 *      native cuMemAlloc of the same size;
 *   3. peak mapped and peak live bytes on a fragmenting trace (growing, varying batch shapes).
 *   4. the same on a replay of NO_CACHING training (train_trace.h), with syncs per step, and on
 *      simdev the physical peak of every instant beside cudaMalloc's worst (phys_peak.h).
 *   5. discard sleeps and wakes (first and steady) of 1 GiB allocations, of 64 MiB ones, or of
 *      2-32 MiB ones left by fragmenting frees, with the driver calls they make and the time
 *      spent outside them (the core's own work, per handle and per allocation).
 * Driver calls are counted and costed at the H200's figures (driver_model.c).
 *   6. --replay FILE: an allocation trace a program recorded under the shim
 *      (VMMSHIM_ALLOC_TRACE), replayed: its peaks and the driver calls they cost.
 * Usage: bench_core [--quick] | --train [STEPS] [--varlen] [--seed N] [CORE OPTIONS]
 *        | --sleep GIB [--pieces | --small] | --replay FILE [CORE OPTIONS] | --demo
 * CORE OPTIONS, last and in any order: --sync-ahead MIB, --max-handle MIB,
 * --edge-cut-min MIB|unlimited, --uncut-scan N, --aligned-cuts, --aligned-cut-max MIB,
 * --give-back-late, --one-stream
 * (--varlen: the replay of the H200's PyTorch benchmark, which needs ~40 GiB of device memory;
 * --seed: other shapes, for figures over several draws; --sync-ahead: the core's thread syncs
 * ahead at MIB of quarantine, as under the shim (VMMSHIM_SYNC_AHEAD), with device work counted
 * between every two calls; simdev's syncs end at once, so this is syncing ahead with no GPU lag,
 * the most it can give, and its figures vary a little from run to run with the thread's timing;
 * --max-handle: the largest handle the core creates, as VMMSHIM_MAX_HANDLE; --edge-cut-min: the
 * smallest allocation a shared handle is cut at the edges of, as VMMSHIM_EDGE_CUT_MIN;
 * --uncut-scan: the fitting blocks a request that would cut looks at for one it cuts nothing in,
 * as VMMSHIM_UNCUT_SCAN (0: none);
 * --aligned-cuts: a shared handle is cut into aligned power-of-two handles, as
 * VMMSHIM_ALIGNED_CUTS=1; --aligned-cut-max: the largest handle such a cut makes, as
 * VMMSHIM_ALIGNED_CUT_MAX; --give-back-late: a large request gives free pieces back only after
 * its sync, as VMMSHIM_GIVE_BACK_LATE=1; --one-stream, for --replay: every plain malloc and free ordered on one stream, as the shim
 * orders them while all of a program's work goes to one stream) */
#include <cuda.h>
#include <errno.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver_model.h"
#include "heap.h"
#include "heap_offload.h"
#include "trace_replay.h"
#include "train_trace.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n ? v[n / 2] : 0;
}

/* The native driver, for the side-by-side columns. */
static struct {
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*free_)(CUdeviceptr);
	CUresult (*retain)(CUcontext *, CUdevice);
	CUresult (*set)(CUcontext);
} native;

static void native_open(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	CUcontext ctx;

	if (!lib)
		return;
	native.alloc = (CUresult(*)(CUdeviceptr *, size_t))dlsym(lib, "cuMemAlloc_v2");
	native.free_ = (CUresult(*)(CUdeviceptr))dlsym(lib, "cuMemFree_v2");
	native.retain = (CUresult(*)(CUcontext *, CUdevice))dlsym(lib, "cuDevicePrimaryCtxRetain");
	native.set = (CUresult(*)(CUcontext))dlsym(lib, "cuCtxSetCurrent");
	if (!native.alloc || !native.free_ || !native.retain || !native.set ||
	    native.retain(&ctx, 0) != CUDA_SUCCESS || native.set(ctx) != CUDA_SUCCESS)
		native.alloc = NULL;
}

static double native_pair_ns(size_t size, int iters)
{
	double *t = malloc(sizeof(double) * (size_t)iters), m;
	CUdeviceptr p;

	if (!native.alloc || !t) {
		free(t);
		return -1;
	}
	for (int i = 0; i < iters; i++) {
		double a = now_ns();

		if (native.alloc(&p, size) != CUDA_SUCCESS) {
			free(t);
			return -1;
		}
		native.free_(p);
		t[i] = now_ns() - a;
	}
	m = median(t, iters);
	free(t);
	return m;
}

static double pair_ns(vmm_core *core, size_t size, int iters)
{
	double *t = malloc(sizeof(double) * (size_t)iters), m;
	vmm_devptr p;

	if (!t)
		return -1;
	for (int i = 0; i < iters / 10 + 1; i++) { /* warm the cache */
		if (vmm_malloc(core, 0, size, 0, NULL, &p, NULL)) {
			free(t);
			return -1;
		}
		vmm_free(core, p, NULL);
	}
	for (int i = 0; i < iters; i++) {
		double a = now_ns();

		if (vmm_malloc(core, 0, size, 0, NULL, &p, NULL)) {
			free(t);
			return -1;
		}
		vmm_free(core, p, NULL);
		t[i] = now_ns() - a;
	}
	m = median(t, iters);
	free(t);
	return m;
}

static void fmt_ns(char *out, size_t n, double ns)
{
	if (ns < 0)
		snprintf(out, n, "-");
	else if (ns < 10000)
		snprintf(out, n, "%.0f ns", ns);
	else if (ns < 1e7)
		snprintf(out, n, "%.1f us", ns / 1e3);
	else
		snprintf(out, n, "%.1f ms", ns / 1e6);
}

static const char *fmt_size(size_t s, char *buf, size_t n)
{
	const char *unit[] = { "B", "KiB", "MiB", "GiB" };
	double v = (double)s;
	int u = 0;

	while (v >= 1024 && u < 3) {
		v /= 1024;
		u++;
	}
	if (v == (double)(uint64_t)v)
		snprintf(buf, n, "%.0f %s", v, unit[u]);
	else
		snprintf(buf, n, "%.1f %s", v, unit[u]);
	return buf;
}

/* simdev's count of submitted device work (what the shim's hooks count on a real driver), for
 * the pair that knows no work came since its last sync; NULL on a real driver. */
static unsigned long long (*simdev_count)(void);

static uint64_t simdev_submitted(vmm_backend *be)
{
	(void)be;
	return simdev_count();
}

/* --sync-ahead: MiB of quarantine (0: off), and the submission count that moves at every call. */
static size_t sync_ahead_mib;
/* --max-handle: MiB (0: the core's default, no limit). */
static size_t max_handle_mib;
/* --edge-cut-min MIB or unlimited (VMMSHIM_EDGE_CUT_MIN); 0: the core's default. */
static size_t edge_cut_min;
/* --one-stream: the replay's plain calls ordered on one stream (lone-stream ordering). */
static bool one_stream;
/* --uncut-scan N: VMMSHIM_UNCUT_SCAN=N (-1: the core's default). */
static long uncut_scan = -1;
/* --aligned-cuts: VMMSHIM_ALIGNED_CUTS=1. */
static bool aligned_cuts;
/* --aligned-cut-max MIB: VMMSHIM_ALIGNED_CUT_MAX (0: the core's default, 64 MiB). */
static size_t aligned_cut_max_mib;
/* --give-back-late: VMMSHIM_GIVE_BACK_LATE=1. */
static bool give_back_late;
/* --refill-ahead: VMMSHIM_REFILL_AHEAD=1. */
static bool refill_ahead;
/* --realtime GAP_US: driver calls take their modelled time, GAP_US of host time between the
 * replay's requests (0: off). */
static size_t realtime_gap_us;
static bool realtime_on;
static _Atomic uint64_t calls_counted;

static uint64_t every_call_submits(vmm_backend *be)
{
	(void)be;
	return ++calls_counted;
}

static vmm_core *open_core(vmm_backend *be)
{
	vmm_core *core = NULL;
	vmm_error err;
	vmm_config cfg;

	vmm_config_defaults(&cfg);
	if (sync_ahead_mib) {
		cfg.sync_ahead_min = sync_ahead_mib * MiB;
		be->submitted = every_call_submits;
	}
	cfg.max_handle_bytes = max_handle_mib * MiB;
	cfg.edge_cut_min = edge_cut_min;
	cfg.aligned_cuts = aligned_cuts;
	cfg.aligned_cut_max = aligned_cut_max_mib * MiB;
	if (uncut_scan >= 0)
		cfg.uncut_scan = (int)uncut_scan;
	cfg.give_back_late = give_back_late;
	cfg.refill_ahead = refill_ahead;
	if (vmm_core_create(be, &cfg, &core, &err)) {
		fprintf(stderr, "bench_core: %s\n", err.msg);
		exit(1);
	}
	return core;
}

/* A training-like trace: per step, activations of a batch-dependent shape are allocated in
 * order and freed in reverse, a few long-lived tensors grow now and then, and the batch shape
 * changes every few steps. */
static void fragmenting_trace(vmm_backend *be, size_t budget, bool quick)
{
	vmm_core *core = open_core(be);
	static vmm_devptr act[64], keep[256];
	int nkeep = 0, steps = quick ? 200 : 1000;
	uint64_t rng = 12345;
	vmm_stats s;
	char a[32], b[32];

	for (int step = 0; step < steps; step++) {
		size_t batch = 1 + (size_t)((step / 7) % 13), layers = 24;

		for (size_t l = 0; l < layers; l++) {
			size_t sz = batch * (budget / 2048) * (1 + l % 3) + (l * 4096);

			if (vmm_malloc(core, 0, sz, 0, NULL, &act[l], NULL))
				act[l] = 0;
		}
		for (size_t l = layers; l-- > 0;)
			if (act[l])
				vmm_free(core, act[l], NULL);
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		if (nkeep < 256 && (rng >> 60) == 0) {
			if (vmm_malloc(core, 0, budget / 512 + (rng >> 40) % (4 * MiB), 0, NULL,
				       &keep[nkeep], NULL) == VMM_OK)
				nkeep++;
		}
	}
	vmm_stats_get(core, 0, NULL, &s, NULL);
	printf("\nFragmenting trace (%d steps, 24 layers, batch shape changing every 7 steps):\n",
	       steps);
	printf("  peak live   %10s\n  peak mapped %10s   (mapped/live %.3f; %llu syncs, %llu handles "
	       "created)\n",
	       fmt_size(s.peak_live_bytes, a, sizeof(a)), fmt_size(s.peak_mapped_bytes, b, sizeof(b)),
	       s.peak_live_bytes ? (double)s.peak_mapped_bytes / (double)s.peak_live_bytes : 0.0,
	       (unsigned long long)s.syncs, (unsigned long long)s.handles_created);
	vmm_core_destroy(core);
}

/* The H200's pinned copy rates (README: sleep and wake, steady state), for the model of a sleep
 * that keeps the contents. */
#define H200_D2H_GBS 52.5
#define H200_H2D_GBS 50.6

static void print_calls(const char *what, double seconds, struct driver_counts c, double bytes,
			double gbs, double scale, size_t allocs)
{
	double us = c.us, best = c.us - c.release_us * 3 / 4;
	double own = seconds * 1e6 - c.call_us;
	uint64_t handles = c.creates > c.releases ? c.creates : c.releases;

	printf("  %-5s %8.2f ms here; %llu creates, %llu maps, %llu handles unmapped in %llu calls, "
	       "%llu granted in %llu calls, %llu releases, %llu syncs\n",
	       what, seconds * 1e3, (unsigned long long)c.creates, (unsigned long long)c.maps,
	       (unsigned long long)c.unmapped, (unsigned long long)c.unmap_calls,
	       (unsigned long long)c.access_handles, (unsigned long long)c.access_calls,
	       (unsigned long long)c.releases, (unsigned long long)c.syncs);
	printf("        H200 model: driver %.0f ms (releases on 4 threads: %.0f ms); scaled to 128 GiB: "
	       "%.2f s (%.2f s), %.2f s with the contents copied at %.1f GB/s\n",
	       us / 1e3, best / 1e3, us * scale / 1e6, best * scale / 1e6,
	       (us * scale / 1e6) + bytes * scale / (gbs * 1e9), gbs);
	/* What is left outside the driver calls is the core's own work (the calls on release
	 * threads overlap, so a sleep's figure is a lower bound). */
	printf("        the core's own: %.2f ms outside the driver calls, %.2f us per handle, %.3f us "
	       "per allocation; scaled to 128 GiB: %.1f ms\n",
	       (own > 0 ? own : 0) / 1e3, handles ? (own > 0 ? own : 0) / (double)handles : 0.0,
	       allocs ? (own > 0 ? own : 0) / (double)allocs : 0.0,
	       (own > 0 ? own : 0) * scale / 1e3);
}

/* How sleep_bench holds its memory. */
enum sleep_layout {
	HELD_WHOLE,     /* 1 GiB allocations, one handle each */
	HELD_PIECES,    /* 64 MiB allocations */
	HELD_SMALL,     /* 2-32 MiB allocations left by fragmenting frees (tests/gpu/hold.cu) */
};

/* The fragmenting allocations of hold.cu's "small": sizes cycle through 2..32 MiB; a third is
 * freed and the holes refilled with other sizes until `total` bytes are held. Returns how many
 * are held. */
static size_t hold_small(vmm_core *core, size_t total)
{
	static const size_t mib[] = { 2, 6, 32, 4, 12, 24, 8, 16, 2, 20 };
	const size_t nmib = sizeof(mib) / sizeof(mib[0]);
	size_t cap = total / (2 * MiB) + 16, n = 0, w = 0, held = 0, k = 0;
	vmm_devptr *ps = calloc(cap, sizeof(*ps));
	size_t *sz = calloc(cap, sizeof(*sz));

	if (!ps || !sz)
		exit(1);
	while (held < total + total / 4 && n < cap) {
		sz[n] = mib[k++ % nmib] * MiB;
		if (vmm_malloc(core, 0, sz[n], 0, NULL, &ps[n], NULL))
			break;
		held += sz[n++];
	}
	for (size_t i = 0; i < n; i++) {
		if (i % 3 == 1) {
			vmm_free(core, ps[i], NULL);
			held -= sz[i];
			continue;
		}
		ps[w] = ps[i];
		sz[w++] = sz[i];
	}
	for (k = 3; held < total && w < cap; k++) {
		size_t b = mib[k % nmib] * MiB < total - held ? mib[k % nmib] * MiB : total - held;

		if (vmm_malloc(core, 0, b, 0, NULL, &ps[w], NULL))
			break;
		held += b;
		w++;
	}
	free(ps);
	free(sz);
	return w;
}

/* One discard sleep and wake; false when either failed (said on stderr). */
static bool discard_cycle(vmm_core *core, const vmm_sleep_opts *o, vmm_transfer_result *rs,
			  vmm_transfer_result *rw, struct driver_counts c[3])
{
	vmm_error err;

	c[0] = driver_model_get();
	if (vmm_sleep(core, o, rs, &err)) {
		fprintf(stderr, "bench_core: sleep: %s\n", err.msg);
		return false;
	}
	c[1] = driver_model_get();
	if (vmm_wake(core, o, rw, &err)) {
		fprintf(stderr, "bench_core: wake: %s\n", err.msg);
		return false;
	}
	c[2] = driver_model_get();
	return true;
}

/* Sleep and wake of `gib` GiB through the core (vmm_sleep / vmm_wake, as vmmctl drives them), the
 * contents discarded, two cycles (the first, and the steady state after it): held as `layout`
 * says. Prints the driver calls made and what they would cost on the H200 (driver_model.c),
 * scaled linearly to 128 GiB, and with the copy a kept sleep adds. */
static void sleep_bench(vmm_backend *be, int gib, enum sleep_layout layout)
{
	static const char *const cycle_name[2] = { "first", "steady" };
	vmm_core *core = open_core(be);
	vmm_sleep_opts o = { .tag = NULL, .device = -1, .discard = true };
	size_t each = layout == HELD_WHOLE ? GiB : 64 * MiB;
	vmm_transfer_result rs, rw;
	struct driver_counts c[3];
	vmm_stats st;
	vmm_devptr p;
	double scale;
	size_t k = 0;

	driver_model_attach(be); /* from the start: it learns each handle's and mapping's size */
	if (layout == HELD_SMALL)
		k = hold_small(core, (size_t)gib * GiB);
	else
		for (k = 0; k < (size_t)gib * (GiB / each); k++)
			if (vmm_malloc(core, 0, each, 0, NULL, &p, NULL))
				break;
	vmm_stats_get(core, 0, NULL, &st, NULL);
	scale = st.mapped_bytes ? (double)(128 * GiB) / (double)st.mapped_bytes : 0;
	if (layout == HELD_SMALL)
		printf("\nDiscard sleep / wake of %.1f GiB in %zu allocations of 2-32 MiB left by "
		       "fragmenting frees (%llu handles):\n",
		       (double)st.mapped_bytes / (double)GiB, k,
		       (unsigned long long)(st.handles_created - st.handles_released));
	else
		printf("\nDiscard sleep / wake of %.1f GiB in %zu allocations of %zu MiB (%llu "
		       "handles):\n",
		       (double)st.mapped_bytes / (double)GiB, k, (size_t)(each / MiB),
		       (unsigned long long)(st.handles_created - st.handles_released));
	for (int cyc = 0; cyc < 2 && discard_cycle(core, &o, &rs, &rw, c); cyc++) {
		vmm_stats_get(core, 0, NULL, &st, NULL);
		printf(" %s cycle (%llu handles after it):\n", cycle_name[cyc],
		       (unsigned long long)(st.handles_created - st.handles_released));
		print_calls("sleep", rs.seconds, driver_counts_sub(c[1], c[0]),
			    (double)st.mapped_bytes, H200_D2H_GBS, scale, k);
		print_calls("wake", rw.seconds, driver_counts_sub(c[2], c[1]),
			    (double)st.mapped_bytes, H200_H2D_GBS, scale, k);
	}
	driver_model_detach(be);
	vmm_core_destroy(core);
}

static double mib(uint64_t bytes)
{
	return (double)bytes / (double)MiB;
}

/* The NO_CACHING training replay (train_trace.h): how close peak mapped stays to peak live, and
 * what that costs in device synchronizations. */
static void training_trace(vmm_backend *be, size_t budget, enum train_shape shape, int steps,
			   uint64_t seed)
{
	vmm_core *core = open_core(be);
	struct train_result r;
	struct driver_counts d;
	double half;
	char a[32], b[32], c[32];

	driver_model_attach(be);
	train_trace(core, budget, shape, steps, seed, &r);
	driver_model_detach(be);
	d = r.steady;
	half = (double)(r.steps - r.steps / 2);
	if (r.varlen)
		printf("\nNO_CACHING training replay of train.py --mode varlen (%d steps; hidden %zu, "
		       "%zu layers, batch 4..%zu, sequence 128..%zu; %llu mallocs in the first step):\n",
		       r.steps, r.hidden, r.layers, r.batch, r.max_seq,
		       (unsigned long long)r.allocs_per_step);
	else
		printf("\nNO_CACHING training replay (%d steps; hidden %zu, %zu layers, batch %zu, "
		       "sequence %zu..%zu; %llu mallocs per step):\n",
		       r.steps, r.hidden, r.layers, r.batch, r.max_seq / 8, r.max_seq,
		       (unsigned long long)r.allocs_per_step);
	printf("  peak live   %10s   (cudaMalloc would hold %s)\n",
	       fmt_size(r.peak_live, a, sizeof(a)), fmt_size(r.peak_native, c, sizeof(c)));
	printf("  peak mapped %10s   mapped/live %.3f, mapped/cudaMalloc %.3f\n",
	       fmt_size(r.peak_mapped, b, sizeof(b)),
	       r.peak_live ? (double)r.peak_mapped / (double)r.peak_live : 0.0,
	       r.peak_native ? (double)r.peak_mapped / (double)r.peak_native : 0.0);
	if (r.phys.known) {
		const struct phys_peak *ph = &r.phys;

		printf("  physical    %8.0f MiB at the worst instant (simdev, inside calls too; %.0f MiB "
		       "between calls), cudaMalloc's worst %.0f MiB: %+.0f MiB, %.4fx\n",
		       mib(ph->peak), mib(ph->sampled), mib(r.peak_native),
		       mib(ph->peak) - mib(r.peak_native),
		       r.peak_native ? (double)ph->peak / (double)r.peak_native : 0.0);
		printf("              between calls at its worst: %.0f MiB mapped (%.0f live, %.0f "
		       "quarantined, %.0f other free), %.0f not mapped; cudaMalloc held %.0f MiB then\n",
		       mib(ph->mapped), mib(ph->live_usable), mib(ph->quarantined),
		       mib(ph->cached - ph->quarantined), mib(ph->sampled) - mib(ph->mapped),
		       mib(ph->native));
	}
	printf("  at the end  %10s   mapped (the driver counts %s in use) in %llu handles\n",
	       fmt_size(r.end_mapped, a, sizeof(a)), fmt_size(r.end_driver_used, c, sizeof(c)),
	       (unsigned long long)(r.handles_created - r.handles_released));
	printf("  syncs       %10.2f per step (second half %.2f; %.2f ahead); handles created %llu, "
	       "released %llu; %.0f ns per call%s\n",
	       (double)r.syncs / r.steps, (double)r.syncs_steady / half,
	       (double)r.syncs_ahead / r.steps,
	       (unsigned long long)r.handles_created, (unsigned long long)r.handles_released,
	       r.ns_per_call, r.failed ? "; SOME ALLOCATIONS FAILED" : "");
	printf("  driver calls per step, second half: %.1f creates, %.1f maps, %.1f handles unmapped "
	       "in %.1f calls, %.1f granted in %.1f calls, %.1f releases\n",
	       d.creates / half, d.maps / half, d.unmapped / half, d.unmap_calls / half,
	       d.access_handles / half, d.access_calls / half, d.releases / half);
	printf("  their cost on the H200 (model: driver_model.c): %.2f ms per step, %.2f ms in the "
	       "costliest step\n",
	       d.us / half / 1e3, r.worst_step_us / 1e3);
	vmm_core_destroy(core);
}

/* --demo: the core at work in a few seconds, for scripts/demo.sh. Sizes fit a 4 GiB device. */
static size_t handles_now(vmm_core *core)
{
	vmm_stats s;

	vmm_stats_get(core, 0, NULL, &s, NULL);
	return (size_t)(s.handles_created - s.handles_released);
}

static void demo_row(vmm_core *core, const char *what)
{
	vmm_stats s;
	char a[32], b[32];

	vmm_stats_get(core, 0, NULL, &s, NULL);
	printf("  %-26s %10s %10s %8zu\n", what, fmt_size(s.live_bytes, a, sizeof(a)),
	       fmt_size(s.mapped_bytes, b, sizeof(b)), handles_now(core));
}

static int demo(vmm_backend *be)
{
	static vmm_devptr p[512];
	vmm_core *core = open_core(be);
	double t0, grow_ns, native_ns = -1;
	vmm_devptr big;
	vmm_error err;
	vmm_stats s0;
	char c1[32], c2[32], c3[32];

	/* 1. Growth: physical memory created, mapped and made accessible on demand. */
	t0 = now_ns();
	for (int i = 0; i < 8; i++) {
		if (vmm_malloc(core, 0, 256 * MiB, 0, NULL, &p[i], &err)) {
			fprintf(stderr, "bench_core --demo: growth: %s\n", err.msg);
			return 1;
		}
	}
	grow_ns = now_ns() - t0;
	if (native.alloc) {
		CUdeviceptr np[8];
		int ok = 0;

		t0 = now_ns();
		for (; ok < 8 && native.alloc(&np[ok], 256 * MiB) == CUDA_SUCCESS; ok++)
			;
		native_ns = ok == 8 ? now_ns() - t0 : -1;
		while (ok-- > 0)
			native.free_(np[ok]);
	}
	fmt_ns(c1, sizeof(c1), grow_ns / 2);
	fmt_ns(c2, sizeof(c2), native_ns < 0 ? -1 : native_ns / 2);
	printf("\n1. Growth: 8 x 256 MiB on an empty heap, physical memory created and mapped on demand\n");
	printf("  %-26s %12s %16s\n", "", "vmmshim", "native cuMemAlloc");
	printf("  %-26s %12s %16s\n", "cost per GiB", c1, c2);
	{
		vmm_stats st;

		vmm_stats_get(core, 0, NULL, &st, NULL);
		printf("  (the heap now maps %s in %zu handles, for %s asked)\n",
		       fmt_size(st.mapped_bytes, c1, sizeof(c1)), handles_now(core),
		       fmt_size(st.live_bytes, c2, sizeof(c2)));
	}
	for (int i = 0; i < 8; i++)
		vmm_free(core, p[i], NULL);

	/* 2. Reuse: freed memory comes back from the heap, not from the driver. */
	printf("\n2. Reuse from cache: one malloc + free pair, warm (median)\n");
	printf("  %-26s %12s %16s\n", "size", "vmmshim", "native cuMem");
	for (size_t sz = MiB; sz <= 256 * MiB; sz *= 256) {
		fmt_ns(c2, sizeof(c2), pair_ns(core, sz, sz > MiB ? 200 : 5000));
		fmt_ns(c3, sizeof(c3), native_pair_ns(sz, 100));
		printf("  %-26s %12s %16s\n", fmt_size(sz, c1, sizeof(c1)), c2, c3);
	}
	vmm_trim(core, 0, NULL);

	/* 3. Fragmentation: the holes' physical memory is remapped side by side. */
	vmm_stats_get(core, 0, NULL, &s0, NULL);
	printf("\n3. Fragmentation: 512 x 2 MiB, every other one freed, then one 512 MiB request\n");
	printf("  %-26s %10s %10s %8s\n", "", "live", "mapped", "handles");
	for (int i = 0; i < 512; i++) {
		if (vmm_malloc(core, 0, 2 * MiB, 0, NULL, &p[i], &err)) {
			fprintf(stderr, "bench_core --demo: %s\n", err.msg);
			return 1;
		}
	}
	demo_row(core, "512 x 2 MiB");
	for (int i = 0; i < 512; i += 2)
		vmm_free(core, p[i], NULL);
	demo_row(core, "every other one freed");
	if (vmm_malloc(core, 0, 512 * MiB, 0, NULL, &big, &err)) {
		printf("  512 MiB FAILED: %s\n", err.msg);
		return 1;
	}
	demo_row(core, "+ 512 MiB in one piece");
	{
		vmm_stats st;

		vmm_stats_get(core, 0, NULL, &st, NULL);
		printf("  (no 2 MiB hole could hold it: after %llu device sync(s) the holes' handles "
		       "were mapped again side by side at a new address; %llu new handle(s))\n",
		       (unsigned long long)(st.syncs - s0.syncs),
		       (unsigned long long)(handles_now(core) > 512 ? handles_now(core) - 512 : 0));
	}
	vmm_core_destroy(core);
	return 0;
}

/* Does the file start with gzip's magic bytes? (The kept traces are compressed.) */
static bool is_gzip(const char *path)
{
	unsigned char m[2];
	FILE *f = fopen(path, "rb");
	bool gz = f && fread(m, 1, 2, f) == 2 && m[0] == 0x1f && m[1] == 0x8b;

	if (f)
		fclose(f);
	return gz;
}

/* A recorded trace replayed (trace_replay.h): the physical peak beside cudaMalloc's, what the
 * heap held at its worst, and the syncs and driver calls that cost. */
static int replay_trace(vmm_backend *be, const char *path)
{
	vmm_core *core;
	struct trace_result r;
	const struct phys_peak *ph = &r.phys;

	if (is_gzip(path)) {
		fprintf(stderr, "bench_core: %s is compressed: scripts/bench-core.sh --replay unpacks "
			"it, or zcat it to a file first\n", path);
		return 1;
	}
	core = open_core(be);
	driver_model_attach(be);
	driver_model_realtime(realtime_on);
	trace_replay_host_gap(realtime_on ? (double)realtime_gap_us : 0);
	if (trace_replay(core, path, one_stream, &r)) {
		fprintf(stderr, "bench_core: %s: %s\n", path, strerror(errno));
		driver_model_detach(be);
		vmm_core_destroy(core);
		return 1;
	}
	r.calls = driver_model_get();
	driver_model_detach(be);
	if (!r.mallocs && r.skipped) {
		fprintf(stderr, "bench_core: %s: no line is an allocation or a free (a, A, f, F): not "
			"a VMMSHIM_ALLOC_TRACE file\n", path);
		vmm_core_destroy(core);
		return 1;
	}
	printf("replay of %s%s: %llu mallocs, %llu frees, %llu lines skipped%s\n", path,
	       one_stream ? " (plain calls ordered on one stream)" : "",
	       (unsigned long long)r.mallocs, (unsigned long long)r.frees,
	       (unsigned long long)r.skipped, r.failed ? "; SOME ALLOCATIONS FAILED" : "");
	printf("  peak live   %8.1f MiB   cudaMalloc would hold %.1f MiB\n", mib(r.peak_live),
	       mib(r.peak_native));
	printf("  peak mapped %8.1f MiB   mapped/live %.4f, mapped/cudaMalloc %.4f\n",
	       mib(r.peak_mapped), r.peak_live ? (double)r.peak_mapped / (double)r.peak_live : 0.0,
	       r.peak_native ? (double)r.peak_mapped / (double)r.peak_native : 0.0);
	if (ph->known) {
		printf("  physical    %8.1f MiB at the worst instant (%+.1f MiB over cudaMalloc's "
		       "worst)\n", mib(ph->peak), mib(ph->peak) - mib(r.peak_native));
		printf("              between calls at its worst: %.1f MiB mapped (%.1f live, %.1f "
		       "quarantined, %.1f other free); cudaMalloc held %.1f MiB then\n",
		       mib(ph->mapped), mib(ph->live_usable), mib(ph->quarantined),
		       mib(ph->cached - ph->quarantined), mib(ph->native));
	}
	printf("  syncs %llu (and %llu ahead); driver: %llu creates, %llu maps, %llu unmap calls, "
	       "%llu access calls, %llu releases: %.1f ms on the H200 (model), %.1f ms of it after a "
	       "sync inside a malloc (the GPU idle), %.1f ms on the core's own threads; %.0f ns per "
	       "call here\n",
	       (unsigned long long)r.syncs, (unsigned long long)r.syncs_ahead,
	       (unsigned long long)r.calls.creates,
	       (unsigned long long)r.calls.maps, (unsigned long long)r.calls.unmap_calls,
	       (unsigned long long)r.calls.access_calls, (unsigned long long)r.calls.releases,
	       r.calls.us / 1e3, r.calls.after_sync_us / 1e3, r.calls.own_thread_us / 1e3,
	       r.ns_per_call);
	/* Where the driver calls came from: on the H200 what a cut costs depends on the step it
	 * lands in, which the per-call model above does not see (docs/design.md). */
	if (realtime_on)
		printf("  real time (driver calls at their modelled cost, one at a time; %zu us of "
		       "host time before each request): %.1f ms inside the replay's mallocs and "
		       "frees\n", realtime_gap_us, r.heap_ms);
	printf("  heap: %llu handles moved, %llu large handles cut (%llu cuts avoided), %llu free "
	       "pieces given back for a large request", (unsigned long long)r.moved,
	       (unsigned long long)r.cut, (unsigned long long)r.uncut,
	       (unsigned long long)r.given_back);
	if (refill_ahead)
		printf("; pieces of cuts' rests made on the core's thread %llu, by a request placed on "
		       "them first %llu", (unsigned long long)r.refilled,
		       (unsigned long long)r.refill_claimed);
	printf("\n");
	printf("  costliest mallocs on the H200 (model):\n");
	for (int i = 0; i < REPLAY_COSTLIEST && r.costliest[i].calls.us > 0; i++) {
		const struct costly_request *c = &r.costliest[i];

		printf("    line %-7llu %8.1f MiB  %6.1f ms: %llu creates, %llu maps, %llu handles "
		       "unmapped, %llu releases, %llu syncs, %.1f ms after one\n",
		       (unsigned long long)c->line,
		       mib(c->size), c->calls.us / 1e3, (unsigned long long)c->calls.creates,
		       (unsigned long long)c->calls.maps, (unsigned long long)c->calls.unmapped,
		       (unsigned long long)c->calls.releases, (unsigned long long)c->calls.syncs,
		       c->calls.after_sync_us / 1e3);
	}
	vmm_core_destroy(core);
	return r.failed || r.skipped || !r.mallocs ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 256, 4 * KiB, 64 * KiB, MiB, 2 * MiB, 64 * MiB, GiB };
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	bool train_only = argc > 1 && !strcmp(argv[1], "--train");
	bool sleep_only = argc > 1 && !strcmp(argv[1], "--sleep");
	bool demo_only = argc > 1 && !strcmp(argv[1], "--demo");
	size_t free_b = 0, total_b = 0;
	vmm_backend *be;
	vmm_core *core;
	vmm_error err;
	char c1[32], c2[32], c3[32];

	if (vmm_backend_cuda_open(&be, &err)) {
		fprintf(stderr, "bench_core: %s\n", err.msg);
		return 1;
	}
	be->mem_info(be, 0, &free_b, &total_b, NULL);
	if (demo_only) {
		int rc;

		native_open();
		printf("vmmshim core at work: device 0, %s (%s)\n", fmt_size(total_b, c1, sizeof(c1)),
		       getenv("SIMDEV_MEMORY") ? "simulated device" : "libcuda.so.1");
		rc = demo(be);
		be->close(be);
		return rc;
	}
	/* The core's options come last, in any order: the modes' own arguments end before them. */
	for (int i = 2; i < argc; i++) {
		bool *flag = !strcmp(argv[i], "--one-stream") ? &one_stream :
			     !strcmp(argv[i], "--aligned-cuts") ? &aligned_cuts :
			     !strcmp(argv[i], "--give-back-late") ? &give_back_late :
			     !strcmp(argv[i], "--refill-ahead") ? &refill_ahead : NULL;

		if (flag) {
			*flag = true;
			memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof(*argv));
			argc--;
			i--;
		}
	}
	for (int i = 2, end = argc; i + 1 < end; i++) {
		size_t *opt = !strcmp(argv[i], "--sync-ahead") ? &sync_ahead_mib :
			      !strcmp(argv[i], "--max-handle") ? &max_handle_mib :
			      !strcmp(argv[i], "--aligned-cut-max") ? &aligned_cut_max_mib :
			      !strcmp(argv[i], "--realtime") ? &realtime_gap_us : NULL;

		realtime_on |= !strcmp(argv[i], "--realtime");
		if (!strcmp(argv[i], "--uncut-scan")) {
			uncut_scan = atol(argv[++i]);
		} else if (!strcmp(argv[i], "--edge-cut-min")) {
			i++;
			edge_cut_min = !strcmp(argv[i], "unlimited") ? SIZE_MAX :
				       (size_t)atoi(argv[i]) * MiB;
		} else if (opt) {
			*opt = (size_t)atoi(argv[++i]);
		} else {
			continue;
		}
		if (argc == end)
			argc = i - 1;
	}
	if (argc > 1 && !strcmp(argv[1], "--replay")) {
		int rc;

		if (argc != 3) {
			fprintf(stderr, "bench_core: --replay wants one trace file\n");
			return 2;
		}
		rc = replay_trace(be, argv[2]);
		be->close(be);
		return rc;
	}
	if (sleep_only) {
		sleep_bench(be, argc > 2 ? atoi(argv[2]) : (int)(free_b / GiB / 2),
			    argc <= 3 ? HELD_WHOLE : !strcmp(argv[3], "--pieces") ? HELD_PIECES
			    : !strcmp(argv[3], "--small") ? HELD_SMALL : HELD_WHOLE);
		be->close(be);
		return 0;
	}
	if (train_only) {
		bool varlen = false;
		uint64_t seed = 0;
		int steps = 200;

		for (int i = 2; i < argc; i++) {
			if (!strcmp(argv[i], "--varlen"))
				varlen = true;
			else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
				seed = strtoull(argv[++i], NULL, 0);
			else
				steps = atoi(argv[i]);
		}
		if (steps < 2) {
			fprintf(stderr, "bench_core: --train wants at least 2 steps\n");
			return 2;
		}
		training_trace(be, free_b / 2, varlen ? TRAIN_VARLEN : TRAIN_FIXED_BATCH, steps, seed);
		be->close(be);
		return 0;
	}
	native_open();
	printf("vmmshim core benchmark: device 0, %s of memory (%s)\n",
	       fmt_size(total_b, c1, sizeof(c1)),
	       getenv("SIMDEV_MEMORY") || getenv("LD_LIBRARY_PATH") ? "libcuda.so.1 from the loader path" :
								      "libcuda.so.1");
	{
		void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

		simdev_count = lib ? (unsigned long long (*)(void))dlsym(lib, "simdev_submissions")
				   : NULL;
	}
	printf("\nmalloc/free pair, warm (median; idle: no device work between, as the shim "
	       "counts it, so a reuse needs no sync):\n");
	printf("  %-8s %12s %12s %14s\n", "size", "vmmshim", "idle", "native cuMem");
	core = open_core(be);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t s = sizes[i];
		int iters = s >= GiB ? 10 : s >= 64 * MiB ? 50 : quick ? 2000 : 20000;

		if (s * 3 > free_b)
			continue; /* it must fit with room for the quarantine */
		char c4[32] = "-";

		fmt_ns(c2, sizeof(c2), pair_ns(core, s, iters));
		if (simdev_count) {
			be->submitted = simdev_submitted;
			fmt_ns(c4, sizeof(c4), pair_ns(core, s, iters));
			be->submitted = NULL;
		}
		fmt_ns(c3, sizeof(c3), native_pair_ns(s, s >= 64 * MiB ? 10 : quick ? 200 : 1000));
		printf("  %-8s %12s %12s %14s\n", fmt_size(s, c1, sizeof(c1)), c2, c4, c3);
	}
	/* Stream-ordered pair (cudaMallocAsync/cudaFreeAsync on one stream: reuse at once). */
	{
		int iters = quick ? 2000 : 20000;
		double *tv = malloc(sizeof(double) * (size_t)iters);
		vmm_stream st = (vmm_stream)0x51;
		vmm_devptr p;

		for (int i = 0; tv && i < iters; i++) {
			double a = now_ns();

			if (vmm_malloc_on_stream(core, 0, MiB, NULL, st, &p, NULL))
				break;
			vmm_free_on_stream(core, p, st, NULL);
			tv[i] = now_ns() - a;
		}
		fmt_ns(c2, sizeof(c2), tv ? median(tv, iters) : -1);
		printf("  %-8s %12s %12s %14s   (same stream, stream-ordered)\n", "1 MiB", c2, "",
		       "");
		free(tv);
	}
	vmm_core_destroy(core);

	/* Growth: a fresh core each time, so nothing is cached. */
	size_t g = free_b >= 3 * GiB ? GiB : 256 * MiB;
	double t[5], tn[5], model_us = 0;
	int runs = quick ? 3 : 5;

	for (int r = 0; r < runs; r++) {
		struct driver_counts d0;
		vmm_devptr p;
		CUdeviceptr np;
		double a;

		core = open_core(be);
		driver_model_attach(be);
		d0 = driver_model_get();
		a = now_ns();
		if (vmm_malloc(core, 0, g, 0, NULL, &p, &err)) {
			fprintf(stderr, "bench_core: growth: %s\n", err.msg);
			return 1;
		}
		t[r] = now_ns() - a;
		model_us = driver_counts_sub(driver_model_get(), d0).us;
		driver_model_detach(be);
		vmm_core_destroy(core);
		tn[r] = -1;
		if (native.alloc) {
			a = now_ns();
			if (native.alloc(&np, g) == CUDA_SUCCESS) {
				tn[r] = now_ns() - a;
				native.free_(np);
			}
		}
	}
	fmt_ns(c2, sizeof(c2), median(t, runs) * (double)GiB / (double)g);
	fmt_ns(c3, sizeof(c3), native.alloc ? median(tn, runs) * (double)GiB / (double)g : -1);
	printf("\nGrowth, cold (median of %d, measured on %s):\n  %-12s %12s %14s\n", runs,
	       fmt_size(g, c1, sizeof(c1)), "", "vmmshim", "native cuMem");
	printf("  %-12s %12s %14s\n", "per GiB", c2, c3);
	printf("  its driver calls on the H200 (model): %.1f us per GiB; a native cudaMalloc of 1 GiB "
	       "took 78.9 us there (%.2fx)\n",
	       model_us * (double)GiB / (double)g, model_us * (double)GiB / (double)g / 78.9);

	fragmenting_trace(be, free_b < 8 * GiB ? free_b / 4 : 2 * GiB, quick);
	training_trace(be, free_b / 2, TRAIN_FIXED_BATCH, quick ? 50 : 200, 0);
	sleep_bench(be, (int)(free_b / GiB / 2), HELD_WHOLE);
	sleep_bench(be, (int)(free_b / GiB / 2), HELD_PIECES);
	be->close(be);
	return 0;
}
