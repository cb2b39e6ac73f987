package s3

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"
)

// These tests run in a synctest bubble: its clock moves only when every
// goroutine in it waits, so a peer that sleeps 50 ms between reads is
// silent for exactly 50 ms, however loaded the machine. On the real
// clock, a reader woken late under load (load average 12 on 2 cores)
// was silent past the bound and the steady write failed.

// silenceConn bounds silence, not transfers: over net.Pipe (no buffer: a
// Write returns once the other end has read it all), a 1 MiB Write that
// the other end reads 64 KiB at a time, every 50 ms, takes 0.8 s and
// succeeds under a 200 ms bound, where one deadline on the whole call
// cut it; a Write the other end never reads fails with a timeout.
func TestSilenceConnWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		c := &silenceConn{Conn: a, limit: 200 * time.Millisecond}
		done := make(chan error, 1)
		go func() {
			buf := make([]byte, 64<<10)
			for range 16 {
				time.Sleep(50 * time.Millisecond)
				if _, err := io.ReadFull(b, buf); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		start := time.Now()
		n, err := c.Write(make([]byte, 1<<20))
		if err != nil || n != 1<<20 {
			b.Close() // ends the reader, which the bubble must see exit
			<-done
			t.Fatalf("steady write: %d bytes, %v", n, err)
		}
		if d := time.Since(start); d != 800*time.Millisecond {
			t.Fatalf("steady write took %s, want the reader's 16 × 50 ms", d)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		if _, err := c.Write([]byte("never read")); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write nobody reads: %v, want a timeout", err)
		}
		if d := time.Since(start); d != 200*time.Millisecond {
			t.Fatalf("write nobody reads failed after %s, want the 200 ms bound", d)
		}
	})
}

// The transport starts reading for an answer before it writes the
// request: a read pending since then is not cut while the request is
// still being written, only once the other end is silent for the bound
// after the last write.
func TestSilenceConnWriteMovesReadDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		c := &silenceConn{Conn: a, limit: 300 * time.Millisecond}
		read := make(chan error, 1)
		go func() {
			_, err := io.ReadFull(c, make([]byte, 2))
			read <- err
		}()
		go io.Copy(io.Discard, b)
		// Writes for 0.8 s, every 100 ms: never 300 ms of silence.
		for range 8 {
			time.Sleep(100 * time.Millisecond)
			if _, err := c.Write([]byte("request")); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		select {
		case err := <-read:
			t.Fatalf("read pending while the request was written ended before the answer: %v", err)
		default:
		}
		if _, err := b.Write([]byte("ok")); err != nil {
			t.Fatalf("answer: %v", err)
		}
		if err := <-read; err != nil {
			t.Fatalf("read pending while the request was written: %v", err)
		}
		// Then silence: the next read times out, after the bound.
		start := time.Now()
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read of a silent peer: %v, want a timeout", err)
		}
		if d := time.Since(start); d != 300*time.Millisecond {
			t.Fatalf("read of a silent peer failed after %s, want the 300 ms bound", d)
		}
	})
}
