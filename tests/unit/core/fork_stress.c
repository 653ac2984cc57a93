/* Forks while other threads change what a forked child must close: the kept export descriptors
 * (vmm_share_keep, freed again) and the duplicates of the program's shared VMM descriptors
 * (vmm_app_share_keep, handles dropped again). Each child closes both as the shim's fork handler
 * does and checks, as a user would, that none is left open (a kept export's descriptors by
 * number, the duplicates by the file they are open on) and that none is still counted; a child
 * that hangs (10 s) or crashes fails too. A third thread trims meanwhile (settling freed
 * exports while one runs without the heap's lock). Not Criterion, so that it also runs under
 * TSan. FORK_STRESS_FORKS sets the number of forks (200). */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "heap.h"
#include "heap_device.h"
#include "heap_keep.h"
#include "offload/app_vmm.h"
#include "vmm_share.h"

#define MiB ((size_t)1 << 20)

enum { KEPT_OPEN = 1, KEPT_COUNTED = 2, DUP_OPEN = 4, HUNG = 8 };

static vmm_core *core;
static vmm_app_registry *reg;
static int marker = -1;          /* the program's "shared" descriptor: a memfd */
static atomic_bool stop;
static atomic_uint keep_rounds, share_rounds;

/* Allocate, export and keep, free: three kept at a time, so that frees detach from the middle of
 * the list as well as its head. */
static void *keep_and_free(void *arg)
{
	vmm_devptr ring[3] = { 0 };
	vmm_error err;

	(void)arg;
	for (unsigned i = 0; !atomic_load(&stop); i++) {
		vmm_share_info si;
		vmm_devptr a;
		bool kept;

		if (ring[i % 3])
			vmm_free(core, ring[i % 3], &err);
		ring[i % 3] = 0;
		if (vmm_malloc(core, 0, 2 * MiB, 0, NULL, &a, &err))
			continue;
		ring[i % 3] = a;
		if (!vmm_share_export(core, a, &si, &err))
			vmm_share_keep(core, si.base, si.id, &kept, &err);
		atomic_fetch_add(&keep_rounds, 1);
	}
	for (int i = 0; i < 3; i++)
		if (ring[i])
			vmm_free(core, ring[i], &err);
	return NULL;
}

/* Trim meanwhile: it settles the freed exports' handles, also while an export runs without the
 * heap's lock (vmm_share_keep). */
static void *trim_often(void *arg)
{
	struct timespec nap = { 0, 200000 };
	vmm_error err;

	(void)arg;
	while (!atomic_load(&stop)) {
		vmm_trim(core, 0, &err);
		nanosleep(&nap, NULL);
	}
	return NULL;
}

/* Record handles, keep two duplicates of the marker for each (the array grows), drop them: four
 * alive at a time. */
static void *share_and_drop(void *arg)
{
	vmm_phys ring[4] = { 0 };

	(void)arg;
	for (unsigned i = 0; !atomic_load(&stop); i++) {
		vmm_phys v = vmm_app_created_value(reg, 0x100000 + (vmm_phys)i * 0x1000, 2 * MiB, 0,
						   NULL, 0);

		vmm_app_share_keep(reg, v, marker);
		vmm_app_share_keep(reg, v, marker);
		if (ring[i % 4])
			vmm_app_released(reg, ring[i % 4]);
		ring[i % 4] = v;
		atomic_fetch_add(&share_rounds, 1);
	}
	for (int i = 0; i < 4; i++)
		if (ring[i])
			vmm_app_released(reg, ring[i]);
	return NULL;
}

/* Descriptors of this process other than the marker itself open on the marker's file, among the
 * first FD_SCAN (the lowest free number is always taken: the test's are all far below). Without
 * opendir: a forked child must not allocate, since another thread of the parent may have held
 * the allocator's lock at the fork (ASan's does not take it around fork). */
#define FD_SCAN 1024
static int copies_of_marker(void)
{
	struct stat want, st;
	int n = 0;

	if (fstat(marker, &want))
		return -1;
	for (int fd = 0; fd < FD_SCAN; fd++)
		if (fd != marker && !fstat(fd, &st) && st.st_dev == want.st_dev &&
		    st.st_ino == want.st_ino)
			n++;
	return n;
}

/* The forked child: close what the shim's fork handler closes, then check. */
static int child(void)
{
	struct devheap *dh = heap_for(core, 0, false, NULL);
	int fds[256], bad = 0;
	size_t n = 0;

	for (struct kept_export *k = dh ? dh->kept : NULL; k; k = k->next)
		for (size_t i = 0; i < k->n && n < 256; i++)
			fds[n++] = k->pieces[i].fd;
	vmm_share_keep_after_fork(core);
	vmm_app_share_after_fork(reg);
	for (size_t i = 0; i < n; i++)
		if (fcntl(fds[i], F_GETFD) != -1)
			bad |= KEPT_OPEN;
	if (vmm_share_kept_fds(core))
		bad |= KEPT_COUNTED;
	if (copies_of_marker())
		bad |= DUP_OPEN;
	return bad;
}

/* pid's exit status, waiting at most 10 s (then killed: HUNG). */
static int wait_bounded(pid_t pid)
{
	struct timespec nap = { 0, 1000000 };
	time_t end = time(NULL) + 10;
	int st;

	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (time(NULL) > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return HUNG;
		}
		nanosleep(&nap, NULL);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int fail(const char *what, const char *why)
{
	fprintf(stderr, "fork_stress: %s: %s\n", what, why);
	return 1;
}

int main(void)
{
	const char *env = getenv("FORK_STRESS_FORKS");
	int forks = env ? atoi(env) : 200;
	unsigned kept_open = 0, kept_counted = 0, dup_open = 0, hung = 0, crashed = 0;
	vmm_backend *be;
	vmm_error err = { 0 };
	pthread_t t1, t2, t3;

	setenv("SIMDEV_MEMORY", "2G", 1);
	if (vmm_backend_cuda_open(&be, &err) || vmm_core_create(be, NULL, &core, &err) ||
	    vmm_app_registry_create(be, &reg, &err))
		return fail("opening on simdev", err.msg);
	marker = memfd_create("vmmshim-test-shared", MFD_CLOEXEC);
	if (marker < 0)
		return fail("memfd_create", "refused");
	if (pthread_create(&t1, NULL, keep_and_free, NULL) ||
	    pthread_create(&t2, NULL, share_and_drop, NULL) ||
	    pthread_create(&t3, NULL, trim_often, NULL))
		return fail("pthread_create", "refused");
	while (atomic_load(&keep_rounds) < 10 || atomic_load(&share_rounds) < 10)
		sched_yield();
	for (int i = 0; i < forks; i++) {
		pid_t pid = fork();
		int rc;

		if (pid < 0)
			return fail("fork", "refused");
		if (!pid)
			_exit(child());
		rc = wait_bounded(pid);
		if (rc > (KEPT_OPEN | KEPT_COUNTED | DUP_OPEN | HUNG) || rc == HUNG) {
			crashed += rc != HUNG;
			hung += rc == HUNG;
			continue;
		}
		kept_open += !!(rc & KEPT_OPEN);
		kept_counted += !!(rc & KEPT_COUNTED);
		dup_open += !!(rc & DUP_OPEN);
	}
	atomic_store(&stop, true);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	pthread_join(t3, NULL);
	printf("fork_stress: %d forks, %u keeps, %u shares meanwhile; children that kept an "
	       "export open %u, still counted one %u, kept a duplicate %u, hung %u, crashed %u\n",
	       forks, atomic_load(&keep_rounds), atomic_load(&share_rounds), kept_open,
	       kept_counted, dup_open, hung, crashed);
	vmm_app_registry_destroy(reg);
	if (copies_of_marker())
		return fail("parent", "a duplicate outlived its handle");
	if (vmm_share_kept_fds(core))
		return fail("parent", "a kept export outlived its allocation");
	vmm_core_destroy(core);
	be->close(be);
	close(marker);
	return kept_open || kept_counted || dup_open || hung || crashed ||
	       atomic_load(&keep_rounds) <= 10 || atomic_load(&share_rounds) <= 10;
}
