/* run_util.h: fork + exec with redirected output in a fresh temporary folder. */
#include "run_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void slurp(const char *path, char *dst, size_t max)
{
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f) {
		n = fread(dst, 1, max - 1, f);
		fclose(f);
	}
	dst[n] = '\0';
}

const char *shim_path(void)
{
	const char *p = getenv("VMMSHIM_LIB");

	return p ? p : "libvmmshim.so";
}

const char *bin_path(const char *name)
{
	static __thread char buf[4][512];
	static __thread int next;
	const char *dir = getenv("INTERPOSE_BIN");
	char *b = buf[next++ % 4];

	snprintf(b, sizeof(buf[0]), "%s/%s", dir ? dir : ".", name);
	return b;
}

static char *str_printf(const char *fmt, const char *a, const char *b)
{
	char *s = NULL;

	if (asprintf(&s, fmt, a, b) < 0)
		return strdup("VMMSHIM_TEST_OOM=1");
	return s;
}

/* environ, minus the variables we set, plus ours. */
static char **make_env(const struct run *r, const char *preload, const char *const *extra)
{
	static const char *const ours[] = { "LD_PRELOAD=", "SIMDEV_STATS=", "SIMDEV_ACL_STATS=",
					    "VMMSHIM_", "ASAN_OPTIONS=", NULL };
	const char *asan = getenv("ASAN_OPTIONS");
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	for (size_t i = 0; extra && extra[i]; i++)
		n++;
	env = calloc(n + 8, sizeof(*env));
	for (size_t i = 0; environ[i]; i++) {
		bool skip = false;

		for (size_t j = 0; ours[j]; j++)
			skip |= !strncmp(environ[i], ours[j], strlen(ours[j]));
		if (!skip)
			env[k++] = strdup(environ[i]);
	}
	/* The test's own settings first: getenv() takes the first of duplicates. */
	for (size_t i = 0; extra && extra[i]; i++)
		env[k++] = strdup(extra[i]);
	/* A sanitized build preloads a sanitized shim ahead of the program's runtime. */
	if (asan)
		env[k++] = str_printf("ASAN_OPTIONS=%s%s", asan, ":verify_asan_link_order=0");
	if (preload)
		env[k++] = str_printf("LD_PRELOAD=%s%s", preload, "");
	env[k++] = str_printf("SIMDEV_STATS=%s%s", r->dir, "/stats");
	env[k++] = str_printf("SIMDEV_ACL_STATS=%s%s", r->dir, "/stats");
	env[k++] = str_printf("VMMSHIM_RUN_DIR=%s%s", r->dir, "/run");
	env[k++] = strdup("VMMSHIM_LOG=info");
	return env;
}

struct run *run_program(const char *preload, const char *const *argv, const char *const *extra)
{
	struct run *r = calloc(1, sizeof(*r));
	char out[300], err[300], stats[300];
	int status;
	pid_t pid;

	snprintf(r->dir, sizeof(r->dir), "/tmp/vmmshim-interpose-XXXXXX");
	if (!mkdtemp(r->dir)) {
		r->status = -1;
		return r;
	}
	snprintf(out, sizeof(out), "%s/stdout", r->dir);
	snprintf(err, sizeof(err), "%s/stderr", r->dir);
	snprintf(stats, sizeof(stats), "%s/stats", r->dir);
	pid = fork();
	if (pid == 0) {
		char **env = make_env(r, preload, extra);
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (o < 0 || e < 0 || chdir(r->dir))
			_exit(126);
		dup2(o, 1);
		dup2(e, 2);
		execve(argv[0], (char *const *)argv, env);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		r->status = -1;
	else if (WIFEXITED(status))
		r->status = WEXITSTATUS(status);
	else
		r->status = 128 + WTERMSIG(status);
	slurp(out, r->out, sizeof(r->out));
	slurp(err, r->err, sizeof(r->err));
	slurp(stats, r->stats, sizeof(r->stats));
	return r;
}

long long run_stat(const struct run *r, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = r->stats; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (!strncmp(p, name, n) && p[n] == ' ')
			return atoll(p + n + 1);
	}
	return 0;
}

bool run_dir_exists(const struct run *r)
{
	char path[300];
	struct stat st;

	snprintf(path, sizeof(path), "%s/run", r->dir);
	return stat(path, &st) == 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void run_free(struct run *r)
{
	if (r && r->dir[0])
		nftw(r->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
	free(r);
}
