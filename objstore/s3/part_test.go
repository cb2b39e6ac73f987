package s3_test

import (
	"bytes"
	"io"
	"runtime"
	"testing"

	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/s3/s3test"
)

// onlyReader hides every method of its reader but Read, as a pipe would:
// a body of unknown length.
type onlyReader struct{ io.Reader }

// A Put of unknown length (a merged shuffle file streamed through a
// pipe) holds one part at most, and a small one about its size: with a
// 5 MiB threshold, a 12 MiB body allocated 16.8 MB (io.ReadAll's growing
// buffer up to the threshold, then a second buffer for the parts), now
// under 7 MiB, the SDK's own allocations included. Every body reads back
// whole, at and around the threshold too, of known length or not.
func TestPutMemory(t *testing.T) {
	const threshold = 5 << 20
	st := open(t, s3test.Start(t)+"&multipart_threshold=5242880")
	ctx := t.Context()
	for _, c := range []struct {
		size, most int
	}{
		{0, 1 << 20},
		{100 << 10, 1 << 20},
		{threshold - 1, threshold + 2<<20},
		{threshold, threshold + 2<<20},
		{threshold + 1, threshold + 2<<20},
		{12 << 20, threshold + 2<<20},
	} {
		body := make([]byte, c.size)
		for i := range body {
			body[i] = byte(i*7 + i>>13)
		}
		for _, known := range []bool{false, true} {
			var r io.Reader = onlyReader{bytes.NewReader(body)}
			o := objstore.PutOptions{}
			if known {
				r, o.Size = bytes.NewReader(body), int64(c.size)
			}
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			v, err := st.Put(ctx, "k", r, o)
			runtime.ReadMemStats(&m1)
			if err != nil {
				t.Fatalf("%d bytes (length known: %v): %v", c.size, known, err)
			}
			if got := m1.TotalAlloc - m0.TotalAlloc; got > uint64(c.most) {
				t.Errorf("Put of %d bytes (length known: %v) allocated %d bytes, want at most %d", c.size, known, got, c.most)
			}
			rc, err := st.Get(ctx, "k", v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%d bytes (length known: %v) read back as %d, %v", c.size, known, len(got), err)
			}
		}
	}
}
