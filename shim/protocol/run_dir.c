/* The control sockets' folder: where it is, creating it privately, and the socket names in it. */
#include "run_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int fit(int k, size_t cap)
{
	return k < 0 || (size_t)k >= cap ? -1 : 0;
}

int run_dir_resolve(const char *vmmshim_run_dir, const char *xdg_runtime_dir, uid_t uid,
		    char *out, size_t cap)
{
	/* Relative paths are ignored, as the shim's configuration does: the socket must not
	 * depend on the program's working directory. */
	if (vmmshim_run_dir && vmmshim_run_dir[0] == '/')
		return fit(snprintf(out, cap, "%s", vmmshim_run_dir), cap);
	if (xdg_runtime_dir && xdg_runtime_dir[0] == '/')
		return fit(snprintf(out, cap, "%s/vmmshim", xdg_runtime_dir), cap);
	return fit(snprintf(out, cap, "/tmp/vmmshim-%u", (unsigned)uid), cap);
}

int run_dir_default(char *out, size_t cap)
{
	return run_dir_resolve(getenv("VMMSHIM_RUN_DIR"), getenv("XDG_RUNTIME_DIR"), getuid(),
			       out, cap);
}

int run_dir_check(const char *dir, const struct stat *st, uid_t owner, char *why, size_t whylen)
{
	if (!S_ISDIR(st->st_mode)) {
		snprintf(why, whylen, "%s is not a folder (a symlink or a file is refused)", dir);
		return -1;
	}
	if (st->st_uid != owner) {
		snprintf(why, whylen, "%s belongs to uid %u, not to the process (uid %u)", dir,
			 (unsigned)st->st_uid, (unsigned)owner);
		return -1;
	}
	if (st->st_mode & 077) {
		snprintf(why, whylen, "%s has mode %03o: group and others must have no access "
			 "(chmod 700 it)", dir, (unsigned)(st->st_mode & 0777));
		return -1;
	}
	return 0;
}

int run_dir_prepare(const char *dir, char *why, size_t whylen)
{
	struct stat st;

	if (mkdir(dir, 0700) && errno != EEXIST) {
		snprintf(why, whylen, "cannot create %s: %s", dir, strerror(errno));
		return -1;
	}
	if (lstat(dir, &st)) {
		snprintf(why, whylen, "cannot stat %s: %s", dir, strerror(errno));
		return -1;
	}
	return run_dir_check(dir, &st, geteuid(), why, whylen);
}

bool run_dir_trusted(const char *dir, uid_t uid)
{
	struct stat st;

	if (lstat(dir, &st) || !S_ISDIR(st.st_mode))
		return false;
	if (st.st_uid != uid && st.st_uid != 0)
		return false;
	return !(st.st_mode & 022);
}

int run_dir_socket_path(const char *dir, pid_t pid, char *out, size_t cap)
{
	struct sockaddr_un sa;
	int k = snprintf(out, cap, "%s/%ld.sock", dir, (long)pid);

	if (fit(k, cap) || (size_t)k >= sizeof(sa.sun_path))
		return -1;
	return 0;
}
