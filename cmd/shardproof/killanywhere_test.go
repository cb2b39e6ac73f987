//go:build unix

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage/stagetest"
)

// wholeObjects checks what a killed process left in file store dir:
// every version of a blob hashes to the blob's name, and every version of
// a JSON document (commit and hold records, the plan's report record)
// is whole JSON. A half-written object would be visible under its key;
// what a killed Put wrote sits in @tmp, which no read sees.
func wholeObjects(t *testing.T, dir string) (versions int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "@tmp" {
			return fs.SkipDir
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), "@") {
			return nil
		}
		versions++
		key := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(p, dir+"/")))
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(key, "blobs/sha256/"):
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != strings.TrimPrefix(key, "blobs/sha256/") {
				t.Errorf("blob %s, version %s: its %d bytes hash to %x", key, d.Name(), len(b), sum)
			}
		case strings.HasSuffix(key, ".json") || strings.Contains(key, "/hold/") || strings.Contains(key, "/report.v1"):
			if !json.Valid(b) {
				t.Errorf("%s, version %s: %d bytes that are not whole JSON: %q", key, d.Name(), len(b), b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return versions
}

// TestVerifyCLIKilledAnywhere: a verification killed with SIGKILL at
// points spread over an undisturbed run's time (mid-Put, mid-task,
// mid-aggregation, mid-removal, wherever the signal lands), rather than
// at the files TestVerifyCLIKilledAndResumed waits for, leaves no
// half-written object under a real key, and both `verify --resume` of
// its plan and a fresh verify then print the undisturbed run's report
// (but its execution section), and leave no job behind.
func TestVerifyCLIKilledAnywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 20 verifications")
	}
	r := newRelease(t)
	want := r.localReport(t)
	if err := coordinator.RemoveJob(t.Context(), r.store, want.Execution.Plan); err != nil {
		t.Fatal(err)
	}
	// How long an undisturbed run of the killed command takes here.
	_, cmd, stdout := planResume(t, r, "undisturbed")
	start := time.Now()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	sameReport(t, "undisturbed resume", want, cliReport(t, cliResult{stdout: stdout.String()}))

	const kills = 10
	killed := 0
	for i := 1; i <= kills; i++ {
		at := took * time.Duration(i) / (kills + 1)
		pd, cmd, _ := planResume(t, r, fmt.Sprint("killed anywhere ", i))
		started := time.Now()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-exited:
			// Faster than the first run: the later kills come sooner.
			took = min(took, time.Since(started))
			t.Logf("kill %d at %v: the run had finished", i, at)
			continue
		case <-time.After(at):
		}
		syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		if status := exitStatusOf(<-exited); status != -1 {
			t.Logf("kill %d at %v: the run exited (%d) first", i, at, status)
			continue
		}
		killed++
		versions := wholeObjects(t, r.dir)
		finished := false
		if _, err := r.store.Head(t.Context(), coordinator.PlanReportKey(pd), ""); err == nil {
			finished = true
		} else if !objstore.IsNotExist(err) {
			t.Fatal(err)
		}
		t.Logf("kill %d at %v: %d versions in the store, report recorded %v", i, at.Round(time.Millisecond), versions, finished)

		what := fmt.Sprintf("resume after kill -9 at %v", at)
		js := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", pd.String(), "--json"))
		sameReport(t, what, want, js)
		if js.Execution.Plan != pd {
			t.Fatalf("%s: report of plan %s, want %s", what, js.Execution.Plan, pd)
		}
		if _, err := os.Stat(filepath.Join(r.dir, "jobs", pd.Hex())); !os.IsNotExist(err) {
			t.Fatalf("%s: the job's files are left: %v", what, err)
		}
		fresh := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--json"))
		sameReport(t, fmt.Sprintf("fresh verify after kill -9 at %v", at), want, fresh)
		if jobs, err := coordinator.ListJobs(t.Context(), r.store); err != nil || len(jobs) != 0 {
			t.Fatalf("after kill -9 at %v: jobs left for prune-jobs: %+v, %v", at, jobs, err)
		}
	}
	if killed == 0 {
		t.Fatalf("none of %d runs was killed before it finished", kills)
	}
}

// TestPublishKilledAnywhere: a publish killed with SIGKILL at points
// spread over an undisturbed publish's time (its verification, the
// register, the compare-and-swap) leaves the alias at its old root and
// generation or at the new ones, never anything else, and no half-written
// object in the store; the same publish run again then moves the alias
// to the new root (or finds it there).
func TestPublishKilledAnywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 16 publishes")
	}
	ctx := t.Context()
	dir, s := tempFileStore(t)
	old := stagetest.Synth(t, s, 600, 2, 1)
	node, g := startLeader(t)
	publish := func(alias string, root fmt.Stringer, gen int) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "publish", "--store", dir, "--gate", node.URL(), "-q",
			"--alias", alias, "--root", root.String(), "--expect-generation", fmt.Sprint(gen))
		cmd.Env = cliEnv()
		cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, &bytes.Buffer{}
		return cmd
	}
	run := func(cmd *exec.Cmd) {
		t.Helper()
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v\n%s%s", cmd.Args[1:], err, cmd.Stdout, cmd.Stderr)
		}
	}
	// How long an undisturbed publish of a new release, verification
	// included, takes here.
	probe := stagetest.Synth(t, s, 600, 2, 100)
	run(publish("probe", old.Root, 0))
	start := time.Now()
	run(publish("probe", probe.Root, 1))
	took := time.Since(start)

	const kills = 8
	killed := 0
	for i := 1; i <= kills; i++ {
		alias := fmt.Sprint("main-", i)
		run(publish(alias, old.Root, 0))
		// A release of its own, which no earlier publish verified.
		next := stagetest.Synth(t, s, 600, 2, int64(100+i))
		// The last kills land about when an undisturbed publish ends:
		// around its compare-and-swap.
		at := took * time.Duration(i) / kills
		cmd := publish(alias, next.Root, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			took = min(took, time.Since(started))
			t.Logf("kill %d at %v: the publish had finished (%v)", i, at, err)
		case <-time.After(at):
			cmd.Process.Signal(syscall.SIGKILL)
			if status := exitStatusOf(<-exited); status != -1 {
				t.Logf("kill %d at %v: the publish exited (%d) first", i, at, status)
			} else {
				killed++
			}
		}
		al, err := g.Alias(ctx, alias)
		if err != nil {
			t.Fatal(err)
		}
		moved := al.Generation == 2 && al.Root == next.Root
		if !moved && (al.Generation != 1 || al.Root != old.Root) {
			t.Fatalf("kill %d at %v: alias at generation %d root %s; want 1 %s or 2 %s", i, at, al.Generation, al.Root, old.Root, next.Root)
		}
		wholeObjects(t, dir)
		t.Logf("kill %d at %v: alias moved %v", i, at.Round(time.Millisecond), moved)
		run(publish(alias, next.Root, 1))
		if al, err := g.Alias(ctx, alias); err != nil || al.Generation != 2 || al.Root != next.Root {
			t.Fatalf("kill %d at %v: the publish run again left the alias at %+v, %v; want generation 2 %s", i, at, al, err, next.Root)
		}
	}
	if killed == 0 {
		t.Fatalf("none of %d publishes was killed before it finished", kills)
	}
}

// versionFiles counts the version files in file store dir.
func versionFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "@tmp" {
			return fs.SkipDir
		}
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "@") {
			n++
		}
		return nil
	})
	return n
}

// TestSynthKilledAnywhere: a synth killed with SIGKILL anywhere in its
// run (once it has written its first object, a quarter, half, three
// quarters of them, all but the last: the signal lands in the middle of
// the next) leaves only whole objects in the store it was making, and
// synth run again into that store writes the undisturbed run's release,
// root and snapshot alike.
func TestSynthKilledAnywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 11 synths")
	}
	synth := func(dir string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "synth", "--samples", "6000", "--shards", "6", "--seed", "3", "--store", dir)
		cmd.Env = cliEnv("TMPDIR=" + t.TempDir())
		cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, &bytes.Buffer{}
		return cmd
	}
	undisturbed := filepath.Join(t.TempDir(), "store")
	first := synth(undisturbed)
	if err := first.Run(); err != nil {
		t.Fatalf("synth: %v\n%s", err, first.Stderr)
	}
	want := first.Stdout.(*bytes.Buffer).String()
	all := versionFiles(undisturbed)

	killed := 0
	for _, n := range []int{1, all / 4, all / 2, all * 3 / 4, all - 1} {
		dir := filepath.Join(t.TempDir(), "store")
		cmd := synth(dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
	poll:
		for versionFiles(dir) < n {
			select {
			case err := <-exited:
				exited <- err
				break poll
			case <-time.After(200 * time.Microsecond):
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		if status := exitStatusOf(<-exited); status == -1 {
			killed++
		}
		versions := wholeObjects(t, dir)
		t.Logf("killed after %d of %d versions: %d in the store", n, all, versions)
		again := synth(dir)
		if err := again.Run(); err != nil {
			t.Fatalf("synth again after a kill at %d of %d versions: %v\n%s", n, all, err, again.Stderr)
		}
		if got := again.Stdout.(*bytes.Buffer).String(); got != want {
			t.Fatalf("synth again after a kill at %d of %d versions printed\n%s\nwant\n%s", n, all, got, want)
		}
	}
	if killed == 0 {
		t.Fatal("no synth was killed before it finished")
	}
}
