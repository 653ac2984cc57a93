/* The soaks' command line and epochs (soak_run.h). */
#include "soak_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static bool usage(const char *name, int procs_max)
{
	fprintf(stderr, "usage: %s [--seconds S] [--seed N] [--threads T]%s\n"
		"  --seconds at least 5, --threads 1 to 16", name,
		procs_max > 0 ? " [--procs P] [--bystanders B]" : "");
	if (procs_max > 0)
		fprintf(stderr, ", --procs 2 to %d, --bystanders 0 to 4", procs_max);
	fputc('\n', stderr);
	return false;
}

bool soak_args_parse(int argc, char **argv, const char *name, int procs_max,
		     struct soak_args *a)
{
	a->seed = (unsigned long long)time(NULL) ^ (unsigned long long)getpid();
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			a->seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			a->seed = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			a->threads = atoi(argv[++i]);
		else if (procs_max > 0 && !strcmp(argv[i], "--procs") && i + 1 < argc)
			a->procs = atoi(argv[++i]);
		else if (procs_max > 0 && !strcmp(argv[i], "--bystanders") && i + 1 < argc)
			a->bystanders = atoi(argv[++i]);
		else
			return usage(name, procs_max);
	}
	if (a->seconds < 5 || a->threads < 1 || a->threads > 16 ||
	    (procs_max > 0 && (a->procs < 2 || a->procs > procs_max || a->bystanders < 0 ||
				a->bystanders > 4)))
		return usage(name, procs_max);
	return true;
}

void soak_run_epochs(double start_s, double seconds, double epoch_s,
		     void (*epoch)(double secs))
{
	while (now_s() - start_s < seconds - epoch_s * 0.5) {
		double left = seconds - (now_s() - start_s);

		epoch(left < epoch_s * 1.5 ? left * 0.7 : epoch_s);
	}
}

static char kept_dir[64];

const char *soak_keep_log(const struct target *t, const char *label)
{
	char *dir = kept_dir;
	char path[256], buf[65536];
	FILE *in, *out;
	size_t n;
	bool ok = true;

	if (!dir[0]) {
		snprintf(dir, sizeof(kept_dir), "/tmp/vmmshim-soak-logs-XXXXXX");
		if (!mkdtemp(dir)) {
			dir[0] = 0;
			return NULL;
		}
	}
	snprintf(path, sizeof(path), "%s/%s-%ld.log", dir, label, (long)t->pid);
	in = fopen(t->err_path, "r");
	out = in ? fopen(path, "w") : NULL;
	while (out && (n = fread(buf, 1, sizeof(buf), in)) > 0)
		ok = ok && fwrite(buf, 1, n, out) == n;
	ok = ok && in && out;
	if (in)
		fclose(in);
	if (out && fclose(out))
		ok = false;
	return ok ? dir : NULL;
}

bool soak_keeping_all_logs(void)
{
	return getenv("SOAK_KEEP_LOGS") != NULL;
}

void soak_drop_kept_logs(void)
{
	char cmd[128];

	if (!kept_dir[0] || soak_keeping_all_logs())
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", kept_dir);
	if (system(cmd))
		fprintf(stderr, "soak: could not remove %s\n", kept_dir);
	kept_dir[0] = 0;
}
