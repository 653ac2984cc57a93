/* The trust rules of trust.h. Pure: no system calls. */
#include "trust.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int refuse(char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int refuse(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return -1;
}

int trust_folder(const trust_facts *f, char *why, size_t whylen)
{
	if (!f->dir_is_dir)
		return refuse(why, whylen, "its folder is not a real folder (a symlink?)");
	if (f->dir_mode & 022)
		return refuse(why, whylen, "its folder may be written by group or others "
			      "(mode %03o)", (unsigned)(f->dir_mode & 0777));
	if (f->caller != 0 && f->dir_owner != f->caller)
		return refuse(why, whylen, "its folder belongs to uid %u, not to you (uid %u)",
			      (unsigned)f->dir_owner, (unsigned)f->caller);
	if (f->dir_named_uid >= 0 && (long)f->dir_owner != f->dir_named_uid)
		return refuse(why, whylen, "its folder is named for uid %ld but belongs to uid %u",
			      f->dir_named_uid, (unsigned)f->dir_owner);
	return 0;
}

int trust_decide(const trust_facts *f, char *why, size_t whylen)
{
	if (trust_folder(f, why, whylen))
		return -1;
	if (f->peer_uid != f->dir_owner)
		return refuse(why, whylen, "the server on it runs as uid %u, but its folder "
			      "belongs to uid %u", (unsigned)f->peer_uid, (unsigned)f->dir_owner);
	if (f->same_pidns == 1 && f->peer_pid != f->name_pid)
		return refuse(why, whylen, "the server on it is pid %ld, not pid %ld as its name "
			      "says", (long)f->peer_pid, (long)f->name_pid);
	return 0;
}

/* "/tmp/vmmshim-UID" or "/run/user/UID/vmmshim" (as run_dir_resolve makes them). */
long trust_dir_named_uid(const char *dir)
{
	const char *p = NULL, *end_want = "";
	char *end;
	long v;

	if (!strncmp(dir, "/tmp/vmmshim-", 13)) {
		p = dir + 13;
	} else if (!strncmp(dir, "/run/user/", 10)) {
		p = dir + 10;
		end_want = "/vmmshim";
	}
	if (!p || *p < '0' || *p > '9')
		return -1;
	v = strtol(p, &end, 10);
	if (strcmp(end, end_want) || v < 0)
		return -1;
	return v;
}
