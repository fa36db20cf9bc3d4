/*
 * Addresses the broker does not connect to unless a server or provider
 * block says allow-address: those no MCP server or LLM provider has reason
 * to live at, and those where cloud metadata services hand out the
 * instance's credentials to anyone who asks.  Loopback and private ranges
 * (RFC 1918, unique local IPv6) stay allowed: on-premises servers and a
 * local Ollama live there, and the administrator who names them means it.
 */
#ifndef MCPBROKER_ADDRCHECK_H
#define MCPBROKER_ADDRCHECK_H

#include <sys/socket.h>

#include <stddef.h>
#include <stdint.h>

#define ADDR_ALLOW_MAX	16	/* allow-address literals per block */

struct addr_allow {
	size_t		aa_n;
	unsigned char	aa_addr[ADDR_ALLOW_MAX][16];	/* IPv6, or mapped */
};

/* 0 and the literal added, or -1 (not an IP address, or too many). */
int		 addr_allow_add(struct addr_allow *, const char *literal);
/*
 * NULL if the broker may connect to sa, else why not ("a link-local
 * address"); allow (may be NULL) lifts the refusal for its addresses.
 */
const char	*addr_refused(const struct sockaddr *sa,
		    const struct addr_allow *allow);
/* The same for an IP literal; NULL also when s is not one (a name). */
const char	*addr_literal_refused(const char *s,
		    const struct addr_allow *allow);

#endif
