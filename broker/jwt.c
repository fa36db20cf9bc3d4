/*
 * JWT bearer tokens, verified with OpenSSL's EVP interface.  What a review
 * of JWT code looks for, and where it is here:
 *
 *  - The algorithm belongs to the key (jk_alg, fixed when the JWKS is
 *    read), never to the token: a token's "alg" only has to agree with it.
 *    An HS256 token "signed" with an RSA key's public bytes therefore meets
 *    no HMAC key at all.  "none", every other algorithm and any "crit"
 *    header are refused.
 *  - Keys come from the configured JWKS only; "jku", "jwk", "x5u" and "x5c"
 *    in a token are never looked at.
 *  - The signature is checked before the claims are parsed.
 *  - base64url is strict (no padding, no stray bits, nothing outside the
 *    alphabet), so a token has one spelling.
 *  - Every claim taken is checked for type and size, and a claim that
 *    cannot be taken whole refuses the token: a role dropped could be the
 *    one a deny rule names.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>

#include "broker/config.h"
#include "broker/controller_store.h"
#include "broker/jwt.h"
#include "common/util.h"

#define JWKS_KEYS_MAX	64
#define JWK_KID_MAX	256
#define HMAC_KEY_MIN	32	/* RFC 7518 3.2: no shorter than the hash */
#define HMAC_KEY_MAX	1024
#define RSA_BITS_MIN	2048
#define RSA_BITS_MAX	16384
#define P256_COORD	32
#define ROLE_MAX	64
#define AUD_MAX		64	/* audiences in one token */
#define TIME_LIMIT	((int64_t)1 << 50)	/* keeps now +- skew exact */

enum jwt_alg {
	JWT_HS256,
	JWT_RS256,
	JWT_ES256,
	JWT_NALGS
};

static const struct {
	const char	*al_name;
	const char	*al_kty;
} algs[JWT_NALGS] = {
	[JWT_HS256] = { "HS256", "oct" },
	[JWT_RS256] = { "RS256", "RSA" },
	[JWT_ES256] = { "ES256", "EC" },
};

struct jwk {
	enum jwt_alg	 jk_alg;
	char		*jk_kid;	/* NULL: the JWK has none */
	size_t		 jk_kidlen;
	unsigned char	*jk_secret;	/* HS256 */
	size_t		 jk_secretlen;
	EVP_PKEY	*jk_pkey;	/* RS256, ES256 */
};

struct jwt_keys {
	struct jwk	*ks_keys;
	size_t		 ks_n;
};

/* A piece of the compact serialisation. */
struct seg {
	const char	*sg_p;
	size_t		 sg_len;
};

/* base64url */

static int
b64url_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '-')
		return 62;
	if (c == '_')
		return 63;
	return -1;
}

/*
 * Strict base64url without padding (RFC 7515 section 2): the alphabet
 * only, no '=', no length that leaves a lone character, and zero bits in
 * what the last character does not fill, so a byte string has exactly one
 * spelling.  The result is malloc'ed, NUL-terminated after outlen bytes.
 */
static unsigned char *
b64url_decode(const char *s, size_t len, size_t *outlen)
{
	unsigned char	*out;
	uint32_t	 acc = 0;
	size_t		 i, n = 0;
	int		 v, bits = 0;

	if (len % 4 == 1 || (out = malloc(len / 4 * 3 + 3)) == NULL)
		return NULL;
	for (i = 0; i < len; i++) {
		if ((v = b64url_value((unsigned char)s[i])) == -1) {
			free(out);
			return NULL;
		}
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (unsigned char)(acc >> bits);
		}
	}
	if ((acc & ((1u << bits) - 1)) != 0) {
		free(out);
		return NULL;
	}
	out[n] = '\0';
	*outlen = n;
	return out;
}

/* JSON members */

/* Equal, with the length: a "\u0000" inside must not cut the compare. */
static int
json_str_eq(struct json_object *v, const char *want)
{
	return json_object_is_type(v, json_type_string) &&
	    (size_t)json_object_get_string_len(v) == strlen(want) &&
	    memcmp(json_object_get_string(v), want, strlen(want)) == 0;
}

/* A string member: 0, 1 when absent, -1 when there but not a string. */
static int
member_str(struct json_object *o, const char *key, const char **out,
    size_t *len)
{
	struct json_object *v;

	*out = NULL;
	if (len != NULL)
		*len = 0;
	if (!json_object_object_get_ex(o, key, &v))
		return 1;
	if (!json_object_is_type(v, json_type_string))
		return -1;
	*out = json_object_get_string(v);
	if (len != NULL)
		*len = (size_t)json_object_get_string_len(v);
	return 0;
}

/* A required base64url member, decoded. */
static unsigned char *
member_b64(struct json_object *o, const char *key, size_t *len, char *why,
    size_t whylen)
{
	unsigned char	*b;
	const char	*s;
	size_t		 slen;

	if (member_str(o, key, &s, &slen) != 0) {
		snprintf(why, whylen, "\"%s\" is missing or not a string", key);
		return NULL;
	}
	if ((b = b64url_decode(s, slen, len)) == NULL || *len == 0) {
		free(b);
		snprintf(why, whylen, "\"%s\" is not base64url", key);
		return NULL;
	}
	return b;
}

/* Keys */

static EVP_PKEY *
pkey_fromdata(const char *type, OSSL_PARAM_BLD *bld)
{
	OSSL_PARAM	*params;
	EVP_PKEY_CTX	*ctx;
	EVP_PKEY	*pkey = NULL;

	if ((params = OSSL_PARAM_BLD_to_param(bld)) == NULL)
		return NULL;
	if ((ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL)) == NULL ||
	    EVP_PKEY_fromdata_init(ctx) != 1 ||
	    EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) != 1)
		pkey = NULL;
	EVP_PKEY_CTX_free(ctx);
	OSSL_PARAM_free(params);
	return pkey;
}

static int
jwk_oct(struct json_object *o, struct jwk *k, char *why, size_t whylen)
{
	if ((k->jk_secret = member_b64(o, "k", &k->jk_secretlen, why,
	    whylen)) == NULL)
		return -1;
	if (k->jk_secretlen < HMAC_KEY_MIN || k->jk_secretlen > HMAC_KEY_MAX) {
		snprintf(why, whylen, "an HS256 key needs %d to %d bytes, not "
		    "%zu", HMAC_KEY_MIN, HMAC_KEY_MAX, k->jk_secretlen);
		return -1;
	}
	return 0;
}

static int
jwk_rsa(struct json_object *o, struct jwk *k, char *why, size_t whylen)
{
	unsigned char	*nb = NULL, *eb = NULL;
	size_t		 nlen, elen;
	BIGNUM		*n = NULL, *e = NULL;
	OSSL_PARAM_BLD	*bld = NULL;
	int		 bits, rv = -1;

	if ((nb = member_b64(o, "n", &nlen, why, whylen)) == NULL ||
	    (eb = member_b64(o, "e", &elen, why, whylen)) == NULL)
		goto out;
	if ((n = BN_bin2bn(nb, (int)nlen, NULL)) == NULL ||
	    (e = BN_bin2bn(eb, (int)elen, NULL)) == NULL) {
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	bits = BN_num_bits(n);
	if (bits < RSA_BITS_MIN || bits > RSA_BITS_MAX) {
		snprintf(why, whylen, "an RSA modulus of %d bits; %d to %d are "
		    "accepted", bits, RSA_BITS_MIN, RSA_BITS_MAX);
		goto out;
	}
	if (!BN_is_odd(e) || BN_num_bits(e) < 2 || BN_num_bits(e) > 64) {
		snprintf(why, whylen, "not a usable RSA exponent");
		goto out;
	}
	if ((bld = OSSL_PARAM_BLD_new()) == NULL ||
	    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) != 1 ||
	    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e) != 1 ||
	    (k->jk_pkey = pkey_fromdata("RSA", bld)) == NULL) {
		snprintf(why, whylen, "the RSA key does not load");
		goto out;
	}
	rv = 0;
 out:
	OSSL_PARAM_BLD_free(bld);
	BN_free(n);
	BN_free(e);
	free(nb);
	free(eb);
	return rv;
}

static int
jwk_ec(struct json_object *o, struct jwk *k, char *why, size_t whylen)
{
	unsigned char	*x = NULL, *y = NULL, pub[1 + 2 * P256_COORD];
	size_t		 xlen, ylen;
	OSSL_PARAM_BLD	*bld = NULL;
	EVP_PKEY_CTX	*ctx = NULL;
	int		 rv = -1;

	if ((x = member_b64(o, "x", &xlen, why, whylen)) == NULL ||
	    (y = member_b64(o, "y", &ylen, why, whylen)) == NULL)
		goto out;
	if (xlen != P256_COORD || ylen != P256_COORD) {
		snprintf(why, whylen, "P-256 coordinates are %d bytes each",
		    P256_COORD);
		goto out;
	}
	pub[0] = 0x04;		/* uncompressed point */
	memcpy(pub + 1, x, P256_COORD);
	memcpy(pub + 1 + P256_COORD, y, P256_COORD);
	if ((bld = OSSL_PARAM_BLD_new()) == NULL ||
	    OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME,
	    "prime256v1", 0) != 1 ||
	    OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY,
	    pub, sizeof(pub)) != 1 ||
	    (k->jk_pkey = pkey_fromdata("EC", bld)) == NULL) {
		snprintf(why, whylen, "not a point on P-256");
		goto out;
	}
	/* Decoding checks the point; invalid-curve attacks need it to. */
	if ((ctx = EVP_PKEY_CTX_new_from_pkey(NULL, k->jk_pkey, NULL)) ==
	    NULL || EVP_PKEY_public_check(ctx) != 1) {
		snprintf(why, whylen, "not a point on P-256");
		goto out;
	}
	rv = 0;
 out:
	EVP_PKEY_CTX_free(ctx);
	OSSL_PARAM_BLD_free(bld);
	free(x);
	free(y);
	return rv;
}

/* "key_ops" present and without "verify": not a key to verify with. */
static int
jwk_verifies(struct json_object *o)
{
	struct json_object	*ops;
	size_t			 i;

	if (!json_object_object_get_ex(o, "key_ops", &ops))
		return 1;
	if (!json_object_is_type(ops, json_type_array))
		return -1;
	for (i = 0; i < json_object_array_length(ops); i++)
		if (json_str_eq(json_object_array_get_idx(ops, i), "verify"))
			return 1;
	return 0;
}

static void
jwk_clear(struct jwk *k)
{
	if (k->jk_secret != NULL) {
		OPENSSL_cleanse(k->jk_secret, k->jk_secretlen);
		free(k->jk_secret);
	}
	free(k->jk_kid);
	EVP_PKEY_free(k->jk_pkey);
	memset(k, 0, sizeof(*k));
}

/* One JWK: 0 usable (k filled), 1 not for us (skipped), -1 malformed. */
static int
jwk_parse(struct json_object *o, struct jwk *k, char *why, size_t whylen)
{
	const char	*kty, *use, *alg, *kid, *crv;
	size_t		 kidlen;
	int		 a, ops, rv;

	if (!json_object_is_type(o, json_type_object)) {
		snprintf(why, whylen, "not a JSON object");
		return -1;
	}
	if (member_str(o, "kty", &kty, NULL) != 0) {
		snprintf(why, whylen, "\"kty\" is missing or not a string");
		return -1;
	}
	if (member_str(o, "use", &use, NULL) == -1 ||
	    member_str(o, "alg", &alg, NULL) == -1 ||
	    member_str(o, "kid", &kid, &kidlen) == -1 ||
	    (ops = jwk_verifies(o)) == -1) {
		snprintf(why, whylen, "\"use\", \"alg\" and \"kid\" must be "
		    "strings, \"key_ops\" an array");
		return -1;
	}
	for (a = 0; a < JWT_NALGS && strcmp(kty, algs[a].al_kty) != 0; a++)
		;
	if (a == JWT_NALGS || ops == 0 || (use != NULL &&
	    strcmp(use, "sig") != 0) || (alg != NULL &&
	    strcmp(alg, algs[a].al_name) != 0))
		return 1;
	if (a != JWT_HS256 && json_object_object_get_ex(o, "d", NULL)) {
		snprintf(why, whylen, "a private key; the JWKS needs the "
		    "public key only");
		return -1;
	}
	if (kid != NULL && (kidlen == 0 || kidlen > JWK_KID_MAX ||
	    strlen(kid) != kidlen)) {
		snprintf(why, whylen, "\"kid\" must be 1 to %d characters",
		    JWK_KID_MAX);
		return -1;
	}
	if (a == JWT_ES256) {
		if (member_str(o, "crv", &crv, NULL) != 0) {
			snprintf(why, whylen, "\"crv\" is missing or not a "
			    "string");
			return -1;
		}
		if (strcmp(crv, "P-256") != 0)
			return 1;
	}
	k->jk_alg = (enum jwt_alg)a;
	if (a == JWT_HS256)
		rv = jwk_oct(o, k, why, whylen);
	else if (a == JWT_RS256)
		rv = jwk_rsa(o, k, why, whylen);
	else
		rv = jwk_ec(o, k, why, whylen);
	if (rv == 0 && kid != NULL) {
		if ((k->jk_kid = strdup(kid)) == NULL) {
			snprintf(why, whylen, "out of memory");
			rv = -1;
		}
		k->jk_kidlen = kidlen;
	}
	if (rv == -1)
		jwk_clear(k);
	ERR_clear_error();
	return rv;
}

struct jwt_keys *
jwt_keys_parse(const char *jwks_json, char *why, size_t whylen)
{
	struct json_object	*doc, *arr;
	struct jwt_keys		*ks = NULL;
	char			 reason[160];
	size_t			 i, n;
	int			 rc;

	if ((doc = json_parse_object(jwks_json, strlen(jwks_json))) == NULL) {
		snprintf(why, whylen, "not a JSON object");
		return NULL;
	}
	if (!json_object_object_get_ex(doc, "keys", &arr) ||
	    !json_object_is_type(arr, json_type_array)) {
		snprintf(why, whylen, "no \"keys\" array");
		goto fail;
	}
	if ((n = json_object_array_length(arr)) > JWKS_KEYS_MAX) {
		snprintf(why, whylen, "more than %d keys", JWKS_KEYS_MAX);
		goto fail;
	}
	if ((ks = calloc(1, sizeof(*ks))) == NULL ||
	    (ks->ks_keys = calloc(n + 1, sizeof(*ks->ks_keys))) == NULL) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	for (i = 0; i < n; i++) {
		rc = jwk_parse(json_object_array_get_idx(arr, i),
		    &ks->ks_keys[ks->ks_n], reason, sizeof(reason));
		if (rc == -1) {
			snprintf(why, whylen, "keys[%zu]: %s", i, reason);
			goto fail;
		}
		if (rc == 0)
			ks->ks_n++;
	}
	if (ks->ks_n == 0) {
		snprintf(why, whylen, "no usable key (\"oct\" for HS256, "
		    "\"RSA\" for RS256, \"EC\" P-256 for ES256)");
		goto fail;
	}
	json_object_put(doc);
	return ks;
 fail:
	json_object_put(doc);
	jwt_keys_free(ks);
	return NULL;
}

void
jwt_keys_free(struct jwt_keys *ks)
{
	size_t	i;

	if (ks == NULL)
		return;
	for (i = 0; i < ks->ks_n; i++)
		jwk_clear(&ks->ks_keys[i]);
	free(ks->ks_keys);
	free(ks);
}

size_t
jwt_keys_count(const struct jwt_keys *ks)
{
	return ks != NULL ? ks->ks_n : 0;
}

/* Signatures */

static int
verify_hs256(const struct jwk *k, const struct seg *in,
    const unsigned char *sig, size_t siglen)
{
	unsigned char	mac[EVP_MAX_MD_SIZE];
	unsigned int	maclen = 0;
	int		ok;

	if (siglen != 32)
		return 0;
	ok = HMAC(EVP_sha256(), k->jk_secret, (int)k->jk_secretlen,
	    (const unsigned char *)in->sg_p, in->sg_len, mac, &maclen) !=
	    NULL && maclen == 32 && CRYPTO_memcmp(mac, sig, 32) == 0;
	OPENSSL_cleanse(mac, sizeof(mac));
	return ok;
}

static int
verify_pkey(EVP_PKEY *pkey, const struct seg *in, const unsigned char *sig,
    size_t siglen)
{
	EVP_MD_CTX	*md;
	int		 ok;

	ok = (md = EVP_MD_CTX_new()) != NULL &&
	    EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, pkey) == 1 &&
	    EVP_DigestVerify(md, sig, siglen, (const unsigned char *)in->sg_p,
	    in->sg_len) == 1;
	EVP_MD_CTX_free(md);
	return ok;
}

static int
verify_rs256(const struct jwk *k, const struct seg *in,
    const unsigned char *sig, size_t siglen)
{
	/* PKCS #1 v1.5: exactly the modulus' length, no leading zeros cut */
	if (siglen != (size_t)EVP_PKEY_get_size(k->jk_pkey))
		return 0;
	return verify_pkey(k->jk_pkey, in, sig, siglen);
}

/*
 * A JWS ECDSA signature is r || s, 32 bytes each (RFC 7518 section 3.4);
 * EVP wants DER.  A DER signature in a token is therefore refused: it is
 * not 64 bytes.
 */
static int
verify_es256(const struct jwk *k, const struct seg *in,
    const unsigned char *sig, size_t siglen)
{
	ECDSA_SIG	*es;
	BIGNUM		*r, *s;
	unsigned char	*der = NULL;
	int		 derlen, ok;

	if (siglen != 2 * P256_COORD)
		return 0;
	r = BN_bin2bn(sig, P256_COORD, NULL);
	s = BN_bin2bn(sig + P256_COORD, P256_COORD, NULL);
	if (r == NULL || s == NULL || (es = ECDSA_SIG_new()) == NULL) {
		BN_free(r);
		BN_free(s);
		return 0;
	}
	if (ECDSA_SIG_set0(es, r, s) != 1) {
		BN_free(r);
		BN_free(s);
		ECDSA_SIG_free(es);
		return 0;
	}
	derlen = i2d_ECDSA_SIG(es, &der);
	ECDSA_SIG_free(es);
	if (derlen <= 0)
		return 0;
	ok = verify_pkey(k->jk_pkey, in, der, (size_t)derlen);
	OPENSSL_free(der);
	return ok;
}

static int
verify_one(const struct jwk *k, const struct seg *in,
    const unsigned char *sig, size_t siglen)
{
	int	ok;

	switch (k->jk_alg) {
	case JWT_HS256:
		ok = verify_hs256(k, in, sig, siglen);
		break;
	case JWT_RS256:
		ok = verify_rs256(k, in, sig, siglen);
		break;
	case JWT_ES256:
		ok = verify_es256(k, in, sig, siglen);
		break;
	default:
		ok = 0;
		break;
	}
	ERR_clear_error();
	return ok;
}

/*
 * Find the key and check the signature over "header.payload".  With a
 * "kid" only keys of that id are candidates; without, every key of the
 * token's algorithm.  Either way a key's algorithm must be the token's.
 */
static int
check_signature(const struct jwt_keys *ks, enum jwt_alg alg,
    const char *kid, size_t kidlen, const struct seg *in,
    const unsigned char *sig, size_t siglen, char *why, size_t whylen)
{
	const struct jwk	*k;
	size_t			 i;
	int			 named = 0, candidates = 0;

	for (i = 0; i < ks->ks_n; i++) {
		k = &ks->ks_keys[i];
		if (kid != NULL && (k->jk_kid == NULL || k->jk_kidlen !=
		    kidlen || memcmp(k->jk_kid, kid, kidlen) != 0))
			continue;
		named++;
		if (k->jk_alg != alg)
			continue;
		candidates++;
		if (verify_one(k, in, sig, siglen))
			return 0;
	}
	if (kid != NULL && named == 0)
		snprintf(why, whylen, "no key matches the token's \"kid\"");
	else if (candidates == 0)
		snprintf(why, whylen, kid != NULL ? "the token's algorithm "
		    "does not match its key" : "no key for the token's "
		    "algorithm");
	else
		snprintf(why, whylen, "the token's signature does not verify");
	return -1;
}

/* Header */

static int
check_header(const struct seg *s, enum jwt_alg *alg, char *kid,
    size_t kidsz, char *why, size_t whylen)
{
	struct json_object	*h = NULL;
	unsigned char		*raw;
	const char		*a, *k;
	size_t			 len, klen;
	int			 i, rv = -1;

	if ((raw = b64url_decode(s->sg_p, s->sg_len, &len)) == NULL) {
		snprintf(why, whylen, "the token's header is not base64url");
		return -1;
	}
	if ((h = json_parse_object((const char *)raw, len)) == NULL) {
		snprintf(why, whylen, "the token's header is not a JSON "
		    "object");
		goto out;
	}
	if (member_str(h, "alg", &a, NULL) != 0) {
		snprintf(why, whylen, "the token's header has no \"alg\"");
		goto out;
	}
	for (i = 0; i < JWT_NALGS && strcmp(a, algs[i].al_name) != 0; i++)
		;
	if (i == JWT_NALGS) {
		snprintf(why, whylen, "the token's algorithm is not accepted "
		    "(HS256, RS256 or ES256 only)");
		goto out;
	}
	*alg = (enum jwt_alg)i;
	/* RFC 7515 4.1.11: an extension we do not know must fail */
	if (json_object_object_get_ex(h, "crit", NULL)) {
		snprintf(why, whylen, "the token's header has \"crit\"; no "
		    "extension is supported");
		goto out;
	}
	kid[0] = '\0';
	if ((i = member_str(h, "kid", &k, &klen)) == -1 || (i == 0 &&
	    (klen == 0 || klen >= kidsz || strlen(k) != klen))) {
		snprintf(why, whylen, "the token's \"kid\" is not usable");
		goto out;
	}
	if (i == 0)
		memcpy(kid, k, klen + 1);
	rv = 0;
 out:
	json_object_put(h);
	free(raw);
	return rv;
}

/* Claims */

/* A NumericDate, clamped: 0 and *t, 1 when absent, -1 when not a number. */
static int
claim_time(struct json_object *c, const char *name, int64_t *t)
{
	struct json_object	*v;
	double			 d;

	if (!json_object_object_get_ex(c, name, &v))
		return 1;
	if (json_object_is_type(v, json_type_int))
		*t = json_object_get_int64(v);
	else if (json_object_is_type(v, json_type_double)) {
		d = json_object_get_double(v);
		if (!isfinite(d))
			return -1;
		if (d > (double)TIME_LIMIT)
			d = (double)TIME_LIMIT;
		else if (d < -(double)TIME_LIMIT)
			d = -(double)TIME_LIMIT;
		*t = (int64_t)d;
		if ((double)*t > d)	/* rounded up a negative: floor */
			(*t)--;
	} else
		return -1;
	if (*t > TIME_LIMIT)
		*t = TIME_LIMIT;
	else if (*t < -TIME_LIMIT)
		*t = -TIME_LIMIT;
	return 0;
}

static int
check_times(struct json_object *c, time_t now, char *why, size_t whylen)
{
	int64_t	exp, nbf, iat, t = (int64_t)now;
	int	rc;

	if (claim_time(c, "exp", &exp) != 0) {
		snprintf(why, whylen, "the token has no valid \"exp\"");
		return -1;
	}
	if (t >= exp + JWT_SKEW) {
		snprintf(why, whylen, "the token has expired");
		return -1;
	}
	if ((rc = claim_time(c, "nbf", &nbf)) == -1 ||
	    (rc == 0 && nbf > t + JWT_SKEW)) {
		snprintf(why, whylen, rc == -1 ? "the token's \"nbf\" is not "
		    "a number" : "the token is not valid yet");
		return -1;
	}
	if ((rc = claim_time(c, "iat", &iat)) == -1 ||
	    (rc == 0 && iat > t + JWT_SKEW)) {
		snprintf(why, whylen, rc == -1 ? "the token's \"iat\" is not "
		    "a number" : "the token was issued in the future");
		return -1;
	}
	return 0;
}

/* "aud" is one string or an array of them (RFC 7519 4.1.3). */
static int
check_audience(struct json_object *c, const char *want)
{
	struct json_object	*v, *e;
	size_t			 i, n;
	int			 found = 0;

	if (!json_object_object_get_ex(c, "aud", &v))
		return 0;
	if (json_object_is_type(v, json_type_string))
		return json_str_eq(v, want);
	if (!json_object_is_type(v, json_type_array) ||
	    (n = json_object_array_length(v)) > AUD_MAX)
		return 0;
	for (i = 0; i < n; i++) {
		e = json_object_array_get_idx(v, i);
		if (!json_object_is_type(e, json_type_string))
			return 0;
		if (json_str_eq(e, want))
			found = 1;
	}
	return found;
}

/* A name we can log, audit and put in a policy: visible ASCII, no space. */
static int
visible(const char *s, size_t len, size_t max)
{
	size_t	i;

	if (len == 0 || len > max)
		return 0;
	for (i = 0; i < len; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return 0;
	return 1;
}

/* Copy a string claim that must be a visible name into buf. */
static int
claim_name(struct json_object *c, const char *name, char *buf, size_t sz)
{
	const char	*s;
	size_t		 len;

	if (member_str(c, name, &s, &len) != 0 || !visible(s, len, sz - 1))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return 0;
}

static int
role_add(char *buf, size_t sz, size_t *n, const char *r, size_t len)
{
	size_t	used = strlen(buf);

	if (!visible(r, len, ROLE_MAX) || memchr(r, ',', len) != NULL ||
	    *n == JWT_ROLES_MAX || used + (used > 0) + len >= sz)
		return -1;
	if (used > 0)
		buf[used++] = ',';
	memcpy(buf + used, r, len);
	buf[used + len] = '\0';
	(*n)++;
	return 0;
}

/* Roles: an array of strings, or one string separated by spaces/commas. */
static int
claim_roles(struct json_object *c, const char *name, char *buf, size_t sz)
{
	struct json_object	*v, *e;
	const char		*s, *end;
	size_t			 i, n = 0, len;

	buf[0] = '\0';
	if (!json_object_object_get_ex(c, name, &v))
		return 0;
	if (json_object_is_type(v, json_type_array)) {
		for (i = 0; i < json_object_array_length(v); i++) {
			e = json_object_array_get_idx(v, i);
			if (!json_object_is_type(e, json_type_string) ||
			    role_add(buf, sz, &n, json_object_get_string(e),
			    (size_t)json_object_get_string_len(e)) == -1)
				return -1;
		}
		return 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return -1;
	s = json_object_get_string(v);
	end = s + json_object_get_string_len(v);
	while (s < end) {
		if (*s == ' ' || *s == ',') {
			s++;
			continue;
		}
		for (len = 0; s + len < end && s[len] != ' ' && s[len] != ',';
		    len++)
			;
		if (role_add(buf, sz, &n, s, len) == -1)
			return -1;
		s += len;
	}
	return 0;
}

static int
check_claims(struct json_object *c, const struct jwt_conf *jc, time_t now,
    struct store_user *out, char *why, size_t whylen)
{
	struct json_object	*iss;
	const char		*uc, *tc, *rc;

	uc = jc->jw_user_claim != NULL ? jc->jw_user_claim : "sub";
	tc = jc->jw_tenant_claim != NULL ? jc->jw_tenant_claim : "tenant";
	rc = jc->jw_roles_claim != NULL ? jc->jw_roles_claim : "roles";
	if (check_times(c, now, why, whylen) == -1)
		return -1;
	if (!json_object_object_get_ex(c, "iss", &iss) ||
	    !json_str_eq(iss, jc->jw_issuer)) {
		snprintf(why, whylen, "the token's issuer is not accepted");
		return -1;
	}
	if (!check_audience(c, jc->jw_audience)) {
		snprintf(why, whylen, "the token is not meant for this "
		    "audience");
		return -1;
	}
	if (claim_name(c, uc, out->su_name, sizeof(out->su_name)) == -1) {
		snprintf(why, whylen, "the token's \"%s\" is not a usable user "
		    "name (1 to %zu visible characters)", uc,
		    sizeof(out->su_name) - 1);
		return -1;
	}
	if (!json_object_object_get_ex(c, tc, NULL))
		snprintf(out->su_tenant, sizeof(out->su_tenant), "default");
	else if (claim_name(c, tc, out->su_tenant,
	    sizeof(out->su_tenant)) == -1) {
		snprintf(why, whylen, "the token's \"%s\" is not a usable "
		    "tenant (1 to %zu visible characters)", tc,
		    sizeof(out->su_tenant) - 1);
		return -1;
	}
	if (claim_roles(c, rc, out->su_roles, sizeof(out->su_roles)) == -1) {
		snprintf(why, whylen, "the token's \"%s\" are not usable roles "
		    "(at most %d names of 1 to %d visible characters, no "
		    "commas)", rc, JWT_ROLES_MAX, ROLE_MAX);
		return -1;
	}
	return 0;
}

/* header.payload.signature, three non-empty pieces */
static int
split(const char *token, struct seg segs[3])
{
	const char	*p = token, *dot;
	int		 i;

	for (i = 0; i < 3; i++) {
		dot = strchr(p, '.');
		if ((i < 2) != (dot != NULL))
			return -1;
		segs[i].sg_p = p;
		segs[i].sg_len = dot != NULL ? (size_t)(dot - p) : strlen(p);
		if (segs[i].sg_len == 0)
			return -1;
		if (dot != NULL)
			p = dot + 1;
	}
	return 0;
}

int
jwt_verify(const struct jwt_keys *ks, const struct jwt_conf *jc,
    const char *token, time_t now, struct store_user *out, char *why,
    size_t whylen)
{
	struct seg		 segs[3], in;
	struct json_object	*claims = NULL;
	enum jwt_alg		 alg;
	unsigned char		*sig = NULL, *payload = NULL;
	char			 kid[JWK_KID_MAX + 1];
	size_t			 siglen, len;
	int			 rv = -1;

	memset(out, 0, sizeof(*out));
	if (ks == NULL || jc == NULL || jc->jw_issuer == NULL ||
	    jc->jw_audience == NULL) {
		snprintf(why, whylen, "tokens are not configured");
		return -1;
	}
	if (strnlen(token, JWT_TOKEN_MAX + 1) > JWT_TOKEN_MAX) {
		snprintf(why, whylen, "the token is longer than %d bytes",
		    JWT_TOKEN_MAX);
		return -1;
	}
	if (split(token, segs) == -1) {
		snprintf(why, whylen, "not a signed JWT (header.payload."
		    "signature)");
		return -1;
	}
	if (check_header(&segs[0], &alg, kid, sizeof(kid), why, whylen) == -1)
		return -1;
	if ((sig = b64url_decode(segs[2].sg_p, segs[2].sg_len,
	    &siglen)) == NULL) {
		snprintf(why, whylen, "the token's signature is not base64url");
		return -1;
	}
	in.sg_p = token;
	in.sg_len = segs[0].sg_len + 1 + segs[1].sg_len;
	if (check_signature(ks, alg, kid[0] != '\0' ? kid : NULL, strlen(kid),
	    &in, sig, siglen, why, whylen) == -1)
		goto out;
	/* Signed by a key we trust; only now is the payload read. */
	if ((payload = b64url_decode(segs[1].sg_p, segs[1].sg_len,
	    &len)) == NULL || (claims = json_parse_object(
	    (const char *)payload, len)) == NULL) {
		snprintf(why, whylen, "the token's claims are not a JSON "
		    "object");
		goto out;
	}
	if (check_claims(claims, jc, now, out, why, whylen) == -1)
		goto out;
	rv = 0;
 out:
	if (rv == -1)
		memset(out, 0, sizeof(*out));
	json_object_put(claims);
	free(payload);
	free(sig);
	return rv;
}
