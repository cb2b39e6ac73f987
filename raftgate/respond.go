package raftgate

import (
	"errors"
	"net/http"
	"os"
	"time"
)

// writeDeadlines gives every write of a response a deadline of
// Config.WriteTimeout, renewed as its bytes go out: a client that stops
// reading (a large GET /v1/state to a process that never reads it, a
// stalled peer) held the handler's goroutine, its encoded answer and the
// connection for as long as it stayed connected. A response is cut, and
// its connection closed, once the client takes none of its bytes for
// WriteTimeout; one that keeps taking them, however slowly, and a
// long-poll, which writes nothing while it waits, are not.
func (n *Node) writeDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: n.cfg.WriteTimeout, cut: n.met.responsesCut.Inc}
		// A deadline an earlier response on this connection set must
		// not cut this one while its handler waits.
		dw.rc.SetWriteDeadline(time.Time{})
		// What the server writes once the handler returns (the
		// buffered rest, the end of a chunked body) has one too.
		defer dw.renew()
		h.ServeHTTP(dw, r)
	})
}

// writeChunk is the most a deadlineWriter writes under one deadline, so
// a large answer written at once gets a deadline for each part of it.
const writeChunk = 64 << 10

// deadlineWriter renews its connection's write deadline before every
// part of a response it writes.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	cut     func()
	counted bool
}

func (d *deadlineWriter) renew() { d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) }

func (d *deadlineWriter) WriteHeader(code int) {
	d.renew()
	d.ResponseWriter.WriteHeader(code)
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		part := b[:min(len(b), writeChunk)]
		d.renew()
		k, err := d.ResponseWriter.Write(part)
		written += k
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !d.counted {
				d.counted = true
				d.cut()
			}
			return written, err
		}
		b = b[len(part):]
	}
	return written, nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
