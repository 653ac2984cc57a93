/* File descriptors passed over a Unix stream socket (SCM_RIGHTS), with a deadline. The
 * descriptors travel with the first bytes of a message; the receiver takes them with those bytes
 * and closes any beyond what it can hold. Pure socket code, no shim state. */
#ifndef VMMSHIM_FD_PASS_H
#define VMMSHIM_FD_PASS_H

#include <stddef.h>

#define FD_PASS_MAX 64   /* descriptors in one message */

/* Send buf[0..len) on sock with fds[0..nfds) attached to its first bytes, all of it before
 * deadline_ms (CLOCK_MONOTONIC milliseconds, fd_pass_now_ms). Returns 0, or -1 with errno
 * (ETIMEDOUT past the deadline, EINVAL for more than FD_PASS_MAX). The fds stay the caller's. */
int fd_pass_send(int sock, const void *buf, size_t len, const int *fds, size_t nfds,
		 long long deadline_ms);

/* The same in one call that never waits, for a thread that must not (nfds at most FD_PASS_MAX):
 * 1 all sent; 0 nothing sent (the peer's buffer is full: try again where waiting is allowed);
 * -1 with errno, the connection broken (or only part sent: it is no use any more). */
int fd_pass_send_now(int sock, const void *buf, size_t len, const int *fds, size_t nfds);

/* The same for any number of descriptors: buf goes in parts of at least one byte, the n-th part
 * carrying descriptors [n * FD_PASS_MAX, (n + 1) * FD_PASS_MAX); the receiver collects them in
 * order (fd_pass_recv, called until the end). EINVAL when len is shorter than the parts. */
int fd_pass_send_many(int sock, const void *buf, size_t len, const int *fds, size_t nfds,
		      long long deadline_ms);

/* Receive up to cap bytes (one recvmsg, waiting until deadline_ms), and the descriptors that
 * came with them into fds[*nfds..max) (close-on-exec; ones beyond max are closed). Returns the
 * bytes read (0: the peer closed), or -1 with errno (ETIMEDOUT). */
long fd_pass_recv(int sock, void *buf, size_t cap, int *fds, size_t max, size_t *nfds,
		  long long deadline_ms);

long long fd_pass_now_ms(void);

#endif
