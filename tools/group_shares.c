/* What the members of a group share through the program's own VMM handles (NCCL's buffers), and
 * why it stays resident while they sleep. Every member's shim keeps a duplicate of each shareable
 * descriptor its program exported or imported and lists them in status (`app_share` records:
 * numbers in that process). Two duplicates are one memory when kcmp(KCMP_FILE) says they are the
 * same open file (identity cannot come from fstat: every such descriptor is an open of the
 * driver's device file). One memory is then reported with its holders: the members that map it,
 * a member whose program still holds a descriptor of it open, and any other process of this user
 * that holds one (found by the same comparison on its descriptors). The driver frees the memory
 * only when all of them have let it go; a group sleep releases the memories all of whose holders
 * are members (group_release.c), reported here as released. */

#include <dirent.h>
#include <errno.h>
#include <linux/kcmp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli.h"
#include "group_shares.h"
#include "output.h"

static long kcmp_file(pid_t a, pid_t b, int fa, int fb)
{
	return syscall(SYS_kcmp, a, b, KCMP_FILE, fa, fb);
}

/* One member's status, asked on a thread of its own (gather). */
struct asking {
	const client_target *t;
	double timeout;
	int rc;
	client_reply r;
};

static void *ask_status(void *arg)
{
	struct asking *q = arg;
	proto_request req = { .verb = PROTO_STATUS, .device = -1 };
	client_error e;

	q->rc = client_call(q->t, &req, q->timeout, false, false, &q->r, &e);
	if (!q->rc && client_reply_error(&q->r, &e))
		q->rc = -1;
	return NULL;
}

int group_shares_take(pid_t pid, const client_reply *r, struct share *s, int k)
{
	for (int j = 0; j < r->nrecords && k < MAX_SHARES; j++) {
		const proto_record *rec = r->records[j];
		const char *role = proto_record_str(rec, "role");
		const char *fds = proto_record_str(rec, "fds");
		uint64_t v;
		bool released = false;

		proto_record_bool(rec, "released", &released);
		if (strcmp(rec->kind, "app_share") || !role || !fds || (!*fds && !released))
			continue;
		s[k] = (struct share){ .pid = pid, .exporter = !strcmp(role, "export"),
				       .memory = -1, .released = released };
		for (const char *p = fds; *p && s[k].nfds < 8; p += strcspn(p, ","), p += *p == ',')
			s[k].fds[s[k].nfds++] = atoi(p);
		proto_record_u64(rec, "handle", &s[k].handle);
		proto_record_u64(rec, "size", &s[k].size);
		s[k].program_fds = proto_record_u64(rec, "program_fds", &v) ? (long long)v : -1;
		s[k].program_fd = proto_record_u64(rec, "program_fd", &v) ? (long long)v : -1;
		s[k].kcmp_errno = proto_record_u64(rec, "kcmp_errno", &v) ? (long long)v : 0;
		k++;
	}
	return k;
}

void group_shares_status(const client_target *t, int n, const bool *sel, double timeout,
			 client_reply *r, bool *answered)
{
	static struct asking q[VMMCTL_MAX_GROUP];
	pthread_t th[VMMCTL_MAX_GROUP];
	bool started[VMMCTL_MAX_GROUP] = { false };

	for (int i = 0; i < n && i < VMMCTL_MAX_GROUP; i++) {
		answered[i] = false;
		if (sel && !sel[i])
			continue;
		q[i] = (struct asking){ .t = &t[i], .timeout = timeout };
		started[i] = !pthread_create(&th[i], NULL, ask_status, &q[i]);
	}
	for (int i = 0; i < n && i < VMMCTL_MAX_GROUP; i++) {
		if (sel && !sel[i])
			continue;
		if (started[i])
			pthread_join(th[i], NULL);
		else
			ask_status(&q[i]);
		answered[i] = !q[i].rc;
		r[i] = q[i].r;
	}
}

/* The members' app_share records, all asked at once within timeout seconds (a member that does
 * not answer in time is left out: its shares are then not named). */
static int gather(const client_target *t, int n, double timeout, struct share *s)
{
	static client_reply r[VMMCTL_MAX_GROUP];
	bool answered[VMMCTL_MAX_GROUP];
	int k = 0;

	group_shares_status(t, n, NULL, timeout, r, answered);
	for (int i = 0; i < n && i < VMMCTL_MAX_GROUP; i++) {
		if (answered[i])
			k = group_shares_take(t[i].pid, &r[i], s, k);
		client_reply_free(&r[i]);
	}
	return k;
}

static bool is_member(const client_target *t, int n, pid_t pid)
{
	for (int i = 0; i < n; i++)
		if (t[i].pid == pid)
			return true;
	return false;
}

/* The open file behind descriptor fd of pid, as stat sees it (its inode): two descriptors of
 * one open file have the same, so a descriptor whose inode no share has is not compared. */
static bool fd_inode(pid_t pid, long fd, struct stat *st)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%ld/fd/%ld", (long)pid, fd);
	return !stat(path, st);
}

struct inodes {
	dev_t dev[MAX_SHARES * 8];
	ino_t ino[MAX_SHARES * 8];
	int n;
	bool unknown;          /* a share's inode could not be read: compare every descriptor */
};

static void collect_inodes(const struct share *s, int ns, struct inodes *in)
{
	struct stat st;

	in->n = 0;
	in->unknown = false;
	for (int k = 0; k < ns; k++)
		for (int j = 0; j < s[k].nfds; j++) {
			if (!fd_inode(s[k].pid, s[k].fds[j], &st)) {
				in->unknown = true;
				continue;
			}
			in->dev[in->n] = st.st_dev;
			in->ino[in->n++] = st.st_ino;
		}
}

static bool may_be_shared(const struct inodes *in, pid_t pid, long fd)
{
	struct stat st;

	if (in->unknown || !fd_inode(pid, fd, &st))
		return true;
	for (int i = 0; i < in->n; i++)
		if (in->dev[i] == st.st_dev && in->ino[i] == st.st_ino)
			return true;
	return false;
}

void group_shares_outside(const client_target *t, int n, struct share *s, int ns,
			 struct memory *m, int nm)
{
	static struct inodes in;
	DIR *proc;
	struct dirent *e;

	if (!nm)
		return;
	collect_inodes(s, ns, &in);
	if (!(proc = opendir("/proc")))
		return;
	while ((e = readdir(proc))) {
		char path[64], *end;
		long pid = strtol(e->d_name, &end, 10);
		struct stat st;
		DIR *fdd;
		struct dirent *f;

		if (*end || end == e->d_name || pid == getpid() || is_member(t, n, (pid_t)pid))
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
		if (stat(path, &st) || st.st_uid != getuid() || !(fdd = opendir(path)))
			continue;
		while ((f = readdir(fdd))) {
			long fd = strtol(f->d_name, &end, 10);

			if (*end || end == f->d_name || !may_be_shared(&in, (pid_t)pid, fd))
				continue;
			for (int i = 0; i < nm; i++) {
				bool named = false, same = false;

				for (int k = 0; k < ns && !same; k++)
					for (int j = 0; s[k].memory == i && j < s[k].nfds && !same; j++)
						same = !kcmp_file(s[k].pid, (pid_t)pid, s[k].fds[j],
								  (int)fd);
				if (!same)
					continue;
				for (int k = 0; k < m[i].noutside; k++)
					named = named || m[i].outside[k] == (pid_t)pid;
				if (!named && m[i].noutside < MAX_OUTSIDE)
					m[i].outside[m[i].noutside++] = (pid_t)pid;
			}
		}
		closedir(fdd);
	}
	closedir(proc);
}

int group_shares_match(struct share *s, int ns, struct memory *m)
{
	int nm = 0;

	for (int i = 0; i < ns; i++) {
		for (int j = 0; j < i && s[i].memory < 0 && !s[i].released; j++)
			for (int a = 0; a < s[j].nfds && s[i].memory < 0; a++)
				for (int b = 0; b < s[i].nfds && s[i].memory < 0; b++) {
					long r = kcmp_file(s[j].pid, s[i].pid, s[j].fds[a],
							   s[i].fds[b]);

					if (r == 0)
						s[i].memory = s[j].memory;
					else if (r < 0 && !m[s[j].memory].kcmp_errno)
						m[s[j].memory].kcmp_errno = errno;
				}
		if (s[i].memory < 0) {
			m[nm] = (struct memory){ .first = i };
			s[i].memory = nm++;
		}
		m[s[i].memory].nholders++;
		if (s[i].kcmp_errno && !m[s[i].memory].kcmp_errno)
			m[s[i].memory].kcmp_errno = (int)s[i].kcmp_errno;
	}
	return nm;
}

/* Did vmmctl keep memory mi out of the release itself (its exporter's share is in kept)? */
static bool kept_out(const struct share *s, int ns, int mi, const struct share_kept *kept,
		     int nkept)
{
	for (int i = 0; i < ns; i++)
		for (int k = 0; s[i].memory == mi && s[i].exporter && k < nkept; k++)
			if (kept[k].exporter == s[i].pid && kept[k].handle == s[i].handle)
				return true;
	return false;
}

/* Why memory m (index mi) stays resident, in words. */
static void why(const struct share *s, int ns, const struct memory *m, int mi,
		const struct share_kept *kept, int nkept, char *buf, size_t cap)
{
	size_t len = 0;

	buf[0] = '\0';
	if (kept_out(s, ns, mi, kept, nkept))
		len += (size_t)snprintf(buf + len, cap - len, "too many shared handles for one "
					"sleep request (a member's request names at most %d bytes "
					"of them, about %d imports): left out",
					PROTO_APP_RELEASE_MAX - 1, (PROTO_APP_RELEASE_MAX - 1) / 48);
	if (m->kcmp_errno)
		len += (size_t)snprintf(buf + len, cap - len, "its holders cannot be matched "
					"(kcmp: %s)", strerror(m->kcmp_errno));
	for (int i = 0; i < ns && len < cap; i++)
		if (s[i].memory == mi && s[i].program_fds > 0)
			len += (size_t)snprintf(buf + len, cap - len, "%spid %d's program holds "
						"descriptor %lld of it open (the driver cannot free "
						"it)", len ? "; " : "", (int)s[i].pid,
						s[i].program_fd);
	for (int k = 0; k < m->noutside && len < cap; k++)
		len += (size_t)snprintf(buf + len, cap - len, "%spid %d, outside the group, holds "
					"it", len ? "; " : "", (int)m->outside[k]);
	if (!len)
		snprintf(buf, cap, "not every holder let it go in this sleep (one that was asleep "
			 "already, or that exports memory the group releases, keeps its mapping)");
}

void group_shares_report(const client_target *t, int n, double timeout,
			 const struct share_kept *kept, int nkept, bool json, FILE *out)
{
	static struct share s[MAX_SHARES];
	static struct memory m[MAX_SHARES];
	int ns = gather(t, n, timeout, s), nm = group_shares_match(s, ns, m);
	char reason[1024], b[32];
	bool any = false;

	group_shares_outside(t, n, s, ns, m, nm);
	if (json)
		fputc('[', out);
	for (int i = 0; i < nm; i++) {
		const struct share *ex = &s[m[i].first];
		uint64_t size = 0;

		if (ex->released) {   /* released with the group: its importers are not matched */
			if (!ex->exporter)
				continue;
			if (json)
				fprintf(out, "%s{\"size\": %llu, \"exporter\": %d, \"holders\": [], "
					"\"outside\": [], \"resident\": false, \"why\": \"released "
					"by the group sleep; re-shared at wake\"}", any ? ", " : "",
					(unsigned long long)ex->size, (int)ex->pid);
			else
				fprintf(out, "shared %s (exported by pid %d): released by the group "
					"sleep; re-shared at wake\n",
					out_bytes(ex->size, b, sizeof(b)), (int)ex->pid);
			any = true;
			continue;
		}
		for (int k = 0; k < ns; k++)   /* the exporter knows the size; importers what they map */
			if (s[k].memory == i && (s[k].exporter || s[k].size > size))
				size = s[k].exporter ? s[k].size : size > s[k].size ? size : s[k].size;
		for (int k = 0; k < ns; k++)
			if (s[k].memory == i && s[k].exporter)
				ex = &s[k];
		why(s, ns, &m[i], i, kept, nkept, reason, sizeof(reason));
		if (json) {
			fprintf(out, "%s{\"size\": %llu, \"exporter\": %d, \"holders\": [", any ? ", " : "",
				(unsigned long long)size, ex->exporter ? (int)ex->pid : -1);
			for (int k = 0, c = 0; k < ns; k++)
				if (s[k].memory == i)
					fprintf(out, "%s{\"pid\": %d, \"handle\": %llu, \"role\": \"%s\", "
						"\"program_fds\": %lld}", c++ ? ", " : "", (int)s[k].pid,
						(unsigned long long)s[k].handle,
						s[k].exporter ? "export" : "import", s[k].program_fds);
			fputs("], \"outside\": [", out);
			for (int k = 0; k < m[i].noutside; k++)
				fprintf(out, "%s%d", k ? ", " : "", (int)m[i].outside[k]);
			fputs("], \"resident\": true, \"why\": ", out);
			out_json_string(out, reason);
			fputc('}', out);
			any = true;
			continue;
		}
		fprintf(out, "shared %s", out_bytes(size, b, sizeof(b)));
		if (ex->exporter)
			fprintf(out, " (exported by pid %d)", (int)ex->pid);
		fputs(", held by pid", out);
		for (int k = 0, c = 0; k < ns; k++)
			if (s[k].memory == i)
				fprintf(out, "%s%d", c++ ? "," : " ", (int)s[k].pid);
		fprintf(out, ": stays resident: %s\n", reason);
		any = true;
	}
	if (json)
		fputc(']', out);
}
