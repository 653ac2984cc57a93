/* `vmmctl metrics`: the survey's replies as Prometheus text exposition (format 0.0.4), for a
 * scraper or node-exporter's textfile collector. */
#ifndef VMMCTL_METRICS_H
#define VMMCTL_METRICS_H

#include <stdio.h>

#include "survey.h"

/* Every metric family of the processes that answered (items with rc 0); skipped: those that
 * did not (a gauge of its own). labels: nlabels "NAME=VALUE" (checked by cli.c) added to every
 * sample. */
void metrics_print(FILE *f, const survey_item *items, int n, const char *const *labels,
		   int nlabels);

/* Write what print() writes into path atomically: a temporary file beside it (not ending in
 * .prom, so that the collector never reads it half-written), flushed, then renamed over path.
 * 0, or -1 with why (path unchanged). */
int metrics_write_file(const char *path, void (*print)(FILE *f, void *arg), void *arg, char *why,
		       size_t whylen);

#endif
