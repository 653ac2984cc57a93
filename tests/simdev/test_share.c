/* Device memory shared between processes, as the driver shares it: VMM memory exported as a
 * POSIX file descriptor and imported elsewhere, legacy IPC of cuMemAlloc memory, and a
 * SIMDEV_SHARED group of processes that draw on one capacity. The other processes are
 * share_peer programs (fork+exec) that the test drives; the test process takes part too. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include "share_util.h"
#include "test_util.h"

#define SZ (4 * MiB)

static char group_name[64];
static char env_shared[96];

/* This test process joins a new group (before its first driver call) and so do peers started
 * with `group_env`. */
static const char *const *join_group(const char *memory)
{
	static char env_memory[64];
	static const char *env[4];
	snprintf(group_name, sizeof(group_name), "t%d-%ld", (int)getpid(), (long)time(NULL));
	snprintf(env_shared, sizeof(env_shared), "SIMDEV_SHARED=%s", group_name);
	snprintf(env_memory, sizeof(env_memory), "SIMDEV_MEMORY=%s", memory);
	setenv("SIMDEV_SHARED", group_name, 1);
	setenv("SIMDEV_MEMORY", memory, 1);
	env[0] = env_shared;
	env[1] = env_memory;
	env[2] = NULL;
	return env;
}

static void start(struct peer *p, const char *const *env)
{
	peer_start(p, env);
	peer_ok(p, "init");
}

/* Device bytes the group uses, as this process's cuMemGetInfo says. */
static size_t used(void)
{
	return su_used();
}

/* ---- VMM memory and POSIX file descriptors ---- */

Test(share, an_exported_descriptor_maps_the_same_memory_elsewhere)
{
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUmemGenericAllocationHandle h, h2;
	CUdeviceptr va;
	CU_OK(cuMemCreate(&h, SZ, &p, 0));
	CU_OK(cuMemCreate(&h2, SZ, &p, 0));
	CU_OK(cuMemAddressReserve(&va, SZ, 0, 0, 0));
	CU_OK(cuMemMap(va, SZ, 0, h, 0));
	su_set_access(va, SZ, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	strcpy((char *)va, "from the exporter");

	int fd, fd2, fd3;
	CU_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CU_OK(cuMemExportToShareableHandle(&fd2, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CU_OK(cuMemExportToShareableHandle(&fd3, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	cr_expect(fd != fd2, "a new descriptor each export");
	struct stat a, b;
	cr_assert_eq(fstat(fd, &a), 0);
	cr_assert_eq(fstat(fd3, &b), 0);
	cr_expect(a.st_ino == b.st_ino && a.st_dev == b.st_dev,
		  "like the driver's, descriptors of two allocations look alike to fstat");

	struct peer q;
	start(&q, NULL);
	peer_cmd(&q, fd, "import");
	cr_assert(!strncmp(q.reply, "ok", 2), "%s", q.reply);
	long qh = atol(q.reply + 2);
	cr_expect_str_eq(peer_cmd(&q, -1, "props %ld", qh), "ok 0 1", "device 0, POSIX fd");
	long qp = peer_ok(&q, "map %ld %zu", qh, SZ);
	cr_expect_str_eq(peer_cmd(&q, -1, "read %ld", qp), "ok from the exporter");
	peer_ok(&q, "write %ld from the importer", qp);
	cr_expect_str_eq((char *)va, "from the importer");

	/* The second descriptor of the same handle imports the same memory. */
	peer_cmd(&q, fd2, "import");
	long qh2 = atol(q.reply + 2);
	long qp2 = peer_ok(&q, "map %ld %zu", qh2, SZ);
	cr_expect_str_eq(peer_cmd(&q, -1, "read %ld", qp2), "ok from the importer");
	peer_exit(&q);
	close(fd);
	close(fd2);
	close(fd3);
	cr_expect_str_eq((char *)va, "from the importer", "the importer's exit changes nothing here");
}

/* The allocation travels with the open file description: a copy of it (pidfd_getfd, as PyTorch
 * takes it) imports, a new open of the same file through /proc/PID/fd does not. */
Test(share, the_descriptor_itself_carries_the_allocation)
{
	su_ctx(0);
	struct peer a;
	start(&a, NULL);
	long ah = peer_ok(&a, "create %zu posix", SZ);
	long ap = peer_ok(&a, "map %ld %zu", ah, SZ);
	peer_ok(&a, "write %ld taken with pidfd_getfd", ap);
	peer_ok(&a, "create %zu posix", SZ); /* a second allocation at another offset */
	long a2 = peer_ok(&a, "create %zu posix", SZ);
	long fdnum = peer_ok(&a, "export %ld keep", ah);
	peer_ok(&a, "export %ld keep", a2);

	int pidfd = (int)syscall(SYS_pidfd_open, a.pid, 0);
	cr_assert_geq(pidfd, 0);
	int fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)fdnum, 0);
	cr_assert_geq(fd, 0);
	CUmemGenericAllocationHandle h;
	CU_OK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
					     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CUdeviceptr va;
	CU_OK(cuMemAddressReserve(&va, SZ, 0, 0, 0));
	CU_OK(cuMemMap(va, SZ, 0, h, 0));
	su_set_access(va, SZ, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	cr_expect_str_eq((char *)va, "taken with pidfd_getfd");

	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%ld", (int)a.pid, fdnum);
	int reopened = open(path, O_RDWR);
	cr_assert_geq(reopened, 0);
	CUmemGenericAllocationHandle bad;
	cr_expect_neq(cuMemImportFromShareableHandle(&bad, (void *)(intptr_t)reopened,
						     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		      CUDA_SUCCESS, "a new open carries no allocation");
	close(reopened);
	close(fd);
	close(pidfd);
	peer_exit(&a);
	cr_expect_str_eq((char *)va, "taken with pidfd_getfd", "held here after the exporter left");
}

Test(share, an_import_keeps_the_device_the_memory_was_made_on)
{
	setenv("SIMDEV_DEVICES", "2", 1);
	static const char *const env[] = { "SIMDEV_DEVICES=2", NULL };
	struct peer a, b;
	peer_start(&a, env);
	peer_ok(&a, "init 1");
	start(&b, env);
	long ah = peer_ok(&a, "create %zu posix", SZ);
	long ap = peer_ok(&a, "map %ld %zu", ah, SZ);
	peer_ok(&a, "write %ld on device one", ap);
	peer_cmd(&a, -1, "export %ld", ah);
	peer_cmd(&b, a.fd, "import");
	close(a.fd);
	long bh = atol(b.reply + 2);
	cr_expect_str_eq(peer_cmd(&b, -1, "props %ld", bh), "ok 1 1");
	long bp = peer_ok(&b, "map %ld %zu", bh, SZ);
	cr_expect_str_eq(peer_cmd(&b, -1, "read %ld", bp), "ok on device one");
	size_t f, t;
	cr_expect_eq(sscanf(peer_cmd(&b, -1, "info"), "ok %zu %zu", &f, &t), 2);
	cr_expect_eq(f, t, "counted on the creator's device, not the importer's device 0");
	peer_exit(&a);
	peer_exit(&b);
}

Test(share, import_in_the_same_process_is_a_new_handle_counted_once)
{
	su_ctx(0);
	size_t base = su_used();
	CUmemAllocationProp p = su_prop(0);
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUmemGenericAllocationHandle h, imp;
	CUdeviceptr va, va2;
	CU_OK(cuMemCreate(&h, SZ, &p, 0));
	int fd;
	CU_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CU_OK(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
					     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	cr_expect_neq(imp, h, "as the driver: a new handle value");
	cr_expect_eq(su_used(), base + SZ, "one allocation");
	CU_OK(cuMemAddressReserve(&va, 2 * SZ, 0, 0, 0));
	va2 = va + SZ;
	CU_OK(cuMemMap(va, SZ, 0, h, 0));
	CU_OK(cuMemMap(va2, SZ, 0, imp, 0));
	su_set_access(va, 2 * SZ, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	strcpy((char *)va + 100, "one memory");
	cr_expect_str_eq((char *)va2 + 100, "one memory");
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemRelease(imp));
	CU_OK(cuMemUnmap(va, 2 * SZ));
	cr_expect_eq(su_used(), base + SZ, "the open descriptor keeps it");
	close(fd);
	cr_expect_eq(su_used(), base, "nothing holds it now");
}

Test(share, retain_counts_references_and_export_needs_the_type)
{
	su_ctx(0);
	size_t base = su_used();
	CUmemAllocationProp p = su_prop(0);
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUmemGenericAllocationHandle h, r1, r2;
	CUdeviceptr va;
	CU_OK(cuMemCreate(&h, SZ, &p, 0));
	CU_OK(cuMemAddressReserve(&va, SZ, 0, 0, 0));
	CU_OK(cuMemMap(va, SZ, 0, h, 0));
	su_set_access(va, SZ, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CU_OK(cuMemRetainAllocationHandle(&r1, (void *)(va + SZ - 1)));
	CU_OK(cuMemRetainAllocationHandle(&r2, (void *)va));
	cr_expect(r1 == h && r2 == h, "the handle that was mapped");
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemRelease(r1));
	int fd;
	CU_OK(cuMemExportToShareableHandle(&fd, r2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	close(fd);
	CUmemAllocationProp got;
	CU_OK(cuMemGetAllocationPropertiesFromHandle(&got, r2));
	cr_expect_eq(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CU_OK(cuMemRelease(r2));
	cr_expect_eq(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE, "three references, three releases");
	cr_expect_eq(su_used(), base + SZ, "still mapped");
	strcpy((char *)va, "still here");
	CU_OK(cuMemUnmap(va, SZ));
	cr_expect_eq(su_used(), base, "the last mapping gone");

	CUmemAllocationProp plain = su_prop(0);
	CU_OK(cuMemCreate(&h, SZ, &plain, 0));
	cr_expect_eq(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		     CUDA_ERROR_INVALID_VALUE, "not requested at cuMemCreate");
	cr_expect_eq(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0),
		     CUDA_ERROR_INVALID_VALUE);
	CUmemGenericAllocationHandle bad;
	int devnull = open("/dev/null", O_RDWR);
	cr_expect_eq(cuMemImportFromShareableHandle(&bad, (void *)(intptr_t)devnull,
						    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		     CUDA_ERROR_INVALID_VALUE, "not device memory");
	close(devnull);
	CU_OK(cuMemRelease(h));
}

/* The three things that hold exported memory: the creator's handle and mapping, the importer's,
 * and the open descriptor the test keeps. The memory is counted (once) until the last is gone,
 * in every order, and whether a process ends by releasing, by exiting or by being killed. */
enum end { RELEASE, EXIT, KILL };
static const char *const end_name[] = { "releases", "exits", "is killed" };

static void end_peer(struct peer *p, enum end how, long handle, long ptr)
{
	if (how == RELEASE) {
		peer_ok(p, "unmap %ld", ptr);
		peer_ok(p, "release %ld", handle);
	} else if (how == EXIT) {
		peer_exit(p);
	} else {
		peer_kill(p);
	}
}

Test(share, exported_memory_lives_while_anything_holds_it, .timeout = 120)
{
	const char *const *env = join_group("256M");
	su_ctx(0);
	static const int orders[6][3] = { { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 },
					  { 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 } };
	for (int o = 0; o < 6; o++)
		for (int ce = RELEASE; ce <= KILL; ce++)
			for (int ie = RELEASE; ie <= KILL; ie += 2) {
				struct peer a, b;
				start(&a, env);
				start(&b, env);
				long ah = peer_ok(&a, "create %zu posix", SZ);
				long ap = peer_ok(&a, "map %ld %zu", ah, SZ);
				peer_ok(&a, "write %ld shared bytes", ap);
				peer_cmd(&a, -1, "export %ld", ah);
				int fd = a.fd;
				cr_assert_geq(fd, 0, "%s", a.reply);
				peer_cmd(&b, fd, "import");
				long bh = atol(b.reply + 2);
				long bp = peer_ok(&b, "map %ld %zu", bh, SZ);
				cr_assert_eq(used(), SZ, "counted once");
				bool b_on = true;
				for (int step = 0; step < 3; step++) {
					int who = orders[o][step];
					if (who == 0) {
						end_peer(&a, (enum end)ce, ah, ap);
					} else if (who == 1) {
						end_peer(&b, (enum end)ie, bh, bp);
						b_on = false;
					} else {
						close(fd);
					}
					bool last = step == 2;
					cr_expect_eq(used(), last ? 0 : SZ,
						     "order %d%d%d, creator %s, importer %s, step %d",
						     orders[o][0], orders[o][1], orders[o][2],
						     end_name[ce], end_name[ie], step);
					if (b_on)
						cr_expect_str_eq(peer_cmd(&b, -1, "read %ld", bp),
								 "ok shared bytes");
				}
				if (ce == RELEASE)
					peer_exit(&a);
				if (ie == RELEASE)
					peer_exit(&b);
			}
}

Test(share, an_open_descriptor_keeps_memory_for_a_later_import)
{
	const char *const *env = join_group("256M");
	su_ctx(0);
	struct peer a, b;
	start(&a, env);
	long ah = peer_ok(&a, "create %zu posix", SZ);
	long ap = peer_ok(&a, "map %ld %zu", ah, SZ);
	peer_ok(&a, "write %ld before the creator left", ap);
	peer_cmd(&a, -1, "export %ld", ah);
	int fd = a.fd;
	peer_kill(&a);
	cr_expect_eq(used(), SZ, "the descriptor holds it");
	start(&b, env);
	peer_cmd(&b, fd, "import");
	long bh = atol(b.reply + 2);
	long bp = peer_ok(&b, "map %ld %zu", bh, SZ);
	cr_expect_str_eq(peer_cmd(&b, -1, "read %ld", bp), "ok before the creator left");
	close(fd);
	cr_expect_eq(used(), SZ, "the importer holds it");
	peer_ok(&b, "release %ld", bh);
	cr_expect_eq(used(), SZ, "its mapping holds it");
	peer_ok(&b, "unmap %ld", bp);
	cr_expect_eq(used(), 0);
	peer_exit(&b);
}

/* ---- legacy IPC of cuMemAlloc memory ---- */

/* The legacy IPC handle of peer a's pointer slot, as 128 hex digits. */
static void ipc_handle(struct peer *a, long ptr, char out[160])
{
	const char *r = peer_cmd(a, -1, "ipcget %ld", ptr);
	cr_assert(!strncmp(r, "ok ", 3) && strlen(r) == 3 + 128, "%s", r);
	snprintf(out, 160, "%.128s", r + 3);
}

Test(share, ipc_memory_lives_until_exporter_and_importer_are_done, .timeout = 120)
{
	const char *const *env = join_group("256M");
	su_ctx(0);
	for (int first = 0; first < 2; first++)
		for (int ae = RELEASE; ae <= KILL; ae++)
			for (int be = RELEASE; be <= KILL; be++) {
				struct peer a, b;
				start(&a, env);
				start(&b, env);
				long ap = peer_ok(&a, "alloc %zu", 3 * MiB);
				peer_ok(&a, "write %ld legacy ipc", ap);
				char handle[160];
				ipc_handle(&a, ap, handle);
				long bp = peer_ok(&b, "ipcopen %s", handle);
				cr_expect_str_eq(peer_cmd(&b, -1, "read %ld", bp), "ok legacy ipc");
				peer_ok(&b, "write %ld written by the importer", bp);
				cr_expect_str_eq(peer_cmd(&a, -1, "read %ld", ap),
						 "ok written by the importer");
				cr_expect_eq(used(), SZ, "3 MiB is 4 MiB of device memory, counted once");
				for (int step = 0; step < 2; step++) {
					bool exporter = (step == 0) == (first == 0);
					struct peer *p = exporter ? &a : &b;
					int how = exporter ? ae : be;
					if (how == RELEASE)
						peer_ok(p, exporter ? "free %ld" : "ipcclose %ld",
							exporter ? ap : bp);
					else if (how == EXIT)
						peer_exit(p);
					else
						peer_kill(p);
					cr_expect_eq(used(), step ? 0 : SZ,
						     "%s first, exporter %s, importer %s, step %d",
						     first ? "importer" : "exporter", end_name[ae],
						     end_name[be], step);
					if (step == 0 && exporter && be != KILL) {
						/* simdev keeps the importer's mapping valid (the driver
						 * leaves it undefined); the importer, which has it
						 * open, may open it again, as on the H200. */
						cr_expect_str_eq(peer_cmd(&b, -1, "read %ld", bp),
								 "ok written by the importer");
						long again = peer_ok(&b, "ipcopen %s", handle);
						cr_expect_str_eq(peer_cmd(&b, -1, "read %ld", again),
								 "ok written by the importer");
						peer_ok(&b, "ipcclose %ld", again);
					}
				}
				if (ae == RELEASE)
					peer_exit(&a);
				if (be == RELEASE)
					peer_exit(&b);
			}
}

Test(share, ipc_open_twice_close_twice_and_stale_handles)
{
	const char *const *env = join_group("256M");
	su_ctx(0);
	struct peer a, b, c;
	start(&a, env);
	start(&b, env);
	long ap = peer_ok(&a, "alloc %zu", SZ);
	peer_ok(&a, "write %ld twice", ap);
	char handle[160];
	ipc_handle(&a, ap, handle);
	long p1 = peer_ok(&b, "ipcopen %s", handle);
	long p2 = peer_ok(&b, "ipcopen %s", handle);
	/* Both slots hold the same pointer: one close leaves it mapped. */
	peer_ok(&b, "ipcclose %ld", p1);
	cr_expect_str_eq(peer_cmd(&b, -1, "read %ld", p2), "ok twice");

	peer_ok(&a, "free %ld", ap);
	cr_expect_eq(used(), SZ, "the importer holds it");
	/* The H200 opens it again in the process that has it open, though the exporter freed it. */
	long p3 = peer_ok(&b, "ipcopen %s", handle);
	cr_expect_str_eq(peer_cmd(&b, -1, "read %ld", p3), "ok twice", "still open here");
	peer_ok(&b, "ipcclose %ld", p3);
	start(&c, env);
	cr_expect_eq(peer_err(&c, "ipcopen %s", handle), CUDA_ERROR_INVALID_HANDLE,
		     "the exporter freed it, even though the importer keeps it");
	cr_expect_str_eq(peer_cmd(&b, -1, "read %ld", p2), "ok twice");
	peer_ok(&b, "ipcclose %ld", p2);
	cr_expect_eq(peer_err(&b, "ipcclose %ld", p2), CUDA_ERROR_INVALID_VALUE, "closed twice");
	cr_expect_eq(used(), 0);
	long ap2 = peer_ok(&a, "alloc %zu", SZ);
	ipc_handle(&a, ap2, handle);
	peer_exit(&a);
	cr_expect_eq(peer_err(&c, "ipcopen %s", handle), CUDA_ERROR_INVALID_HANDLE,
		     "the exporter has exited");
	cr_expect_eq(peer_err(&c, "ipcopen %0128d", 0), CUDA_ERROR_INVALID_VALUE, "not a handle");
	peer_exit(&b);
	peer_exit(&c);
	cr_expect_eq(used(), 0);
}

Test(share, ipc_is_for_cumemalloc_memory_and_other_processes)
{
	su_ctx(0);
	CUipcMemHandle h;
	CUdeviceptr d, async;
	CU_OK(cuMemAlloc(&d, SZ));
	cr_expect_eq(cuIpcGetMemHandle(&h, d + 4096), CUDA_SUCCESS,
		     "an address inside names the allocation (H200)");
	CU_OK(cuMemAllocAsync(&async, SZ, NULL));
	CU_OK(cuStreamSynchronize(NULL));
	cr_expect_eq(cuIpcGetMemHandle(&h, async), CUDA_ERROR_INVALID_VALUE, "pool memory");
	int capable = 1;
	CU_OK(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
				    async));
	cr_expect_eq(capable, 0);
	CU_OK(cuIpcGetMemHandle(&h, d));
	CUdeviceptr o;
	cr_expect_eq(cuIpcOpenMemHandle(&o, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
		     CUDA_ERROR_INVALID_CONTEXT, "not in the exporting process");
	cr_expect_eq(cuIpcOpenMemHandle(&o, h, 4), CUDA_ERROR_INVALID_VALUE, "unknown flag");
}

static void open_as_nobody(void *arg)
{
	CUipcMemHandle *h = arg;
	if (setgid(65534) || setuid(65534))
		_exit(2);
	CUcontext c;
	CUdeviceptr d;
	if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c))
		_exit(3);
	_exit(cuIpcOpenMemHandle(&d, *h, 0) == CUDA_ERROR_INVALID_HANDLE ? 0 : 4);
}

Test(share, another_user_cannot_open_an_ipc_handle)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to start a process of another user");
	su_ctx(0);
	CUdeviceptr d;
	CUipcMemHandle h;
	CU_OK(cuMemAlloc(&d, SZ));
	CU_OK(cuIpcGetMemHandle(&h, d));
	pid_t pid = fork();
	if (pid == 0)
		open_as_nobody(&h);
	int status;
	waitpid(pid, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}

/* ---- SIMDEV_SHARED: one capacity for a group ---- */

/* Processes of one group share a device as processes share a GPU: one UUID, and another in each
 * other group (the shim's sharing keys its lock and members by it). */
Test(share, a_group_is_one_gpu_and_another_group_another)
{
	const char *const *env = join_group("64M");
	const char *other_env[] = { "SIMDEV_SHARED=other-gpu-of-this-test", "SIMDEV_MEMORY=64M",
				    NULL };
	struct peer a, b, c;
	su_ctx(0);
	start(&a, env);
	start(&b, env);
	start(&c, other_env);
	long ua = peer_ok(&a, "uuid"), ub = peer_ok(&b, "uuid"), uc = peer_ok(&c, "uuid");
	cr_expect_eq(ua, ub, "one group, one GPU");
	cr_expect_neq(ua, uc, "two groups, two GPUs");
	peer_exit(&a);
	peer_exit(&b);
	peer_exit(&c);
}

static size_t free_of(struct peer *p, size_t *total)
{
	const char *r = peer_cmd(p, -1, "info");
	size_t f = 0;
	cr_assert_eq(sscanf(r, "ok %zu %zu", &f, total), 2, "%s", r);
	return f;
}

Test(share, a_group_draws_on_one_capacity)
{
	const char *const *env = join_group("64M");
	su_ctx(0);
	struct peer p[3];
	long ptr[3];
	for (int i = 0; i < 3; i++) {
		start(&p[i], env);
		ptr[i] = peer_ok(&p[i], "alloc %zu", 16 * MiB);
	}
	for (int i = 0; i < 3; i++) {
		size_t total = 0;
		cr_expect_eq(free_of(&p[i], &total), 16 * MiB, "member %d sees the group", i);
		cr_expect_eq(total, 64 * MiB);
	}
	cr_expect_eq(peer_err(&p[0], "alloc %zu", 32 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	long h = peer_ok(&p[1], "create %zu none", 16 * MiB);
	cr_expect_eq(peer_err(&p[2], "create %zu none", 2 * MiB), CUDA_ERROR_OUT_OF_MEMORY,
		     "full");
	size_t total;
	cr_expect_eq(free_of(&p[2], &total), 0);
	peer_ok(&p[2], "free %ld", ptr[2]);
	peer_ok(&p[0], "alloc %zu", 16 * MiB);
	peer_ok(&p[1], "release %ld", h);
	cr_expect_eq(used(), 48 * MiB);
	for (int i = 0; i < 3; i++)
		peer_exit(&p[i]);
	cr_expect_eq(used(), 0, "members that exit give their memory back");
}

Test(share, a_killed_member_gives_its_memory_back)
{
	const char *const *env = join_group("64M");
	su_ctx(0);
	struct peer a, b;
	start(&a, env);
	start(&b, env);
	peer_ok(&a, "alloc %zu", 16 * MiB);
	long h = peer_ok(&a, "create %zu none", 8 * MiB);
	peer_ok(&a, "map %ld %zu", h, 8 * MiB);
	peer_ok(&b, "alloc %zu", 8 * MiB);
	cr_expect_eq(used(), 32 * MiB);
	peer_kill(&a);
	cr_expect_eq(used(), 8 * MiB, "only the survivor's");
	size_t total;
	cr_expect_eq(free_of(&b, &total), 56 * MiB);
	peer_exit(&b);
}

/* exec ends a process's use of the device (its memory with it) though its pid lives on. */
Test(share, a_member_that_execs_gives_its_memory_back)
{
	const char *const *env = join_group("64M");
	su_ctx(0);
	struct peer a;
	start(&a, env);
	peer_ok(&a, "alloc %zu", 16 * MiB);
	long h = peer_ok(&a, "create %zu none", 8 * MiB);
	peer_ok(&a, "map %ld %zu", h, 8 * MiB);
	cr_expect_eq(used(), 24 * MiB);
	peer_ok(&a, "exec");
	peer_ok(&a, "init");
	cr_expect_eq(used(), 0);
	peer_ok(&a, "alloc %zu", 8 * MiB);
	cr_expect_eq(used(), 8 * MiB, "the new program is a member again");
	peer_exit(&a);
	cr_expect_eq(used(), 0);
}

Test(share, a_member_killed_holding_the_lock_does_not_block_the_group)
{
	const char *const *env = join_group("64M");
	su_ctx(0);
	static const char *stall_env[4];
	stall_env[0] = env[0];
	stall_env[1] = env[1];
	stall_env[2] = "SIMDEV_LOCK_STALL=3000";
	struct peer a;
	start(&a, stall_env);
	peer_send(&a, -1, "alloc %zu", 16 * MiB); /* charges, then holds the lock 3 s */
	usleep(300 * 1000);
	peer_kill(&a);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cr_expect_eq(used(), 0, "its half-done allocation is undone");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	cr_expect_lt(s, 1.0, "no wait for the dead member (%.2f s)", s);
	CUdeviceptr d;
	CU_OK(cuMemAlloc(&d, 32 * MiB));
	CU_OK(cuMemFree(d));
}

Test(share, memory_shared_in_a_group_is_counted_once)
{
	const char *const *env = join_group("64M");
	su_ctx(0);
	struct peer a, b;
	start(&a, env);
	start(&b, env);
	long ah = peer_ok(&a, "create %zu posix", 16 * MiB);
	peer_cmd(&a, -1, "export %ld", ah);
	peer_cmd(&b, a.fd, "import");
	close(a.fd);
	long bh = atol(b.reply + 2);
	peer_ok(&b, "map %ld %zu", bh, 16 * MiB);
	long ap = peer_ok(&a, "alloc %zu", 8 * MiB);
	char handle[160];
	ipc_handle(&a, ap, handle);
	peer_ok(&b, "ipcopen %s", handle);
	cr_expect_eq(used(), 24 * MiB);
	size_t total;
	cr_expect_eq(free_of(&b, &total), 40 * MiB);
	peer_exit(&a);
	cr_expect_eq(used(), 24 * MiB, "the importer holds both");
	peer_exit(&b);
	cr_expect_eq(used(), 0);
}

Test(share, a_later_member_uses_the_groups_capacity)
{
	const char *const *env = join_group("64M");
	su_ctx(0);
	static const char *other[3];
	other[0] = env[0];
	other[1] = "SIMDEV_MEMORY=1G";
	struct peer a;
	start(&a, other);
	size_t total = 0;
	free_of(&a, &total);
	cr_expect_eq(total, 64 * MiB);
	peer_exit(&a);
}

/* Members allocate and free at random while some are killed at random moments: nobody waits
 * for a dead member, every survivor finishes, and the group ends with nothing in use. */
Test(share, members_killed_at_random_moments, .timeout = 120)
{
	const char *const *env = join_group("64M");
	su_ctx(0);
	unsigned seed = (unsigned)getpid();
	for (int round = 0; round < 6; round++) {
		struct peer p[3];
		for (int i = 0; i < 3; i++) {
			start(&p[i], env);
			peer_send(&p[i], -1, "churn 400 %u", seed + 7 * (unsigned)round + (unsigned)i);
		}
		int victim = (int)(rand_r(&seed) % 3);
		usleep(1000 * (rand_r(&seed) % 50));
		peer_kill(&p[victim]);
		for (int i = 0; i < 3; i++) {
			if (i == victim)
				continue;
			cr_expect_str_eq(peer_wait(&p[i]), "ok", "round %d member %d", round, i);
			peer_exit(&p[i]);
		}
		cr_expect_eq(used(), 0, "round %d", round);
	}
}
