package trainer

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Handler serves the worker's probes and metrics:
//
//	/readyz   200 only while the run's barrier is open and its permit is
//	          open; 503 with the state and reason otherwise. Kubernetes
//	          gates the trainer container on it.
//	/healthz  200 unless the worker has failed (then 500 with the code).
//	/status   the worker's Status as JSON.
//	/metrics  Prometheus metrics labelled by release digest.
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		s := w.Status()
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.State == StateReady {
			fmt.Fprintf(rw, "ready run=%s rank=%d root=%s epoch=%d\n", s.Run, s.Rank, s.Root, s.Epoch)
			return
		}
		rw.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(rw, "not ready: %s", s.State)
		switch {
		case s.Code != "":
			fmt.Fprintf(rw, " %s: %s", s.Code, s.Reason)
		case s.Reason != "":
			// A rank waiting for the reassignment that includes it, a
			// closed permit: why it is not ready yet.
			fmt.Fprintf(rw, ": %s", s.Reason)
		}
		fmt.Fprintln(rw)
	})
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, r *http.Request) {
		s := w.Status()
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.State == StateFailed {
			rw.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(rw, "failed %s: %s\n", s.Code, s.Reason)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /status", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		json.NewEncoder(rw).Encode(w.Status())
	})
	mux.Handle("GET /metrics", w.cfg.Metrics.Handler())
	return mux
}
