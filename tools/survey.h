/* Asking every control socket vmmctl may talk to one question at once (list, metrics): each
 * process within its own deadline, a few dozen at a time, so that one that hangs costs one
 * timeout, not one each. */
#ifndef VMMCTL_SURVEY_H
#define VMMCTL_SURVEY_H

#include "client.h"

typedef struct survey_item {
	client_target t;
	client_reply reply;   /* when rc is 0: an ok reply with an info record */
	client_error e;       /* when rc is not 0 */
	int rc;
} survey_item;

/* Send verb to every socket (client_list_sockets; note gets the folders refused), each answer
 * within timeout seconds. Returns how many items *out holds, sorted by pid (free with
 * survey_free), or -1 when out of memory. */
int survey_run(proto_verb verb, double timeout, void (*note)(const char *msg, void *arg),
	       void *arg, survey_item **out);
void survey_free(survey_item *items, int n);

#endif
