/* Legacy CUDA IPC between two processes, as PyTorch's torch.multiprocessing uses it: the parent
 * exports a cudaMalloc'd buffer, a child it starts (fork + exec, a fresh process like "spawn")
 * opens the handle, checks and writes, and the parent sees the write. Modes (argv[1]):
 *   torch              the pattern above with the runtime API, a large and a small buffer, the
 *                      handle opened twice (same pointer) and closed twice
 *   orders             the exporter frees while the child has it open and allocates again: the
 *                      child still sees its bytes and the new allocations are untouched; an
 *                      importer exits without closing; open after the free, open in the
 *                      exporting process: the driver's errors
 *   killed             the exporter (a child) is killed while this process has its memory open:
 *                      the memory stays readable and writable here until closed
 *   noshim             the child runs without the shim: the driver's error, no crash
 *   retain             NCCL's way: cuMemRetainAllocationHandle at a 1 GiB allocation's base, its
 *                      properties, the handle exported as a descriptor; a child imports and maps
 *                      it, sees the parent's bytes and writes; the parent sees the write. Then a
 *                      retain inside a small allocation: refused ("retain_small RC"), no handle
 *                      can hold it from its base (prog_retain.c has the mid-size cases)
 *   fork-kept          an importer keeps its connection to us; a child we fork then holds none of
 *                      the control server's sockets ("parent_sockets N", "child_sockets N")
 *   plain-open         a child asks the exporter's socket for a kept export's descriptors as an
 *                      older shim does (one request, no keep): "plain_reply ok fds=N ended=1"
 *   restart            exporters one after another (export-wait children, killed in turn): each
 *                      is asked over a connection of its own, kept between two opens; a dead
 *                      one's handle is refused ("open_after_exit RC")
 *   large              a 136 MiB buffer: 68 physical pieces, more than one message carries
 *   share N            N importers at once open one handle and check its bytes (the exporter
 *                      exports its memory once, at the get, however many open it)
 *   free-after-get     a handle is made and nobody opens it: the descriptors exported ahead
 *                      ("kept_fds N", counted in /proc/self/fd) are not inherited by a forked
 *                      child ("child_extra_fds N") and are closed by the free
 *                      ("fds_after_free N") and the device memory goes back to the driver
 *                      ("used_after_free BYTES", relative to before the allocation)
 *   bench N [MIB [MS]] N allocations of MIB (2) MiB, one at a time, as torch's IPC benchmark does
 *                      (tests/gpu/ipc_torch.py --bench): the parent allocates and gets a handle,
 *                      waits up to MS (0) ms for the shim's export ahead (its descriptors in
 *                      /proc/self/fd), a child opens it (timed), checks a byte and closes; the
 *                      parent frees.
 *                      Prints "bench open_us median=M min=A max=B" (scripts/bench-ipc.sh)
 *   woken              two buffers slept and woken through the in-process API (the wake makes
 *                      them one joint handle), then one exported: a child opens it, checks its
 *                      bytes and writes; the parent sees the write and the other buffer intact
 *                      ("woken ok"). The driver maps whole handles only, so the importer must
 *                      map the joint handle whole, not the buffer's part of it
 *   close-refused      the importer's driver refuses the unmaps of its close and of the next
 *                      open's retry: the close succeeds, the memory stays mapped and counted
 *                      (its status printed after "after_refused_close"), the reopen gets a new
 *                      range with the exporter's bytes ("reopen_same_address 0"), and the next
 *                      close unmaps both (status after "after_last_close")
 * Prints "name rc" lines for the error codes; the test checks them. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <dirent.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_device_pattern.h"

#define BIG (6u << 20)
#define SMALL 1000u
#define LARGE (136u << 20)

static void to_hex(const void *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", ((const unsigned char *)p)[i]);
}

static void from_hex(const char *s, void *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			FAIL("bad handle text");
		((unsigned char *)p)[i] = (unsigned char)v;
	}
}

static void driver_init(void)
{
	CUdevice dev;
	CUcontext ctx;

	CHECK_CU(cuInit(0));
	CHECK_CU(cuDeviceGet(&dev, 0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK_CU(cuCtxSetCurrent(ctx));
}

/* Start this program again as mode with args; its stdin/stdout are pipes (*to, *from). */
static pid_t spawn(const char *self, const char *mode, const char *a1, const char *a2,
		   bool noshim, int *to, int *from)
{
	int in[2], out[2];
	pid_t pid;

	if (pipe(in) || pipe(out))
		FAIL("pipe");
	pid = fork();
	if (pid < 0)
		FAIL("fork");
	if (!pid) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		unsetenv("SIMDEV_STATS"); /* the parent's counters are the test's */
		if (noshim)
			unsetenv("LD_PRELOAD");
		execl(self, self, mode, a1, a2, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	*to = in[1];
	*from = out[0];
	return pid;
}

static void say(int fd, const char *word)
{
	if (write(fd, word, strlen(word)) < 0 || write(fd, "\n", 1) < 0)
		FAIL("write");
}

static void expect_line(int fd, const char *word)
{
	char buf[256];
	size_t n = 0;

	while (n + 1 < sizeof(buf) && read(fd, buf + n, 1) == 1 && buf[n] != '\n')
		n++;
	buf[n] = '\0';
	if (strcmp(buf, word))
		FAIL("expected \"%s\", got \"%s\"", word, buf);
}

static void read_line(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap && read(fd, buf + n, 1) == 1 && buf[n] != '\n')
		n++;
	buf[n] = '\0';
}

static int wait_child(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		FAIL("waitpid");
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Ask this process's own control socket for its status and print the legacy-IPC records
 * ("STATUS ipc_export ..."), as vmmctl would see them. */
static void print_ipc_status(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *dir = getenv("VMMSHIM_RUN_DIR");
	static char reply[1 << 16];
	size_t len = 0;
	ssize_t k;
	int fd;

	if (!dir)
		return;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%d.sock", dir, (int)getpid());
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    write(fd, "vmmshim/1 status\n", 17) != 17)
		FAIL("cannot ask the control socket");
	while (len + 1 < sizeof(reply) && (k = read(fd, reply + len, sizeof(reply) - 1 - len)) > 0)
		len += (size_t)k;
	reply[len] = '\0';
	close(fd);
	for (char *l = strtok(reply, "\n"); l; l = strtok(NULL, "\n"))
		if (!strncmp(l, "ipc", 3) || strstr(l, "ipc_shared"))
			printf("STATUS %s\n", l);
}

/* ---- torch: runtime API ---- */

static int torch_parent(const char *self)
{
	void *big, *small, *host = malloc(BIG);
	cudaIpcMemHandle_t hb, hs;
	char xb[129], xs[129];
	int to, from;
	pid_t pid;

	CHECK_CU(cudaMalloc(&big, BIG));
	CHECK_CU(cudaMalloc(&small, SMALL));
	pattern_fill(host, BIG, 1);
	CHECK_CU(cudaMemcpy(big, host, BIG, cudaMemcpyHostToDevice));
	pattern_fill(host, SMALL, 2);
	CHECK_CU(cudaMemcpy(small, host, SMALL, cudaMemcpyHostToDevice));
	CHECK_CU(cudaIpcGetMemHandle(&hb, big));
	CHECK_CU(cudaIpcGetMemHandle(&hs, (char *)small + 10)); /* any address in it */
	to_hex(&hb, sizeof(hb), xb);
	to_hex(&hs, sizeof(hs), xs);
	pid = spawn(self, "torch-child", xb, xs, false, &to, &from);
	if (wait_child(pid))
		FAIL("the child failed");
	CHECK_CU(cudaMemcpy(host, big, BIG, cudaMemcpyDeviceToHost));
	if (pattern_check(host, BIG, 3))
		FAIL("the parent does not see the child's write to the large buffer");
	CHECK_CU(cudaMemcpy(host, small, SMALL, cudaMemcpyDeviceToHost));
	if (pattern_check(host, SMALL, 4))
		FAIL("the parent does not see the child's write to the small buffer");
	CHECK_CU(cudaFree(big));
	CHECK_CU(cudaFree(small));
	free(host);
	printf("torch ok\n");
	return 0;
}

static int torch_child(const char *xb, const char *xs)
{
	cudaIpcMemHandle_t hb, hs;
	void *big, *big2, *small, *host = malloc(BIG);

	from_hex(xb, &hb, sizeof(hb));
	from_hex(xs, &hs, sizeof(hs));
	CHECK_CU(cudaSetDevice(0));
	CHECK_CU(cudaIpcOpenMemHandle(&big, hb, cudaIpcMemLazyEnablePeerAccess));
	CHECK_CU(cudaIpcOpenMemHandle(&small, hs, cudaIpcMemLazyEnablePeerAccess));
	CHECK_CU(cudaIpcOpenMemHandle(&big2, hb, cudaIpcMemLazyEnablePeerAccess));
	if (big2 != big)
		FAIL("a second open gave another pointer");
	CHECK_CU(cudaMemcpy(host, big, BIG, cudaMemcpyDeviceToHost));
	if (pattern_check(host, BIG, 1))
		FAIL("the child does not see the parent's large buffer");
	CHECK_CU(cudaMemcpy(host, small, SMALL, cudaMemcpyDeviceToHost));
	if (pattern_check(host, SMALL, 2))
		FAIL("the child does not see the parent's small buffer");
	pattern_fill(host, BIG, 3);
	CHECK_CU(cudaMemcpy(big, host, BIG, cudaMemcpyHostToDevice));
	pattern_fill(host, SMALL, 4);
	CHECK_CU(cudaMemcpy(small, host, SMALL, cudaMemcpyHostToDevice));
	CHECK_CU(cudaIpcCloseMemHandle(big2));
	CHECK_CU(cudaMemcpy(host, big, BIG, cudaMemcpyDeviceToHost)); /* still open once */
	CHECK_CU(cudaIpcCloseMemHandle(big));
	CHECK_CU(cudaIpcCloseMemHandle(small));
	free(host);
	return 0;
}

/* ---- orders: driver API ---- */

static int orders_parent(const char *self)
{
	CUdeviceptr a, again[4], c, d;
	CUipcMemHandle h, hc;
	char x[129], xc[129];
	int to, from, rc;
	pid_t pid;

	driver_init();
	CHECK_CU(cuMemAlloc(&a, BIG));
	put_pattern(a, BIG, 1);
	CHECK_CU(cuIpcGetMemHandle(&h, a));
	printf("open_in_exporter %d\n", (int)cuIpcOpenMemHandle(&d, h, 0));
	to_hex(&h, sizeof(h), x);
	pid = spawn(self, "orders-child", x, "", false, &to, &from);
	expect_line(from, "opened");
	printf("importer %d\n", (int)pid);
	print_ipc_status();
	/* Free while the child maps it, then allocate the same sizes again. */
	CHECK_CU(cuMemFree(a));
	for (int i = 0; i < 4; i++) {
		CHECK_CU(cuMemAlloc(&again[i], BIG));
		put_pattern(again[i], BIG, 9);
	}
	say(to, "go");
	rc = wait_child(pid);
	if (rc)
		FAIL("the child failed (%d)", rc);
	for (int i = 0; i < 4; i++) {
		if (!has_pattern(again[i], BIG, 9))
			FAIL("a new allocation was changed by the importer of a freed one");
		CHECK_CU(cuMemFree(again[i]));
	}
	/* An importer that exits without closing: the exporter's memory is as it was. */
	CHECK_CU(cuMemAlloc(&c, BIG));
	put_pattern(c, BIG, 13);
	CHECK_CU(cuIpcGetMemHandle(&hc, c));
	to_hex(&hc, sizeof(hc), xc);
	pid = spawn(self, "open-exit", xc, "", false, &to, &from);
	if (wait_child(pid))
		FAIL("the importer that exits without closing failed");
	if (!has_pattern(c, BIG, 14))
		FAIL("the write of an importer that exited is lost");
	CHECK_CU(cuMemFree(c));
	/* A handle whose allocation is freed before anyone opened it. */
	CHECK_CU(cuMemAlloc(&c, SMALL));
	CHECK_CU(cuIpcGetMemHandle(&hc, c));
	CHECK_CU(cuMemFree(c));
	to_hex(&hc, sizeof(hc), xc);
	pid = spawn(self, "open-rc", xc, "", false, &to, &from);
	printf("open_after_free child %d\n", wait_child(pid));
	printf("orders ok\n");
	return 0;
}

static int orders_child(const char *x)
{
	CUipcMemHandle h;
	CUdeviceptr p, q;

	driver_init();
	from_hex(x, &h, sizeof(h));
	CHECK_CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	if (!has_pattern(p, BIG, 1))
		FAIL("opened memory lacks the exporter's bytes");
	say(1, "opened");
	expect_line(0, "go");
	if (!has_pattern(p, BIG, 1))
		FAIL("the exporter's reuse changed memory this process has open");
	put_pattern(p, BIG, 5);
	if (!has_pattern(p, BIG, 5))
		FAIL("write to opened memory lost");
	CHECK_CU(cuIpcCloseMemHandle(p));
	if (cuIpcOpenMemHandle(&q, h, 0) != CUDA_ERROR_INVALID_HANDLE)
		FAIL("a freed allocation's handle opened again");
	return 0;
}

/* Exit status: the open's CUresult modulo 256 (0 only when it opened, then closed). */
static int open_rc(const char *x)
{
	CUipcMemHandle h;
	CUdeviceptr p;
	CUresult r;

	driver_init();
	from_hex(x, &h, sizeof(h));
	r = cuIpcOpenMemHandle(&p, h, 0);
	if (!r)
		cuIpcCloseMemHandle(p);
	return !r ? 0 : r % 256 ? (int)(r % 256) : 255;
}

/* Opens, writes and exits without closing. */
static int open_exit(const char *x)
{
	CUipcMemHandle h;
	CUdeviceptr p;

	driver_init();
	from_hex(x, &h, sizeof(h));
	CHECK_CU(cuIpcOpenMemHandle(&p, h, 0));
	if (!has_pattern(p, BIG, 13))
		FAIL("opened memory lacks the exporter's bytes");
	put_pattern(p, BIG, 14);
	exit(0);
}

/* ---- killed ---- */

static int export_wait(void)
{
	CUipcMemHandle h;
	CUdeviceptr a;
	char x[129];

	driver_init();
	CHECK_CU(cuMemAlloc(&a, BIG));
	put_pattern(a, BIG, 1);
	CHECK_CU(cuIpcGetMemHandle(&h, a));
	to_hex(&h, sizeof(h), x);
	say(1, x);
	pause();
	return 0;
}

static int killed(const char *self)
{
	CUipcMemHandle h;
	CUdeviceptr p;
	char x[200];
	size_t n = 0;
	int to, from;
	pid_t pid;

	driver_init();
	pid = spawn(self, "export-wait", "", "", false, &to, &from);
	while (n + 1 < sizeof(x) && read(from, x + n, 1) == 1 && x[n] != '\n')
		n++;
	x[n] = '\0';
	from_hex(x, &h, sizeof(h));
	CHECK_CU(cuIpcOpenMemHandle(&p, h, 0));
	if (!has_pattern(p, BIG, 1))
		FAIL("opened memory lacks the exporter's bytes");
	printf("exporter %d\n", (int)pid);
	print_ipc_status();
	kill(pid, SIGKILL);
	wait_child(pid);
	if (!has_pattern(p, BIG, 1))
		FAIL("the exporter's death changed memory open here");
	put_pattern(p, BIG, 6);
	if (!has_pattern(p, BIG, 6))
		FAIL("write after the exporter died lost");
	CHECK_CU(cuIpcCloseMemHandle(p));
	printf("open_after_exit %d\n", (int)cuIpcOpenMemHandle(&p, h, 0));
	printf("killed ok\n");
	return 0;
}

/* ---- restart ---- */

/* Start an export-wait child; its handle in *h. */
static pid_t start_exporter(const char *self, CUipcMemHandle *h)
{
	char x[200];
	size_t n = 0;
	int to, from;
	pid_t pid = spawn(self, "export-wait", "", "", false, &to, &from);

	while (n + 1 < sizeof(x) && read(from, x + n, 1) == 1 && x[n] != '\n')
		n++;
	x[n] = '\0';
	from_hex(x, h, sizeof(*h));
	return pid;
}

/* Opens from one exporter go over one connection; when it ends, its handles are refused and the
 * next exporter (the program started again) is asked over a connection of its own. */
static int restart(const char *self)
{
	CUipcMemHandle h1, h2;
	CUdeviceptr p;
	pid_t pid;

	driver_init();
	for (int round = 0; round < 2; round++) {
		pid = start_exporter(self, &h1);
		CHECK_CU(cuIpcOpenMemHandle(&p, h1, 0));
		if (!has_pattern(p, BIG, 1))
			FAIL("round %d: opened memory lacks the exporter's bytes", round);
		CHECK_CU(cuIpcCloseMemHandle(p));
		CHECK_CU(cuIpcOpenMemHandle(&p, h1, 0)); /* again, over the kept connection */
		CHECK_CU(cuIpcCloseMemHandle(p));
		kill(pid, SIGKILL);
		wait_child(pid);
		printf("open_after_exit %d\n", (int)cuIpcOpenMemHandle(&p, h1, 0));
	}
	pid = start_exporter(self, &h2);
	CHECK_CU(cuIpcOpenMemHandle(&p, h2, 0));
	if (!has_pattern(p, BIG, 1))
		FAIL("the last exporter's memory lacks its bytes");
	CHECK_CU(cuIpcCloseMemHandle(p));
	kill(pid, SIGKILL);
	wait_child(pid);
	printf("restart ok\n");
	return 0;
}

/* ---- large ---- */

static int large_parent(const char *self)
{
	CUipcMemHandle h;
	CUdeviceptr a;
	char x[129];
	int to, from;
	pid_t pid;

	driver_init();
	CHECK_CU(cuMemAlloc(&a, LARGE));
	put_pattern(a, LARGE, 11);
	CHECK_CU(cuIpcGetMemHandle(&h, a));
	to_hex(&h, sizeof(h), x);
	pid = spawn(self, "large-child", x, "", false, &to, &from);
	if (wait_child(pid))
		FAIL("the child failed");
	if (!has_pattern(a, LARGE, 12))
		FAIL("the parent does not see the child's write");
	CHECK_CU(cuMemFree(a));
	printf("large ok\n");
	return 0;
}

/* An importer: open the handle written as hex in x, find the exporter's pattern `seen` in its n
 * bytes, write the pattern `written` for the exporter to see, close. */
static int open_check_write(const char *x, size_t n, int seen, int written)
{
	CUipcMemHandle h;
	CUdeviceptr p;

	driver_init();
	from_hex(x, &h, sizeof(h));
	CHECK_CU(cuIpcOpenMemHandle(&p, h, 0));
	if (!has_pattern(p, n, seen))
		FAIL("the child does not see the parent's bytes");
	put_pattern(p, n, written);
	CHECK_CU(cuIpcCloseMemHandle(p));
	return 0;
}

static int large_child(const char *x)
{
	return open_check_write(x, LARGE, 11, 12);
}

/* ---- woken ---- */

static int woken_parent(const char *self)
{
	int (*vsleep)(const char *, int) = (int (*)(const char *, int))dlsym(RTLD_DEFAULT,
										"vmmshim_sleep");
	int (*vwake)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "vmmshim_wake");
	CUipcMemHandle h;
	CUdeviceptr a, b;
	char x[129];
	int to, from;
	pid_t pid;

	if (!vsleep || !vwake)
		FAIL("no in-process API: run it under the shim");
	driver_init();
	CHECK_CU(cuMemAlloc(&a, BIG));
	CHECK_CU(cuMemAlloc(&b, BIG));
	put_pattern(a, BIG, 21);
	put_pattern(b, BIG, 22);
	if (vsleep(NULL, 0) || vwake(NULL))
		FAIL("sleep or wake failed");
	CHECK_CU(cuIpcGetMemHandle(&h, b));
	to_hex(&h, sizeof(h), x);
	pid = spawn(self, "woken-child", x, "", false, &to, &from);
	if (wait_child(pid))
		FAIL("the child failed");
	if (!has_pattern(b, BIG, 23))
		FAIL("the parent does not see the child's write");
	if (!has_pattern(a, BIG, 21))
		FAIL("the other buffer changed");
	CHECK_CU(cuMemFree(a));
	CHECK_CU(cuMemFree(b));
	printf("woken ok\n");
	return 0;
}

static int woken_child(const char *x)
{
	return open_check_write(x, BIG, 22, 23);
}

/* ---- share N ---- */

static int share_parent(const char *self, int n)
{
	CUipcMemHandle h;
	CUdeviceptr a;
	char x[129];
	int to[8], from[8];
	pid_t pid[8];

	if (n < 1 || n > 8)
		FAIL("share: 1 to 8 importers");
	driver_init();
	CHECK_CU(cuMemAlloc(&a, BIG));
	put_pattern(a, BIG, 31);
	CHECK_CU(cuIpcGetMemHandle(&h, a));
	to_hex(&h, sizeof(h), x);
	for (int i = 0; i < n; i++)
		pid[i] = spawn(self, "share-child", x, "", false, &to[i], &from[i]);
	for (int i = 0; i < n; i++)
		if (wait_child(pid[i]))
			FAIL("importer %d failed", i);
	CHECK_CU(cuMemFree(a));
	printf("share ok\n");
	return 0;
}

static int share_child(const char *x)
{
	CUipcMemHandle h;
	CUdeviceptr p;

	driver_init();
	from_hex(x, &h, sizeof(h));
	CHECK_CU(cuIpcOpenMemHandle(&p, h, 0));
	if (!has_pattern(p, BIG, 31))
		FAIL("opened memory lacks the exporter's bytes");
	CHECK_CU(cuIpcCloseMemHandle(p));
	return 0;
}

/* ---- free-after-get ---- */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		FAIL("cannot list /proc/self/fd");
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static long long device_used(void)
{
	size_t fr, tot;

	CHECK_CU(cuMemGetInfo(&fr, &tot));
	return (long long)(tot - fr);
}

static int free_after_get(void)
{
	CUdeviceptr warm, a, b;
	CUipcMemHandle h;
	struct timespec pause = { 0, 10 * 1000 * 1000 };
	long long used0;
	int fd0, waited = 0;
	pid_t child;

	driver_init();
	CHECK_CU(cuMemAlloc(&warm, SMALL)); /* the shim's own descriptors open before counting */
	fd0 = count_fds();
	used0 = device_used();
	CHECK_CU(cuMemAlloc(&a, BIG));
	put_pattern(a, BIG, 41);
	CHECK_CU(cuIpcGetMemHandle(&h, a));
	/* The export ahead happens on a thread of the shim: wait for it (bounded). */
	while (count_fds() == fd0 && waited++ < 500)
		nanosleep(&pause, NULL);
	printf("kept_fds %d\n", count_fds() - fd0);
	/* A forked child holds none of them (nor the control socket: at most fd0 - 1). */
	fflush(stdout);
	child = fork();
	if (child < 0)
		FAIL("fork");
	if (!child) {
		printf("child_extra_fds %d\n", count_fds() - fd0);
		_exit(0);
	}
	wait_child(child);
	CHECK_CU(cuMemFree(a));
	printf("fds_after_free %d\n", count_fds() - fd0);
	/* Freed memory is reused only after a sync; the next allocation settles the heap. */
	CHECK_CU(cuCtxSynchronize());
	CHECK_CU(cuMemAlloc(&b, SMALL));
	CHECK_CU(cuMemFree(b));
	printf("used_after_free %lld\n", device_used() - used0);
	CHECK_CU(cuMemFree(warm));
	return 0;
}

/* ---- plain-open ---- */

/* The parent's side: a handle whose descriptors the shim has exported ahead and kept. */
static int plain_open_parent(const char *self)
{
	struct timespec pause = { 0, 10 * 1000 * 1000 };
	CUipcMemHandle h;
	CUdeviceptr warm, a;
	char x[129], line[128];
	int to, from, fd0, waited = 0, rc;
	pid_t pid;

	driver_init();
	CHECK_CU(cuMemAlloc(&warm, SMALL));
	fd0 = count_fds();
	CHECK_CU(cuMemAlloc(&a, BIG));
	CHECK_CU(cuIpcGetMemHandle(&h, a));
	while (count_fds() == fd0 && waited++ < 500)
		nanosleep(&pause, NULL);
	to_hex(&h, sizeof(h), x);
	pid = spawn(self, "plain-open-child", x, "", false, &to, &from);
	read_line(from, line, sizeof(line)); /* the child's verdict, on our output */
	printf("%s\n", line);
	rc = wait_child(pid);
	CHECK_CU(cuMemFree(a));
	CHECK_CU(cuMemFree(warm));
	printf("plain-open child %d\n", rc);
	return rc;
}

/* The child asks the exporter's socket as a shim without kept connections does: one request,
 * its end of writing shut, the reply and the descriptors read until the server closes. */
static int plain_open_child(const char *x)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *dir = getenv("VMMSHIM_RUN_DIR");
	unsigned char raw[64];
	uint32_t pid;
	uint64_t id, base;
	char line[160], reply[4096];
	size_t len = 0, nfds = 0;
	int fd;

	from_hex(x, raw, sizeof(raw));
	memcpy(&pid, raw + 12, 4);   /* the shim's handle: magic, version, pid, start time, */
	memcpy(&id, raw + 24, 8);    /* export id, base */
	memcpy(&base, raw + 32, 8);
	if (!dir)
		FAIL("no VMMSHIM_RUN_DIR");
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%u.sock", dir, pid);
	snprintf(line, sizeof(line), "vmmshim/1 share_open export=%llu base=%llu\n",
		 (unsigned long long)id, (unsigned long long)base);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    write(fd, line, strlen(line)) != (ssize_t)strlen(line))
		FAIL("cannot ask the exporter");
	shutdown(fd, SHUT_WR);
	for (;;) {
		char ctl[CMSG_SPACE(sizeof(int) * 64)];
		struct iovec io = { .iov_base = reply + len, .iov_len = sizeof(reply) - 1 - len };
		struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl,
				    .msg_controllen = sizeof(ctl) };
		ssize_t k = recvmsg(fd, &m, 0);

		if (k <= 0)
			break;
		len += (size_t)k;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int got[64];

			memcpy(got, CMSG_DATA(c), n * sizeof(int));
			for (size_t i = 0; i < n; i++)
				close(got[i]);
			nfds += n;
		}
	}
	reply[len] = '\0';
	close(fd);
	printf("plain_reply %s fds=%zu ended=%d\n", strncmp(reply, "vmmshim/1 ok\n", 13) ? "bad" :
	       "ok", nfds, len >= 4 && !strcmp(reply + len - 4, "end\n"));
	return 0;
}

/* ---- fork-kept ---- */

static int count_sockets(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		FAIL("cannot list /proc/self/fd");
	while ((e = readdir(d))) {
		char path[300], target[64];
		ssize_t k;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		k = readlink(path, target, sizeof(target) - 1);
		if (k > 0) {
			target[k] = '\0';
			n += !strncmp(target, "socket:", 7);
		}
	}
	closedir(d);
	return n;
}

/* An importer keeps its connection to us; a child we fork holds none of the control server's
 * sockets (a copy would keep the connection open after we close it, and the importer would wait
 * on it for a reply). */
static int fork_kept(const char *self)
{
	CUipcMemHandle h;
	CUdeviceptr a;
	char x[129];
	int to, from, st;
	pid_t pid, child;

	driver_init();
	CHECK_CU(cuMemAlloc(&a, BIG));
	put_pattern(a, BIG, 1);
	CHECK_CU(cuIpcGetMemHandle(&h, a));
	to_hex(&h, sizeof(h), x);
	pid = spawn(self, "orders-child", x, "", false, &to, &from);
	expect_line(from, "opened"); /* it keeps its connection while it waits */
	printf("parent_sockets %d\n", count_sockets());
	fflush(stdout);
	child = fork();
	if (child < 0)
		FAIL("fork");
	if (!child) {
		printf("child_sockets %d\n", count_sockets());
		_exit(0);
	}
	if (waitpid(child, &st, 0) != child)
		FAIL("waitpid");
	CHECK_CU(cuMemFree(a)); /* what orders-child expects before "go" */
	say(to, "go");
	if (wait_child(pid))
		FAIL("the importer failed");
	printf("fork-kept ok\n");
	return 0;
}

/* ---- retain ---- */

#define HUGE (1ull << 30)
#define PROBE (1u << 20)

static int retain_parent(const char *self)
{
	CUmemGenericAllocationHandle h, hs;
	CUmemAllocationProp prop;
	CUdeviceptr a, s, s2;
	char arg[32];
	int fd = -1, to, from, rc;
	pid_t pid;

	driver_init();
	CHECK_CU(cuMemAlloc(&a, HUGE));
	put_pattern(a, PROBE, 21);
	put_pattern(a + HUGE - PROBE, PROBE, 22);
	CHECK_CU(cuMemRetainAllocationHandle(&h, (void *)a));
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&prop, h));
	if (!(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		FAIL("the retained handle cannot be exported as a descriptor");
	CHECK_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	snprintf(arg, sizeof(arg), "%d", fd);
	pid = spawn(self, "retain-child", arg, "", false, &to, &from);
	if (wait_child(pid))
		FAIL("the child failed");
	close(fd);
	if (!has_pattern(a, PROBE, 23) || !has_pattern(a + HUGE - PROBE, PROBE, 22))
		FAIL("the parent does not see the child's write through the exported handle");
	CHECK_CU(cuMemRelease(h));
	/* The second of two small allocations lies inside a shared 2 MiB piece. */
	CHECK_CU(cuMemAlloc(&s, 4096));
	CHECK_CU(cuMemAlloc(&s2, 4096));
	rc = (int)cuMemRetainAllocationHandle(&hs, (void *)(s2 + 100));
	printf("retain_small %d\n", rc);
	if (!rc)
		CHECK_CU(cuMemRelease(hs));
	CHECK_CU(cuMemFree(s));
	CHECK_CU(cuMemFree(s2));
	CHECK_CU(cuMemFree(a));
	printf("retain ok\n");
	return 0;
}

static int retain_child(const char *arg)
{
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr va;

	driver_init();
	CHECK_CU(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)atoi(arg),
						CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CHECK_CU(cuMemAddressReserve(&va, HUGE, 0, 0, 0));
	CHECK_CU(cuMemMap(va, HUGE, 0, h, 0));
	CHECK_CU(cuMemSetAccess(va, HUGE, &acc, 1));
	if (!has_pattern(va, PROBE, 21) || !has_pattern(va + HUGE - PROBE, PROBE, 22))
		FAIL("the imported handle does not hold the allocation from its start");
	put_pattern(va, PROBE, 23);
	CHECK_CU(cuMemUnmap(va, HUGE));
	CHECK_CU(cuMemAddressFree(va, HUGE));
	CHECK_CU(cuMemRelease(h));
	return 0;
}

/* ---- noshim ---- */

static int noshim(const char *self)
{
	CUipcMemHandle h;
	CUdeviceptr a;
	char x[129];
	int to, from;
	pid_t pid;

	driver_init();
	CHECK_CU(cuMemAlloc(&a, BIG));
	CHECK_CU(cuIpcGetMemHandle(&h, a));
	to_hex(&h, sizeof(h), x);
	pid = spawn(self, "open-rc", x, "", true, &to, &from);
	printf("open_without_shim %d\n", wait_child(pid));
	CHECK_CU(cuMemFree(a));
	return 0;
}

/* ---- bench ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int bench_parent(const char *self, int n, int mib, int wait_ms)
{
	struct timespec pause = { 0, 1000 * 1000 };
	size_t size = (size_t)mib << 20;
	CUipcMemHandle h;
	CUdeviceptr a;
	char x[129], line[64];
	int to, from, fd0;
	pid_t pid;

	if (n < 1 || mib < 1)
		FAIL("bench: N >= 1 opens of MIB >= 1 MiB");
	driver_init();
	snprintf(line, sizeof(line), "%d", n);
	pid = spawn(self, "bench-child", line, "", false, &to, &from);
	for (int i = 0; i < n; i++) {
		unsigned char b = (unsigned char)(i + 1);

		CHECK_CU(cuMemAlloc(&a, size));
		CHECK_CU(cuMemcpyHtoD(a, &b, 1));
		fd0 = count_fds();
		CHECK_CU(cuIpcGetMemHandle(&h, a));
		for (int waited = 0; waited < wait_ms && count_fds() == fd0; waited++)
			nanosleep(&pause, NULL);
		to_hex(&h, sizeof(h), x);
		say(to, x);
		expect_line(from, "done");
		CHECK_CU(cuMemFree(a));
	}
	read_line(from, line, sizeof(line));
	if (wait_child(pid))
		FAIL("the child failed");
	printf("bench open_us %s (%d opens of %d MiB)\n", line, n, mib);
	return 0;
}

static int bench_child(int n)
{
	double *us = calloc((size_t)n, sizeof(*us));
	CUipcMemHandle h;
	CUdeviceptr p;
	char x[200];

	if (!us)
		FAIL("out of memory");
	driver_init();
	for (int i = 0; i < n; i++) {
		unsigned char b = 0;
		double t0;

		read_line(0, x, sizeof(x));
		from_hex(x, &h, sizeof(h));
		t0 = now_us();
		CHECK_CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
		us[i] = now_us() - t0;
		CHECK_CU(cuMemcpyDtoH(&b, p, 1));
		if (b != (unsigned char)(i + 1))
			FAIL("open %d does not see the exporter's byte", i);
		CHECK_CU(cuIpcCloseMemHandle(p));
		say(1, "done");
	}
	qsort(us, (size_t)n, sizeof(*us), cmp_double);
	printf("median=%.1f min=%.1f max=%.1f\n", us[n / 2], us[0], us[n - 1]);
	free(us);
	return 0;
}

/* ---- close-refused: the importer's unmap is refused at a close ---- */

static int close_refused_parent(const char *self)
{
	CUdeviceptr a;
	CUipcMemHandle h;
	char x[129], buf[4096];
	ssize_t k;
	int to, from, rc;
	pid_t pid;

	driver_init();
	CHECK_CU(cuMemAlloc(&a, BIG));
	put_pattern(a, BIG, 1);
	CHECK_CU(cuIpcGetMemHandle(&h, a));
	to_hex(&h, sizeof(h), x);
	/* The child's driver: the close's unmap and its retry, then the next open's retry. */
	setenv("SIMDEV_FAIL", "cuMemUnmap:1,cuMemUnmap:2,cuMemUnmap:3", 1);
	pid = spawn(self, "close-refused-child", x, "", false, &to, &from);
	unsetenv("SIMDEV_FAIL");
	while ((k = read(from, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)k, stdout);
	rc = wait_child(pid);
	if (rc)
		FAIL("the child failed (%d)", rc);
	CHECK_CU(cuMemFree(a));
	printf("close-refused ok\n");
	return 0;
}

static int close_refused_child(const char *x)
{
	CUdeviceptr a, b;
	CUipcMemHandle h;

	from_hex(x, &h, sizeof(h));
	driver_init();
	CHECK_CU(cuIpcOpenMemHandle(&a, h, 0));
	if (!has_pattern(a, BIG, 1))
		FAIL("the child does not see the exporter's bytes");
	CHECK_CU(cuIpcCloseMemHandle(a));
	CHECK_CU(cuIpcOpenMemHandle(&b, h, 0));
	printf("reopen_same_address %d\n", b == a);
	printf("after_refused_close\n");
	print_ipc_status();
	if (!has_pattern(b, BIG, 1))
		FAIL("the reopened memory does not hold the exporter's bytes");
	CHECK_CU(cuIpcCloseMemHandle(b));
	printf("after_last_close\n");
	print_ipc_status();
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const char *a1 = argc > 2 ? argv[2] : "", *a2 = argc > 3 ? argv[3] : "";
	const char *a3 = argc > 4 ? argv[4] : "";

	setvbuf(stdout, NULL, _IONBF, 0);
	if (!strcmp(mode, "torch"))
		return torch_parent(argv[0]);
	if (!strcmp(mode, "torch-child"))
		return torch_child(a1, a2);
	if (!strcmp(mode, "orders"))
		return orders_parent(argv[0]);
	if (!strcmp(mode, "orders-child"))
		return orders_child(a1);
	if (!strcmp(mode, "open-exit"))
		return open_exit(a1);
	if (!strcmp(mode, "open-rc"))
		return open_rc(a1);
	if (!strcmp(mode, "killed"))
		return killed(argv[0]);
	if (!strcmp(mode, "export-wait"))
		return export_wait();
	if (!strcmp(mode, "retain"))
		return retain_parent(argv[0]);
	if (!strcmp(mode, "retain-child"))
		return retain_child(a1);
	if (!strcmp(mode, "fork-kept"))
		return fork_kept(argv[0]);
	if (!strcmp(mode, "plain-open"))
		return plain_open_parent(argv[0]);
	if (!strcmp(mode, "plain-open-child"))
		return plain_open_child(a1);
	if (!strcmp(mode, "restart"))
		return restart(argv[0]);
	if (!strcmp(mode, "large"))
		return large_parent(argv[0]);
	if (!strcmp(mode, "large-child"))
		return large_child(a1);
	if (!strcmp(mode, "woken"))
		return woken_parent(argv[0]);
	if (!strcmp(mode, "woken-child"))
		return woken_child(a1);
	if (!strcmp(mode, "noshim"))
		return noshim(argv[0]);
	if (!strcmp(mode, "share"))
		return share_parent(argv[0], atoi(a1));
	if (!strcmp(mode, "share-child"))
		return share_child(a1);
	if (!strcmp(mode, "close-refused"))
		return close_refused_parent(argv[0]);
	if (!strcmp(mode, "close-refused-child"))
		return close_refused_child(a1);
	if (!strcmp(mode, "free-after-get"))
		return free_after_get();
	if (!strcmp(mode, "bench"))
		return bench_parent(argv[0], atoi(a1), a2[0] ? atoi(a2) : 2, atoi(a3));
	if (!strcmp(mode, "bench-child"))
		return bench_child(atoi(a1));
	FAIL("unknown mode '%s'", mode);
}
