/* A standalone driver for fuzz_protocol.c, for compilers without libFuzzer (gcc): replays every
 * file of the corpus folders given, then feeds random mutations of them (bit flips, byte edits,
 * splices and protocol tokens) for a bounded time.
 *
 * Usage: fuzz_driver [--seconds S] [--seed N] DIR...
 * Exit 0 when the time is up without a crash (a violated property aborts). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT 8192
#define MAX_CORPUS 512

static uint8_t *corpus[MAX_CORPUS];
static size_t corpus_len[MAX_CORPUS];
static int ncorpus;
static uint64_t rng_state;

static const char *const tokens[] = {
	"vmmshim/1 ", "vmmshim/2 ", "hello", "status", "sleep", "wake", " tag=", " device=",
	" discard=", " autowake=", " timeout_ms=", "\"", "%", "%2", "%20", "%00", "%zz", "=", " ",
	"  ", "\n", "true", "false", "-1", "15", "16", "99999999999999999999", "1.5", "-", "+",
	"end", "info", "error status=\"malformed\"", "\"a b\"", "\x7f", "\xff", "\0",
};

static uint64_t rnd(void)
{
	/* xorshift64*: quick and good enough to pick mutations. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static void add(const uint8_t *d, size_t n)
{
	if (ncorpus == MAX_CORPUS || n > FUZZ_MAX_INPUT)
		return;
	corpus[ncorpus] = malloc(n ? n : 1);
	if (!corpus[ncorpus])
		return;
	memcpy(corpus[ncorpus], d, n);
	corpus_len[ncorpus++] = n;
}

static void load_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d) {
		fprintf(stderr, "fuzz_driver: cannot open %s\n", dir);
		return;
	}
	while ((de = readdir(d))) {
		char path[1024];
		uint8_t buf[FUZZ_MAX_INPUT];
		FILE *f;
		size_t n;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "rb");
		if (!f)
			continue;
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		LLVMFuzzerTestOneInput(buf, n);
		add(buf, n);
	}
	closedir(d);
}

static size_t mutate(uint8_t *b, size_t n)
{
	int edits = 1 + (int)(rnd() % 4);

	for (int e = 0; e < edits; e++) {
		size_t pos = n ? rnd() % (n + 1) : 0;

		switch (rnd() % 6) {
		case 0: /* flip a bit */
			if (n)
				b[pos % n] ^= (uint8_t)(1u << (rnd() % 8));
			break;
		case 1: /* random byte */
			if (n)
				b[pos % n] = (uint8_t)rnd();
			break;
		case 2: /* delete a run */
			if (n) {
				size_t k = 1 + rnd() % 8, at = pos % n;

				if (k > n - at)
					k = n - at;
				memmove(b + at, b + at + k, n - at - k);
				n -= k;
			}
			break;
		case 3: { /* insert a token */
			const char *t = tokens[rnd() % (sizeof(tokens) / sizeof(tokens[0]))];
			size_t k = strlen(t) ? strlen(t) : 1;

			if (n + k <= FUZZ_MAX_INPUT) {
				memmove(b + pos + k, b + pos, n - pos);
				memcpy(b + pos, t, k);
				n += k;
			}
			break;
		}
		case 4: { /* splice in part of another input */
			int o = (int)(rnd() % (uint64_t)ncorpus);
			size_t k = corpus_len[o] ? rnd() % corpus_len[o] : 0;

			if (n + k <= FUZZ_MAX_INPUT) {
				memmove(b + pos + k, b + pos, n - pos);
				memcpy(b + pos, corpus[o], k);
				n += k;
			}
			break;
		}
		default: /* truncate */
			n = pos;
			break;
		}
	}
	return n;
}

int main(int argc, char **argv)
{
	double seconds = 20;
	unsigned long long iterations = 0;
	uint8_t buf[FUZZ_MAX_INPUT];
	time_t end;

	rng_state = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull | 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			rng_state = strtoull(argv[++i], NULL, 0) | 1;
		else
			load_dir(argv[i]);
	}
	if (!ncorpus)
		add((const uint8_t *)"vmmshim/1 hello\n", 16);
	printf("fuzz_driver: %d corpus inputs replayed; seed %llu; fuzzing for %.0f s\n", ncorpus,
	       (unsigned long long)rng_state, seconds);
	fflush(stdout);
	end = time(NULL) + (time_t)seconds;
	while (time(NULL) < end) {
		for (int k = 0; k < 1000; k++) {
			int pick = (int)(rnd() % (uint64_t)ncorpus);
			size_t n = corpus_len[pick];

			memcpy(buf, corpus[pick], n);
			n = mutate(buf, n);
			LLVMFuzzerTestOneInput(buf, n);
			/* Keep a few mutants that still look like requests, to go deeper. */
			if (n && buf[n - 1] == '\n' && rnd() % 64 == 0)
				add(buf, n);
			iterations++;
		}
	}
	printf("fuzz_driver: %llu inputs, no crash\n", iterations);
	return 0;
}
