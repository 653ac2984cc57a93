/* A process for the cross-process tests (test_share.c): started with fork+exec, it runs driver
 * calls that the test sends over a SOCK_SEQPACKET socket (argv[1] is its descriptor) and answers
 * "ok ..." or "err CODE". File descriptors travel with the messages (SCM_RIGHTS).
 * Tables: h<i> physical handles, p<i> pointers (mappings, cuMemAlloc memory, opened IPC memory).
 *   init [DEV]                 cuInit and the device's primary context
 *   create SIZE posix|none     cuMemCreate                          -> ok H
 *   export H [keep]            cuMemExportToShareableHandle, the fd sent and closed here
 *                              (keep: kept open here instead -> ok FD)
 *   import                     (fd attached) cuMemImportFromShareableHandle, the fd closed -> ok H
 *   release H | props H        cuMemRelease | cuMemGetAllocationPropertiesFromHandle -> ok DEV TYPES
 *   map H SIZE | unmap P       reserve, map and grant read/write | unmap and free the range -> ok P
 *   retain P                   cuMemRetainAllocationHandle(P + 1) -> ok H
 *   alloc SIZE | free P        cuMemAlloc | cuMemFree -> ok P
 *   ipcget P | ipcopen HEX | ipcclose P    legacy IPC (the handle as 128 hex digits) -> ok HEX | ok P
 *   write P TEXT | read P      copy TEXT (with its NUL) to P | read a string back -> ok TEXT
 *   fill P SEED | verify P SEED   every byte of mapping P from SEED | compare them all
 *                              -> ok | ok same, or ok differs at OFFSET
 *   info                       cuMemGetInfo -> ok FREE TOTAL
 *   reset                      cuDevicePrimaryCtxReset of the device (cudaDeviceReset) -> ok
 *   churn N SEED               N random cuMemAlloc/cuMemCreate+map and frees (OOM allowed)
 *   fork                       a child that waits, holding what fork gave it, until killed or
 *                              this process ends -> ok CHILDPID
 *   exec                       answers, then executes itself again (same pid, same socket)
 *   exit                       answers, then exit(0) (destructors run) */
#include <cuda.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define SLOTS 256

static int sock;
static CUmemGenericAllocationHandle handles[SLOTS];
static int nhandles;
static struct {
	CUdeviceptr va;
	size_t size;
} ptrs[SLOTS];
static int nptrs;
static int device;

static void reply(int fd, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	struct iovec io = { .iov_base = buf, .iov_len = strlen(buf) + 1 };
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1 };
	if (fd >= 0) {
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	if (sendmsg(sock, &m, 0) < 0)
		_exit(3);
}

/* One request; *fd receives an attached descriptor (or -1). False when the test has gone. */
static bool request(char *buf, size_t cap, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { .iov_base = buf, .iov_len = cap - 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return false;
	buf[n] = 0;
	*fd = -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(fd, CMSG_DATA(c), sizeof(int));
	return true;
}

static CUresult map_at(CUmemGenericAllocationHandle h, size_t size, CUdeviceptr *va)
{
	CUresult r = cuMemAddressReserve(va, size, 0, 0, 0);
	if (r)
		return r;
	r = cuMemMap(*va, size, 0, h, 0);
	if (r) {
		cuMemAddressFree(*va, size);
		return r;
	}
	CUmemAccessDesc d = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device },
			      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	return cuMemSetAccess(*va, size, &d, 1);
}

static CUresult map(CUmemGenericAllocationHandle h, size_t size, int *slot)
{
	CUresult r = map_at(h, size, &ptrs[nptrs].va);
	if (!r) {
		ptrs[nptrs].size = size;
		*slot = nptrs++;
	}
	return r;
}

static CUresult unmap(int p)
{
	CUresult r = cuMemUnmap(ptrs[p].va, ptrs[p].size);
	return r ? r : cuMemAddressFree(ptrs[p].va, ptrs[p].size);
}

/* Random allocations and frees, both kinds, to be killed in the middle of. */
static CUresult churn(int n, unsigned seed)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
						   .id = device } };
	CUdeviceptr live[8] = { 0 };
	CUmemGenericAllocationHandle lh[8] = { 0 };
	size_t lsize[8] = { 0 };
	for (int i = 0; i < n; i++) {
		int k = (int)(rand_r(&seed) % 8);
		size_t size = ((size_t)1 + rand_r(&seed) % 4) << 21;
		CUresult r = CUDA_SUCCESS;
		if (live[k] && lh[k]) {
			r = cuMemUnmap(live[k], lsize[k]);
			r = r ? r : cuMemRelease(lh[k]);
			r = r ? r : cuMemAddressFree(live[k], lsize[k]);
			live[k] = 0;
			lh[k] = 0;
		} else if (live[k]) {
			r = cuMemFree(live[k]);
			live[k] = 0;
		} else if (rand_r(&seed) % 2) {
			r = cuMemAlloc(&live[k], size);
			if (r == CUDA_ERROR_OUT_OF_MEMORY) {
				live[k] = 0;
				r = CUDA_SUCCESS;
			}
		} else if (!(r = cuMemCreate(&lh[k], size, &prop, 0))) {
			r = map_at(lh[k], size, &live[k]);
			lsize[k] = size;
		} else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
			r = CUDA_SUCCESS;
		}
		if (r)
			return r;
	}
	for (int k = 0; k < 8; k++) {
		if (live[k] && lh[k]) {
			cuMemUnmap(live[k], lsize[k]);
			cuMemRelease(lh[k]);
			cuMemAddressFree(live[k], lsize[k]);
		} else if (live[k]) {
			cuMemFree(live[k]);
		}
	}
	return CUDA_SUCCESS;
}

static void to_hex(const unsigned char *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static bool from_hex(const char *s, unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return false;
		b[i] = (unsigned char)v;
	}
	return true;
}

/* Byte i of a fill with seed: differs across every 4 KiB page and between seeds. */
static unsigned char pattern_byte(size_t i, long seed)
{
	return (unsigned char)((i * 131u) ^ (i >> 12) ^ (size_t)seed);
}

/* Fill (or compare, *differs: the first offset that does not match, -1: none) mapping p. */
static CUresult pattern(int p, long seed, bool fill, long *differs)
{
	size_t n = ptrs[p].size;
	unsigned char *b = malloc(n ? n : 1);
	CUresult r;

	if (!b)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (fill) {
		for (size_t i = 0; i < n; i++)
			b[i] = pattern_byte(i, seed);
		r = cuMemcpyHtoD(ptrs[p].va, b, n);
	} else if (!(r = cuMemcpyDtoH(b, ptrs[p].va, n))) {
		*differs = -1;
		for (size_t i = 0; i < n && *differs < 0; i++)
			if (b[i] != pattern_byte(i, seed))
				*differs = (long)i;
	}
	free(b);
	return r;
}

static void run(char *cmd, int fd)
{
	char word[16] = "", arg[256] = "";
	long a = 0, b = 0;
	sscanf(cmd, "%15s", word);
	int nargs = sscanf(cmd, "%*s %ld %ld", &a, &b);
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	int slot = -1;
	if (!strcmp(word, "init")) {
		CUcontext c;
		device = nargs >= 1 ? (int)a : 0;
		r = cuInit(0);
		r = r ? r : cuDevicePrimaryCtxRetain(&c, device);
		r = r ? r : cuCtxSetCurrent(c);
	} else if (!strcmp(word, "create")) {
		CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
					  .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
							.id = device } };
		if (strstr(cmd, "posix"))
			p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		r = cuMemCreate(&handles[nhandles], (size_t)a, &p, 0);
		if (!r)
			slot = nhandles++;
	} else if (!strcmp(word, "export")) {
		int out = -1;
		r = cuMemExportToShareableHandle(&out, handles[a],
						 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		if (!r && strstr(cmd, "keep")) {
			reply(-1, "ok %d", out);
			return;
		}
		if (!r) {
			reply(out, "ok");
			close(out);
			return;
		}
	} else if (!strcmp(word, "import")) {
		r = cuMemImportFromShareableHandle(&handles[nhandles], (void *)(intptr_t)fd,
						   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		if (!r)
			slot = nhandles++;
	} else if (!strcmp(word, "release")) {
		r = cuMemRelease(handles[a]);
	} else if (!strcmp(word, "props")) {
		CUmemAllocationProp p;
		r = cuMemGetAllocationPropertiesFromHandle(&p, handles[a]);
		if (!r) {
			reply(-1, "ok %d %d", p.location.id, (int)p.requestedHandleTypes);
			return;
		}
	} else if (!strcmp(word, "map")) {
		r = map(handles[a], (size_t)b, &slot);
	} else if (!strcmp(word, "unmap")) {
		r = unmap((int)a);
	} else if (!strcmp(word, "retain")) {
		r = cuMemRetainAllocationHandle(&handles[nhandles], (void *)(ptrs[a].va + 1));
		if (!r)
			slot = nhandles++;
	} else if (!strcmp(word, "alloc")) {
		r = cuMemAlloc(&ptrs[nptrs].va, (size_t)a);
		if (!r) {
			ptrs[nptrs].size = (size_t)a;
			slot = nptrs++;
		}
	} else if (!strcmp(word, "free")) {
		r = cuMemFree(ptrs[a].va);
	} else if (!strcmp(word, "ipcget")) {
		CUipcMemHandle h;
		char hex[2 * sizeof(h) + 1];
		r = cuIpcGetMemHandle(&h, ptrs[a].va);
		if (!r) {
			to_hex((unsigned char *)&h, sizeof(h), hex);
			reply(-1, "ok %s", hex);
			return;
		}
	} else if (!strcmp(word, "ipcopen")) {
		CUipcMemHandle h;
		if (sscanf(cmd, "%*s %255s", arg) == 1 && strlen(arg) == 2 * sizeof(h) &&
		    from_hex(arg, (unsigned char *)&h, sizeof(h))) {
			r = cuIpcOpenMemHandle(&ptrs[nptrs].va, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
			if (!r)
				slot = nptrs++;
		}
	} else if (!strcmp(word, "ipcclose")) {
		r = cuIpcCloseMemHandle(ptrs[a].va);
	} else if (!strcmp(word, "write")) {
		const char *text = strchr(strchr(cmd, ' ') + 1, ' ');
		text = text ? text + 1 : "";
		r = cuMemcpyHtoD(ptrs[a].va, text, strlen(text) + 1);
	} else if (!strcmp(word, "read")) {
		char text[65] = "";
		r = cuMemcpyDtoH(text, ptrs[a].va, 64);
		if (!r) {
			reply(-1, "ok %s", text);
			return;
		}
	} else if (!strcmp(word, "fill")) {
		r = pattern((int)a, b, true, NULL);
	} else if (!strcmp(word, "verify")) {
		long at = -1;

		r = pattern((int)a, b, false, &at);
		if (!r) {
			if (at < 0)
				reply(-1, "ok same");
			else
				reply(-1, "ok differs at %ld", at);
			return;
		}
	} else if (!strcmp(word, "info")) {
		size_t f = 0, t = 0;
		r = cuMemGetInfo(&f, &t);
		if (!r) {
			reply(-1, "ok %zu %zu", f, t);
			return;
		}
	} else if (!strcmp(word, "uuid")) {
		CUuuid u;
		long v = 0;
		r = cuDeviceGetUuid(&u, device);
		if (!r) {
			/* The bytes that tell GPUs apart, as one positive number. */
			memcpy(&v, u.bytes + 6, sizeof(v));
			reply(-1, "ok %ld", v & 0x7fffffffffffffffL);
			return;
		}
	} else if (!strcmp(word, "reset")) {
		r = cuDevicePrimaryCtxReset(device);
	} else if (!strcmp(word, "churn")) {
		r = churn((int)a, (unsigned)b);
	} else if (!strcmp(word, "fork")) {
		pid_t child = fork();
		if (child == 0) {
			close(sock);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			for (;;)
				pause();
		}
		if (child > 0) {
			reply(-1, "ok %d", (int)child);
			return;
		}
		r = CUDA_ERROR_OPERATING_SYSTEM;
	} else if (!strcmp(word, "exit")) {
		reply(-1, "ok");
		exit(0);
	} else if (!strcmp(word, "exec")) {
		char arg[16];
		snprintf(arg, sizeof(arg), "%d", sock);
		reply(-1, "ok");
		execl("/proc/self/exe", "share_peer", arg, (char *)NULL);
		_exit(4);
	}
	if (fd >= 0)
		close(fd);
	if (r)
		reply(-1, "err %d", (int)r);
	else if (slot >= 0)
		reply(-1, "ok %d", slot);
	else
		reply(-1, "ok");
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	sock = atoi(argv[1]);
	char cmd[512];
	int fd;
	while (request(cmd, sizeof(cmd), &fd))
		run(cmd, fd);
	return 0;
}
