/* A forked child closes the shim's duplicates of the program's shared descriptors
 * (vmm_app_share_after_fork) even when another thread of the parent is adding and closing them
 * at that moment: the child holds none of them afterwards, and it neither crashes nor hangs.
 * Descriptors are told apart as a user would, by what /proc/self/fd points at. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "offload/app_vmm.h"

#define FORKS 200
#define CHILD_WAIT_S 10

struct churn {
	vmm_app_registry *reg;
	int marker;              /* the "shared" descriptor: a memfd the test owns */
	atomic_bool stop;
	atomic_uint rounds;
};

/* Share and drop handles in a ring of four, each with two duplicates (the array grows). */
static void *share_and_drop(void *arg)
{
	struct churn *c = arg;
	vmm_phys ring[4] = { 0 };

	for (unsigned i = 0; !atomic_load(&c->stop); i++) {
		vmm_phys v = vmm_app_created_value(c->reg, 0x100000 + (vmm_phys)i * 0x1000, 2 << 20, 0,
						   NULL, 0);

		vmm_app_share_keep(c->reg, v, c->marker);
		vmm_app_share_keep(c->reg, v, c->marker);
		if (ring[i % 4])
			vmm_app_released(c->reg, ring[i % 4]);
		ring[i % 4] = v;
		atomic_fetch_add(&c->rounds, 1);
	}
	for (int i = 0; i < 4; i++)
		if (ring[i])
			vmm_app_released(c->reg, ring[i]);
	return NULL;
}

/* Descriptors of this process, other than `marker` itself, open on the marker's file. */
static int copies_of(int marker)
{
	struct stat want, st;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d || fstat(marker, &want))
		return -1;
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name);

		if (e->d_name[0] == '.' || fd == marker || fd == dirfd(d))
			continue;
		if (!fstat(fd, &st) && st.st_dev == want.st_dev && st.st_ino == want.st_ino)
			n++;
	}
	closedir(d);
	return n;
}

/* Wait for pid at most CHILD_WAIT_S; kill it when it hangs. Its exit status, or -1: hung. */
static int wait_bounded(pid_t pid)
{
	struct timespec nap = { 0, 1000000 };
	time_t end = time(NULL) + CHILD_WAIT_S;
	int st;

	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (time(NULL) > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		nanosleep(&nap, NULL);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(app_share_fork, a_child_forked_mid_change_holds_no_duplicate)
{
	struct churn c = { .marker = -1 };
	struct tdev td;
	vmm_error err = { 0 };
	pthread_t thr;
	unsigned leaked = 0, hung = 0, crashed = 0;

	t_simdev_env("1G", "1", NULL);
	t_dev_open(&td);
	cr_assert_eq(vmm_app_registry_create(td.be, &c.reg, &err), VMM_OK, "%s", err.msg);
	c.marker = memfd_create("vmmshim-test-shared", MFD_CLOEXEC);
	cr_assert_geq(c.marker, 0);
	cr_assert_eq(pthread_create(&thr, NULL, share_and_drop, &c), 0);
	while (atomic_load(&c.rounds) < 10)
		sched_yield();
	for (int i = 0; i < FORKS; i++) {
		pid_t pid = fork();
		int rc;

		cr_assert_geq(pid, 0);
		if (!pid) {
			vmm_app_share_after_fork(c.reg);
			_exit(copies_of(c.marker) == 0 ? 0 : 1);
		}
		rc = wait_bounded(pid);
		leaked += rc == 1;
		hung += rc == -1;
		crashed += rc > 1;
	}
	atomic_store(&c.stop, true);
	pthread_join(thr, NULL);
	cr_expect_eq(hung, 0, "%u of %d children hung", hung, FORKS);
	cr_expect_eq(crashed, 0, "%u of %d children crashed", crashed, FORKS);
	cr_expect_eq(leaked, 0, "%u of %d children kept a duplicate open", leaked, FORKS);
	cr_expect_gt(atomic_load(&c.rounds), 10, "the sharing thread ran meanwhile");
	vmm_app_registry_destroy(c.reg);
	cr_expect_eq(copies_of(c.marker), 0, "the parent's duplicates went with their handles");
	close(c.marker);
	t_dev_close(&td);
}
