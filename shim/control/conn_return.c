/* The hand-back of kept connections to the reading thread (conn_return.h): a short list under a
 * mutex and an eventfd that wakes the reading thread's poll. */
#include "conn_return.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static conn_returned list[CONN_RETURN_MAX];
static size_t count;
static int wake_fd = -1;

bool conn_return_init(void)
{
	bool ok;

	pthread_mutex_lock(&lock);
	if (wake_fd < 0)
		wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ok = wake_fd >= 0;
	pthread_mutex_unlock(&lock);
	return ok;
}

int conn_return_fd(void)
{
	int fd;

	pthread_mutex_lock(&lock);
	fd = wake_fd;
	pthread_mutex_unlock(&lock);
	return fd;
}

bool conn_return_push(int fd, const struct ucred *cred)
{
	uint64_t one = 1;
	bool ok;

	pthread_mutex_lock(&lock);
	ok = wake_fd >= 0 && count < CONN_RETURN_MAX;
	if (ok) {
		list[count++] = (conn_returned){ .fd = fd, .cred = *cred };
		/* Cannot fail but for a counter at its maximum, which the reader's reads
		 * prevent; the entry is in the list either way. */
		if (write(wake_fd, &one, sizeof(one)) < 0) {
		}
	}
	pthread_mutex_unlock(&lock);
	return ok;
}

size_t conn_return_take(conn_returned *out, size_t max)
{
	uint64_t n;
	size_t k = 0;

	pthread_mutex_lock(&lock);
	if (wake_fd >= 0 && read(wake_fd, &n, sizeof(n)) < 0) {
		/* EAGAIN: nothing signalled since the last take; the list says what there is. */
	}
	while (k < max && k < count) {
		out[k] = list[k];
		k++;
	}
	for (size_t i = k; i < count; i++)
		list[i - k] = list[i];
	count -= k;
	if (count && wake_fd >= 0 && write(wake_fd, &(uint64_t){ 1 }, sizeof(uint64_t)) < 0) {
		/* More than max: poll wakes the reader again for the rest. */
	}
	pthread_mutex_unlock(&lock);
	return k;
}

void conn_return_after_fork(void)
{
	pthread_mutex_init(&lock, NULL);
	for (size_t i = 0; i < count; i++)
		close(list[i].fd);
	count = 0;
	if (wake_fd >= 0)
		close(wake_fd);
	wake_fd = -1;
}
