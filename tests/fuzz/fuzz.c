#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/log.h"
#include "tests/fuzz/fuzz.h"

static void
drop_line(int priority, const char *line)
{
	(void)priority;
	(void)line;
}

void
fuzz_log_quiet(void)
{
	log_init(0, 2, LOG_DAEMON);
	log_set_sink(drop_line);
}

char *
fuzz_strndup(const uint8_t *data, size_t len)
{
	char *s;

	if ((s = malloc(len + 1)) == NULL)
		abort();
	memcpy(s, data, len);
	s[len] = '\0';
	return s;
}

uint8_t
fuzz_take(const uint8_t **data, size_t *len)
{
	uint8_t b;

	if (*len == 0)
		return 0;
	b = **data;
	(*data)++;
	(*len)--;
	return b;
}
