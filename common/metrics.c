#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/metrics.h"

const double	metric_latency_buckets[] = { 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300 };
const size_t	metric_latency_nbuckets = sizeof(metric_latency_buckets) /
    sizeof(metric_latency_buckets[0]);

struct series {
	char		*s_values[METRIC_LABELS_MAX];
	double		 s_value;	/* counter, gauge; histogram: sum */
	uint64_t	 s_count;	/* histogram: observations */
	uint64_t	 s_buckets[METRIC_BUCKETS_MAX];	/* not cumulative */
};

struct metric {
	struct metric	*m_next;
	enum metric_type m_type;
	const char	*m_name;
	const char	*m_help;
	char		*m_labels[METRIC_LABELS_MAX];
	size_t		 m_nlabels;
	double		 m_bounds[METRIC_BUCKETS_MAX];
	size_t		 m_nbounds;
	struct series	*m_series;
	size_t		 m_nseries;
};

static struct metric	*metrics_head, **metrics_tail = &metrics_head;

static struct series	*series_new(struct metric *, const char *const *);

static char *
xstrndup(const char *s, size_t max)
{
	char *d;

	if ((d = strndup(s, max)) == NULL)
		fatal("strndup");
	return d;
}

struct metric *
metric_new(enum metric_type type, const char *name, const char *help,
    const char *labels, const double *buckets, size_t nbuckets)
{
	struct metric	*m;
	char		*copy, *save, *l;

	if ((m = calloc(1, sizeof(*m))) == NULL || (copy = strdup(labels)) ==
	    NULL)
		fatal("metric_new");
	m->m_type = type;
	m->m_name = name;
	m->m_help = help;
	for (l = strtok_r(copy, ",", &save); l != NULL;
	    l = strtok_r(NULL, ",", &save)) {
		if (m->m_nlabels == METRIC_LABELS_MAX)
			fatalx("metric %s: too many labels", name);
		m->m_labels[m->m_nlabels++] = xstrndup(l, 64);
	}
	free(copy);
	if (nbuckets > METRIC_BUCKETS_MAX)
		fatalx("metric %s: too many buckets", name);
	if (type == METRIC_HISTOGRAM && nbuckets > 0)
		memcpy(m->m_bounds, buckets, nbuckets * sizeof(*buckets));
	m->m_nbounds = type == METRIC_HISTOGRAM ? nbuckets : 0;
	if (m->m_nlabels == 0)		/* shown from the start, at 0 */
		(void)series_new(m, NULL);
	*metrics_tail = m;
	metrics_tail = &m->m_next;
	return m;
}

static struct series *
series_new(struct metric *m, const char *const *values)
{
	struct series	*s;
	size_t		 i;

	s = reallocarray(m->m_series, m->m_nseries + 1, sizeof(*s));
	if (s == NULL)
		fatal("metric %s", m->m_name);
	m->m_series = s;
	s = &m->m_series[m->m_nseries++];
	memset(s, 0, sizeof(*s));
	for (i = 0; i < m->m_nlabels; i++)
		s->s_values[i] = xstrndup(values[i], METRIC_VALUE_MAX);
	return s;
}

static struct series *
series_match(struct metric *m, const char *const *values)
{
	size_t	i, j;

	for (i = 0; i < m->m_nseries; i++) {
		for (j = 0; j < m->m_nlabels; j++)
			if (strncmp(m->m_series[i].s_values[j], values[j],
			    METRIC_VALUE_MAX) != 0)
				break;
		if (j == m->m_nlabels)
			return &m->m_series[i];
	}
	return NULL;
}

/* The series of these values; past the cap, the one of "other"s. */
static struct series *
series_get(struct metric *m, va_list ap)
{
	const char	*values[METRIC_LABELS_MAX];
	struct series	*s;
	size_t		 i;

	for (i = 0; i < m->m_nlabels; i++)
		if ((values[i] = va_arg(ap, const char *)) == NULL)
			values[i] = "";
	if ((s = series_match(m, values)) != NULL)
		return s;
	if (m->m_nseries >= METRIC_SERIES_MAX) {
		for (i = 0; i < m->m_nlabels; i++)
			values[i] = "other";
		if ((s = series_match(m, values)) != NULL)
			return s;
	}
	return series_new(m, values);
}

void
metric_add(struct metric *m, double v, ...)
{
	va_list ap;

	if (m == NULL)		/* not made in this process */
		return;
	va_start(ap, v);
	series_get(m, ap)->s_value += v;
	va_end(ap);
}

void
metric_set(struct metric *m, double v, ...)
{
	va_list ap;

	if (m == NULL)		/* not made in this process */
		return;
	va_start(ap, v);
	series_get(m, ap)->s_value = v;
	va_end(ap);
}

void
metric_observe(struct metric *m, double v, ...)
{
	struct series	*s;
	va_list		 ap;
	size_t		 i;

	if (m == NULL)
		return;
	va_start(ap, v);
	s = series_get(m, ap);
	va_end(ap);
	for (i = 0; i < m->m_nbounds && v > m->m_bounds[i]; i++)
		;
	if (i < m->m_nbounds)
		s->s_buckets[i]++;
	s->s_value += v;
	s->s_count++;
}

/* Label values are any text: \, " and newline must be escaped. */
void
metric_escape(const char *v, char *dst, size_t dstlen)
{
	size_t	o = 0;
	char	c;

	if (dstlen == 0)
		return;
	for (; (c = *v) != '\0'; v++) {
		if (c == '\\' || c == '"' || c == '\n') {
			if (o + 2 >= dstlen)
				break;
			dst[o++] = '\\';
			dst[o++] = c == '\n' ? 'n' : c;
		} else {
			if (o + 1 >= dstlen)
				break;
			dst[o++] = c;
		}
	}
	dst[o] = '\0';
}

static void
put_value(FILE *fp, double v)
{
	if (v == (double)(int64_t)v && v > -9007199254740992.0 &&
	    v < 9007199254740992.0)
		fprintf(fp, "%lld", (long long)v);
	else
		fprintf(fp, "%.9g", v);
}

/* {a="x",b="y"} with an optional le, or nothing at all. */
static void
put_labels(FILE *fp, const struct metric *m, const struct series *s,
    const char *le)
{
	char	esc[2 * METRIC_VALUE_MAX + 1];
	size_t	i;

	if (m->m_nlabels == 0 && le == NULL)
		return;
	fputc('{', fp);
	for (i = 0; i < m->m_nlabels; i++) {
		metric_escape(s->s_values[i], esc, sizeof(esc));
		fprintf(fp, "%s%s=\"%s\"", i > 0 ? "," : "", m->m_labels[i],
		    esc);
	}
	if (le != NULL)
		fprintf(fp, "%sle=\"%s\"", m->m_nlabels > 0 ? "," : "", le);
	fputc('}', fp);
}

static void
put_histogram(FILE *fp, const struct metric *m, const struct series *s)
{
	uint64_t	cum = 0;
	char		le[32];
	size_t		i;

	for (i = 0; i < m->m_nbounds; i++) {
		cum += s->s_buckets[i];
		snprintf(le, sizeof(le), "%g", m->m_bounds[i]);
		fprintf(fp, "%s_bucket", m->m_name);
		put_labels(fp, m, s, le);
		fprintf(fp, " %llu\n", (unsigned long long)cum);
	}
	fprintf(fp, "%s_bucket", m->m_name);
	put_labels(fp, m, s, "+Inf");
	fprintf(fp, " %llu\n%s_sum", (unsigned long long)s->s_count,
	    m->m_name);
	put_labels(fp, m, s, NULL);
	fputc(' ', fp);
	put_value(fp, s->s_value);
	fprintf(fp, "\n%s_count", m->m_name);
	put_labels(fp, m, s, NULL);
	fprintf(fp, " %llu\n", (unsigned long long)s->s_count);
}

static void
put_metric(FILE *fp, const struct metric *m)
{
	static const char *const types[] = { "counter", "gauge", "histogram" };
	const struct series	*s;
	size_t			 i;

	fprintf(fp, "# HELP %s %s\n# TYPE %s %s\n", m->m_name, m->m_help,
	    m->m_name, types[m->m_type]);
	for (i = 0; i < m->m_nseries; i++) {
		s = &m->m_series[i];
		if (m->m_type == METRIC_HISTOGRAM) {
			put_histogram(fp, m, s);
			continue;
		}
		fputs(m->m_name, fp);
		put_labels(fp, m, s, NULL);
		fputc(' ', fp);
		put_value(fp, s->s_value);
		fputc('\n', fp);
	}
}

char *
metrics_render(void)
{
	const struct metric	*m;
	char			*text = NULL;
	size_t			 len = 0;
	FILE			*fp;

	if ((fp = open_memstream(&text, &len)) == NULL)
		fatal("open_memstream");
	for (m = metrics_head; m != NULL; m = m->m_next)
		put_metric(fp, m);
	if (fclose(fp) != 0)
		fatal("metrics");
	return text;
}

void
metrics_free(void)
{
	struct metric	*m;
	size_t		 i, j;

	while ((m = metrics_head) != NULL) {
		metrics_head = m->m_next;
		for (i = 0; i < m->m_nseries; i++)
			for (j = 0; j < m->m_nlabels; j++)
				free(m->m_series[i].s_values[j]);
		for (j = 0; j < m->m_nlabels; j++)
			free(m->m_labels[j]);
		free(m->m_series);
		free(m);
	}
	metrics_tail = &metrics_head;
}

double
metrics_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
