package coordinator

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/objstore/faults"
	"github.com/shardproof/shardproof/objstore/file"
)

// age makes every object under key prefix of the file store in dir look
// written d ago.
func age(t *testing.T, dir, prefix string, d time.Duration) {
	t.Helper()
	past := time.Now().Add(-d)
	err := filepath.WalkDir(filepath.Join(dir, filepath.FromSlash(prefix)), func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, past, past)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// prune runs PruneJobs and returns what it did with each job.
func prune(t *testing.T, s objstore.Store, o PruneOptions) map[manifest.Digest]PrunedJob {
	t.Helper()
	got := map[manifest.Digest]PrunedJob{}
	if err := PruneJobs(t.Context(), s, o, func(j PrunedJob) error { got[j.Plan] = j; return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// A job's age is judged by the store's clock, which times its objects,
// not by this machine's: through a store whose clock runs 3 hours ahead
// of this machine's (a job written 2 hours ago looked an hour in the
// future, and was kept) or behind it (a job written just now looked 3
// hours old, and was deleted), a prune with --older-than 1h keeps the
// job written just now and deletes the one written 2 hours ago, by the
// store's clock. The one probe it reads the clock by is gone after it,
// as is one a prune killed an hour before left, and neither is taken
// for a job. A dry run writes nothing, and says its ages are estimates.
func TestPruneJobsUnderClockSkew(t *testing.T) {
	for _, shift := range []time.Duration{-3 * time.Hour, 3 * time.Hour} {
		t.Run(shift.String(), func(t *testing.T) {
			dir := t.TempDir()
			real, err := file.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { real.Close() })
			s := &faults.ClockSkew{Store: real, Shift: shift}
			ctx := t.Context()
			young, old := manifest.Sum([]byte("job written just now")), manifest.Sum([]byte("job written 2 hours ago"))
			for _, pd := range []manifest.Digest{young, old} {
				for _, k := range []string{"map/0/commit.json", "map/0/r0.arrow", "reduce/0/commit.json"} {
					if _, err := real.Put(ctx, jobPrefix(pd)+k, strings.NewReader(k), objstore.PutOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			age(t, dir, jobPrefix(old), 2*time.Hour)
			// Probes of other prunes: one killed 2 hours ago, one
			// running now.
			for _, name := range []string{"killed", "running"} {
				if _, err := real.Put(ctx, pruneClockPrefix+name+"/probe", strings.NewReader(""), objstore.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			age(t, dir, pruneClockPrefix+"killed/", 2*time.Hour)
			listing := func() []objstore.ObjectInfo {
				page, err := real.List(ctx, JobsPrefix, "", 1000)
				if err != nil {
					t.Fatal(err)
				}
				return page.Objects
			}

			before := listing()
			dry := prune(t, s, PruneOptions{OlderThan: time.Hour, DryRun: true})
			if len(dry) != 2 || !dry[young].Estimated || !dry[old].Estimated {
				t.Fatalf("dry run: %+v, want both jobs, their ages estimated", dry)
			}
			if after := listing(); !slices.Equal(after, before) {
				t.Fatalf("the dry run wrote: %d objects under %s before, %d after", len(before), JobsPrefix, len(after))
			}

			got := prune(t, s, PruneOptions{OlderThan: time.Hour})
			if j := got[young]; len(got) != 2 || j.Action != PruneKept || j.Estimated || j.Age < 0 || j.Age > time.Hour {
				t.Errorf("the job written just now: %+v, want kept, its age under an hour by the store's clock", j)
			}
			if j := got[old]; j.Action != PruneDeleted || j.Age < 2*time.Hour || j.Age > 3*time.Hour {
				t.Errorf("the job written 2 hours ago: %+v, want deleted, its age 2 hours by the store's clock", j)
			}
			if n := jobKeys(t, real, young, ""); n != 3 {
				t.Fatalf("the job kept has %d objects, want its 3", n)
			}
			if n := jobKeys(t, real, old, ""); n != 0 {
				t.Fatalf("the job deleted has %d objects left", n)
			}
			var probes []string
			for _, o := range listing() {
				if strings.HasPrefix(o.Key, pruneClockPrefix) {
					probes = append(probes, strings.TrimPrefix(o.Key, pruneClockPrefix))
				}
			}
			if !slices.Equal(probes, []string{"running/probe"}) {
				t.Fatalf("clock probes left: %v, want only the running prune's", probes)
			}
		})
	}
}

// A negative age is USAGE, and deletes nothing.
func TestPruneJobsNegativeAge(t *testing.T) {
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pd := manifest.Sum([]byte("job of a prune with a negative age"))
	if _, err := s.Put(t.Context(), jobPrefix(pd)+"map/0/commit.json", strings.NewReader("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	err = PruneJobs(t.Context(), s, PruneOptions{OlderThan: -time.Hour}, func(PrunedJob) error { return fmt.Errorf("called") })
	if errcode.Of(err) != errcode.Usage || jobKeys(t, s, pd, "") != 1 {
		t.Fatalf("PruneJobs with a negative age: %v, %d objects left; want USAGE and the job whole", err, jobKeys(t, s, pd, ""))
	}
}
