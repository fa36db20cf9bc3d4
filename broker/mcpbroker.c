/*
 * mcpbroker: the one executable for every process.  Without -P it is the
 * parent; the parent re-executes it with -P frontend|controller|worker so
 * that each child starts from a fresh address-space layout.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "broker/mcpbroker.h"
#include "common/log.h"

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr, "usage: mcpbroker [-dnv] [-D macro=value] "
	    "[-f file]\n");
	exit(1);
}

static int
child_dispatch(const char *kind, const char *server)
{
	enum proc_kind k;

	if (proc_kind_parse(kind, &k) == -1)
		fatalx("unknown process kind \"%s\"", kind);
	switch (k) {
	case PROC_FRONTEND:
		return frontend_main();
	case PROC_CONTROLLER:
		return controller_main();
	case PROC_WORKER:
		if (server == NULL)
			fatalx("worker needs -S server");
		return worker_main(server);
	default:
		fatalx("cannot run as %s", kind);
	}
}

int
main(int argc, char *argv[])
{
	static char	 self[PATH_MAX];
	struct opts	 o;
	const char	*kind = NULL, *server = NULL;
	char		*defines[64];
	size_t		 ndefines = 0;
	ssize_t		 n;
	int		 ch;

	memset(&o, 0, sizeof(o));
	o.o_conffile = CONF_DEFAULT_PATH;
	while ((ch = getopt(argc, argv, "dD:f:nP:S:v")) != -1) {
		switch (ch) {
		case 'd':
			o.o_foreground = 1;
			break;
		case 'D':
			if (strchr(optarg, '=') == NULL ||
			    ndefines == sizeof(defines) / sizeof(defines[0]) - 1)
				usage();
			defines[ndefines++] = optarg;
			break;
		case 'f':
			o.o_conffile = optarg;
			break;
		case 'n':
			o.o_check = 1;
			break;
		case 'P':
			kind = optarg;
			break;
		case 'S':
			server = optarg;
			break;
		case 'v':
			o.o_verbose++;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	defines[ndefines] = NULL;
	o.o_defines = defines;

	log_init(o.o_foreground || o.o_check, o.o_verbose, LOG_DAEMON);
	if (kind != NULL)
		return child_dispatch(kind, server);

	if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) == -1)
		fatal("readlink /proc/self/exe");
	self[n] = '\0';
	o.o_self = self;
	return parent_main(&o);
}
