/* soak_target: the program the randomized soak (soak.c) runs under the shim. Threads allocate,
 * free, copy and check device memory at random, each keeping a host mirror of every buffer it
 * owns, while the soak sleeps and wakes it from outside, injects driver faults and kills its
 * clients. A buffer whose contents differ from its mirror after a successful copy is a
 * mismatch: data lost. A call that fails (an injected fault) is an error, not a mismatch: the
 * buffer it touched is marked stale and rewritten from its mirror before it is checked again.
 * It reads commands on stdin and answers each with one line on stdout:
 *
 *   base N BYTES           N long-lived buffers in all (they live through every cycle) -> "ok",
 *                          or "error alloc" with those made so far kept
 *   check                  compare the long-lived buffers -> "ok N", "corrupt I" or "error I"
 *   work T SECS SEED       T threads for SECS seconds -> "work started", then, when they end,
 *                          "work ops=.. copies=.. kernels=.. mismatches=.. errors=.. unfreed=..
 *                          ooms=.." (each thread frees what it allocated first; ooms: its
 *                          allocations refused for want of memory, which a GPU shared with
 *                          other processes may do, counted apart from errors)
 *   memused                device memory in use, as the program sees it (cudaMemGetInfo) ->
 *                          "used N"
 *   ipcexport BYTES SEED   a buffer filled from SEED and exported with cudaIpcGetMemHandle ->
 *                          "ok HEX" (the handle), "error alloc" (out of memory: nothing kept)
 *                          or "error ipc"
 *   ipcopen HEX BYTES SEED another process's export opened (cudaIpcOpenMemHandle) -> "ok", or
 *                          "error ipc N" (the driver's error)
 *   vmmexport BYTES SEED   a buffer of the program's own VMM memory (cuMemCreate, shareable as
 *                          a POSIX descriptor, mapped and filled from SEED) -> "ok", "error
 *                          alloc" (out of memory: nothing kept) or "error vmm N"
 *   vmmsend                that buffer's handle exported (cuMemExportToShareableHandle) and
 *                          the descriptor sent on the channel (CTL_CHANNEL_FD), then closed
 *                          here, as NCCL does -> "ok" or "error vmm N"
 *   vmmimport BYTES SEED keep|release
 *                          the descriptor that came on the channel imported, mapped, and the
 *                          handle kept or released at once (the mapping then holds the memory)
 *                          -> "ok" or "error vmm N"
 *                          Nobody writes shared buffers after the export: `check` compares
 *                          every one this process exported or opened with SEED's bytes.
 *   quit                   exit 0
 *
 * SOAK_LARGE_PCT=N (manual soaks): N% of the allocations are 33-80 MiB, so that the heap makes
 * large handles that smaller allocations then cut (and refill ahead, with
 * VMMSHIM_REFILL_AHEAD=1); without it every allocation is under 3 MiB. */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fd_pass.h" /* shim/protocol: descriptors over a socket, with deadlines */
#include "random_bytes.h"

#define MAX_THREADS 16
#define BUFS_PER_THREAD 8
#define MAX_BASE 16

struct buf {
	unsigned char *dev;
	unsigned char *mirror; /* what the device memory must hold */
	size_t size;
	bool stale;            /* a failed call touched it: the device copy is unknown */
};

struct worker {
	pthread_t thread;
	int id;
	unsigned seed;
	double until;
	cudaStream_t stream;
	struct buf bufs[BUFS_PER_THREAD];
	int nbufs;
	long ops, copies, kernels, errors, ooms;
	int mismatches;
};

static struct buf base[MAX_BASE];
static int nbase;
#define MAX_SHARED 8
static struct buf shared[MAX_SHARED]; /* exported or opened through legacy IPC */
static int nshared;
/* The program's own VMM memory this process exported (vmmexport), for vmmsend. */
static CUmemGenericAllocationHandle vmm_exported;
static bool vmm_has_export;
static int channel = -1; /* CTL_CHANNEL_FD */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&out_lock);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Write the mirror to the device; a failure leaves the buffer stale. */
static bool push(struct buf *b)
{
	b->stale = cudaMemcpy(b->dev, b->mirror, b->size, cudaMemcpyHostToDevice) != cudaSuccess;
	return !b->stale;
}

/* 1 equal, 0 differs (reported on stderr), -1 the copy failed. */
static int compare(const struct buf *b, const char *who, int id)
{
	unsigned char *h = malloc(b->size);
	int rc = -1;

	if (!h)
		return -1;
	if (cudaMemcpy(h, b->dev, b->size, cudaMemcpyDeviceToHost) == cudaSuccess) {
		rc = memcmp(h, b->mirror, b->size) == 0;
		if (!rc) {
			size_t at = 0;

			while (h[at] == b->mirror[at])
				at++;
			fprintf(stderr, "soak_target: MISMATCH %s %d: %zu-byte buffer at %p differs "
				"from byte %zu\n", who, id, b->size, (void *)b->dev, at);
		}
	}
	free(h);
	return rc;
}

/* The in-process API, looked up as a Python user would; absent when not under the shim. */
static void set_tag(int id)
{
	int (*fn)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "vmmshim_set_tag");
	char tag[16];

	snprintf(tag, sizeof(tag), "t%d", id % 3);
	if (fn)
		fn(tag);
}

static int large_pct; /* SOAK_LARGE_PCT */

static size_t random_size(unsigned *seed)
{
	int r = rand_r(seed) % 100;

	if (large_pct && rand_r(seed) % 100 < large_pct)
		return (33u << 20) + (size_t)(rand_r(seed) % (48u << 20));

	if (r < 70)
		return 4096 + (size_t)(rand_r(seed) % (252 * 1024));
	if (r < 95)
		return 256 * 1024 + (size_t)(rand_r(seed) % (768 * 1024));
	return 1536 * 1024 + (size_t)(rand_r(seed) % (1536 * 1024)); /* past one 2 MiB piece */
}

static void op_alloc(struct worker *w)
{
	struct buf *b = &w->bufs[w->nbufs];

	b->size = random_size(&w->seed);
	b->mirror = malloc(b->size);
	if (!b->mirror)
		return;
	switch (cudaMalloc((void **)&b->dev, b->size)) {
	case cudaSuccess:
		break;
	case cudaErrorMemoryAllocation:
		free(b->mirror);
		w->ooms++;
		return;
	default:
		free(b->mirror);
		w->errors++;
		return;
	}
	fill_random(b->mirror, b->size, &w->seed);
	if (!push(b))
		w->errors++;
	w->nbufs++;
}

static void op_free(struct worker *w, int i)
{
	struct buf *b = &w->bufs[i];

	if (cudaFree(b->dev) != cudaSuccess) {
		w->errors++; /* it stays ours: freed again later */
		return;
	}
	free(b->mirror);
	w->bufs[i] = w->bufs[--w->nbufs];
}

static void op_check(struct worker *w, struct buf *b)
{
	int rc;

	if (b->stale) {
		if (!push(b))
			w->errors++;
		return;
	}
	rc = compare(b, "thread", w->id);
	if (rc < 0)
		w->errors++;
	if (rc == 0) {
		w->mismatches++;
		push(b); /* count it once */
	}
}

/* A device-to-device copy between two of the thread's buffers. */
static void op_copy(struct worker *w, struct buf *a, struct buf *b)
{
	size_t n, from, to;

	if (a == b || a->stale || b->stale)
		return;
	n = 1 + (size_t)rand_r(&w->seed) % (a->size < b->size ? a->size : b->size);
	from = (size_t)rand_r(&w->seed) % (a->size - n + 1);
	to = (size_t)rand_r(&w->seed) % (b->size - n + 1);
	if (cudaMemcpy(b->dev + to, a->dev + from, n, cudaMemcpyDeviceToDevice) != cudaSuccess) {
		b->stale = true;
		w->errors++;
		return;
	}
	memcpy(b->mirror + to, a->mirror + from, n);
	w->copies++;
}

struct kernel_check {
	const unsigned char *dev, *want;
	size_t size;
	int equal;
};

/* A host function on the stream reads device memory as a kernel would (simdev runs it on the
 * stream's worker, where device memory is addressable). */
static void CUDART_CB kernel_compare(void *p)
{
	struct kernel_check *k = p;

	k->equal = memcmp(k->dev, k->want, k->size) == 0;
}

/* Stream-ordered work: an async upload and memset, then a "kernel" that compares the buffer
 * with what those leave; the sleep's drain must let all of it finish before it copies. */
static void op_stream(struct worker *w, struct buf *b)
{
	struct kernel_check k = { .dev = b->dev, .want = b->mirror, .size = b->size, .equal = -1 };
	size_t n = 1 + (size_t)rand_r(&w->seed) % b->size;
	size_t at = (size_t)rand_r(&w->seed) % (b->size - n + 1);
	int value = rand_r(&w->seed) & 0xff;
	unsigned char *src = malloc(n);
	bool ok;

	if (!src || b->stale) {
		free(src);
		return;
	}
	fill_random(src, n, &w->seed);
	ok = cudaMemcpyAsync(b->dev + at, src, n, cudaMemcpyHostToDevice, w->stream) ==
	     cudaSuccess;
	ok = ok && cudaMemsetAsync(b->dev, value, n / 2, w->stream) == cudaSuccess;
	if (ok) {
		memcpy(b->mirror + at, src, n);
		memset(b->mirror, value, n / 2);
		ok = cudaLaunchHostFunc(w->stream, kernel_compare, &k) == cudaSuccess;
	}
	/* Always wait, until the wait itself succeeds (a fault fails it without waiting): src and
	 * k must outlive what was queued. */
	for (int tries = 0; cudaStreamSynchronize(w->stream) != cudaSuccess; tries++) {
		ok = false;
		if (tries == 5) {
			cudaDeviceSynchronize();
			break;
		}
	}
	if (!ok) {
		b->stale = true;
		w->errors++;
	} else if (k.equal == 0) {
		fprintf(stderr, "soak_target: MISMATCH thread %d: a kernel read a %zu-byte buffer "
			"at %p that differs\n", w->id, b->size, (void *)b->dev);
		w->mismatches++;
		push(b);
	} else {
		w->kernels++;
	}
	free(src);
}

static void *worker_main(void *p)
{
	struct worker *w = p;

	set_tag(w->id);
	if (cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking) != cudaSuccess)
		w->stream = NULL; /* the legacy stream then */
	while (now() < w->until) {
		int r = rand_r(&w->seed) % 100;
		struct buf *a = w->nbufs ? &w->bufs[rand_r(&w->seed) % w->nbufs] : NULL;
		struct buf *b = w->nbufs ? &w->bufs[rand_r(&w->seed) % w->nbufs] : NULL;

		if (!w->nbufs || (r < 25 && w->nbufs < BUFS_PER_THREAD))
			op_alloc(w);
		else if (r < 40)
			op_free(w, (int)(a - w->bufs));
		else if (r < 65)
			op_check(w, a);
		else if (r < 85)
			op_copy(w, a, b);
		else
			op_stream(w, a);
		w->ops++;
	}
	/* Everything it still owns is checked, then freed (a failed free is retried). */
	for (int i = 0; i < w->nbufs; i++)
		op_check(w, &w->bufs[i]);
	for (int tries = 0; w->nbufs && tries < 20; tries++)
		op_free(w, w->nbufs - 1);
	if (w->stream)
		cudaStreamDestroy(w->stream);
	return NULL;
}

static void *work_main(void *p)
{
	struct worker *w = p;
	long ops = 0, copies = 0, kernels = 0, errors = 0, ooms = 0;
	int mismatches = 0, left = 0;

	for (int i = 0; i < w[0].id; i++)
		pthread_create(&w[i + 1].thread, NULL, worker_main, &w[i + 1]);
	for (int i = 1; i <= w[0].id; i++) {
		pthread_join(w[i].thread, NULL);
		ops += w[i].ops;
		copies += w[i].copies;
		kernels += w[i].kernels;
		errors += w[i].errors;
		ooms += w[i].ooms;
		mismatches += w[i].mismatches;
		left += w[i].nbufs;
	}
	say("work ops=%ld copies=%ld kernels=%ld mismatches=%d errors=%ld unfreed=%d ooms=%ld",
	    ops, copies, kernels, mismatches, errors, left, ooms);
	free(w);
	return NULL;
}

/* w[0].id holds the thread count; w[1..] are the threads. */
static void cmd_work(int threads, double secs, unsigned seed)
{
	struct worker *w = calloc(MAX_THREADS + 1, sizeof(*w));
	pthread_t t;

	if (!w || threads < 1 || threads > MAX_THREADS) {
		free(w);
		say("error work");
		return;
	}
	w[0].id = threads;
	for (int i = 1; i <= threads; i++)
		w[i] = (struct worker){ .id = i - 1, .seed = seed * 7919u + (unsigned)i,
					.until = now() + secs };
	say("work started");
	pthread_create(&t, NULL, work_main, w);
	pthread_detach(t);
}

/* N long-lived buffers in all: a command that failed part way (out of memory on a shared GPU)
 * may be sent again, and makes only those still missing. */
static void cmd_base(int n, size_t size)
{
	unsigned seed = 12345 + (unsigned)nbase;

	while (nbase < n && nbase < MAX_BASE) {
		struct buf *b = &base[nbase];

		b->size = size;
		b->mirror = malloc(size);
		if (!b->mirror || cudaMalloc((void **)&b->dev, size) != cudaSuccess) {
			free(b->mirror);
			b->mirror = NULL;
			say("error alloc");
			return;
		}
		fill_random(b->mirror, size, &seed);
		nbase++;
		/* A fault may hit the upload: try again, it is injected once. */
		for (int tries = 0; tries < 4 && !push(b); tries++)
			;
		if (b->stale) {
			say("error upload");
			return;
		}
	}
	say("ok");
}

/* 1 equal, 0 differs, -1 the copies failed (a fault is injected once or twice). */
static int compare_retried(const struct buf *b, const char *who, int id)
{
	int rc = compare(b, who, id);

	for (int tries = 0; rc < 0 && tries < 3; tries++)
		rc = compare(b, who, id);
	return rc;
}

static void cmd_check(void)
{
	for (int i = 0; i < nbase; i++) {
		int rc = compare_retried(&base[i], "base", i);

		if (rc <= 0) {
			say("%s %d", rc ? "error" : "corrupt", i);
			return;
		}
	}
	for (int i = 0; i < nshared; i++) {
		int rc = compare_retried(&shared[i], "shared", i);

		if (rc <= 0) {
			say("%s shared %d", rc ? "error" : "corrupt", i);
			return;
		}
	}
	say("ok %d", nbase);
}

/* The bytes every holder of a shared buffer expects: the same seed gives the same bytes. */
static unsigned char *shared_mirror(size_t size, unsigned seed)
{
	unsigned char *m = malloc(size);

	if (m)
		fill_random(m, size, &seed);
	return m;
}

static void cmd_ipcexport(size_t size, unsigned seed)
{
	struct buf *b = &shared[nshared];
	cudaIpcMemHandle_t h;
	cudaError_t rc = cudaErrorUnknown;
	char hex[2 * sizeof(h) + 1];

	if (nshared == MAX_SHARED || !size || !(b->mirror = shared_mirror(size, seed))) {
		say("error ipc");
		return;
	}
	b->size = size;
	if (cudaMalloc((void **)&b->dev, size) != cudaSuccess) {
		free(b->mirror);
		say("error alloc");
		return;
	}
	for (int tries = 0; tries < 4 && !push(b); tries++)
		;
	for (int tries = 0; !b->stale && tries < 4 && rc != cudaSuccess; tries++)
		rc = cudaIpcGetMemHandle(&h, b->dev);
	if (rc != cudaSuccess) {
		cudaFree(b->dev);
		free(b->mirror);
		say("error ipc");
		return;
	}
	for (size_t i = 0; i < sizeof(h); i++)
		sprintf(hex + 2 * i, "%02x", (unsigned char)h.reserved[i]);
	nshared++;
	say("ok %s", hex);
}

static void cmd_ipcopen(const char *hex, size_t size, unsigned seed)
{
	struct buf *b = &shared[nshared];
	cudaIpcMemHandle_t h;
	cudaError_t rc;

	if (nshared == MAX_SHARED || strlen(hex) != 2 * sizeof(h) || !size) {
		say("error ipc bad request");
		return;
	}
	for (size_t i = 0; i < sizeof(h); i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
			say("error ipc bad handle");
			return;
		}
		h.reserved[i] = (char)v;
	}
	rc = cudaIpcOpenMemHandle((void **)&b->dev, h, cudaIpcMemLazyEnablePeerAccess);
	if (rc != cudaSuccess) {
		say("error ipc %d", (int)rc);
		return;
	}
	b->size = size;
	if (!(b->mirror = shared_mirror(size, seed))) {
		cudaIpcCloseMemHandle(b->dev);
		say("error ipc no host memory");
		return;
	}
	nshared++;
	say("ok");
}

/* size bytes reserved, mapped from h and made read/write (size a multiple of the granularity:
 * the soak shares 4 MiB). */
static CUresult vmm_map(CUmemGenericAllocationHandle h, size_t size, CUdeviceptr *va)
{
	CUmemAccessDesc d = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
			      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUresult r = cuMemAddressReserve(va, size, 0, 0, 0);

	if (r)
		return r;
	if ((r = cuMemMap(*va, size, 0, h, 0)) == CUDA_SUCCESS &&
	    (r = cuMemSetAccess(*va, size, &d, 1)) != CUDA_SUCCESS)
		cuMemUnmap(*va, size);
	if (r)
		cuMemAddressFree(*va, size);
	return r;
}

static void cmd_vmmexport(size_t size, unsigned seed)
{
	CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				  .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				  .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
	struct buf *b = &shared[nshared];
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CUresult r;

	if (nshared == MAX_SHARED || vmm_has_export || !size ||
	    !(b->mirror = shared_mirror(size, seed))) {
		say("error vmm bad request");
		return;
	}
	r = cuMemCreate(&h, size, &p, 0);
	if (r) {
		free(b->mirror);
		say(r == CUDA_ERROR_OUT_OF_MEMORY ? "error alloc" : "error vmm %d", (int)r);
		return;
	}
	if ((r = vmm_map(h, size, &va))) {
		cuMemRelease(h);
		free(b->mirror);
		say("error vmm %d", (int)r);
		return;
	}
	b->dev = (unsigned char *)(uintptr_t)va;
	b->size = size;
	for (int tries = 0; tries < 4 && !push(b); tries++)
		;
	if (b->stale) {
		cuMemUnmap(va, size);
		cuMemAddressFree(va, size);
		cuMemRelease(h);
		free(b->mirror);
		say("error vmm upload");
		return;
	}
	vmm_exported = h;
	vmm_has_export = true;
	nshared++;
	say("ok");
}

static void cmd_vmmsend(void)
{
	int fd = -1;
	CUresult r;

	if (!vmm_has_export || channel < 0) {
		say("error vmm nothing to send");
		return;
	}
	r = cuMemExportToShareableHandle(&fd, vmm_exported, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
					 0);
	if (r) {
		say("error vmm %d", (int)r);
		return;
	}
	if (fd_pass_send(channel, "vmm", 4, &fd, 1, fd_pass_now_ms() + 10000))
		say("error vmm channel");
	else
		say("ok");
	close(fd);
}

static void cmd_vmmimport(size_t size, unsigned seed, bool keep)
{
	struct buf *b = &shared[nshared];
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	char msg[16];
	size_t nfds = 0;
	CUresult r;
	int fd = -1;

	if (nshared == MAX_SHARED || !size || channel < 0) {
		say("error vmm bad request");
		return;
	}
	if (fd_pass_recv(channel, msg, sizeof(msg), &fd, 1, &nfds, fd_pass_now_ms() + 10000) <= 0 ||
	    nfds != 1) {
		say("error vmm no descriptor came");
		return;
	}
	r = cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
					   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	close(fd);
	if (r) {
		say("error vmm %d", (int)r);
		return;
	}
	if ((r = vmm_map(h, size, &va))) {
		cuMemRelease(h);
		say("error vmm %d", (int)r);
		return;
	}
	if (!keep)
		cuMemRelease(h); /* the mapping holds the memory, as NCCL's peers leave it */
	if (!(b->mirror = shared_mirror(size, seed))) {
		say("error vmm no host memory"); /* the mapping stays, unchecked */
		return;
	}
	b->dev = (unsigned char *)(uintptr_t)va;
	b->size = size;
	nshared++;
	say("ok");
}

int main(void)
{
	char line[256];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("CTL_CHANNEL_FD"))
		channel = atoi(getenv("CTL_CHANNEL_FD"));
	if (getenv("SOAK_LARGE_PCT"))
		large_pct = atoi(getenv("SOAK_LARGE_PCT"));
	if (cudaSetDevice(0) != cudaSuccess) {
		say("error no device");
		return 1;
	}
	say("ready");
	while (fgets(line, sizeof(line), stdin)) {
		char a[32] = "", b[160] = "", c[32] = "", d[32] = "";
		int n = sscanf(line, "%31s %159s %31s %31s", a, b, c, d);

		if (n <= 0)
			continue;
		if (!strcmp(a, "base") && n == 3)
			cmd_base(atoi(b), strtoull(c, NULL, 10));
		else if (!strcmp(a, "check"))
			cmd_check();
		else if (!strcmp(a, "work") && n == 4)
			cmd_work(atoi(b), atof(c), (unsigned)strtoul(d, NULL, 10));
		else if (!strcmp(a, "memused")) {
			size_t fr = 0, tot = 0;

			if (cudaMemGetInfo(&fr, &tot) == cudaSuccess)
				say("used %zu", tot - fr);
			else
				say("error meminfo");
		} else if (!strcmp(a, "ipcexport") && n == 3)
			cmd_ipcexport(strtoull(b, NULL, 10), (unsigned)strtoul(c, NULL, 10));
		else if (!strcmp(a, "ipcopen") && n == 4)
			cmd_ipcopen(b, strtoull(c, NULL, 10), (unsigned)strtoul(d, NULL, 10));
		else if (!strcmp(a, "vmmexport") && n == 3)
			cmd_vmmexport(strtoull(b, NULL, 10), (unsigned)strtoul(c, NULL, 10));
		else if (!strcmp(a, "vmmsend"))
			cmd_vmmsend();
		else if (!strcmp(a, "vmmimport") && n == 4)
			cmd_vmmimport(strtoull(b, NULL, 10), (unsigned)strtoul(c, NULL, 10),
				      !strcmp(d, "keep"));
		else if (!strcmp(a, "quit"))
			break;
		else
			say("error unknown command");
	}
	return 0;
}
