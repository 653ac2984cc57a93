/* ctl_target: an ordinary CUDA program (runtime and driver API, no knowledge of vmmshim) that the
 * control tests run under the shim and drive from outside with vmmctl. It reads commands on stdin,
 * one per line, and answers each with one line on stdout, so a test can sequence exactly what the
 * program does between sleeps and wakes.
 *
 *   alloc N BYTES      N buffers of BYTES with random contents (cudaMalloc + cudaMemcpy)
 *   appvmm BYTES       one mapping made with the VMM API itself (cuMemCreate/Reserve/Map/SetAccess)
 *   check              copy every buffer back and compare checksums -> "ok" or "corrupt ..."
 *   checkone I         the same for buffer I alone
 *   rewrite            give every buffer new random contents (after a discard)
 *   touch              a cudaMemcpy of buffer 0 on another thread; answers "touched ok" when it
 *                      completes (which, while asleep, is after wake)
 *   dtouch             the same with the driver API (cuMemcpyDtoH) -> "dtouched ok"
 *   kernel             a cuLaunchHostFunc "kernel" that reads buffer 0 on the device's stream
 *                      (simdev runs host functions on its stream worker), waited with
 *                      cuStreamSynchronize -> "kernel ok"
 *   tag NAME | sleeptag NAME|all discard | waketag NAME|all | stats NAME|all
 *                      the in-process API (vmmshim.h), found with dlsym as a Python user would
 *   busy MS            a host function that runs MS ms on a stream of its own, not waited for
 *                      ("busy launched"): a sleep's drain waits for it, so the sleep lasts
 *                      at least that long; SIGUSR1 ends every busy work launched before it
 *                      (a test done with what it checks during the work need not wait it out)
 *   bgsleep NAME|all   the in-process sleep of a tag (no discard) on a thread of its own;
 *                      answers "bgsleep started", then "bgsleep rc=N MESSAGE" when it returns
 *   threads N SECS     N threads allocating, filling, checking and freeing for SECS seconds
 *   memused            device memory in use as the program sees it (cudaMemGetInfo)
 *   bgmeminfo MS       on a thread of its own, after MS ms, cudaMemGetInfo, timed: answers
 *                      "bgmeminfo started", then "meminfo took N ms free BYTES"
 *   bgquery MS         on a thread of its own, a cudaMalloc of 4 MiB ("bgquery started"), then
 *                      after MS ms cuMemGetAddressRange of a pointer inside it, timed: answers
 *                      "query took N ms size S" (S: the range's size, the allocation's)
 *   bgalloc BYTES      on a thread of its own, a cudaMalloc of BYTES, freed at once: answers
 *                      "bgalloc started", then "bgalloc ok" or "bgalloc err N" when it returns
 *   device N           cudaSetDevice(N): later allocations land there
 *   primary N          whether device N's primary context is active -> "primary N active 0|1"
 *   release N          cuDevicePrimaryCtxRelease(N), the runtime's retain let go (its last)
 *                      -> "release RC took MS ms"
 *   fork               fork a child that exits at once; answers with the child's status
 *   spin               a simdev kernel on a non-blocking stream that runs until a flag in device
 *                      memory turns non-zero (at most 60 s) -> "spinning" once launched
 *   setflag            on another thread, cuMemcpyHtoD writes the flag -> "flag set" when the
 *                      copy returned (while a sleep holds device work: after it)
 *   spinwait           wait for the spinning kernel -> "spin ok" (it saw the flag) or "spin timeout"
 *   freeall            cudaFree every buffer -> "freed N"
 *   freelast N         cudaFree the N buffers allocated last -> "freed N"
 *   reset              cudaDeviceReset (the runtime resets through the pre-11.0 entry point),
 *                      then forget the buffers as the reset freed them -> "reset RC freed N"
 *                      (N: how many of them cudaFree still took afterwards: 0 natively)
 *   reset v2           the same as a driver-API program does it: cuDevicePrimaryCtxReset_v2 of
 *                      the current device, then a retain that makes the context again
 *   quit               exit 0 */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "random_bytes.h"
#include "simdev.h"

#define MAX_BUFS 4096

struct buf {
	void *dev;
	size_t size;
	uint64_t sum;
	unsigned seed;
	int device;
};

/* Copies run with the buffer's device current (simdev does not copy across devices). */
static int copy_on(int device, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	int cur = 0;
	cudaError_t e;

	cudaGetDevice(&cur);
	if (cur != device)
		cudaSetDevice(device);
	e = cudaMemcpy(dst, src, n, kind);
	if (cur != device)
		cudaSetDevice(cur);
	return e == cudaSuccess ? 0 : -1;
}

static struct buf bufs[MAX_BUFS];
static int nbufs;
static pthread_mutex_t bufs_lock = PTHREAD_MUTEX_INITIALIZER;

/* Fill b with fresh contents from its seed; returns 0 or -1. */
static int fill(struct buf *b)
{
	unsigned char *h = malloc(b->size ? b->size : 1);
	unsigned s = b->seed;
	int rc = -1;

	if (!h)
		return -1;
	fill_random(h, b->size, &s);
	b->sum = sum_bytes(h, b->size);
	if (!copy_on(b->device, b->dev, h, b->size, cudaMemcpyHostToDevice))
		rc = 0;
	free(h);
	return rc;
}

static int verify(const struct buf *b)
{
	unsigned char *h = malloc(b->size ? b->size : 1);
	int rc = -1;

	if (!h)
		return -1;
	if (!copy_on(b->device, h, b->dev, b->size, cudaMemcpyDeviceToHost) &&
	    sum_bytes(h, b->size) == b->sum)
		rc = 0;
	free(h);
	return rc;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void cmd_alloc(int n, size_t size)
{
	pthread_mutex_lock(&bufs_lock);
	for (int i = 0; i < n; i++) {
		struct buf *b;

		if (nbufs == MAX_BUFS) {
			pthread_mutex_unlock(&bufs_lock);
			say("error too many buffers");
			return;
		}
		b = &bufs[nbufs];
		b->size = size;
		b->seed = (unsigned)(nbufs * 7919 + 17);
		cudaGetDevice(&b->device);
		if (cudaMalloc(&b->dev, size) != cudaSuccess) {
			pthread_mutex_unlock(&bufs_lock);
			say("error cudaMalloc %zu", size);
			return;
		}
		if (fill(b)) {
			pthread_mutex_unlock(&bufs_lock);
			say("error fill");
			return;
		}
		nbufs++;
	}
	pthread_mutex_unlock(&bufs_lock);
	say("ok");
}

static void cmd_appvmm(size_t size)
{
	CUmemAllocationProp prop = { 0 };
	CUmemAccessDesc acc = { 0 };
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	size_t gran = 0;
	struct buf *b;

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	if (cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ||
	    !gran) {
		say("error granularity");
		return;
	}
	size = (size + gran - 1) / gran * gran;
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (cuMemCreate(&h, size, &prop, 0) || cuMemAddressReserve(&va, size, 0, 0, 0) ||
	    cuMemMap(va, size, 0, h, 0) || cuMemSetAccess(va, size, &acc, 1)) {
		say("error vmm");
		return;
	}
	pthread_mutex_lock(&bufs_lock);
	b = &bufs[nbufs];
	b->dev = (void *)(uintptr_t)va;
	b->size = size;
	b->seed = 4242u + (unsigned)nbufs;
	b->device = 0;
	if (fill(b)) {
		pthread_mutex_unlock(&bufs_lock);
		say("error fill");
		return;
	}
	nbufs++;
	pthread_mutex_unlock(&bufs_lock);
	say("ok");
}

static void cmd_check(void)
{
	pthread_mutex_lock(&bufs_lock);
	for (int i = 0; i < nbufs; i++) {
		if (verify(&bufs[i])) {
			pthread_mutex_unlock(&bufs_lock);
			say("corrupt buffer %d of %d (%zu bytes)", i, nbufs, bufs[i].size);
			return;
		}
	}
	pthread_mutex_unlock(&bufs_lock);
	say("ok %d", nbufs);
}

static void cmd_rewrite(void)
{
	pthread_mutex_lock(&bufs_lock);
	for (int i = 0; i < nbufs; i++) {
		bufs[i].seed += 1;
		if (fill(&bufs[i])) {
			pthread_mutex_unlock(&bufs_lock);
			say("error fill");
			return;
		}
	}
	pthread_mutex_unlock(&bufs_lock);
	say("ok");
}

static void *touch_main(void *arg)
{
	(void)arg;
	say(nbufs && !verify(&bufs[0]) ? "touched ok" : "touched corrupt");
	return NULL;
}

static void *dtouch_main(void *arg)
{
	unsigned char *h = malloc(bufs[0].size);
	CUcontext ctx = NULL;
	CUresult rc;
	bool ok;

	(void)arg;
	/* A new thread has no current context: the driver API needs the device's primary one. */
	rc = cuDevicePrimaryCtxRetain(&ctx, 0);
	if (!rc)
		rc = cuCtxSetCurrent(ctx);
	if (!rc && h)
		rc = cuMemcpyDtoH(h, (CUdeviceptr)(uintptr_t)bufs[0].dev, bufs[0].size);
	ok = h && !rc && sum_bytes(h, bufs[0].size) == bufs[0].sum;
	if (rc)
		fprintf(stderr, "ctl_target: dtouch: CUresult %d\n", (int)rc);
	free(h);
	say(ok ? "dtouched ok" : "dtouched corrupt");
	return NULL;
}

struct kernel_args {
	const unsigned char *dev;
	size_t size;
	uint64_t sum;
};

/* A host function on the stream: on simdev, device memory is addressable from the stream
 * worker, so this reads it as a kernel would. */
static void CUDA_CB read_kernel(void *p)
{
	struct kernel_args *k = p;

	k->sum = sum_bytes(k->dev, k->size);
}

static void cmd_kernel(void)
{
	struct kernel_args k = { 0 };
	CUstream s;

	if (!nbufs || cuStreamCreate(&s, 0)) {
		say("error stream");
		return;
	}
	k.dev = bufs[0].dev;
	k.size = bufs[0].size;
	if (cuLaunchHostFunc(s, read_kernel, &k) || cuStreamSynchronize(s)) {
		say("error launch");
		return;
	}
	cuStreamDestroy(s);
	say(k.sum == bufs[0].sum ? "kernel ok" : "kernel corrupt");
}

/* Work that keeps the device busy for a while, as a long kernel would, or until a SIGUSR1 that
 * came after its launch. The launch's count of signals travels with it: a signal sent before
 * the work begins on the stream still ends it. The signal is blocked in every thread and taken
 * by one of its own (sigwait): a handler would run in whichever thread the kernel picked, and
 * under ThreadSanitizer not before that thread next entered the library. */
static atomic_uint busy_ends;

static void *busy_end_main(void *arg)
{
	sigset_t *set = arg;
	int sig;

	while (!sigwait(set, &sig))
		atomic_fetch_add(&busy_ends, 1);
	return NULL;
}

/* Before any other thread: they inherit the blocked signal. */
static void busy_end_start(void)
{
	static sigset_t set;
	pthread_t t;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (!pthread_create(&t, NULL, busy_end_main, &set))
		pthread_detach(t);
}

static double now(void);

static void CUDA_CB busy_kernel(void *p)
{
	uintptr_t arg = (uintptr_t)p;
	unsigned ends = (unsigned)(arg >> 32);
	double until = now() + (double)(arg & 0xffffffffu) / 1000;

	while (now() < until && atomic_load(&busy_ends) == ends)
		usleep(2000);
}

static void cmd_busy(unsigned ms)
{
	static CUstream s;
	uintptr_t arg = ((uintptr_t)atomic_load(&busy_ends) << 32) | ms;

	if (!s && cuStreamCreate(&s, 0)) {
		say("error stream");
		return;
	}
	if (cuLaunchHostFunc(s, busy_kernel, (void *)arg)) {
		say("error launch");
		return;
	}
	say("busy launched");
}

/* A kernel that cannot finish until the host writes a flag: legal (the flag's copy is issued on
 * another stream), and it keeps the device busy until then. */
static struct {
	CUdeviceptr flag;
	CUstream stream;
	int saw;          /* written by the kernel: 1 saw the flag, 2 gave up */
	void *params[2];
} spin;

static void spin_kernel(void **params)
{
	const volatile int *flag = *(const volatile int **)params[0];
	int *saw = *(int **)params[1];
	struct timespec pause = { 0, 1000000L };

	for (int i = 0; i < 60000; i++) {
		if (simdev_check_access(simdev_current_device(), (const void *)flag, sizeof(int)))
			break; /* a GPU would fault */
		if (*flag) {
			__atomic_store_n(saw, 1, __ATOMIC_RELEASE);
			return;
		}
		nanosleep(&pause, NULL);
	}
	__atomic_store_n(saw, 2, __ATOMIC_RELEASE);
}

static void cmd_spin(void)
{
	static int *saw_ptr = &spin.saw;
	static CUdeviceptr flag_arg;

	if (cudaMalloc((void **)&spin.flag, sizeof(int)) != cudaSuccess ||
	    cudaMemset((void *)spin.flag, 0, sizeof(int)) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess ||
	    cuStreamCreate(&spin.stream, CU_STREAM_NON_BLOCKING)) {
		say("error spin setup");
		return;
	}
	flag_arg = spin.flag;
	spin.params[0] = &flag_arg;
	spin.params[1] = &saw_ptr;
	if (cuLaunchKernel(SIMDEV_KERNEL(spin_kernel), 1, 1, 1, 1, 1, 1, 0, spin.stream,
			   spin.params, NULL)) {
		say("error launch");
		return;
	}
	say("spinning");
}

static void *setflag_main(void *arg)
{
	const int one = 1;
	CUcontext ctx = NULL;
	CUresult rc;

	(void)arg;
	rc = cuDevicePrimaryCtxRetain(&ctx, 0);
	if (!rc)
		rc = cuCtxSetCurrent(ctx);
	if (!rc)
		rc = cuMemcpyHtoD(spin.flag, &one, sizeof(one));
	if (rc)
		say("flag error %d", (int)rc);
	else
		say("flag set");
	return NULL;
}

static void cmd_spinwait(void)
{
	CUresult rc = cuStreamSynchronize(spin.stream);
	int saw = __atomic_load_n(&spin.saw, __ATOMIC_ACQUIRE);

	if (rc)
		say("spin error %d", (int)rc);
	else
		say(saw == 1 ? "spin ok" : "spin timeout");
}

/* The in-process API, looked up the way ctypes.CDLL(None) would. */
static void *api(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

static void cmd_api(const char *verb, const char *arg, int discard)
{
	const char *tag = arg && strcmp(arg, "all") ? arg : NULL;
	const char *(*last_error)(void) = (const char *(*)(void))api("vmmshim_last_error");
	int rc;

	if (!last_error) {
		say("noapi");
		return;
	}
	if (!strcmp(verb, "tag")) {
		rc = ((int (*)(const char *))api("vmmshim_set_tag"))(tag);
	} else if (!strcmp(verb, "sleeptag")) {
		rc = ((int (*)(const char *, int))api("vmmshim_sleep"))(tag, discard);
	} else if (!strcmp(verb, "waketag")) {
		rc = ((int (*)(const char *))api("vmmshim_wake"))(tag);
	} else {
		uint64_t st[10] = { 0 };

		rc = ((int (*)(const char *, int, void *))api("vmmshim_stats"))(tag, -1, st);
		say("rc=%d live=%llu mapped=%llu asleep=%llu", rc, (unsigned long long)st[0],
		    (unsigned long long)st[2], (unsigned long long)st[5]);
		return;
	}
	say("rc=%d %s", rc, rc ? last_error() : "");
}

static char bg_tag[64];

static void *bgsleep_main(void *arg)
{
	const char *tag = strcmp(bg_tag, "all") ? bg_tag : NULL;
	const char *(*last_error)(void) = (const char *(*)(void))api("vmmshim_last_error");
	int (*sleep_fn)(const char *, int) = (int (*)(const char *, int))api("vmmshim_sleep");
	int rc;

	(void)arg;
	if (!sleep_fn || !last_error) {
		say("bgsleep noapi");
		return NULL;
	}
	rc = sleep_fn(tag, 0);
	say("bgsleep rc=%d %s", rc, rc ? last_error() : "");
	return NULL;
}

static int bg_meminfo_ms;

static void *bgmeminfo_main(void *arg)
{
	size_t fr = 0, tot = 0;
	double t0;

	(void)arg;
	usleep((useconds_t)bg_meminfo_ms * 1000);
	t0 = now();
	cudaMemGetInfo(&fr, &tot);
	say("meminfo took %.0f ms free %zu", (now() - t0) * 1e3, fr);
	return NULL;
}

static size_t bg_alloc_bytes;

static void *bgalloc_main(void *arg)
{
	void *p = NULL;
	cudaError_t e = cudaMalloc(&p, bg_alloc_bytes);

	(void)arg;
	if (e == cudaSuccess) {
		cudaFree(p);
		say("bgalloc ok");
	} else {
		say("bgalloc err %d", (int)e);
	}
	return NULL;
}

static int bg_query_ms;
static CUdeviceptr bg_query_ptr;

static void *bgquery_main(void *arg)
{
	CUdeviceptr base = 0;
	size_t size = 0;
	double t0;

	(void)arg;
	usleep((useconds_t)bg_query_ms * 1000);
	t0 = now();
	cuMemGetAddressRange(&base, &size, bg_query_ptr + 4096);
	say("query took %.0f ms size %zu", (now() - t0) * 1e3, base == bg_query_ptr ? size : 0);
	return NULL;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

struct worker {
	pthread_t t;
	int id;
	double until;
	int bad;
	long iterations;
};

static void *worker_main(void *p)
{
	struct worker *w = p;
	unsigned seed = (unsigned)w->id * 31u + 7u;

	while (now() < w->until && !w->bad) {
		struct buf b = { .size = 4096 + (size_t)(rand_r(&seed) % (256 * 1024)),
				 .seed = seed };

		if (cudaMalloc(&b.dev, b.size) != cudaSuccess) {
			w->bad = 1;
			break;
		}
		if (fill(&b) || verify(&b))
			w->bad = 2;
		if (cudaFree(b.dev) != cudaSuccess)
			w->bad = 3;
		w->iterations++;
	}
	return NULL;
}

static void cmd_threads(int n, double secs)
{
	struct worker w[64];
	long total = 0;
	int bad = 0;

	if (n > 64)
		n = 64;
	for (int i = 0; i < n; i++) {
		w[i] = (struct worker){ .id = i, .until = now() + secs };
		pthread_create(&w[i].t, NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].t, NULL);
		total += w[i].iterations;
		if (w[i].bad)
			bad = w[i].bad;
	}
	if (bad)
		say("threads bad %d", bad);
	else
		say("threads ok %ld", total);
}

/* cudaFree the last `last` buffers (at most all) -> "freed N". */
static void free_last(int last)
{
	int k = 0;

	if (last < 0)
		last = 0;
	if (last > nbufs)
		last = nbufs;
	for (int i = nbufs - last; i < nbufs; i++)
		k += cudaFree(bufs[i].dev) == cudaSuccess;
	say("freed %d", k);
	nbufs -= last;
}

int main(void)
{
	char line[256];

	setvbuf(stdout, NULL, _IOLBF, 0);
	busy_end_start();
	/* CTL_DEVICE: the device it starts on (default 0), for tests of a program that never
	 * touches device 0. */
	if (cudaSetDevice(getenv("CTL_DEVICE") ? atoi(getenv("CTL_DEVICE")) : 0) != cudaSuccess) {
		say("error no device");
		return 1;
	}
	say("ready %ld", (long)getpid());
	while (fgets(line, sizeof(line), stdin)) {
		char a[64] = "", b[64] = "", c[64] = "";
		int n = sscanf(line, "%63s %63s %63s", a, b, c);

		if (n <= 0)
			continue;
		if (!strcmp(a, "alloc") && n == 3)
			cmd_alloc(atoi(b), strtoull(c, NULL, 10));
		else if (!strcmp(a, "appvmm") && n == 2)
			cmd_appvmm(strtoull(b, NULL, 10));
		else if (!strcmp(a, "check"))
			cmd_check();
		else if (!strcmp(a, "checkone") && n == 2) {
			int i = atoi(b);

			say(i >= 0 && i < nbufs && !verify(&bufs[i]) ? "ok" : "corrupt");
		}
		else if (!strcmp(a, "rewrite"))
			cmd_rewrite();
		else if (!strcmp(a, "touch")) {
			pthread_t t;

			pthread_create(&t, NULL, touch_main, NULL);
			pthread_detach(t);
		} else if (!strcmp(a, "dtouch") && nbufs) {
			pthread_t t;

			pthread_create(&t, NULL, dtouch_main, NULL);
			pthread_detach(t);
		} else if (!strcmp(a, "kernel"))
			cmd_kernel();
		else if (!strcmp(a, "tag") || !strcmp(a, "sleeptag") || !strcmp(a, "waketag") ||
			 !strcmp(a, "stats"))
			cmd_api(a, n >= 2 ? b : NULL, n == 3 && !strcmp(c, "discard"));
		else if (!strcmp(a, "busy") && n == 2)
			cmd_busy((unsigned)atoi(b));
		else if (!strcmp(a, "bgsleep") && n == 2) {
			pthread_t t;

			snprintf(bg_tag, sizeof(bg_tag), "%s", b);
			pthread_create(&t, NULL, bgsleep_main, NULL);
			pthread_detach(t);
			say("bgsleep started");
		} else if (!strcmp(a, "bgmeminfo") && n == 2) {
			pthread_t t;

			bg_meminfo_ms = atoi(b);
			pthread_create(&t, NULL, bgmeminfo_main, NULL);
			pthread_detach(t);
			say("bgmeminfo started");
		} else if (!strcmp(a, "bgalloc") && n == 2) {
			pthread_t t;

			bg_alloc_bytes = strtoull(b, NULL, 10);
			pthread_create(&t, NULL, bgalloc_main, NULL);
			pthread_detach(t);
			say("bgalloc started");
		} else if (!strcmp(a, "bgquery") && n == 2) {
			pthread_t t;
			void *p = NULL;

			bg_query_ms = atoi(b);
			if (cudaMalloc(&p, 4 << 20) != cudaSuccess) {
				say("error cudaMalloc");
				continue;
			}
			bg_query_ptr = (CUdeviceptr)(uintptr_t)p;
			pthread_create(&t, NULL, bgquery_main, NULL);
			pthread_detach(t);
			say("bgquery started");
		} else if (!strcmp(a, "threads") && n == 3)
			cmd_threads(atoi(b), atof(c));
		else if (!strcmp(a, "memused")) {
			size_t fr = 0, tot = 0;

			cudaMemGetInfo(&fr, &tot);
			say("used %zu", tot - fr);
		} else if (!strcmp(a, "primary") && n == 2) {
			unsigned flags = 0;
			int active = -1;

			cuDevicePrimaryCtxGetState(atoi(b), &flags, &active);
			say("primary %d active %d", atoi(b), active);
		} else if (!strcmp(a, "release") && n == 2) {
			/* The runtime's retain of the primary context (cudaSetDevice made it) let go by
			 * the program, as a library that took the context over does: its last one. */
			double t0 = now();
			CUresult r = cuDevicePrimaryCtxRelease(atoi(b));

			say("release %d took %d ms", (int)r, (int)((now() - t0) * 1000));
		} else if (!strcmp(a, "device") && n == 2) {
			say(cudaSetDevice(atoi(b)) == cudaSuccess ? "ok" : "error device");
		} else if (!strcmp(a, "fork")) {
			pid_t p = fork();
			int st = 0;

			if (p == 0)
				_exit(0);
			waitpid(p, &st, 0);
			say("forked %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		} else if (!strcmp(a, "spin")) {
			cmd_spin();
		} else if (!strcmp(a, "setflag")) {
			pthread_t t;

			pthread_create(&t, NULL, setflag_main, NULL);
			pthread_detach(t);
		} else if (!strcmp(a, "spinwait")) {
			cmd_spinwait();
		} else if (!strcmp(a, "freelast") && n == 2) {
			free_last(atoi(b));
		} else if (!strcmp(a, "freeall")) {
			free_last(nbufs);
		} else if (!strcmp(a, "reset")) {
			CUcontext again = NULL;
			CUdevice d = 0;
			CUresult r;
			int k = 0;

			if (n >= 2 && !strcmp(b, "v2")) {
				r = cuCtxGetDevice(&d);
				if (!r)
					r = cuDevicePrimaryCtxReset_v2(d);
				if (!r)
					r = cuDevicePrimaryCtxRetain(&again, d);
				if (!r)
					r = cuCtxSetCurrent(again);
			} else {
				r = (CUresult)cudaDeviceReset();
			}
			for (int i = 0; i < nbufs && !r; i++)
				k += cudaFree(bufs[i].dev) == cudaSuccess;
			say("reset %d freed %d", (int)r, k);
			nbufs = 0;
		} else if (!strcmp(a, "quit"))
			break;
		else
			say("error unknown command");
	}
	return 0;
}
