/* The driver's answers that simdev's cross-process sharing copies (tests/simdev/README.md,
 * "Sharing device memory between processes"): each line is "FACT name ok" or "FACT name DIFF
 * got=X simdev=Y"; the exit status is 0 when every answer is simdev's. CI runs it on simdev, the
 * H200 matrix natively: a DIFF there is a place where simdev must change. A child process (forked
 * before cuInit, as CUDA requires) imports and opens what the parent exports.
 * Build: nvcc -cudart none share_facts.c -lcuda (or gcc with simdev's libcuda). */
#include <cuda.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MB (1u << 20)
#define CK(x)                                                                         \
	do {                                                                          \
		CUresult r_ = (x);                                                    \
		if (r_) {                                                             \
			printf("FAIL %s -> %d (line %d)\n", #x, (int)r_, __LINE__);  \
			fflush(stdout);                                               \
			exit(2);                                                      \
		}                                                                     \
	} while (0)

static int diffs;

static void fact(const char *name, long long got, long long want)
{
	if (got == want)
		printf("FACT %s ok\n", name);
	else
		printf("FACT %s DIFF got=%lld simdev=%lld\n", name, got, want);
	fflush(stdout);
	diffs += got != want;
}

static void send_msg(int sock, const void *buf, size_t n, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { .iov_base = (void *)buf, .iov_len = n };
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
		exit(3);
}

static int recv_msg(int sock, void *buf, size_t n)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { .iov_base = buf, .iov_len = n };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	int fd = -1;
	if (recvmsg(sock, &m, 0) <= 0)
		exit(3);
	if (CMSG_FIRSTHDR(&m))
		memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	return fd;
}

static void context(void)
{
	CUcontext c;
	CK(cuInit(0));
	CK(cuDevicePrimaryCtxRetain(&c, 0));
	CK(cuCtxSetCurrent(c));
}

static CUmemAllocationProp prop_of(int posix)
{
	CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				  .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	if (posix)
		p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return p;
}

static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size)
{
	CUmemAccessDesc a = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
			      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr va;
	CK(cuMemAddressReserve(&va, size, 0, 0, 0));
	CK(cuMemMap(va, size, 0, h, 0));
	CK(cuMemSetAccess(va, size, &a, 1));
	return va;
}

static long long used_mib(void)
{
	size_t f, t;
	CK(cuMemGetInfo(&f, &t));
	return (long long)((t - f) / MB);
}

/* What one process can see: export/import, retain, the open descriptor, legacy IPC refusals. */
static void in_one_process(void)
{
	CUmemAllocationProp posix = prop_of(1), plain = prop_of(0);
	CUmemGenericAllocationHandle h1, h2, hn, imp, r;
	int f1, f2, fx = -1;
	CK(cuMemCreate(&h1, 2 * MB, &posix, 0));
	CK(cuMemCreate(&h2, 2 * MB, &posix, 0));
	CK(cuMemCreate(&hn, 2 * MB, &plain, 0));
	fact("export_without_the_type", cuMemExportToShareableHandle(&fx, hn,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemExportToShareableHandle(&f1, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CK(cuMemExportToShareableHandle(&f2, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	struct stat a, b;
	fstat(f1, &a);
	fstat(f2, &b);
	fact("exports_look_alike_to_fstat", a.st_ino == b.st_ino && a.st_dev == b.st_dev, 1);
	CK(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)f1,
					  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	fact("import_in_the_exporter_is_a_new_handle", imp != h1, 1);
	CK(cuMemRelease(imp));

	CUdeviceptr va = map_rw(h2, 2 * MB);
	CK(cuMemRetainAllocationHandle(&r, (void *)(va + 4096)));
	fact("retain_returns_the_mapped_handle", r == h2, 1);
	CK(cuMemRelease(r));
	CK(cuMemRelease(h2));
	fact("release_without_a_reference", cuMemRelease(h2), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemUnmap(va, 2 * MB));
	CK(cuMemAddressFree(va, 2 * MB));

	/* An open exported descriptor keeps the memory after every handle and mapping is gone. */
	CUmemGenericAllocationHandle big, back;
	size_t size = 64 * MB;
	CK(cuMemCreate(&big, size, &posix, 0));
	va = map_rw(big, size);
	CK(cuMemsetD8(va, 0xa7, size));
	CK(cuCtxSynchronize());
	int fb;
	CK(cuMemExportToShareableHandle(&fb, big, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	long long before = used_mib();
	CK(cuMemUnmap(va, size));
	CK(cuMemRelease(big));
	fact("descriptor_keeps_the_memory", before - used_mib() < 32, 1);
	CK(cuMemImportFromShareableHandle(&back, (void *)(intptr_t)fb,
					  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CK(cuMemMap(va, size, 0, back, 0));
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CK(cuMemSetAccess(va, size, &acc, 1));
	unsigned char byte = 0;
	CK(cuMemcpyDtoH(&byte, va + 12345, 1));
	fact("descriptor_keeps_the_bytes", byte, 0xa7);
	CK(cuMemUnmap(va, size));
	CK(cuMemRelease(back));
	before = used_mib();
	close(fb);
	fact("closing_the_last_descriptor_frees", before - used_mib() >= 32, 1);
	CK(cuMemAddressFree(va, size));

	CUipcMemHandle ih;
	CUdeviceptr d, pool, vmm;
	CUmemGenericAllocationHandle hv;
	CK(cuMemCreate(&hv, 2 * MB, &plain, 0));
	vmm = map_rw(hv, 2 * MB);
	fact("ipc_get_on_vmm_memory", cuIpcGetMemHandle(&ih, vmm), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemAllocAsync(&pool, 2 * MB, NULL));
	CK(cuStreamSynchronize(NULL));
	fact("ipc_get_on_pool_memory", cuIpcGetMemHandle(&ih, pool), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemAlloc(&d, 4 * MB));
	fact("ipc_get_on_an_interior_address", cuIpcGetMemHandle(&ih, d + 4096), CUDA_SUCCESS);
	CK(cuIpcGetMemHandle(&ih, d));
	CUdeviceptr o;
	fact("ipc_open_in_the_exporter", cuIpcOpenMemHandle(&o, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
	     CUDA_ERROR_INVALID_CONTEXT);
	close(f1);
	close(f2);
}

/* The child: imports and opens what the parent sends. */
static int child(int sock)
{
	char msg[128];
	int fd = recv_msg(sock, msg, sizeof(msg));
	context();
	CUipcMemHandle ih;
	int fdnum;
	memcpy(&ih, msg, sizeof(ih));
	memcpy(&fdnum, msg + sizeof(ih), sizeof(int));

	CUmemGenericAllocationHandle h;
	CK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
					  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CUdeviceptr va = map_rw(h, 2 * MB);
	unsigned char byte = 0;
	CK(cuMemcpyDtoH(&byte, va + 777, 1));
	fact("import_through_scm_rights", byte, 0x3e);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getppid(), fdnum);
	int reopened = open(path, O_RDWR);
	CUmemGenericAllocationHandle h2;
	CUresult e = reopened < 0 ? CUDA_ERROR_UNKNOWN :
		     cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)reopened,
						    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	/* Which error it is differs (the driver answered 999 once); that it fails is the fact. */
	printf("# a new open of the descriptor: %s, import answered %d\n",
	       reopened < 0 ? "open failed" : "opened", (int)e);
	fact("import_of_a_new_open_of_the_descriptor_fails", e != CUDA_SUCCESS, 1);

	CUdeviceptr p1, p2;
	CK(cuIpcOpenMemHandle(&p1, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CK(cuIpcOpenMemHandle(&p2, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	fact("ipc_open_twice_same_pointer", p1 == p2, 1);
	CK(cuIpcCloseMemHandle(p1));
	byte = 0;
	CK(cuMemcpyDtoH(&byte, p2 + 999, 1));
	fact("ipc_one_close_of_two_keeps_it", byte, 0x5d);
	send_msg(sock, "o", 1, -1); /* opened: the parent frees its allocation now */
	recv_msg(sock, msg, 1);
	CUdeviceptr p3;
	/* Still open here, so it opens again (one more open to close) though the exporter freed it. */
	fact("ipc_open_after_the_exporter_freed", cuIpcOpenMemHandle(&p3, ih,
			CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS);
	fact("ipc_open_after_the_exporter_freed_same_pointer", p3 == p2, 1);
	CK(cuIpcCloseMemHandle(p3));
	CK(cuIpcCloseMemHandle(p2));
	fact("ipc_close_once_more", cuIpcCloseMemHandle(p2), CUDA_ERROR_INVALID_VALUE);
	fflush(stdout);
	return diffs ? 1 : 0;
}

int main(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
		return 2;
	pid_t pid = fork(); /* before cuInit: the child starts the driver itself */
	if (pid == 0) {
		close(sv[0]);
		return child(sv[1]);
	}
	close(sv[1]);
	context();
	in_one_process();

	/* What the child imports and opens. */
	CUmemAllocationProp posix = prop_of(1);
	CUmemGenericAllocationHandle h;
	CK(cuMemCreate(&h, 2 * MB, &posix, 0));
	CUdeviceptr va = map_rw(h, 2 * MB);
	CK(cuMemsetD8(va, 0x3e, 2 * MB));
	CUdeviceptr d;
	CK(cuMemAlloc(&d, 2 * MB));
	CK(cuMemsetD8(d, 0x5d, 2 * MB));
	CK(cuCtxSynchronize());
	int fd;
	CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	char msg[128];
	CUipcMemHandle ih;
	CK(cuIpcGetMemHandle(&ih, d));
	memcpy(msg, &ih, sizeof(ih));
	memcpy(msg + sizeof(ih), &fd, sizeof(int));
	send_msg(sv[0], msg, sizeof(ih) + sizeof(int), fd);
	recv_msg(sv[0], msg, 1);
	CK(cuMemFree(d));
	send_msg(sv[0], "f", 1, -1);
	int status = 0;
	waitpid(pid, &status, 0);
	fact("child_agrees", WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status), 0);
	printf("FACTS %s\n", diffs ? "differ" : "all as simdev");
	return diffs ? 1 : 0;
}
