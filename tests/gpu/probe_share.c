/* Probe: the driver's facts that cross-process sharing under the shim is built on.
 * 1. the cost of asking cuMemCreate for an exportable (POSIX fd) handle, per size;
 * 2. what a shareable fd is (readlink, st_dev/st_ino): the same for two exports of one handle?
 *    different for two handles? the same inode in the process that receives it?
 * 3. lifetime: does an open fd keep the memory alive after every handle is released?
 * 4. legacy IPC: cuIpcGetMemHandle on VMM memory, cuIpcOpenMemHandle in the exporting process.
 * Prints "PROBE key=value" lines. Build: nvcc -cudart none probe_share.c -lcuda */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("FAIL %s -> %d line %d\n", #x, r_, __LINE__); exit(1); } } while (0)

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static CUmemAllocationProp prop_of(int dev, int fd_type)
{
	CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				  .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev } };

	if (fd_type)
		p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return p;
}

static void create_cost(size_t size, int n)
{
	for (int t = 0; t < 2; t++) {
		CUmemAllocationProp p = prop_of(0, t);
		double *us = calloc(n, sizeof(*us)), *rel = calloc(n, sizeof(*rel));

		for (int i = 0; i < n; i++) {
			CUmemGenericAllocationHandle h;
			double t0 = now_us();

			CK(cuMemCreate(&h, size, &p, 0));
			us[i] = now_us() - t0;
			t0 = now_us();
			CK(cuMemRelease(h));
			rel[i] = now_us() - t0;
		}
		qsort(us, n, sizeof(*us), cmp_d);
		qsort(rel, n, sizeof(*rel), cmp_d);
		printf("PROBE create_us size=%zu posix_fd=%d median=%.1f p90=%.1f release_median=%.1f\n",
		       size, t, us[n / 2], us[n * 9 / 10], rel[n / 2]);
		free(us);
		free(rel);
	}
}

static void describe_fd(const char *what, int fd)
{
	char path[64], link[256] = "";
	struct stat st;
	ssize_t k;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	k = readlink(path, link, sizeof(link) - 1);
	if (k > 0)
		link[k] = 0;
	fstat(fd, &st);
	printf("PROBE fd %s fd=%d link=%s dev=%lu ino=%lu rdev=%lu mode=%o size=%lld\n", what, fd,
	       link, (unsigned long)st.st_dev, (unsigned long)st.st_ino, (unsigned long)st.st_rdev,
	       st.st_mode, (long long)st.st_size);
}

static void send_fd(int sock, int fd)
{
	char c = 'f', cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { .iov_base = &c, .iov_len = 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	sendmsg(sock, &m, 0);
}

static int recv_fd(int sock)
{
	char c, cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { .iov_base = &c, .iov_len = 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	int fd = -1;

	if (recvmsg(sock, &m, 0) <= 0 || !CMSG_FIRSTHDR(&m))
		return -1;
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	return fd;
}

static CUdeviceptr map_handle(CUmemGenericAllocationHandle h, size_t size, int dev)
{
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr va;

	CK(cuMemAddressReserve(&va, size, 0, 0, 0));
	CK(cuMemMap(va, size, 0, h, 0));
	CK(cuMemSetAccess(va, size, &acc, 1));
	return va;
}

/* The child: imports the fd it receives, reads the parent's bytes, writes its own. */
static int child(int sock, size_t size)
{
	CUcontext ctx;
	CUmemGenericAllocationHandle h;
	unsigned char b = 0;
	int fd = recv_fd(sock);

	CK(cuInit(0));
	CK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CK(cuCtxSetCurrent(ctx));
	describe_fd("child_received", fd);
	CK(cuMemImportFromShareableHandle(&h, (void *)(long)fd,
					  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CUdeviceptr va = map_handle(h, size, 0);
	CK(cuMemcpyDtoH(&b, va + 12345, 1));
	printf("PROBE child_reads=0x%02x\n", b);
	CK(cuMemsetD8(va, 0x5c, size));
	CK(cuCtxSynchronize());
	fflush(stdout);
	write(sock, "d", 1);
	return 0;
}

int main(void)
{
	size_t g = 2u << 20;
	int sv[2];
	pid_t pid;

	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	pid = fork(); /* before cuInit: the child starts the driver itself */
	if (pid == 0) {
		close(sv[0]);
		return child(sv[1], g);
	}
	close(sv[1]);

	CUcontext ctx;
	CK(cuInit(0));
	CK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CK(cuCtxSetCurrent(ctx));

	create_cost(g, 200);
	create_cost(64u << 20, 50);
	create_cost(1u << 30, 10);

	/* 2. identity of shareable fds */
	CUmemAllocationProp p = prop_of(0, 1);
	CUmemGenericAllocationHandle h1, h2, h3;
	int fa, fb, fc;
	CK(cuMemCreate(&h1, g, &p, 0));
	CK(cuMemCreate(&h2, g, &p, 0));
	CK(cuMemExportToShareableHandle(&fa, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CK(cuMemExportToShareableHandle(&fb, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CK(cuMemExportToShareableHandle(&fc, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	describe_fd("h1_first", fa);
	describe_fd("h1_second", fb);
	describe_fd("h2", fc);
	{
		CUmemGenericAllocationHandle hi;
		CUresult e = cuMemImportFromShareableHandle(&hi, (void *)(long)fb,
							   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		printf("PROBE import_in_same_process rc=%d same_value=%d\n", e, e == 0 && hi == h1);
		if (!e)
			cuMemRelease(hi);
	}
	{
		CUmemGenericAllocationHandle hn;
		CUmemAllocationProp pn = prop_of(0, 0);
		int fx = -1;

		CK(cuMemCreate(&hn, g, &pn, 0));
		printf("PROBE export_without_type rc=%d\n",
		       cuMemExportToShareableHandle(&fx, hn, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		cuMemRelease(hn);
	}

	/* 3. lifetime: bytes written, every handle released, only the fd left open */
	size_t free0, free1, free2, total;
	CK(cuMemCreate(&h3, 64u << 20, &p, 0));
	CUdeviceptr va = map_handle(h3, 64u << 20, 0);
	CK(cuMemsetD8(va, 0xa7, 64u << 20));
	CK(cuCtxSynchronize());
	int fl;
	CK(cuMemExportToShareableHandle(&fl, h3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CK(cuMemGetInfo(&free0, &total));
	CK(cuMemUnmap(va, 64u << 20));
	CK(cuMemRelease(h3));
	CK(cuMemGetInfo(&free1, &total));
	{
		CUmemGenericAllocationHandle hb;
		CUresult e = cuMemImportFromShareableHandle(&hb, (void *)(long)fl,
							   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		unsigned char b = 0;

		if (!e) {
			CK(cuMemMap(va, 64u << 20, 0, hb, 0));
			CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
						.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
			CK(cuMemSetAccess(va, 64u << 20, &acc, 1));
			CK(cuMemcpyDtoH(&b, va + 777, 1));
			CK(cuMemUnmap(va, 64u << 20));
			CK(cuMemRelease(hb));
		}
		printf("PROBE fd_keeps_memory import_after_release rc=%d byte=0x%02x "
		       "free_drop_after_release_MiB=%lld\n", e, b,
		       ((long long)free1 - (long long)free0) >> 20);
	}
	close(fl);
	CK(cuMemGetInfo(&free2, &total));
	printf("PROBE fd_closed free_change_MiB=%lld\n", ((long long)free2 - (long long)free1) >> 20);

	/* 4. legacy IPC */
	{
		CUipcMemHandle ih;
		CUdeviceptr d;
		CUmemGenericAllocationHandle hv;

		CK(cuMemCreate(&hv, g, &p, 0));
		CUdeviceptr vv = map_handle(hv, g, 0);
		printf("PROBE ipc_get_on_vmm rc=%d\n", cuIpcGetMemHandle(&ih, vv));
		CK(cuMemAlloc(&d, g));
		printf("PROBE ipc_get_on_memalloc rc=%d\n", cuIpcGetMemHandle(&ih, d));
		CUdeviceptr o = 0;
		printf("PROBE ipc_open_in_same_process rc=%d\n",
		       cuIpcOpenMemHandle(&o, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
		CK(cuMemAlloc(&d, g + 4096));
		printf("PROBE ipc_get_interior rc=%d\n", cuIpcGetMemHandle(&ih, d + 4096));
	}

	/* 2b. across processes: the child imports h1 through fa and writes to it */
	{
		CUdeviceptr v1 = map_handle(h1, g, 0);
		unsigned char b = 0;
		char d;

		CK(cuMemsetD8(v1, 0x3e, g));
		CK(cuCtxSynchronize());
		send_fd(sv[0], fa);
		read(sv[0], &d, 1);
		CK(cuMemcpyDtoH(&b, v1 + 999, 1));
		printf("PROBE parent_sees_child_write=0x%02x\n", b);
		int st;
		waitpid(pid, &st, 0);
		printf("PROBE child_exit=%d\n", WEXITSTATUS(st));
	}
	printf("PROBE done\n");
	return 0;
}
