/* SCM_RIGHTS over a Unix stream socket, with deadlines (fd_pass.h). */
#include "fd_pass.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

long long fd_pass_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for events on sock until the deadline: 0 ready, -1 with errno. */
static int wait_for(int sock, short events, long long deadline_ms)
{
	for (;;) {
		long long left = deadline_ms - fd_pass_now_ms();
		struct pollfd p = { .fd = sock, .events = events };
		int r;

		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		r = poll(&p, 1, left > 1000000 ? 1000000 : (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -1;
	}
}

/* Room for one message's descriptors, aligned as a control message must be. */
union fd_ctl {
	struct cmsghdr align;
	char bytes[CMSG_SPACE(sizeof(int) * FD_PASS_MAX)];
};

/* Put fds[0..nfds) (at most FD_PASS_MAX) in m's control message, built in ctl. */
static void attach_fds(struct msghdr *m, union fd_ctl *ctl, const int *fds, size_t nfds)
{
	struct cmsghdr *c;

	memset(ctl, 0, sizeof(*ctl));
	m->msg_control = ctl->bytes;
	m->msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
	c = CMSG_FIRSTHDR(m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
}

int fd_pass_send(int sock, const void *buf, size_t len, const int *fds, size_t nfds,
		 long long deadline_ms)
{
	union fd_ctl ctl;
	size_t off = 0;

	if (nfds > FD_PASS_MAX || (nfds && !len)) {
		errno = EINVAL;
		return -1;
	}
	while (off < len) {
		struct iovec io = { .iov_base = (char *)buf + off, .iov_len = len - off };
		struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1 };
		ssize_t k;

		if (nfds && off == 0)
			attach_fds(&m, &ctl, fds, nfds);
		if (wait_for(sock, POLLOUT, deadline_ms))
			return -1;
		k = sendmsg(sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			return -1;
		}
		off += (size_t)k;
	}
	return 0;
}

int fd_pass_send_now(int sock, const void *buf, size_t len, const int *fds, size_t nfds)
{
	union fd_ctl ctl;
	struct iovec io = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1 };
	ssize_t k;

	if (nfds > FD_PASS_MAX || (nfds && !len)) {
		errno = EINVAL;
		return -1;
	}
	if (nfds)
		attach_fds(&m, &ctl, fds, nfds);
	k = sendmsg(sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (k == (ssize_t)len)
		return 1;
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (k >= 0)
		errno = EPIPE; /* cut short: the rest cannot follow without waiting */
	return -1;
}

int fd_pass_send_many(int sock, const void *buf, size_t len, const int *fds, size_t nfds,
		      long long deadline_ms)
{
	size_t parts = (nfds + FD_PASS_MAX - 1) / FD_PASS_MAX, off = 0;

	if (parts <= 1)
		return fd_pass_send(sock, buf, len, fds, nfds, deadline_ms);
	if (len < parts) {
		errno = EINVAL;
		return -1;
	}
	for (size_t i = 0; i < parts; i++) {
		size_t n = nfds - i * FD_PASS_MAX < FD_PASS_MAX ? nfds - i * FD_PASS_MAX : FD_PASS_MAX;
		/* One byte with each batch but the last, which takes the rest of the text. */
		size_t bytes = i + 1 < parts ? 1 : len - off;

		if (fd_pass_send(sock, (const char *)buf + off, bytes, fds + i * FD_PASS_MAX, n,
				 deadline_ms))
			return -1;
		off += bytes;
	}
	return 0;
}

long fd_pass_recv(int sock, void *buf, size_t cap, int *fds, size_t max, size_t *nfds,
		  long long deadline_ms)
{
	union fd_ctl ctl;

	for (;;) {
		struct iovec io = { .iov_base = buf, .iov_len = cap };
		struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl.bytes,
				    .msg_controllen = sizeof(ctl.bytes) };
		ssize_t k;

		if (wait_for(sock, POLLIN, deadline_ms))
			return -1;
		k = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
				continue;
			return -1;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			size_t n;
			int *in;

			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			in = (int *)CMSG_DATA(c);
			for (size_t i = 0; i < n; i++) {
				int fd;

				memcpy(&fd, in + i, sizeof(fd));
				if (*nfds < max)
					fds[(*nfds)++] = fd;
				else
					close(fd);
			}
		}
		return (long)k;
	}
}
