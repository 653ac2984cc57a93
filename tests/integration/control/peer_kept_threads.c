/* Kept connections (shim/protocol/peer_kept.c) used by many threads at once, as an importer's
 * threads open legacy IPC handles of a few exporters side by side: each request must get its own
 * whole reply and descriptor, a connection is used by one thread at a time, and closing them all
 * meanwhile (what a forked child does) or the server dropping one loses no request. A plain
 * program, not Criterion, so that it runs under ThreadSanitizer as it is (scripts/test.sh).
 * The server is this process's own socket (the peer's pid is ours): every line gets an ok reply
 * and a pipe's read end, and every DROP_EVERY-th request on a connection is dropped unanswered
 * (a kept connection the server gave up: the client must retry on a new one). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fd_pass.h"
#include "peer_kept.h"
#include "run_dir.h"

#define CLIENTS 8
#define REQUESTS 150       /* per client */
#define TOKENS 3           /* peers as the clients see them: connections are shared among them */
#define DROP_EVERY 5

static char dir[] = "/tmp/peerkept-XXXXXX";
static int failures, done_clients;   /* atomics */

static void *serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg, on_conn = 0;
	char buf[512];

	while (read(fd, buf, sizeof(buf)) > 0) {
		int p[2];

		if (++on_conn % DROP_EVERY == 0 || pipe(p))
			break;
		fd_pass_send(fd, "vmmshim/1 ok\nend\n", 17, &p[0], 1, fd_pass_now_ms() + 2000);
		close(p[0]);
		close(p[1]);
	}
	close(fd);
	return NULL;
}

static void *serve(void *arg)
{
	int lfd = (int)(intptr_t)arg, c;

	while ((c = accept(lfd, NULL, NULL)) >= 0) {
		pthread_t t;

		if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)c)) {
			close(c);
			continue;
		}
		pthread_detach(t);
	}
	return NULL;
}

static bool always(pid_t pid, uint64_t token)
{
	(void)pid;
	(void)token;
	return true;
}

static void *client(void *arg)
{
	int id = (int)(intptr_t)arg;

	for (int i = 0; i < REQUESTS; i++) {
		char why[256];
		peer_reply r;
		uint64_t token = (uint64_t)((id + i) % TOKENS) + 1;

		if (peer_request_kept(dir, getpid(), token, always, "vmmshim/1 hello\n", 5000, &r,
				      NULL, why, sizeof(why))) {
			fprintf(stderr, "client %d, request %d: %s\n", id, i, why);
			__atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
			continue;
		}
		if (strcmp(r.text, "vmmshim/1 ok\nend\n") || r.nfds != 1) {
			fprintf(stderr, "client %d, request %d: %zu descriptors with '%s'\n", id, i,
				r.nfds, r.text);
			__atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
		}
		peer_reply_free(&r);
	}
	__atomic_add_fetch(&done_clients, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Closes every kept connection now and then while the clients run. */
static void *closer(void *arg)
{
	(void)arg;
	while (__atomic_load_n(&done_clients, __ATOMIC_SEQ_CST) < CLIENTS) {
		if (peer_kept_count() > PEER_KEPT_MAX)
			__atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
		peer_kept_close_all();
		usleep(3000);
	}
	return NULL;
}

int main(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	pthread_t server, clients[CLIENTS], closing;
	int lfd;

	if (!mkdtemp(dir) ||
	    run_dir_socket_path(dir, getpid(), sa.sun_path, sizeof(sa.sun_path)) ||
	    (lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 64)) {
		perror("peer_kept_threads: server socket");
		return 1;
	}
	pthread_create(&server, NULL, serve, (void *)(intptr_t)lfd);
	for (int i = 0; i < CLIENTS; i++)
		pthread_create(&clients[i], NULL, client, (void *)(intptr_t)i);
	pthread_create(&closing, NULL, closer, NULL);
	for (int i = 0; i < CLIENTS; i++)
		pthread_join(clients[i], NULL);
	pthread_join(closing, NULL);
	peer_kept_close_all();
	shutdown(lfd, SHUT_RDWR);
	close(lfd);
	pthread_join(server, NULL);
	unlink(sa.sun_path);
	rmdir(dir);
	if (failures) {
		fprintf(stderr, "peer_kept_threads: %d failures\n", failures);
		return 1;
	}
	printf("peer_kept_threads: %d requests from %d threads answered\n", CLIENTS * REQUESTS,
	       CLIENTS);
	return 0;
}
