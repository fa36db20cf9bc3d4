#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <string.h>

#include "common/addrcheck.h"

static const unsigned char mapped[12] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
};
static const unsigned char nat64[12] = {
	0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0
};
static const unsigned char aws_v6[16] = {	/* fd00:ec2::254 */
	0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54
};

/*
 * The address as 16 bytes, an IPv4 one as ::ffff:a.b.c.d.  An IPv6
 * address that carries an IPv4 one (mapped, NAT64 64:ff9b::/96, the old
 * compatible ::a.b.c.d) is that IPv4 address: it reaches the same host.
 */
static int
canon(const struct sockaddr *sa, unsigned char out[16])
{
	const unsigned char	*a;
	static const unsigned char zero[12];

	if (sa->sa_family == AF_INET) {
		memcpy(out, mapped, 12);
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr,
		    4);
		return 0;
	}
	if (sa->sa_family != AF_INET6)
		return -1;
	a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
	memcpy(out, a, 16);
	if (memcmp(a, nat64, 12) == 0 || (memcmp(a, zero, 12) == 0 &&
	    (a[12] | a[13] | a[14]) != 0))
		memcpy(out, mapped, 12);
	return 0;
}

static const char *
v4_refused(const unsigned char *a)
{
	if (a[0] == 0)
		return "an unspecified address";
	if (a[0] == 169 && a[1] == 254)
		return a[2] == 169 && a[3] == 254 ?
		    "the cloud metadata address" : "a link-local address";
	if (a[0] == 100 && a[1] == 100 && a[2] == 100 && a[3] == 200)
		return "a cloud metadata address";
	if (a[0] >= 224)
		return "a multicast or reserved address";
	return NULL;
}

static const char *
v6_refused(const unsigned char *a)
{
	static const unsigned char zero[16];

	if (memcmp(a, zero, 16) == 0)
		return "an unspecified address";
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return "a link-local address";
	if (memcmp(a, aws_v6, 16) == 0)
		return "the cloud metadata address";
	if (a[0] == 0xff)
		return "a multicast address";
	return NULL;
}

int
addr_allow_add(struct addr_allow *aa, const char *literal)
{
	struct sockaddr_in	sin;
	struct sockaddr_in6	sin6;

	if (aa->aa_n == ADDR_ALLOW_MAX)
		return -1;
	memset(&sin, 0, sizeof(sin));
	memset(&sin6, 0, sizeof(sin6));
	sin.sin_family = AF_INET;
	sin6.sin6_family = AF_INET6;
	if (inet_pton(AF_INET, literal, &sin.sin_addr) == 1)
		return canon((struct sockaddr *)&sin, aa->aa_addr[aa->aa_n++]);
	if (inet_pton(AF_INET6, literal, &sin6.sin6_addr) == 1)
		return canon((struct sockaddr *)&sin6,
		    aa->aa_addr[aa->aa_n++]);
	return -1;
}

/* Why the canonical address a is refused, unless allow names it. */
static const char *
refused16(const unsigned char a[16], const struct addr_allow *allow)
{
	const char	*why;
	size_t		 i;

	why = memcmp(a, mapped, 12) == 0 ? v4_refused(a + 12) : v6_refused(a);
	for (i = 0; why != NULL && allow != NULL && i < allow->aa_n; i++)
		if (memcmp(a, allow->aa_addr[i], 16) == 0)
			why = NULL;
	return why;
}

const char *
addr_refused(const struct sockaddr *sa, const struct addr_allow *allow)
{
	unsigned char a[16];

	if (canon(sa, a) == -1)
		return "not an IP address";
	return refused16(a, allow);
}

const char *
addr_literal_refused(const char *s, const struct addr_allow *allow)
{
	struct addr_allow one;

	one.aa_n = 0;
	if (addr_allow_add(&one, s) == -1)
		return NULL;
	return refused16(one.aa_addr[0], allow);
}
