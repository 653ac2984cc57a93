/* One message, with at most one descriptor attached (SCM_RIGHTS), over a SOCK_SEQPACKET socket:
 * how the sharing soak hands a shareable VMM descriptor from an exporting soak_target to the
 * processes that import it. Every receive has a deadline. */
#ifndef CTL_FD_PASS_H
#define CTL_FD_PASS_H

#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

/* msg with fd attached (none when fd < 0). 0, or -1 when the peer is gone. */
static inline int fd_pass_send(int sock, const char *msg, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { .iov_base = (void *)msg, .iov_len = strlen(msg) + 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		memset(cbuf, 0, sizeof(cbuf));
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &m, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/* The next message into buf (cap bytes, NUL-ended), within timeout_ms. Returns the descriptor
 * it carried (close-on-exec), -1 when it carried none, -2 on timeout or a peer gone. */
static inline int fd_pass_recv(int sock, char *buf, size_t cap, int timeout_ms)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { .iov_base = buf, .iov_len = cap - 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct cmsghdr *c;
	ssize_t n;
	int fd = -1;

	if (poll(&p, 1, timeout_ms) != 1 || (n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) <= 0)
		return -2;
	buf[n] = '\0';
	c = CMSG_FIRSTHDR(&m);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

#endif
