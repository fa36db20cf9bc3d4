/*
 * JWT bearer tokens (broker/jwt.c) against a fixed JWKS with one key of
 * each supported kind, and JWKS documents themselves.  A forger cannot
 * sign, so the claims are reached two ways: tokens taken as they come,
 * and header and claims that the target signs itself with the HS256 key.
 *
 * What must hold: a refusal never repeats a part of the token, and an
 * acceptance names a user.
 *
 * Input: [mode] then, by mode % 3: 0 a token; 1 a JWKS document;
 * 2 header JSON "\n" claims JSON, signed here.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "broker/config.h"
#include "broker/controller_store.h"
#include "broker/jwt.h"
#include "tests/fuzz/fuzz.h"

#define NOW		((time_t)1900000000)

/* The HMAC key is bytes 0..31; the RSA and EC keys are public halves. */
static const unsigned char hmac_key[32] = {
	0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
	16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
};

static const char jwks[] = "{\"keys\":["
    "{\"kty\":\"oct\",\"kid\":\"h\",\"alg\":\"HS256\","
    "\"k\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\"},"
    "{\"kty\":\"RSA\",\"kid\":\"r\",\"alg\":\"RS256\",\"use\":\"sig\","
    "\"e\":\"AQAB\",\"n\":\"1KAIAMYUg-9JHjaLfCOKfF3m8oplZz4XRDnRR8vslNUMGg"
    "IyI3XIC0Vxncl6A_BCf1kyHrn17KEeNKd-32a3CWC21oWkCt13WQ7wB2a-N4unUqeqqfC"
    "xbPxwNsTat5apz3blXbv1xe3i4mOetUljZsHZN8FelVxapdfLfqRDdVbSEH7_QiJ6xGr8"
    "A6L3NgyIfOAbTGPVocLEPe91z0j2xUEArMN1STvWwDYoEFEQo0C0hRaWsPgUsYhq1wf-p"
    "lUGAanNVbJ1zD-V9FdD74yBGoVqAk1gNZap-OfipRyncnC0L1QCabf2F9m1JFjBgcpDsh"
    "YB7V8UT0rQOb9lZgAJkw\"},"
    "{\"kty\":\"EC\",\"kid\":\"e\",\"crv\":\"P-256\",\"alg\":\"ES256\","
    "\"x\":\"D_7Sc-FH0e9RgYvaELxGtn1H7PtexQMO9dCrCMLlwpo\","
    "\"y\":\"BPF-mt4bBW_gGCMv9PYFwsmMrqbQKVmNQa4CUsqXMvg\"}]}";

static struct jwt_conf conf = {
	.jw_issuer = "https://idp.example.test",
	.jw_audience = "mcpbroker",
	.jw_roles_claim = "roles",
	.jw_tenant_claim = "tenant",
	.jw_user_claim = "sub",
};

static struct jwt_keys	*keys;

static char *
b64url(const unsigned char *p, size_t len, char *o)
{
	static const char abc[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	uint32_t	v;
	size_t		i;
	int		k;

	for (i = 0; i < len; i += 3) {
		v = (uint32_t)p[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < len)
			v |= p[i + 2];
		for (k = 0; k < 4 && (k < 2 || i + k <= len); k++)
			*o++ = abc[(v >> (18 - 6 * k)) & 63];
	}
	*o = '\0';
	return o;
}

/* No part of the token may come back in the reason. */
static void
check_why(const char *token, const char *why)
{
	const char	*p = token, *dot;
	char		 part[JWT_TOKEN_MAX + 1];
	size_t		 n;

	for (;;) {
		dot = strchr(p, '.');
		n = dot != NULL ? (size_t)(dot - p) : strlen(p);
		if (n >= 8 && n < sizeof(part)) {
			memcpy(part, p, n);
			part[n] = '\0';
			if (strstr(why, part) != NULL)
				abort();
		}
		if (dot == NULL)
			break;
		p = dot + 1;
	}
}

static void
verify(const char *token)
{
	struct store_user	u;
	char			why[256];

	memset(why, 0, sizeof(why));
	if (jwt_verify(keys, &conf, token, NOW, &u, why, sizeof(why)) == 0) {
		if (u.su_name[0] == '\0')
			abort();
		return;
	}
	if (why[0] == '\0' || u.su_name[0] != '\0')
		abort();
	check_why(token, why);
}

/* header "\n" claims, encoded and signed with the HMAC key. */
static void
sign_and_verify(const uint8_t *data, size_t size)
{
	const uint8_t	*nl;
	unsigned char	 mac[EVP_MAX_MD_SIZE];
	unsigned int	 maclen;
	size_t		 hlen;
	char		*token, *o;

	if ((nl = memchr(data, '\n', size)) == NULL)
		return;
	hlen = nl - data;
	if ((token = malloc((size + 32) * 4 / 3 + 64)) == NULL)
		abort();
	o = b64url(data, hlen, token);
	*o++ = '.';
	o = b64url(nl + 1, size - hlen - 1, o);
	if (HMAC(EVP_sha256(), hmac_key, sizeof(hmac_key),
	    (unsigned char *)token, (size_t)(o - token), mac, &maclen) == NULL)
		abort();
	*o++ = '.';
	b64url(mac, maclen, o);
	verify(token);
	free(token);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char why[256];

	(void)argc;
	(void)argv;
	fuzz_log_quiet();
	if ((keys = jwt_keys_parse(jwks, why, sizeof(why))) == NULL ||
	    jwt_keys_count(keys) != 3) {
		fprintf(stderr, "fixed JWKS refused: %s\n", keys ? "" : why);
		abort();
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jwt_keys	*ks;
	char		 why[256];
	char		*s;

	switch (fuzz_take(&data, &size) % 3) {
	case 0:
		s = fuzz_strndup(data, size);
		verify(s);
		free(s);
		break;
	case 1:
		s = fuzz_strndup(data, size);
		why[0] = '\0';
		if ((ks = jwt_keys_parse(s, why, sizeof(why))) != NULL) {
			if (jwt_keys_count(ks) == 0)
				abort();
			jwt_keys_free(ks);
		} else if (why[0] == '\0')
			abort();
		free(s);
		break;
	default:
		sign_and_verify(data, size);
		break;
	}
	return 0;
}
