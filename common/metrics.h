/*
 * Metrics in the Prometheus text exposition format.  Each process keeps
 * its own: counters, gauges and fixed-bucket histograms, each with a fixed
 * list of label names.  Label values often come from outside (tool names
 * from MCP servers, model names from callers), so a metric holds at most
 * METRIC_SERIES_MAX series; further label sets are counted together under
 * the values "other".
 */
#ifndef MCPBROKER_METRICS_H
#define MCPBROKER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRIC_SERIES_MAX	200
#define METRIC_LABELS_MAX	4
#define METRIC_BUCKETS_MAX	16
#define METRIC_VALUE_MAX	128	/* a label value's bytes, beyond: cut */

enum metric_type {
	METRIC_COUNTER,
	METRIC_GAUGE,
	METRIC_HISTOGRAM
};

struct metric;

/*
 * labels: comma-separated names ("server,tool,outcome"), or "".  buckets:
 * a histogram's upper bounds, ascending (+Inf is implied); NULL otherwise.
 * The name and help are static strings.
 */
struct metric	*metric_new(enum metric_type, const char *name,
		    const char *help, const char *labels,
		    const double *buckets, size_t nbuckets);
/* As many label values as the metric has label names. */
void		 metric_add(struct metric *, double, ...);
void		 metric_set(struct metric *, double, ...);
void		 metric_observe(struct metric *, double, ...);
/* The exposition text of every metric of this process (malloc'd). */
char		*metrics_render(void);
/* Drop every metric (tests). */
void		 metrics_free(void);
/* A monotonic clock in seconds, for durations. */
double		 metrics_now(void);
/* v with \, " and newline escaped, as a label value is written. */
void		 metric_escape(const char *v, char *dst, size_t dstlen);

/* Bounds for latencies, in seconds. */
extern const double	metric_latency_buckets[];
extern const size_t	metric_latency_nbuckets;

#endif
