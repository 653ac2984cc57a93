/* Which of the program's VMM handles are shared with other processes, and through what: the
 * shim's duplicates of every POSIX descriptor the program exported a handle as or imported one
 * from (app_vmm.h, vmm_app_share_keep). The driver frees shared memory only when no process holds
 * it by a handle, a mapping or an open descriptor; the duplicates let vmmctl match the holders
 * across processes with kcmp(KCMP_FILE), and let this process tell whether the program itself
 * still holds a descriptor of it open (then no sleep can release it). Also the table of those
 * duplicates made ready for importers' fetches (reg->ready). Calls nothing of the registry's:
 * the registry and app_reshare.c build on it. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../log.h"
#include "app_internal.h"

/* The duplicates and the sharing lists change under the registry's lock and this one, which a
 * fork waits for (fork_prepare): a forked child finds them whole, and every duplicate either on
 * a list or not made yet, or closed already (dup and close happen under it). A leaf: held for a
 * few stores and descriptor syscalls, never across a driver call, unlike the registry's lock
 * (held through a whole sleep). */
static pthread_mutex_t fds_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	pthread_mutex_lock(&fds_lock);
}

static void fork_release(void)
{
	/* Parent and child alike: the child's one thread took it in fork_prepare. */
	pthread_mutex_unlock(&fds_lock);
}

static void fork_handlers(void)
{
	if (pthread_atfork(fork_prepare, fork_release, fork_release))
		vmm_log(VMM_LOG_WARN, "app handles: no fork handlers; a child forked while another "
			"thread shares a handle may keep its duplicates open");
}

/* With fds_lock held. */
static void unlist(struct app_handle *h)
{
	if (!h->share_pprev)
		return;
	*h->share_pprev = h->share_next;
	if (h->share_next)
		h->share_next->share_pprev = h->share_pprev;
	h->share_next = NULL;
	h->share_pprev = NULL;
}

/* With fds_lock held (or in a forked child, alone): close h's duplicates and take it off its list; returns the array to free
 * once the lock is dropped. */
static int *close_locked(struct app_handle *h)
{
	int *fds = h->share_fds;

	for (unsigned i = 0; i < h->nshare_fds; i++)
		close(fds[i]);
	h->share_fds = NULL;
	h->nshare_fds = 0;
	unlist(h);
	return fds;
}

void app_share_fds_close(struct app_handle *h)
{
	int *fds;

	pthread_mutex_lock(&fds_lock);
	fds = close_locked(h);
	pthread_mutex_unlock(&fds_lock);
	free(fds);
}

int app_share_fd_add(vmm_app_registry *reg, struct app_handle *h, int fd, bool *no_memory)
{
	int *v, *old = NULL, dup_fd = -1;

	pthread_once(&fork_once, fork_handlers);
	/* Allocated outside fds_lock, so that a fork never waits behind the allocator. */
	v = malloc((h->nshare_fds + 1) * sizeof(*v));
	*no_memory = !v;
	if (v) {
		pthread_mutex_lock(&fds_lock);
		dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		if (dup_fd >= 0) {
			if (h->nshare_fds)
				memcpy(v, h->share_fds, h->nshare_fds * sizeof(*v));
			v[h->nshare_fds++] = dup_fd;
			old = h->share_fds;
			h->share_fds = v;
			v = NULL;
			if (!h->share_pprev) {
				h->share_next = reg->sharing;
				if (reg->sharing)
					reg->sharing->share_pprev = &h->share_next;
				reg->sharing = h;
				h->share_pprev = &reg->sharing;
			}
		}
		pthread_mutex_unlock(&fds_lock);
	}
	free(v);
	free(old);
	return dup_fd;
}

void app_share_unpublish(vmm_app_registry *reg, vmm_phys app)
{
	size_t k = 0;

	pthread_mutex_lock(&reg->ready_lock);
	for (size_t i = 0; i < reg->nready; i++)   /* the descriptors are h's kept duplicates */
		if (reg->ready[i].app != app)
			reg->ready[k++] = reg->ready[i];
	reg->nready = k;
	pthread_mutex_unlock(&reg->ready_lock);
}

void app_share_ready_add(vmm_app_registry *reg, const struct app_handle *h, int fd)
{
	struct app_ready *v;

	pthread_mutex_lock(&reg->ready_lock);
	v = realloc(reg->ready, (reg->nready + 1) * sizeof(*v));
	if (v) {
		reg->ready = v;
		reg->ready[reg->nready++] = (struct app_ready){ .app = h->app, .size = h->size,
								.fd = fd };
	}
	pthread_mutex_unlock(&reg->ready_lock);
}

void vmm_app_share_after_fork(vmm_app_registry *reg)
{
	/* Without the registry's lock, which another thread may have held at the fork (a sleep):
	 * the sharing list is whole, the fork having waited for fds_lock. */
	if (!reg)
		return;
	reg->nready = 0;   /* its descriptors are the duplicates closed here; its lock may be
	                    * held by a thread the child does not have */
	while (reg->sharing)
		free(close_locked(reg->sharing));
}

static bool is_kept(const struct app_handle *h, int fd)
{
	for (unsigned i = 0; i < h->nshare_fds; i++)
		if (h->share_fds[i] == fd)
			return true;
	return false;
}

/* Descriptors of this process, other than the shim's, that are one of h's open files. */
static void program_holders(const struct app_handle *h, vmm_app_share *s)
{
	pid_t self = getpid();
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	s->program_fds = 0;
	s->program_fd = -1;
	if (!d) {
		s->program_fds = -1;
		s->kcmp_errno = errno;
		return;
	}
	while ((e = readdir(d))) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);

		if (*end || end == e->d_name || fd == dirfd(d) || is_kept(h, (int)fd))
			continue;
		for (unsigned i = 0; i < h->nshare_fds; i++) {
			long r = syscall(SYS_kcmp, self, self, KCMP_FILE, h->share_fds[i], fd);

			if (r < 0 && errno != EBADF) {   /* EBADF: closed meanwhile */
				s->program_fds = -1;
				s->kcmp_errno = errno;
				closedir(d);
				return;
			}
			if (r == 0) {
				if (s->program_fd < 0)
					s->program_fd = (int)fd;
				s->program_fds++;
				break;
			}
		}
	}
	closedir(d);
}

bool app_share_program_holds(const struct app_handle *h)
{
	vmm_app_share s = { .program_fd = -1 };

	program_holders(h, &s);
	return s.program_fds != 0;
}

size_t vmm_app_share_list(vmm_app_registry *reg, vmm_app_share *out, size_t cap)
{
	size_t n = 0;

	if (!reg)
		return 0;
	pthread_mutex_lock(&reg->lock);
	for (size_t i = 0; i < reg->nh; i++) {
		struct app_handle *h = reg->hs[i];

		if (!h->nshare_fds && !(h->asleep && h->group_released))
			continue;
		if (n < cap && out) {
			vmm_app_share *s = &out[n];

			*s = (vmm_app_share){ .app = h->app, .dev = h->dev, .size = h->size,
					      .imported = h->imported, .nfds = h->nshare_fds,
					      .program_fd = -1, .released = h->group_released };
			for (unsigned k = 0; k < h->nshare_fds && k < VMM_APP_SHARE_FDS; k++)
				s->fds[k] = h->share_fds[k];
			if (h->nshare_fds)
				program_holders(h, s);
		}
		n++;
	}
	pthread_mutex_unlock(&reg->lock);
	return n;
}
