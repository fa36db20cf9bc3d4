/*
 * JWT verification against keys made here, at run time, with OpenSSL: an
 * HMAC secret, RSA 2048 and EC P-256.  Every token is signed in the test,
 * so each case changes one thing of an otherwise valid token and says what
 * must come of it.  No refusal may repeat any part of the token.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "broker/config.h"
#include "broker/controller_store.h"
#include "broker/jwt.h"

#define NOW		((time_t)1900000000)
#define ISS		"https://idp.example.test"
#define AUD		"mcpbroker"

enum alg { HS, RS, ES };

static struct {
	unsigned char	 hmac[32];
	EVP_PKEY	*rsa;
	EVP_PKEY	*ec;
	char		*jwks;		/* all three, kids "h", "r", "e" */
	struct jwt_keys	*keys;
} k;

static struct jwt_conf conf = {
	.jw_issuer = ISS,
	.jw_audience = AUD,
	.jw_roles_claim = "roles",
	.jw_tenant_claim = "tenant",
	.jw_user_claim = "sub",
};

/* Encoding, signing */

static char *
b64url(const unsigned char *p, size_t len)
{
	static const char abc[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	char		*out = malloc(len * 4 / 3 + 4), *o = out;
	uint32_t	 v;
	size_t		 i;

	assert_non_null(out);
	for (i = 0; i + 2 < len; i += 3) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		*o++ = abc[v >> 18];
		*o++ = abc[(v >> 12) & 63];
		*o++ = abc[(v >> 6) & 63];
		*o++ = abc[v & 63];
	}
	if (len - i == 1) {
		v = (uint32_t)p[i] << 16;
		*o++ = abc[v >> 18];
		*o++ = abc[(v >> 12) & 63];
	} else if (len - i == 2) {
		v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
		*o++ = abc[v >> 18];
		*o++ = abc[(v >> 12) & 63];
		*o++ = abc[(v >> 6) & 63];
	}
	*o = '\0';
	return out;
}

static char *
b64url_str(const char *s)
{
	return b64url((const unsigned char *)s, strlen(s));
}

static char *
bn_b64url(const BIGNUM *bn, int pad)
{
	unsigned char	buf[1024];
	int		len = pad > 0 ? pad : BN_num_bytes(bn);

	assert_true(len <= (int)sizeof(buf));
	assert_int_equal(BN_bn2binpad(bn, buf, len), len);
	return b64url(buf, (size_t)len);
}

/* The raw signature bytes of input with the key of alg. */
static unsigned char *
sign_raw(enum alg a, const char *input, size_t *siglen, int der)
{
	unsigned char	*sig, *p;
	EVP_MD_CTX	*md;
	ECDSA_SIG	*es;
	const BIGNUM	*r, *s;
	size_t		 len;

	if (a == HS) {
		unsigned int n = 0;

		assert_non_null(sig = malloc(32));
		assert_non_null(HMAC(EVP_sha256(), k.hmac, sizeof(k.hmac),
		    (const unsigned char *)input, strlen(input), sig, &n));
		*siglen = n;
		return sig;
	}
	assert_non_null(md = EVP_MD_CTX_new());
	assert_int_equal(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL,
	    a == RS ? k.rsa : k.ec), 1);
	assert_int_equal(EVP_DigestSign(md, NULL, &len,
	    (const unsigned char *)input, strlen(input)), 1);
	assert_non_null(sig = malloc(len));
	assert_int_equal(EVP_DigestSign(md, sig, &len,
	    (const unsigned char *)input, strlen(input)), 1);
	EVP_MD_CTX_free(md);
	if (a == RS || der) {
		*siglen = len;
		return sig;
	}
	/* DER to the JWS form, r || s */
	p = sig;
	assert_non_null(es = d2i_ECDSA_SIG(NULL, (const unsigned char **)&p,
	    (long)len));
	ECDSA_SIG_get0(es, &r, &s);
	assert_non_null(p = malloc(64));
	assert_int_equal(BN_bn2binpad(r, p, 32), 32);
	assert_int_equal(BN_bn2binpad(s, p + 32, 32), 32);
	ECDSA_SIG_free(es);
	free(sig);
	*siglen = 64;
	return p;
}

static char *
join(const char *h, const char *p, const char *s)
{
	char	*t;

	assert_true(asprintf(&t, "%s.%s%s%s", h, p, s != NULL ? "." : "",
	    s != NULL ? s : "") != -1);
	return t;
}

/* header and payload as JSON text; signed with the key of alg. */
static char *
token_ex(enum alg a, const char *header, const char *payload, int der)
{
	char		*h = b64url_str(header), *p = b64url_str(payload);
	char		*in = join(h, p, NULL), *s, *t;
	unsigned char	*sig;
	size_t		 siglen;

	sig = sign_raw(a, in, &siglen, der);
	s = b64url(sig, siglen);
	t = join(h, p, s);
	free(h);
	free(p);
	free(in);
	free(sig);
	free(s);
	return t;
}

static char *
token(enum alg a, const char *header, const char *payload)
{
	return token_ex(a, header, payload, 0);
}

/* Claims with exp an hour ahead, and extra members after them. */
static char *
claims(const char *extra)
{
	char	*c;

	assert_true(asprintf(&c, "{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\","
	    "\"sub\":\"alice\",\"exp\":%lld%s%s}", (long long)NOW + 3600,
	    *extra != '\0' ? "," : "", extra) != -1);
	return c;
}

/* Checking */

static void
accept(const char *tok, const char *name, const char *tenant,
    const char *roles)
{
	struct store_user	u;
	char			why[256] = "";

	if (jwt_verify(k.keys, &conf, tok, NOW, &u, why, sizeof(why)) != 0)
		fail_msg("refused: %s", why);
	assert_string_equal(u.su_name, name);
	assert_string_equal(u.su_tenant, tenant);
	assert_string_equal(u.su_roles, roles);
}

static void
refuse_keys(const struct jwt_keys *keys, const char *tok, const char *want)
{
	struct store_user	u;
	char			why[256] = "";
	const char		*dot;

	memset(&u, 'x', sizeof(u));
	if (jwt_verify(keys, &conf, tok, NOW, &u, why, sizeof(why)) == 0)
		fail_msg("accepted, wanted: %s", want);
	if (strstr(why, want) == NULL)
		fail_msg("why \"%s\", wanted \"%s\"", why, want);
	/* nothing of the token in the reason, and no identity left behind */
	for (dot = tok; dot != NULL && *dot != '\0'; dot = strchr(dot, '.')) {
		char piece[9];

		if (*dot == '.')
			dot++;
		snprintf(piece, sizeof(piece), "%s", dot);
		if (strlen(piece) == 8)
			assert_null(strstr(why, piece));
	}
	assert_string_equal(u.su_name, "");
	assert_string_equal(u.su_roles, "");
}

static void
refuse(const char *tok, const char *want)
{
	refuse_keys(k.keys, tok, want);
}

/* Sign, check, free: one line per case. */
static void
refuse_signed(enum alg a, const char *header, const char *payload,
    const char *want)
{
	char *t = token(a, header, payload);

	refuse(t, want);
	free(t);
}

static void
refuse_claims(const char *extra_or_full, int full, const char *want)
{
	char *c = full ? strdup(extra_or_full) : claims(extra_or_full);

	refuse_signed(HS, "{\"alg\":\"HS256\",\"kid\":\"h\"}", c, want);
	free(c);
}

static void
accept_claims(const char *extra, const char *name, const char *tenant,
    const char *roles)
{
	char *c = claims(extra), *t;

	t = token(ES, "{\"alg\":\"ES256\"}", c);
	accept(t, name, tenant, roles);
	free(t);
	free(c);
}

/* Keys */

static char *
jwk_rsa(const char *kid, EVP_PKEY *pk, const char *extra)
{
	BIGNUM	*n = NULL, *e = NULL;
	char	*nb, *eb, *j;

	assert_int_equal(EVP_PKEY_get_bn_param(pk, OSSL_PKEY_PARAM_RSA_N, &n),
	    1);
	assert_int_equal(EVP_PKEY_get_bn_param(pk, OSSL_PKEY_PARAM_RSA_E, &e),
	    1);
	nb = bn_b64url(n, 0);
	eb = bn_b64url(e, 0);
	assert_true(asprintf(&j, "{\"kty\":\"RSA\",\"kid\":\"%s\",\"n\":\"%s\","
	    "\"e\":\"%s\"%s}", kid, nb, eb, extra) != -1);
	BN_free(n);
	BN_free(e);
	free(nb);
	free(eb);
	return j;
}

static char *
jwk_ec(const char *kid, EVP_PKEY *pk, const char *extra)
{
	BIGNUM	*x = NULL, *y = NULL;
	char	*xb, *yb, *j;

	assert_int_equal(EVP_PKEY_get_bn_param(pk, OSSL_PKEY_PARAM_EC_PUB_X,
	    &x), 1);
	assert_int_equal(EVP_PKEY_get_bn_param(pk, OSSL_PKEY_PARAM_EC_PUB_Y,
	    &y), 1);
	xb = bn_b64url(x, 32);
	yb = bn_b64url(y, 32);
	assert_true(asprintf(&j, "{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":"
	    "\"%s\",\"x\":\"%s\",\"y\":\"%s\"%s}", kid, xb, yb, extra) != -1);
	BN_free(x);
	BN_free(y);
	free(xb);
	free(yb);
	return j;
}

static char *
jwk_oct(const char *kid, const unsigned char *key, size_t len)
{
	char	*kb = b64url(key, len), *j;

	assert_true(asprintf(&j, "{\"kty\":\"oct\",\"kid\":\"%s\",\"k\":"
	    "\"%s\"}", kid, kb) != -1);
	free(kb);
	return j;
}

static struct jwt_keys *
keys_of(const char *jwks, char *why, size_t whylen)
{
	why[0] = '\0';
	return jwt_keys_parse(jwks, why, whylen);
}

static int
setup(void **state)
{
	char	*h, *r, *e, why[256];

	(void)state;
	if (RAND_bytes(k.hmac, sizeof(k.hmac)) != 1 ||
	    (k.rsa = EVP_RSA_gen(2048)) == NULL ||
	    (k.ec = EVP_EC_gen("P-256")) == NULL)
		return -1;
	h = jwk_oct("h", k.hmac, sizeof(k.hmac));
	r = jwk_rsa("r", k.rsa, ",\"alg\":\"RS256\",\"use\":\"sig\"");
	e = jwk_ec("e", k.ec, "");
	if (asprintf(&k.jwks, "{\"keys\":[%s,%s,%s]}", h, r, e) == -1)
		return -1;
	free(h);
	free(r);
	free(e);
	if ((k.keys = jwt_keys_parse(k.jwks, why, sizeof(why))) == NULL) {
		fprintf(stderr, "jwks: %s\n", why);
		return -1;
	}
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	jwt_keys_free(k.keys);
	free(k.jwks);
	EVP_PKEY_free(k.rsa);
	EVP_PKEY_free(k.ec);
	return 0;
}

/* Valid tokens */

static void
test_valid(void **state)
{
	char	*c, *t;

	(void)state;
	assert_int_equal(jwt_keys_count(k.keys), 3);
	c = claims("\"roles\":[\"analyst\",\"ops\"],\"tenant\":\"acme\"");
	t = token(HS, "{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"h\"}", c);
	accept(t, "alice", "acme", "analyst,ops");
	free(t);
	t = token(RS, "{\"alg\":\"RS256\",\"kid\":\"r\"}", c);
	accept(t, "alice", "acme", "analyst,ops");
	free(t);
	t = token(ES, "{\"alg\":\"ES256\",\"kid\":\"e\"}", c);
	accept(t, "alice", "acme", "analyst,ops");
	free(t);
	/* without a kid, the keys of the token's algorithm are tried */
	t = token(HS, "{\"alg\":\"HS256\"}", c);
	accept(t, "alice", "acme", "analyst,ops");
	free(t);
	t = token(RS, "{\"alg\":\"RS256\"}", c);
	accept(t, "alice", "acme", "analyst,ops");
	free(t);
	t = token(ES, "{\"alg\":\"ES256\"}", c);
	accept(t, "alice", "acme", "analyst,ops");
	free(t);
	free(c);
}

/* Time */

static void
test_times(void **state)
{
	char	 extra[128], *c, *t;

	(void)state;
	/* exp: refused from exp + 60 s on */
	snprintf(extra, sizeof(extra), "{\"iss\":\"" ISS "\",\"aud\":\"" AUD
	    "\",\"sub\":\"a\",\"exp\":%lld}", (long long)NOW - 61);
	refuse_claims(extra, 1, "the token has expired");
	snprintf(extra, sizeof(extra), "{\"iss\":\"" ISS "\",\"aud\":\"" AUD
	    "\",\"sub\":\"a\",\"exp\":%lld}", (long long)NOW - 60);
	refuse_claims(extra, 1, "the token has expired");
	snprintf(extra, sizeof(extra), "{\"iss\":\"" ISS "\",\"aud\":\"" AUD
	    "\",\"sub\":\"a\",\"exp\":%lld}", (long long)NOW - 59);
	c = strdup(extra);
	t = token(HS, "{\"alg\":\"HS256\"}", c);
	accept(t, "a", "default", "");
	free(t);
	free(c);
	/* fractional NumericDate */
	snprintf(extra, sizeof(extra), "{\"iss\":\"" ISS "\",\"aud\":\"" AUD
	    "\",\"sub\":\"a\",\"exp\":%lld.5}", (long long)NOW + 10);
	c = strdup(extra);
	t = token(HS, "{\"alg\":\"HS256\"}", c);
	accept(t, "a", "default", "");
	free(t);
	free(c);
	/* nbf and iat in the future, beyond and within the skew */
	snprintf(extra, sizeof(extra), "\"nbf\":%lld", (long long)NOW + 61);
	refuse_claims(extra, 0, "the token is not valid yet");
	snprintf(extra, sizeof(extra), "\"nbf\":%lld", (long long)NOW + 59);
	accept_claims(extra, "alice", "default", "");
	snprintf(extra, sizeof(extra), "\"iat\":%lld", (long long)NOW + 120);
	refuse_claims(extra, 0, "the token was issued in the future");
	snprintf(extra, sizeof(extra), "\"iat\":%lld,\"nbf\":%lld",
	    (long long)NOW - 10, (long long)NOW - 10);
	accept_claims(extra, "alice", "default", "");
	/* exp is required, and a number */
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"sub\":\"a\"}",
	    1, "the token has no valid \"exp\"");
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"sub\":\"a\","
	    "\"exp\":\"4000000000\"}", 1, "the token has no valid \"exp\"");
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"sub\":\"a\","
	    "\"exp\":true}", 1, "the token has no valid \"exp\"");
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"sub\":\"a\","
	    "\"exp\":null}", 1, "the token has no valid \"exp\"");
	refuse_claims("\"nbf\":\"0\"", 0, "\"nbf\" is not a number");
	/* huge values neither overflow nor wrap */
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"sub\":\"a\","
	    "\"exp\":-9223372036854775808}", 1, "the token has expired");
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"sub\":\"a\","
	    "\"exp\":-1e300}", 1, "the token has expired");
	refuse_claims("\"nbf\":1e300", 0, "the token is not valid yet");
	refuse_claims("\"nbf\":18446744073709551615", 0,
	    "the token is not valid yet");
}

/* Issuer and audience */

static void
test_iss_aud(void **state)
{
	char	exp[32];
	char	c[512];

	(void)state;
	snprintf(exp, sizeof(exp), "%lld", (long long)NOW + 3600);
#define CL(iss, aud) (snprintf(c, sizeof(c), "{%s%s\"sub\":\"a\","	\
	    "\"exp\":%s}", iss, aud, exp), c)
	refuse_claims(CL("\"iss\":\"https://evil.test\",", "\"aud\":\"" AUD
	    "\","), 1, "the token's issuer is not accepted");
	refuse_claims(CL("", "\"aud\":\"" AUD "\","), 1,
	    "the token's issuer is not accepted");
	refuse_claims(CL("\"iss\":[\"" ISS "\"],", "\"aud\":\"" AUD "\","), 1,
	    "the token's issuer is not accepted");
	refuse_claims(CL("\"iss\":\"" ISS "\\u0000x\",", "\"aud\":\"" AUD
	    "\","), 1, "the token's issuer is not accepted");
	refuse_claims(CL("\"iss\":\"" ISS "\",", "\"aud\":\"other\","), 1,
	    "the token is not meant for this audience");
	refuse_claims(CL("\"iss\":\"" ISS "\",", "\"aud\":\"" AUD "x\","), 1,
	    "the token is not meant for this audience");
	refuse_claims(CL("\"iss\":\"" ISS "\",", "\"aud\":\"" AUD
	    "\\u0000\","), 1, "the token is not meant for this audience");
	refuse_claims(CL("\"iss\":\"" ISS "\",", ""), 1,
	    "the token is not meant for this audience");
	refuse_claims(CL("\"iss\":\"" ISS "\",", "\"aud\":[\"a\",\"b\"],"), 1,
	    "the token is not meant for this audience");
	refuse_claims(CL("\"iss\":\"" ISS "\",", "\"aud\":[],"), 1,
	    "the token is not meant for this audience");
	refuse_claims(CL("\"iss\":\"" ISS "\",", "\"aud\":[\"" AUD "\",7],"),
	    1, "the token is not meant for this audience");
	refuse_claims(CL("\"iss\":\"" ISS "\",", "\"aud\":{\"" AUD "\":1},"),
	    1, "the token is not meant for this audience");
	{
		char	*t = token(HS, "{\"alg\":\"HS256\"}",
			    CL("\"iss\":\"" ISS "\",", "\"aud\":[\"x\",\"" AUD
			    "\"],"));

		accept(t, "a", "default", "");
		free(t);
	}
#undef CL
}

/* Algorithms and keys */

static void
test_alg_none_and_others(void **state)
{
	static const char *const algs[] = { "none", "None", "NONE", "HS384",
	    "HS512", "RS384", "RS512", "PS256", "ES384", "ES512", "EdDSA",
	    "hs256", "" };
	char	*c = claims(""), *h, *p, *t, hdr[64];
	size_t	 i;

	(void)state;
	/* alg none: no signature at all, or an empty one */
	h = b64url_str("{\"alg\":\"none\"}");
	p = b64url_str(c);
	t = join(h, p, "");
	refuse(t, "not a signed JWT");
	free(t);
	t = join(h, p, NULL);
	refuse(t, "not a signed JWT");
	free(t);
	/* alg none with a signature that would verify as HS256 */
	t = token(HS, "{\"alg\":\"none\"}", c);
	refuse(t, "the token's algorithm is not accepted");
	free(t);
	free(h);
	free(p);
	for (i = 0; i < sizeof(algs) / sizeof(algs[0]); i++) {
		snprintf(hdr, sizeof(hdr), "{\"alg\":\"%s\"}", algs[i]);
		refuse_signed(HS, hdr, c, "the token's algorithm is not "
		    "accepted");
	}
	refuse_signed(HS, "{\"typ\":\"JWT\"}", c, "has no \"alg\"");
	refuse_signed(HS, "{\"alg\":256}", c, "has no \"alg\"");
	refuse_signed(HS, "{\"alg\":[\"HS256\"]}", c, "has no \"alg\"");
	/* crit: an extension we cannot know must not be ignored */
	refuse_signed(HS, "{\"alg\":\"HS256\",\"crit\":[\"exp\"],\"exp\":1}",
	    c, "\"crit\"");
	refuse_signed(HS, "{\"alg\":\"HS256\",\"b64\":false,\"crit\":"
	    "[\"b64\"]}", c, "\"crit\"");
	/* a header that is not an object */
	refuse_signed(HS, "[\"HS256\"]", c, "header is not a JSON object");
	refuse_signed(HS, "{\"alg\":\"HS256\"}{}", c,
	    "header is not a JSON object");
	refuse_signed(HS, "{\"alg\":\"HS256\",}", c,
	    "header is not a JSON object");
	free(c);
}

/*
 * The classic confusion: the verifier is given the RSA public key, and an
 * HS256 token is "signed" with that public key's bytes as the HMAC secret.
 */
static void
test_hs_rs_confusion(void **state)
{
	char		*c = claims(""), *h, *p, *in, *s, *t, *pem, *jwks, *r;
	char		 why[256];
	unsigned char	 mac[32], nbuf[512];
	unsigned int	 maclen;
	BIO		*bio;
	BIGNUM		*n = NULL;
	struct jwt_keys	*rsa_only;
	long		 pemlen;
	int		 nlen, i;

	(void)state;
	assert_non_null(bio = BIO_new(BIO_s_mem()));
	assert_int_equal(PEM_write_bio_PUBKEY(bio, k.rsa), 1);
	pemlen = BIO_get_mem_data(bio, &pem);
	assert_int_equal(EVP_PKEY_get_bn_param(k.rsa, OSSL_PKEY_PARAM_RSA_N,
	    &n), 1);
	nlen = BN_bn2bin(n, nbuf);
	BN_free(n);
	r = jwk_rsa("r", k.rsa, "");
	assert_true(asprintf(&jwks, "{\"keys\":[%s]}", r) != -1);
	free(r);
	assert_non_null(rsa_only = keys_of(jwks, why, sizeof(why)));
	free(jwks);

	p = b64url_str(c);
	for (i = 0; i < 4; i++) {
		h = b64url_str(i % 2 == 0 ? "{\"alg\":\"HS256\",\"kid\":\"r\"}" :
		    "{\"alg\":\"HS256\"}");
		in = join(h, p, NULL);
		if (i < 2)
			HMAC(EVP_sha256(), pem, (int)pemlen,
			    (unsigned char *)in, strlen(in), mac, &maclen);
		else
			HMAC(EVP_sha256(), nbuf, nlen, (unsigned char *)in,
			    strlen(in), mac, &maclen);
		s = b64url(mac, maclen);
		t = join(h, p, s);
		if (i % 2 == 0) {
			/* kid names the RSA key: its algorithm is RS256 */
			refuse(t, "the token's algorithm does not match its "
			    "key");
			refuse_keys(rsa_only, t, "the token's algorithm does "
			    "not match its key");
		} else {
			/* no kid: only HMAC keys are tried, and fail */
			refuse(t, "the token's signature does not verify");
			refuse_keys(rsa_only, t, "no key for the token's "
			    "algorithm");
		}
		free(h);
		free(in);
		free(s);
		free(t);
	}
	free(p);
	BIO_free(bio);
	jwt_keys_free(rsa_only);
	free(c);
}

static void
test_kid(void **state)
{
	char	*c = claims("");

	(void)state;
	/* a kid naming a key of another type */
	refuse_signed(ES, "{\"alg\":\"ES256\",\"kid\":\"r\"}", c,
	    "the token's algorithm does not match its key");
	refuse_signed(RS, "{\"alg\":\"RS256\",\"kid\":\"e\"}", c,
	    "the token's algorithm does not match its key");
	refuse_signed(RS, "{\"alg\":\"RS256\",\"kid\":\"h\"}", c,
	    "the token's algorithm does not match its key");
	refuse_signed(HS, "{\"alg\":\"HS256\",\"kid\":\"e\"}", c,
	    "the token's algorithm does not match its key");
	/* a kid no key has: no falling back to the others */
	refuse_signed(HS, "{\"alg\":\"HS256\",\"kid\":\"nope\"}", c,
	    "no key matches the token's \"kid\"");
	refuse_signed(HS, "{\"alg\":\"HS256\",\"kid\":\"h\\u0000\"}", c,
	    "the token's \"kid\" is not usable");
	refuse_signed(HS, "{\"alg\":\"HS256\",\"kid\":\"\"}", c,
	    "the token's \"kid\" is not usable");
	refuse_signed(HS, "{\"alg\":\"HS256\",\"kid\":7}", c,
	    "the token's \"kid\" is not usable");
	/* header keys are never trusted: jwk and jku are ignored */
	refuse_signed(HS, "{\"alg\":\"HS256\",\"kid\":\"x\",\"jku\":"
	    "\"https://evil.test/jwks\"}", c, "no key matches");
	free(c);
}

/* Signatures */

static char *
flip(const char *tok, size_t seg, size_t byte, unsigned char bit)
{
	const char	*p = tok;
	char		*sig, *t, *pre;
	unsigned char	 raw[1024];
	size_t		 i, n = 0;
	int		 v;

	/* decode the segment by hand: the test must not trust jwt.c */
	for (i = 0; i < seg; i++)
		p = strchr(p, '.') + 1;
	for (i = 0; p[i] != '\0' && p[i] != '.'; i++) {
		const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
		    "qrstuvwxyz0123456789-_";

		v = (int)(strchr(abc, p[i]) - abc);
		if (i % 4 == 0)
			raw[n] = (unsigned char)(v << 2);
		else if (i % 4 == 1) {
			raw[n++] |= (unsigned char)(v >> 4);
			raw[n] = (unsigned char)(v << 4);
		} else if (i % 4 == 2) {
			raw[n++] |= (unsigned char)(v >> 2);
			raw[n] = (unsigned char)(v << 6);
		} else
			raw[n++] |= (unsigned char)v;
	}
	raw[byte] ^= bit;
	sig = b64url(raw, n);
	pre = strndup(tok, (size_t)(p - tok));
	assert_true(asprintf(&t, "%s%s%s", pre, sig, p + i) != -1);
	free(pre);
	free(sig);
	return t;
}

static void
test_bad_signature(void **state)
{
	static const char *const hdr[] = { "{\"alg\":\"HS256\"}",
	    "{\"alg\":\"RS256\"}", "{\"alg\":\"ES256\"}" };
	char	*c = claims(""), *t, *bad;
	int	 a;

	(void)state;
	for (a = HS; a <= ES; a++) {
		t = token((enum alg)a, hdr[a], c);
		accept(t, "alice", "default", "");
		bad = flip(t, 2, 0, 0x01);
		refuse(bad, "the token's signature does not verify");
		free(bad);
		bad = flip(t, 2, 20, 0x80);
		refuse(bad, "the token's signature does not verify");
		free(bad);
		/* a changed claim: sub "alice" becomes "alicf" */
		bad = flip(t, 1, strstr(c, "alice") - c + 4, 0x03);
		refuse(bad, "the token's signature does not verify");
		free(bad);
		free(t);
	}
	/* ES256 in DER, as EVP makes it: JWS wants r || s */
	t = token_ex(ES, hdr[ES], c, 1);
	refuse(t, "the token's signature does not verify");
	free(t);
	free(c);
}

static void
test_structure(void **state)
{
	char	*c = claims(""), *t, *bad, *dot;
	size_t	 len;

	(void)state;
	t = token(HS, "{\"alg\":\"HS256\"}", c);
	len = strlen(t);
	/* truncated */
	bad = strndup(t, strrchr(t, '.') - t);
	refuse(bad, "not a signed JWT");
	free(bad);
	bad = strndup(t, len - 1);	/* 31 bytes, maybe stray bits */
	refuse(bad, "signature");
	free(bad);
	bad = strndup(t, len - 2);	/* a length base64 cannot have */
	refuse(bad, "signature is not base64url");
	free(bad);
	bad = strndup(t, len - 3);	/* 30 bytes */
	refuse(bad, "the token's signature does not verify");
	free(bad);
	bad = strndup(t, strchr(t, '.') - t);
	refuse(bad, "not a signed JWT");
	free(bad);
	refuse("", "not a signed JWT");
	refuse("..", "not a signed JWT");
	refuse("a.b.c", "not base64url");
	/* extra segments: a JWE has five */
	assert_true(asprintf(&bad, "%s.AAAA", t) != -1);
	refuse(bad, "not a signed JWT");
	free(bad);
	assert_true(asprintf(&bad, "%s.", t) != -1);
	refuse(bad, "not a signed JWT");
	free(bad);
	assert_true(asprintf(&bad, "%s.AAAA.AAAA", t) != -1);
	refuse(bad, "not a signed JWT");
	free(bad);
	/* an empty payload */
	dot = strchr(t, '.');
	assert_true(asprintf(&bad, "%.*s.%s", (int)(dot - t), t,
	    strchr(dot + 1, '.')) != -1);
	refuse(bad, "not a signed JWT");
	free(bad);
	free(t);
	free(c);
}

static void
test_base64url(void **state)
{
	char	*c = claims(""), *t, *bad, *p;
	size_t	 len;

	(void)state;
	t = token(HS, "{\"alg\":\"HS256\"}", c);
	len = strlen(t);
	/* padding, the other alphabet, whitespace, junk */
	assert_true(asprintf(&bad, "%s=", t) != -1);
	refuse(bad, "signature is not base64url");
	free(bad);
	bad = strdup(t);
	for (p = strrchr(bad, '.') + 1; *p != '\0'; p++)
		if (*p == '-' || *p == '_')
			break;
	if (*p != '\0') {
		*p = *p == '-' ? '+' : '/';
		refuse(bad, "signature is not base64url");
	}
	free(bad);
	bad = strdup(t);
	bad[len - 5] = ' ';
	refuse(bad, "signature is not base64url");
	bad[len - 5] = '\n';
	refuse(bad, "signature is not base64url");
	free(bad);
	bad = strdup(t);
	bad[2] = '*';
	refuse(bad, "header is not base64url");
	free(bad);
	/*
	 * A 32-byte signature ends in a character that carries 4 bits and 2
	 * unused ones: set those and the bytes are the same, the spelling
	 * not.  Strict decoding refuses the second spelling.
	 */
	bad = strdup(t);
	p = bad + len - 1;
	{
		const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
		    "qrstuvwxyz0123456789-_";
		int v = (int)(strchr(abc, *p) - abc);

		assert_int_equal(v & 3, 0);
		*p = abc[v | 1];
	}
	refuse(bad, "signature is not base64url");
	free(bad);
	/* payload with padding */
	p = strchr(t, '.');
	assert_true(asprintf(&bad, "%.*s.%.*s=%s", (int)(p - t), t,
	    (int)(strrchr(t, '.') - p - 1), p + 1, strrchr(t, '.')) != -1);
	refuse(bad, "the token's signature does not verify");
	free(bad);
	free(t);
	free(c);
}

static void
test_oversized(void **state)
{
	char	*pad, *c, *t, extra[JWT_TOKEN_MAX];

	(void)state;
	assert_non_null(pad = malloc(JWT_TOKEN_MAX));
	memset(pad, 'x', JWT_TOKEN_MAX - 1);
	pad[JWT_TOKEN_MAX - 1] = '\0';
	snprintf(extra, sizeof(extra), "\"pad\":\"%.*s\"", 6300, pad);
	c = claims(extra);
	t = token(HS, "{\"alg\":\"HS256\"}", c);
	assert_true(strlen(t) > JWT_TOKEN_MAX);
	refuse(t, "longer than 8192 bytes");
	free(t);
	free(c);
	/* just under the cap is fine */
	snprintf(extra, sizeof(extra), "\"pad\":\"%.*s\"", 5800, pad);
	c = claims(extra);
	t = token(HS, "{\"alg\":\"HS256\"}", c);
	assert_true(strlen(t) <= JWT_TOKEN_MAX);
	accept(t, "alice", "default", "");
	free(t);
	free(c);
	free(pad);
}

/* Identity from the claims */

static void
test_roles(void **state)
{
	char	many[1024], *p;
	int	i;

	(void)state;
	accept_claims("\"roles\":[\"analyst\"]", "alice", "default",
	    "analyst");
	accept_claims("\"roles\":[]", "alice", "default", "");
	accept_claims("\"roles\":\"a b,c ,, d\"", "alice", "default",
	    "a,b,c,d");
	accept_claims("\"roles\":\"\"", "alice", "default", "");
	accept_claims("\"roles\":\"admin\"", "alice", "default", "admin");
	refuse_claims("\"roles\":[\"a,b\"]", 0, "are not usable roles");
	refuse_claims("\"roles\":[\"a b\"]", 0, "are not usable roles");
	refuse_claims("\"roles\":[\"\"]", 0, "are not usable roles");
	refuse_claims("\"roles\":[\"a\",7]", 0, "are not usable roles");
	refuse_claims("\"roles\":[[\"a\"]]", 0, "are not usable roles");
	refuse_claims("\"roles\":{\"a\":1}", 0, "are not usable roles");
	refuse_claims("\"roles\":null", 0, "are not usable roles");
	refuse_claims("\"roles\":\"a\\tb\"", 0, "are not usable roles");
	refuse_claims("\"roles\":[\"caf\\u00e9\"]", 0, "are not usable roles");
	/* 16 roles fit, the 17th would be dropped: refused instead */
	p = many + snprintf(many, sizeof(many), "\"roles\":[");
	for (i = 0; i < JWT_ROLES_MAX; i++)
		p += snprintf(p, many + sizeof(many) - p, "%s\"r%d\"",
		    i > 0 ? "," : "", i);
	snprintf(p, many + sizeof(many) - p, "]");
	accept_claims(many, "alice", "default", "r0,r1,r2,r3,r4,r5,r6,r7,r8,"
	    "r9,r10,r11,r12,r13,r14,r15");
	snprintf(p, many + sizeof(many) - p, ",\"r16\"]");
	refuse_claims(many, 0, "are not usable roles");
	/* nor may the list outgrow su_roles */
	p = many + snprintf(many, sizeof(many), "\"roles\":[");
	for (i = 0; i < 5; i++)
		p += snprintf(p, many + sizeof(many) - p, "%s\"%064d\"",
		    i > 0 ? "," : "", i);
	snprintf(p, many + sizeof(many) - p, "]");
	refuse_claims(many, 0, "are not usable roles");
	refuse_claims("\"roles\":[\"" "0123456789012345678901234567890123456789"
	    "01234567890123456789012345\"]", 0, "are not usable roles");

	/* another claim name, as configured */
	conf.jw_roles_claim = "groups";
	accept_claims("\"groups\":[\"g\"],\"roles\":[\"r\"]", "alice",
	    "default", "g");
	conf.jw_roles_claim = "roles";
}

static void
test_user_and_tenant(void **state)
{
	(void)state;
	accept_claims("\"tenant\":\"acme\"", "alice", "acme", "");
	refuse_claims("\"tenant\":7", 0, "is not a usable tenant");
	refuse_claims("\"tenant\":\"\"", 0, "is not a usable tenant");
	refuse_claims("\"tenant\":\"a b\"", 0, "is not a usable tenant");
	refuse_claims("\"tenant\":\"" "01234567890123456789012345678901234567"
	    "890123456789012345678901234\"", 0, "is not a usable tenant");
	conf.jw_tenant_claim = "org";
	accept_claims("\"org\":\"initech\",\"tenant\":\"acme\"", "alice",
	    "initech", "");
	conf.jw_tenant_claim = "tenant";

	/* sub is overridden by user-claim, both must be names */
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"exp\":"
	    "4000000000}", 1, "\"sub\" is not a usable user name");
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"exp\":"
	    "4000000000,\"sub\":42}", 1, "\"sub\" is not a usable user name");
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"exp\":"
	    "4000000000,\"sub\":\"al ice\"}", 1, "is not a usable user name");
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"exp\":"
	    "4000000000,\"sub\":\"al\\nice\"}", 1,
	    "is not a usable user name");
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"exp\":"
	    "4000000000,\"sub\":\"al\\u0000ice\"}", 1,
	    "is not a usable user name");
	refuse_claims("{\"iss\":\"" ISS "\",\"aud\":\"" AUD "\",\"exp\":"
	    "4000000000,\"sub\":\"0123456789012345678901234567890123456789"
	    "0123456789012345678901234\"}", 1, "is not a usable user name");
	conf.jw_user_claim = "email";
	accept_claims("\"email\":\"alice@example.com\"", "alice@example.com",
	    "default", "");
	refuse_claims("", 0, "\"email\" is not a usable user name");
	conf.jw_user_claim = "sub";

	/* the claims must be one JSON object */
	refuse_signed(HS, "{\"alg\":\"HS256\"}", "[1]", "claims are not a JSON "
	    "object");
	refuse_signed(HS, "{\"alg\":\"HS256\"}", "{\"sub\":\"a\"}x",
	    "claims are not a JSON object");
	refuse_signed(HS, "{\"alg\":\"HS256\"}", "{\"sub\":\"\xff\"}",
	    "claims are not a JSON object");
}

/* Key sets */

static void
test_jwks(void **state)
{
	static const char *const bad[][2] = {
		{ "", "not a JSON object" },
		{ "[]", "not a JSON object" },
		{ "{}", "no \"keys\" array" },
		{ "{\"keys\":{}}", "no \"keys\" array" },
		{ "{\"keys\":[1]}", "keys[0]: not a JSON object" },
		{ "{\"keys\":[{}]}", "keys[0]: \"kty\" is missing" },
		{ "{\"keys\":[{\"kty\":\"oct\"}]}", "keys[0]: \"k\" is missing" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAA=\"}]}",
		    "keys[0]: \"k\" is not base64url" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAAA\"}]}",
		    "keys[0]: an HS256 key needs 32 to 1024 bytes, not 3" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"kid\":7,\"k\":\"AAAA\"}]}",
		    "keys[0]: \"use\", \"alg\" and \"kid\" must be strings" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"key_ops\":\"verify\","
		    "\"k\":\"AAAA\"}]}", "\"key_ops\" an array" },
		{ "{\"keys\":[{\"kty\":\"RSA\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}",
		    "keys[0]: an RSA modulus of 17 bits" },
		{ "{\"keys\":[{\"kty\":\"EC\",\"x\":\"AA\",\"y\":\"AA\"}]}",
		    "keys[0]: \"crv\" is missing" },
		{ "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"AA\","
		    "\"y\":\"AA\"}]}", "keys[0]: P-256 coordinates are 32 "
		    "bytes each" },
		{ "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":"
		    "\"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\",\"y\":"
		    "\"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}",
		    "keys[0]: not a point on P-256" },
		/* nothing usable: skipped keys only */
		{ "{\"keys\":[]}", "no usable key" },
		{ "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"A\"},"
		    "{\"kty\":\"EC\",\"crv\":\"P-384\",\"x\":\"A\",\"y\":\"A\"},"
		    "{\"kty\":\"oct\",\"use\":\"enc\",\"k\":\"A\"},"
		    "{\"kty\":\"oct\",\"alg\":\"HS512\",\"k\":\"A\"},"
		    "{\"kty\":\"oct\",\"key_ops\":[\"sign\"],\"k\":\"A\"}]}",
		    "no usable key" },
	};
	struct jwt_keys	*ks;
	char		 why[256], *r, *e, *j, *big;
	size_t		 i;
	EVP_PKEY	*small;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ks = keys_of(bad[i][0], why, sizeof(why));
		if (ks != NULL)
			fail_msg("accepted %s", bad[i][0]);
		if (strstr(why, bad[i][1]) == NULL)
			fail_msg("%s: why \"%s\", wanted \"%s\"", bad[i][0],
			    why, bad[i][1]);
	}

	/* private halves do not belong in a JWKS */
	r = jwk_rsa("r", k.rsa, ",\"d\":\"AQAB\"");
	assert_true(asprintf(&j, "{\"keys\":[%s]}", r) != -1);
	assert_null(keys_of(j, why, sizeof(why)));
	assert_non_null(strstr(why, "a private key"));
	free(j);
	free(r);
	e = jwk_ec("e", k.ec, ",\"d\":\"AQAB\"");
	assert_true(asprintf(&j, "{\"keys\":[%s]}", e) != -1);
	assert_null(keys_of(j, why, sizeof(why)));
	assert_non_null(strstr(why, "a private key"));
	free(j);
	free(e);

	/* RSA below 2048 bits */
	assert_non_null(small = EVP_RSA_gen(1024));
	r = jwk_rsa("s", small, "");
	assert_true(asprintf(&j, "{\"keys\":[%s]}", r) != -1);
	assert_null(keys_of(j, why, sizeof(why)));
	assert_non_null(strstr(why, "an RSA modulus of 1024 bits; 2048 to "
	    "16384 are accepted"));
	free(j);
	free(r);
	EVP_PKEY_free(small);

	/* keys we skip sit beside one we use; an alg on the JWK binds */
	r = jwk_rsa("r", k.rsa, ",\"alg\":\"RS512\"");
	e = jwk_ec("e", k.ec, ",\"use\":\"sig\",\"key_ops\":[\"verify\"]");
	assert_true(asprintf(&j, "{\"keys\":[%s,%s,{\"kty\":\"OKP\"}]}", r,
	    e) != -1);
	assert_non_null(ks = keys_of(j, why, sizeof(why)));
	assert_int_equal(jwt_keys_count(ks), 1);
	{
		char *c = claims(""), *t;

		t = token(RS, "{\"alg\":\"RS256\",\"kid\":\"r\"}", c);
		refuse_keys(ks, t, "no key matches the token's \"kid\"");
		free(t);
		t = token(RS, "{\"alg\":\"RS256\"}", c);
		refuse_keys(ks, t, "no key for the token's algorithm");
		free(t);
		free(c);
	}
	jwt_keys_free(ks);
	free(j);
	free(r);
	free(e);

	/* at most 64 keys */
	big = malloc(70 * 64 + 32);
	assert_non_null(big);
	strcpy(big, "{\"keys\":[");
	for (i = 0; i < 65; i++)
		strcat(big, i > 0 ? ",{\"kty\":\"OKP\"}" : "{\"kty\":\"OKP\"}");
	strcat(big, "]}");
	assert_null(keys_of(big, why, sizeof(why)));
	assert_string_equal(why, "more than 64 keys");
	free(big);

	/* the JWKS itself never travels into a reason */
	assert_null(keys_of("{\"keys\":[{\"kty\":\"oct\",\"k\":\"c2VjcmV0\"}]}",
	    why, sizeof(why)));
	assert_null(strstr(why, "c2VjcmV0"));

	/* and nothing without keys or configuration */
	{
		struct store_user	u;
		struct jwt_conf		none;

		memset(&none, 0, sizeof(none));
		assert_int_equal(jwt_verify(NULL, &conf, "a.b.c", NOW, &u, why,
		    sizeof(why)), -1);
		assert_int_equal(jwt_verify(k.keys, &none, "a.b.c", NOW, &u,
		    why, sizeof(why)), -1);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_times),
		cmocka_unit_test(test_iss_aud),
		cmocka_unit_test(test_alg_none_and_others),
		cmocka_unit_test(test_hs_rs_confusion),
		cmocka_unit_test(test_kid),
		cmocka_unit_test(test_bad_signature),
		cmocka_unit_test(test_structure),
		cmocka_unit_test(test_base64url),
		cmocka_unit_test(test_oversized),
		cmocka_unit_test(test_roles),
		cmocka_unit_test(test_user_and_tenant),
		cmocka_unit_test(test_jwks),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
