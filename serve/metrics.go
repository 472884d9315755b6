package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus series. Every series is labelled
// with the model and version it is about.
type metrics struct {
	requests  *prometheus.CounterVec   // model, version, protocol, outcome
	latency   *prometheus.HistogramVec // model, version, protocol
	queue     *prometheus.HistogramVec // model, version
	compute   *prometheus.HistogramVec // model, version
	batch     *prometheus.HistogramVec // model, version
	restarts  *prometheus.CounterVec   // model, version, backend
	inflight  *prometheus.GaugeVec     // model, version
	queueLen  *prometheus.Desc
	instances *prometheus.Desc
}

// latencyBuckets span 50 µs to 10 s.
var latencyBuckets = prometheus.ExponentialBucketsRange(50e-6, 10, 20)

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	mv := []string{"model", "version"}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "attnrun_requests_total",
			Help: "Inference requests answered, by model, version, protocol (http, grpc) and outcome (success, or the error class: invalid_argument, not_found, too_large, unavailable, deadline_exceeded, canceled, internal).",
		}, []string{"model", "version", "protocol", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "attnrun_request_duration_seconds",
			Help:    "Time from a decoded inference request to its answer (queue and compute), by model, version and protocol.",
			Buckets: latencyBuckets,
		}, []string{"model", "version", "protocol"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "attnrun_queue_duration_seconds",
			Help:    "Time a request waited for a free instance and for its batch to form.",
			Buckets: latencyBuckets,
		}, mv),
		compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "attnrun_compute_duration_seconds",
			Help:    "Time of one model run on an instance (a batch counts once), including a retry after a backend died.",
			Buckets: latencyBuckets,
		}, mv),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "attnrun_batch_size",
			Help:    "Requests stacked into one model run (1 without dynamic batching).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}, mv),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "attnrun_backend_restarts_total",
			Help: "Backend processes replaced by a fresh one after they ended (killed, crashed, or killed for not answering), whether a run found them dead or not.",
		}, []string{"model", "version", "backend"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "attnrun_inflight_requests",
			Help: "Inference requests accepted and not yet answered (queued or running).",
		}, mv),
		queueLen:  prometheus.NewDesc("attnrun_queue_length", "Requests waiting for an instance.", mv, nil),
		instances: prometheus.NewDesc("attnrun_model_instances", "Backend instances of each loaded model version.", mv, nil),
	}
	reg.MustRegister(m.requests, m.latency, m.queue, m.compute, m.batch, m.restarts, m.inflight,
		&loadedCollector{s: s, m: m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// forget drops the gauges of a version that is no longer loaded.
func (m *metrics) forget(model, version string) {
	m.inflight.DeleteLabelValues(model, version)
}

// loadedCollector reports the queue length and instances of every loaded
// model version at scrape time.
type loadedCollector struct {
	s *Server
	m *metrics
}

func (c *loadedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.queueLen
	ch <- c.m.instances
}

func (c *loadedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.s.loadedVersions() {
		ch <- prometheus.MustNewConstMetric(c.m.queueLen, prometheus.GaugeValue, float64(l.sched.QueueLength()), l.name, l.version)
		ch <- prometheus.MustNewConstMetric(c.m.instances, prometheus.GaugeValue, float64(l.runner.Instances()), l.name, l.version)
	}
}
