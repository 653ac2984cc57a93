/* The allocation trace (alloc_trace.h). One descriptor, written with one write(2) per line under
 * a lock, so that lines of several threads never interleave and a crash loses none. */
#include "alloc_trace.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/log.h"

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int trace_fd = -1;

/* path with each "%p" replaced by the pid; false when it does not fit. */
static bool expand(const char *path, char *out, size_t n)
{
	size_t k = 0;

	for (const char *s = path; *s; s++) {
		int w = s[0] == '%' && s[1] == 'p' ? snprintf(out + k, n - k, "%ld", (long)getpid())
						   : snprintf(out + k, n - k, "%c", *s);

		if (w < 0 || (size_t)w >= n - k)
			return false;
		k += (size_t)w;
		if (s[0] == '%' && s[1] == 'p')
			s++;
	}
	return true;
}

void alloc_trace_open(const char *path)
{
	char name[512];
	int fd;

	if (!path || !path[0] || atomic_load(&trace_fd) >= 0)
		return;
	if (!expand(path, name, sizeof(name))) {
		vmm_log(VMM_LOG_WARN, "VMMSHIM_ALLOC_TRACE=%s: the name is too long; no trace", path);
		return;
	}
	fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		vmm_log(VMM_LOG_WARN, "VMMSHIM_ALLOC_TRACE: cannot create %s (%s); no trace", name,
			strerror(errno));
		return;
	}
	atomic_store(&trace_fd, fd);
	vmm_log(VMM_LOG_INFO, "writing the allocation trace to %s", name);
}

static void put(const char *line, int len)
{
	int fd = atomic_load_explicit(&trace_fd, memory_order_relaxed);

	if (fd < 0 || len <= 0)
		return;
	pthread_mutex_lock(&trace_lock);
	/* A short write is given up rather than retried: the trace is best effort. */
	if (write(fd, line, (size_t)len) != len)
		atomic_store(&trace_fd, -1);
	pthread_mutex_unlock(&trace_lock);
}

void alloc_trace_malloc(size_t size, uint64_t ptr, bool on_stream, uint64_t stream)
{
	char line[96];

	if (atomic_load_explicit(&trace_fd, memory_order_relaxed) < 0)
		return;
	put(line, on_stream ? snprintf(line, sizeof(line), "A %zu %llx %llx\n", size,
				       (unsigned long long)ptr, (unsigned long long)stream)
			    : snprintf(line, sizeof(line), "a %zu %llx\n", size,
				       (unsigned long long)ptr));
}

void alloc_trace_free(uint64_t ptr, bool on_stream)
{
	char line[48];

	if (atomic_load_explicit(&trace_fd, memory_order_relaxed) < 0)
		return;
	put(line, snprintf(line, sizeof(line), "%c %llx\n", on_stream ? 'F' : 'f',
			   (unsigned long long)ptr));
}
