/* Test side of share_peer: start peers with fork+exec and drive them over a SOCK_SEQPACKET
 * socket, descriptors attached with SCM_RIGHTS. Every wait for a peer has a deadline. */
#ifndef SIMDEV_SHARE_UTIL_H
#define SIMDEV_SHARE_UTIL_H

#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define PEER_REPLY_S 30

struct peer {
	pid_t pid;
	int sock;
	char reply[512];
	int fd; /* a descriptor the last reply carried, or -1 */
};

/* env: "NAME=value" entries set in the peer (NULL-terminated; NULL for none). */
static inline void peer_start(struct peer *p, const char *const *env)
{
	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	p->pid = fork();
	cr_assert_geq(p->pid, 0);
	if (p->pid == 0) {
		int fd = dup(sv[1]); /* without close-on-exec */
		char arg[16];
		snprintf(arg, sizeof(arg), "%d", fd);
		for (const char *const *e = env; e && *e; e++)
			putenv((char *)*e);
		execl(SHARE_PEER, "share_peer", arg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	p->sock = sv[0];
	p->fd = -1;
	struct timeval tv = { .tv_sec = PEER_REPLY_S };
	setsockopt(p->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* Send a command (with descriptor fd attached when >= 0) without waiting for the answer. */
static inline void peer_send(struct peer *p, int fd, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	struct iovec io = { .iov_base = buf, .iov_len = strlen(buf) + 1 };
	char cbuf[CMSG_SPACE(sizeof(int))];
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
	cr_assert_geq(sendmsg(p->sock, &m, MSG_NOSIGNAL), 0, "peer %d is gone", (int)p->pid);
}

/* The answer to the last command: "ok ..." or "err CODE". */
static inline const char *peer_wait(struct peer *p)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec io = { .iov_base = p->reply, .iov_len = sizeof(p->reply) - 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	ssize_t n = recvmsg(p->sock, &m, MSG_CMSG_CLOEXEC);
	cr_assert_gt(n, 0, "peer %d did not answer within %d s", (int)p->pid, PEER_REPLY_S);
	p->reply[n] = 0;
	p->fd = -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&p->fd, CMSG_DATA(c), sizeof(int));
	return p->reply;
}

#define peer_cmd(p, fd, ...) (peer_send((p), (fd), __VA_ARGS__), peer_wait(p))

/* A command that must succeed; its first number (a slot), or 0. */
#define peer_ok(p, ...)                                                                     \
	({                                                                                  \
		const char *r_ = peer_cmd((p), -1, __VA_ARGS__);                            \
		cr_assert(!strncmp(r_, "ok", 2), "peer %d: '%s' -> '%s'", (int)(p)->pid,      \
			  (p)->reply, r_);                                                  \
		atol(r_ + 2);                                                               \
	})

/* A command that must fail; its CUresult. */
#define peer_err(p, ...)                                                                    \
	({                                                                                  \
		const char *r_ = peer_cmd((p), -1, __VA_ARGS__);                            \
		cr_assert(!strncmp(r_, "err ", 4), "peer %d: expected an error, got '%s'",   \
			  (int)(p)->pid, r_);                                               \
		atoi(r_ + 4);                                                               \
	})

static inline int peer_reap(struct peer *p)
{
	int status = -1;
	for (int i = 0; i < PEER_REPLY_S * 100 && waitpid(p->pid, &status, WNOHANG) == 0; i++)
		usleep(10000);
	close(p->sock);
	return status;
}

/* exit(0) after answering: library destructors run, as at a normal end. */
static inline void peer_exit(struct peer *p)
{
	peer_ok(p, "exit");
	int status = peer_reap(p);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "peer status %d", status);
}

static inline void peer_kill(struct peer *p)
{
	kill(p->pid, SIGKILL);
	int status = peer_reap(p);
	cr_assert(WIFSIGNALED(status), "peer status %d", status);
}

#endif
