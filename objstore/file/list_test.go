package file_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/file"
)

// BenchmarkListLarge lists every key of a job's prefix laid out as a
// verification writes it, jobs/<plan>/map/<task>/r<reducer>.arrow and
// .../commit.json, a page of the default size at a time, and reports the
// directory entries read per full listing (entries/op).
func BenchmarkListLarge(b *testing.B) {
	for _, n := range []struct{ tasks, reducers int }{{200, 99}, {1000, 99}} {
		keys := n.tasks * (n.reducers + 1)
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			s, err := file.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			prefix := "jobs/" + strings.Repeat("ab", 32) + "/"
			put := func(key string) {
				if _, err := s.Put(ctx, key, strings.NewReader("x"), objstore.PutOptions{Ephemeral: true}); err != nil {
					b.Fatal(err)
				}
			}
			for task := range n.tasks {
				for r := range n.reducers {
					put(fmt.Sprintf("%smap/%d/r%d.arrow", prefix, task, r))
				}
				put(fmt.Sprintf("%smap/%d/commit.json", prefix, task))
			}
			read, restore := file.CountListEntries()
			defer restore()
			b.ResetTimer()
			for b.Loop() {
				got, after := 0, ""
				for {
					page, err := s.List(ctx, prefix, after, 0)
					if err != nil {
						b.Fatal(err)
					}
					got += len(page.Objects)
					if page.Next == "" {
						break
					}
					after = page.Next
				}
				if got != keys {
					b.Fatalf("listed %d keys, want %d", got, keys)
				}
			}
			b.ReportMetric(float64(read())/float64(b.N), "entries/op")
		})
	}
}
