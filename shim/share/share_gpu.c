/* Which GPU a device ordinal is (its UUID: ordinals differ between processes under
 * CUDA_VISIBLE_DEVICES), what this process keeps per GPU (share_per_gpu), and the per-GPU
 * decision lock: <run dir>/share-<UUID>.lock, held with flock, so that the kernel drops it when
 * its holder dies at any moment. A process that finds it held waits for a close of the file
 * (inotify): the holder closes it to let go, and the kernel closes it for a holder that dies. */
#include "share_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "../../core/mono_wait.h"
#include "../../core/real_dlsym.h"

typedef int (*device_get_fn)(int *dev, int ordinal);
typedef int (*uuid_fn)(unsigned char uuid[16], int dev);

static device_get_fn device_get;
static uuid_fn get_uuid;
static atomic_bool resolved;
static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;

/* The driver's two functions, once libcuda is loaded (asked again until it is). Any thread may
 * ask first (the program's, the control server's): published by `resolved`. */
static bool resolve(void)
{
	void *lib;

	if (atomic_load_explicit(&resolved, memory_order_acquire))
		return true;
	pthread_mutex_lock(&resolve_lock);
	if (!atomic_load(&resolved) && (lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD))) {
		device_get = (device_get_fn)vmm_real_dlsym(lib, "cuDeviceGet");
		get_uuid = (uuid_fn)vmm_real_dlsym(lib, "cuDeviceGetUuid_v2");
		if (!get_uuid)
			get_uuid = (uuid_fn)vmm_real_dlsym(lib, "cuDeviceGetUuid");
		dlclose(lib); /* still loaded: the program uses it */
		if (device_get && get_uuid)
			atomic_store_explicit(&resolved, true, memory_order_release);
	}
	pthread_mutex_unlock(&resolve_lock);
	return atomic_load(&resolved);
}

bool share_gpu_uuid(int dev, char *out, size_t cap)
{
	unsigned char u[16];
	int d;

	if (!resolve())
		return false;
	if (device_get(&d, dev) || get_uuid(u, d))
		return false;
	snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
		 u[13], u[14], u[15]);
	return true;
}

void *share_per_gpu(struct share_per_gpu *c, int dev, const char *dir,
		    void *(*open_fn)(const char *dir, const char *uuid))
{
	char uuid[SHARE_UUID_MAX];
	void *p;

	if (dev < 0 || dev >= VMM_MAX_DEVICES)
		return NULL;
	p = atomic_load_explicit(&c->by_dev[dev], memory_order_acquire);
	if (p)
		return p;
	if (!share_gpu_uuid(dev, uuid, sizeof(uuid)))
		return NULL; /* the driver does not say yet: asked again next time */
	/* One opener at a time, so that a GPU's file is mapped once. */
	pthread_mutex_lock(&c->lock);
	p = atomic_load(&c->by_dev[dev]);
	if (!p && (p = open_fn(dir, uuid)))
		atomic_store_explicit(&c->by_dev[dev], p, memory_order_release);
	pthread_mutex_unlock(&c->lock);
	return p;
}

/* This thread's hold of each GPU lock (a thread that holds one and meets it again, e.g. its own
 * autowake inside an allocation, does not wait for itself). */
static _Thread_local struct {
	char uuid[SHARE_UUID_MAX];
	int fd;
	int depth;
} held;

/* Wait (until deadline_ms at most) for a close of the lock file: its holder lets go by closing
 * it, and the kernel closes it for a holder that dies. Without inotify, a pause that grows. */
static void wait_for_release(int watch, long long deadline_ms, long *pause_us)
{
	long long left = deadline_ms - vmm_now_ms();
	char buf[1024] __attribute__((aligned(8)));

	if (left <= 0)
		return;
	if (watch >= 0) {
		struct pollfd p = { .fd = watch, .events = POLLIN };

		/* At most a second: a holder that unlocks without closing (none does) is still seen. */
		if (poll(&p, 1, (int)(left < 1000 ? left : 1000)) > 0)
			while (read(watch, buf, sizeof(buf)) > 0)
				;
		return;
	}
	struct timespec ts = { 0, *pause_us * 1000 };

	nanosleep(&ts, NULL);
	if (*pause_us < 50000)
		*pause_us *= 2;
}

int share_lock(const char *dir, const char *uuid, long long deadline_ms)
{
	char path[512];
	long pause_us = 1000;
	int fd, watch = -1;
	bool watching = false;

	if (held.depth && !strcmp(held.uuid, uuid)) {
		held.depth++;
		return 0;
	}
	if (held.depth)
		return -1; /* one GPU at a time per thread: never two locks, never a cycle */
	if (snprintf(path, sizeof(path), "%s/share-%s.lock", dir, uuid) >= (int)sizeof(path))
		return -1;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	while (flock(fd, LOCK_EX | LOCK_NB)) {
		if ((errno != EWOULDBLOCK && errno != EINTR) || vmm_now_ms() >= deadline_ms) {
			if (watch >= 0)
				close(watch);
			close(fd);
			return -1;
		}
		/* Contended: watch for the holder's close, then try once more before waiting (a
		 * release between the try and the watch is not missed). */
		if (!watching) {
			watching = true;
			watch = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
			if (watch >= 0 && inotify_add_watch(watch, path, IN_CLOSE_WRITE) < 0) {
				close(watch);
				watch = -1;
			}
			continue;
		}
		wait_for_release(watch, deadline_ms, &pause_us);
	}
	if (watch >= 0)
		close(watch);
	snprintf(held.uuid, sizeof(held.uuid), "%s", uuid);
	held.fd = fd;
	held.depth = 1;
	return 0;
}

void share_unlock(void)
{
	if (!held.depth || --held.depth)
		return;
	flock(held.fd, LOCK_UN);
	close(held.fd);
	held.fd = -1;
}

bool share_lock_held(void)
{
	return held.depth > 0;
}
