package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/coordinator"
	"github.com/shardproof/shardproof/internal/canon"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/stage"
	"github.com/shardproof/shardproof/stage/stagetest"
)

var (
	reportLine   = regexp.MustCompile(`(?m)^report (sha256:[0-9a-f]{64})$`)
	progressLine = regexp.MustCompile(`(?m)^shardproof: verify: checked (\d+)/(\d+) files`)
)

// `shardproof verify` as a user runs it: exit 0 with a summary naming the
// stored report for a clean release, --json printing that report.
func TestVerifyCLIClean(t *testing.T) {
	r := newRelease(t)
	res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String())
	if res.status != errcode.ExitOK || !strings.Contains(res.stdout, "verdict  VERIFIED\n") {
		t.Fatalf("exit %d\n%s\n%s", res.status, res.stdout, res.stderr)
	}
	// Not a terminal: plain progress lines on stderr, ending with every
	// release shard mapped and, the release matching its snapshot, every
	// member skipped (stage wrote the snapshot's leaf index).
	// Every line counts against the same total, shards and members.
	shards, members := len(r.res.Release.Shards), len(r.res.SnapshotDoc.Members)
	files := shards + members
	if want := fmt.Sprintf("shardproof: verify: checked %d/%d files, ", files, files); !strings.Contains(res.stderr, want) ||
		!strings.Contains(res.stderr, fmt.Sprintf(", %d snapshot members skipped (leaf index)\n", members)) {
		t.Errorf("stderr lacks %q and the skipped members:\n%s", want, res.stderr)
	}
	for _, m := range progressLine.FindAllStringSubmatch(res.stderr, -1) {
		if m[2] != strconv.Itoa(files) {
			t.Errorf("progress line %q counts against %s files, want %d", m[0], m[2], files)
		}
	}
	if want := fmt.Sprintf("members  0 read, %d skipped", members); !strings.Contains(res.stdout, want) {
		t.Errorf("summary lacks %q:\n%s", want, res.stdout)
	}
	// --read-all-members maps every file, members too.
	all := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--read-all-members")
	if want := fmt.Sprintf("shardproof: verify: checked %d/%d files, ", files, files); all.status != errcode.ExitOK || !strings.Contains(all.stderr, want) || strings.Contains(all.stderr, "skipped") || strings.Contains(all.stdout, "members ") {
		t.Errorf("--read-all-members: exit %d, want %q in\n%s\n%s", all.status, want, all.stderr, all.stdout)
	}
	m := reportLine.FindStringSubmatch(res.stdout)
	if m == nil {
		t.Fatalf("no report line in\n%s", res.stdout)
	}
	d := manifest.MustParseDigest(m[1])
	b, _, err := objstore.ReadBlob(t.Context(), r.store, d, manifest.MaxDocumentSize)
	if err != nil {
		t.Fatalf("report %s not in the store: %v", d, err)
	}
	stored, err := manifest.DecodeReport(b)
	if err != nil || stored.Root != r.res.Root || stored.Verdict != manifest.Verified {
		t.Fatalf("stored report: %+v, %v", stored, err)
	}
	js := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--json", "--map-tasks", "1", "--reducers", "3"))
	sameReport(t, "verify --json", stored, js)
}

// verify deletes its job's shuffle files and commit records once the
// report is stored, and keeps them with --keep-job.
func TestVerifyCLIRemovesJob(t *testing.T) {
	r := newRelease(t)
	jobKeys := func(pd manifest.Digest) []string {
		page, err := r.store.List(t.Context(), "jobs/"+pd.Hex()+"/", "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, o := range page.Objects {
			keys = append(keys, o.Key)
		}
		return keys
	}
	kept := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--json", "--keep-job", "--reducers", "2"))
	keys := jobKeys(kept.Execution.Plan)
	var commits, outputs int
	for _, k := range keys {
		switch {
		case strings.HasSuffix(k, "/commit.json"):
			commits++
		case strings.HasSuffix(k, ".arrow"):
			outputs++
		}
	}
	if commits != kept.Execution.MapTasks+2 || outputs != 2*kept.Execution.MapTasks {
		t.Fatalf("--keep-job kept %d commit records and %d shuffle files (%d map tasks, 2 reducers): %q", commits, outputs, kept.Execution.MapTasks, keys)
	}
	res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--json")
	removed := cliReport(t, res)
	if keys := jobKeys(removed.Execution.Plan); len(keys) != 0 {
		t.Fatalf("after verify, its job still holds %q", keys)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs", removed.Execution.Plan.Hex())); !os.IsNotExist(err) {
		t.Fatalf("job directory left behind: %v", err)
	}
	if len(jobKeys(kept.Execution.Plan)) != len(keys) {
		t.Fatal("removing one job touched another")
	}
	sameReport(t, "kept vs removed", kept, removed)
	if strings.Contains(res.stderr, "not removed") {
		t.Fatalf("stderr: %s", res.stderr)
	}
}

// An INVALID release: exit 1, and the summary lists each non-zero count
// with its code and the shard-level evidence.
func TestVerifyCLIInvalid(t *testing.T) {
	r := newRelease(t)
	data := stagetest.ShardBytes(t, r.store, r.res.Release.Shards[0])
	bad := stagetest.ReplaceShardBytes(t, r.store, r.res, 0, stagetest.Truncate(data, 1))
	res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", bad.Root.String())
	if res.status != errcode.ExitInvalid {
		t.Fatalf("exit %d, want %d\n%s\n%s", res.status, errcode.ExitInvalid, res.stdout, res.stderr)
	}
	for _, want := range []string{"verdict  INVALID", "DIGEST_MISMATCH        1", "SIZE_MISMATCH          1",
		"MISSING_MEMBER", "TUPLE_ROOT_MISMATCH    1", "shard-00000-of-00005: SIZE_MISMATCH: manifest.size="} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, res.stdout)
		}
	}
	if reportLine.FindStringSubmatch(res.stdout) == nil {
		t.Errorf("no report line in\n%s", res.stdout)
	}
}

// Usage errors exit 2, operational errors (the root is not in the store)
// exit 3, each with its code on stderr.
func TestVerifyCLIErrors(t *testing.T) {
	r := newRelease(t)
	for _, c := range []struct {
		args   []string
		status int
		code   errcode.Code
	}{
		{[]string{"verify", "--store", r.dir}, errcode.ExitUsage, errcode.Usage},
		{[]string{"verify", "--store", r.dir, "--root", "sha256:ABC"}, errcode.ExitUsage, errcode.Usage},
		{[]string{"verify", "--store", r.dir, "--root", r.res.Root.String(), "--no-such-flag"}, errcode.ExitUsage, errcode.Usage},
		{[]string{"verify", "--store", r.dir, "--root", manifest.Sum([]byte("absent")).String()}, errcode.ExitError, errcode.NotFound},
		{[]string{"verify", "--store", r.dir, "--root", r.res.Root.String(), "--shuffle-checksum", "md5"}, errcode.ExitUsage, errcode.Usage},
		// Another process wrote an engine's shuffle files: sha256 only.
		{[]string{"verify", "--store", r.dir, "--root", r.res.Root.String(), "--executor", "process", "--shuffle-checksum", "xxh64"}, errcode.ExitUsage, errcode.Usage},
	} {
		res := runCLI(t, cliEnv(), c.args...)
		if res.status != c.status || !strings.Contains(res.stderr, "shardproof: "+string(c.code)+":") {
			t.Errorf("%v: exit %d (want %d), stderr %q (want code %s)", c.args, res.status, c.status, res.stderr, c.code)
		}
	}
}

// `verify --resume PLAN` finishes a planned verification whose tasks never
// ran (a run killed after planning), and refuses inputs beside the plan.
func TestVerifyCLIResume(t *testing.T) {
	r := newRelease(t)
	_, pd, err := coordinator.NewPlan(t.Context(), r.store, coordinator.PlanOptions{Root: r.res.Root, Tool: "shardproof " + version})
	if err != nil {
		t.Fatal(err)
	}
	js := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", pd.String(), "--json"))
	if js.Verdict != manifest.Verified || js.Root != r.res.Root || js.Execution.Plan != pd {
		t.Fatalf("resumed report: verdict %s root %s plan %s, want VERIFIED %s %s", js.Verdict, js.Root, js.Execution.Plan, r.res.Root, pd)
	}
	fresh := cliReport(t, runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--json"))
	sameReport(t, "resume vs fresh", fresh, js)
	res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", pd.String(), "--root", r.res.Root.String())
	if res.status != errcode.ExitUsage {
		t.Fatalf("--resume with --root: exit %d, want %d\n%s", res.status, errcode.ExitUsage, res.stderr)
	}
	// The root where the plan was meant: a usage error naming what the
	// digest is, not exit 1 (INVALID) for a plan that failed to decode.
	res = runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", r.res.Root.String())
	if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, `is a "`+manifest.ReleaseSchema+`" document, not a verification plan`) {
		t.Fatalf("--resume ROOT: exit %d, want %d naming the release schema\n%s", res.status, errcode.ExitUsage, res.stderr)
	}
}

// A verification killed while it deleted its job's files, after storing
// its report, leaves commit records whose outputs are gone: a resume
// prints the report that verification stored (the plan's report record)
// and deletes what is left. Without the record (a job of an earlier
// build), it runs again the map task whose file is gone and finishes the
// job, to the same report but for its execution section (it said the
// files were partly deleted and to verify the root again).
func TestVerifyCLIResumePartlyDeleted(t *testing.T) {
	r := newRelease(t)
	partly := func() (*manifest.Report, cliResult) {
		res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--keep-job", "--json")
		js := cliReport(t, res)
		jobs := filepath.Join(r.dir, "jobs", js.Execution.Plan.Hex())
		if err := os.RemoveAll(filepath.Join(jobs, "reduce")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(jobs, "map", "0", "r0.arrow")); err != nil {
			t.Fatal(err)
		}
		return js, res
	}
	js, first := partly()
	res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", js.Execution.Plan.String(), "--json")
	if res.status != 0 || res.stdout != first.stdout || !strings.Contains(res.stderr, "had finished") {
		t.Fatalf("resume of a partly deleted job: exit %d, want the stored report\n%s\n%s", res.status, res.stdout, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs", js.Execution.Plan.Hex())); !os.IsNotExist(err) {
		t.Fatalf("the resume left the job's files: %v", err)
	}

	js, _ = partly()
	if err := os.RemoveAll(filepath.Join(r.dir, "index", "plans", js.Execution.Plan.Hex())); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, cliEnv(), "verify", "--store", r.dir, "--resume", js.Execution.Plan.String(), "--json")
	if res.status != 0 || !strings.Contains(res.stderr, "running the task again") {
		t.Fatalf("resume of a partly deleted job without a report record: exit %d\n%s", res.status, res.stderr)
	}
	sameReport(t, "resume of a partly deleted job", js, cliReport(t, res))
}

// A shuffle file damaged after its map task committed, and another map
// task's commit record, in a job interrupted before its reduce tasks all
// committed: `verify --resume` runs those two map tasks again and ends
// VERIFIED with the report a verification without damage gives, but for
// its execution section, with the local executor and with the process
// executor's tasks. It used to fail with SHUFFLE_CORRUPT at every resume,
// the process executor's retries and all.
func TestVerifyCLIResumeDamagedShuffle(t *testing.T) {
	for _, executor := range []string{"local", "process"} {
		t.Run(executor, func(t *testing.T) {
			r := newRelease(t)
			flags := []string{"--executor", executor, "--keep-job", "--json"}
			if executor == "process" {
				flags = append(flags, "--task-binary", os.Args[0])
			}
			first := cliReport(t, runCLI(t, cliEnv(), append([]string{"verify", "--store", r.dir, "--root", r.res.Root.String(),
				"--map-tasks", "3", "--reducers", "2"}, flags...)...))
			pd := first.Execution.Plan
			jobs := filepath.Join(r.dir, "jobs", pd.Hex())
			// What a verification interrupted in its reduce phase
			// leaves: reduce task 0 committed, reduce task 1 not, no
			// report.
			for _, dir := range []string{filepath.Join(r.dir, "index", "plans", pd.Hex()), filepath.Join(jobs, "reduce", "1")} {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}
			damage := func(path string, edit func([]byte) []byte) {
				t.Helper()
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, edit(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			v1 := "@00000000000000000001"
			damage(filepath.Join(jobs, "map", "0", "r1.arrow", v1), func(b []byte) []byte { b[len(b)-30] ^= 4; return b })
			damage(filepath.Join(jobs, "map", "2", "commit.json", v1), func(b []byte) []byte { return b[:len(b)/2] })

			res := runCLI(t, cliEnv(), append([]string{"verify", "--store", r.dir, "--resume", pd.String()}, flags...)...)
			if res.status != 0 || !strings.Contains(res.stderr, "running the task again") && executor == "local" {
				t.Fatalf("resume over a damaged shuffle file and commit record: exit %d\n%s", res.status, res.stderr)
			}
			got := cliReport(t, res)
			if got.Verdict != manifest.Verified || got.Execution.Executor != executor {
				t.Fatalf("resume over a damaged shuffle file: verdict %s, executor %s", got.Verdict, got.Execution.Executor)
			}
			sameReport(t, "resume over a damaged shuffle file", first, got)
			for k, want := range map[string]int{"0/commit.json": 2, "1/commit.json": 1, "2/commit.json": 2} {
				vs, err := filepath.Glob(filepath.Join(jobs, "map", filepath.FromSlash(k), "@*"))
				if err != nil || len(vs) != want {
					t.Errorf("map/%s has %d versions (%v), want %d", k, len(vs), err, want)
				}
			}
		})
	}
}

// A reduce task's commit record damaged after the task committed (cut
// short) in a job stopped before its report was recorded: `verify
// --resume` runs that reduce task again (the local executor's reduce
// phase, or the process executor's aggregation, finding it) and ends
// VERIFIED with the report a verification without damage gives, but for
// its execution section. It used to fail with SHUFFLE_CORRUPT at every
// resume.
func TestVerifyCLIResumeDamagedReduceRecord(t *testing.T) {
	for _, executor := range []string{"local", "process"} {
		t.Run(executor, func(t *testing.T) {
			r := newRelease(t)
			flags := []string{"--executor", executor, "--keep-job", "--json"}
			if executor == "process" {
				flags = append(flags, "--task-binary", os.Args[0])
			}
			first := cliReport(t, runCLI(t, cliEnv(), append([]string{"verify", "--store", r.dir, "--root", r.res.Root.String(),
				"--map-tasks", "3", "--reducers", "2"}, flags...)...))
			pd := first.Execution.Plan
			jobs := filepath.Join(r.dir, "jobs", pd.Hex())
			if err := os.RemoveAll(filepath.Join(r.dir, "index", "plans", pd.Hex())); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(jobs, "reduce", "1", "commit.json", "@00000000000000000001")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil {
				t.Fatal(err)
			}

			res := runCLI(t, cliEnv(), append([]string{"verify", "--store", r.dir, "--resume", pd.String()}, flags...)...)
			if res.status != 0 || !strings.Contains(res.stderr, "running the task again") && executor == "local" {
				t.Fatalf("resume over a damaged reduce commit record: exit %d\n%s", res.status, res.stderr)
			}
			got := cliReport(t, res)
			if got.Verdict != manifest.Verified || got.Execution.Executor != executor {
				t.Fatalf("resume over a damaged reduce commit record: verdict %s, executor %s", got.Verdict, got.Execution.Executor)
			}
			sameReport(t, "resume over a damaged reduce commit record", first, got)
			for k, want := range map[string]int{"0": 1, "1": 2} {
				vs, err := filepath.Glob(filepath.Join(jobs, "reduce", k, "commit.json", "@*"))
				if err != nil || len(vs) != want {
					t.Errorf("reduce/%s/commit.json has %d versions (%v), want %d", k, len(vs), err, want)
				}
			}
		})
	}
}

// A local verification that stops on an operational error after planning
// says which plan it leaves and the command that finishes it; that
// command, once the store is whole again, finishes it to the same report
// a fresh verification gives.
func TestVerifyCLIResumeHint(t *testing.T) {
	for _, withScratch := range []bool{false, true} {
		t.Run(fmt.Sprintf("scratch=%v", withScratch), func(t *testing.T) { testResumeHint(t, withScratch) })
	}
}

// TestResumeHintQuotesS3URL: the commands the resume hint prints quote
// an S3 store URL and scratch for the shell, where they were printed
// bare and a shell took the URL's & for the end of the command; a plain
// path stays bare (testResumeHint).
func TestResumeHintQuotesS3URL(t *testing.T) {
	var errOut strings.Builder
	cmd := &cobra.Command{}
	cmd.SetErr(&errOut)
	plan := manifest.Sum([]byte("plan"))
	store, scratch := "s3://bucket/rel?region=eu-west-1&path_style=true", "s3://scratch/x?timeout=90s&region=eu-west-1"
	resumeHint(cmd, store, scratch, &coordinator.UnfinishedError{Plan: plan, Err: errcode.New(errcode.IO, "read")})
	want := "`shardproof verify --store '" + store + "' --scratch '" + scratch + "' --resume " + plan.String() + "` finishes it, `shardproof store prune-jobs --store '" + scratch + "'`"
	if !strings.Contains(errOut.String(), want) {
		t.Fatalf("hint %q, want it to hold %q", errOut.String(), want)
	}
}

// testResumeHint: a verify that stops on an I/O error prints the command
// that finishes it (with --scratch when the job's files are there), and
// that command does.
func testResumeHint(t *testing.T, withScratch bool) {
	r := newRelease(t)
	var scratch []string
	jobsDir := filepath.Join(r.dir, "jobs")
	if withScratch {
		dir := filepath.Join(t.TempDir(), "scratch")
		scratch, jobsDir = []string{"--scratch", dir}, filepath.Join(dir, "jobs")
	}
	// One shard's stored version is unreadable (a directory where the file
	// was): every read of it fails with an I/O error, not a mismatch.
	d := r.res.Release.Shards[1].Digest
	vf := filepath.Join(r.dir, "blobs", "sha256", d.Hex(), "@00000000000000000001")
	saved := vf + ".saved"
	if err := os.Rename(vf, saved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(vf, 0o755); err != nil {
		t.Fatal(err)
	}
	// One map task per shard, one at a time: task 0 commits, task 1 fails.
	res := runCLI(t, cliEnv(), append([]string{"verify", "--store", r.dir, "--root", r.res.Root.String(),
		"--map-tasks", "5", "--parallelism", "1"}, scratch...)...)
	m := regexp.MustCompile("plan (sha256:[0-9a-f]{64}) stopped; .*`shardproof verify --store (\\S+)((?: --scratch \\S+)?) --resume (sha256:[0-9a-f]{64})` finishes it, `shardproof store prune-jobs --store (\\S+)`").FindStringSubmatch(res.stderr)
	if res.status != errcode.ExitError || m == nil || m[2] != r.dir || m[4] != m[1] {
		t.Fatalf("verify with an unreadable shard: exit %d, stderr %q; want exit 3 and the resume command", res.status, res.stderr)
	}
	if wantScratch, wantPrune := strings.Join(append([]string{""}, scratch...), " "), filepath.Dir(jobsDir); m[3] != wantScratch || m[5] != wantPrune {
		t.Fatalf("hint names scratch %q and prunes %q; want %q and %q", m[3], m[5], wantScratch, wantPrune)
	}
	if !strings.HasPrefix(res.stderr[strings.LastIndex(strings.TrimSuffix(res.stderr, "\n"), "\n")+1:], "shardproof: IO: ") {
		t.Fatalf("the last line is not the coded error: %q", res.stderr)
	}
	// The committed tasks are where the hint says: under the scratch when
	// there is one, and then nothing of the job is in the store.
	pd, _ := manifest.ParseDigest(m[1])
	if _, err := os.Stat(filepath.Join(jobsDir, pd.Hex(), "map", "0", "commit.json")); err != nil {
		t.Fatalf("the stopped job's files are not in %s: %v", jobsDir, err)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs")); withScratch && !os.IsNotExist(err) {
		t.Fatalf("with --scratch, the store has a jobs directory: %v", err)
	}
	os.Remove(vf)
	if err := os.Rename(saved, vf); err != nil {
		t.Fatal(err)
	}
	js := cliReport(t, runCLI(t, cliEnv(), append([]string{"verify", "--store", r.dir, "--resume", m[1], "--json"}, scratch...)...))
	if js.Verdict != manifest.Verified || js.Execution.Plan.String() != m[1] {
		t.Fatalf("resumed: verdict %s plan %s, want VERIFIED %s", js.Verdict, js.Execution.Plan, m[1])
	}
	if _, err := os.Stat(filepath.Join(jobsDir, pd.Hex())); !os.IsNotExist(err) {
		t.Fatalf("the finished job's files are still in %s: %v", jobsDir, err)
	}
	sameReport(t, "resumed vs fresh", cliReport(t, runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--json")), js)
}

// runCLIWithFileLimit is runCLI under `ulimit -n limit` (soft and hard, so
// the Go runtime cannot raise it).
func runCLIWithFileLimit(t *testing.T, limit int, args ...string) cliResult {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, limit), os.Args[0]}, args...)...)
	cmd.Env = cliEnv()
	return runChild(t, cmd, args)
}

// TestVerifyFileLimit: a reducer holds one shuffle file per map task open
// at once. When not even one reducer fits the process's open-file limit,
// verify says so before it maps anything (it used to fail with "too many
// open files" after the whole map phase); when fewer reducers fit than
// --parallelism asks, they run fewer at a time, and the verification
// succeeds.
func TestVerifyFileLimit(t *testing.T) {
	r := newRelease(t)
	// Five map tasks: a reduce task holds 5 + 8 files, and the process
	// keeps 64 for itself.
	args := []string{"verify", "--store", r.dir, "--root", r.res.Root.String(), "--map-tasks", "5", "--reducers", "2", "--parallelism", "2"}
	res := runCLIWithFileLimit(t, 70, args...)
	if res.status != errcode.ExitError || !strings.Contains(res.stderr, "shardproof: FILE_LIMIT: a reduce task of this plan holds 13 files open at once") {
		t.Fatalf("verify under ulimit -n 70: exit %d, stderr %q; want FILE_LIMIT", res.status, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs")); !os.IsNotExist(err) {
		t.Fatalf("verify mapped before it refused: %v", err)
	}
	res = runCLIWithFileLimit(t, 80, append(args, "--json")...)
	if res.status != 0 || !strings.Contains(res.stderr, "reduce tasks run fewer at a time") || !strings.Contains(res.stderr, "atOnce=1") {
		t.Fatalf("verify under ulimit -n 80: exit %d, stderr %q; want VERIFIED with one reducer at a time", res.status, res.stderr)
	}
	sameReport(t, "one reducer at a time", r.localReport(t), cliReport(t, res))
	// A task process refuses the same way.
	_, pd, err := coordinator.NewPlan(t.Context(), r.store, coordinator.PlanOptions{Root: r.res.Root, MapTasks: 5, Reducers: 2, Parallelism: 2})
	if err != nil {
		t.Fatal(err)
	}
	res = runCLIWithFileLimit(t, 70, "task", "reduce", "--plan", r.dir+"#"+pd.String(), "--index", "0")
	if res.status != errcode.ExitError || !strings.Contains(res.stderr, "FILE_LIMIT") {
		t.Fatalf("task reduce under ulimit -n 70: exit %d, stderr %q; want FILE_LIMIT", res.status, res.stderr)
	}
}

// TestVerifyMapTasksTooFew: verify refuses at once, before any work, a
// --map-tasks whose map task's commit record would be over the document
// cap, naming the smallest count that fits: a release of 100,000 shards
// (all one stored file, under 100,000 ids) in one map task counts 68 MB
// of results at their largest, with 16 MiB kept for listed failures. A
// map task used to map every input first, and store a record over the
// cap (about 425 bytes a result: from about 158,000 clean shards, fewer
// failing ones) that its reduce tasks, and every resume, then refused
// with DOCUMENT_TOO_LARGE.
func TestVerifyMapTasksTooFew(t *testing.T) {
	r := newRelease(t)
	rel := stagetest.CloneRelease(r.res.Release)
	d := rel.Shards[0]
	for i := range 100_000 {
		d.ID = fmt.Sprintf("many-%06d", i)
		rel.Shards = append(rel.Shards, d)
	}
	res := stagetest.Reissue(t, r.store, r.res, rel, false)
	root := res.Root.String()
	out := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", root, "--map-tasks", "1")
	if out.status != errcode.ExitUsage || !strings.Contains(out.stderr, "shardproof: USAGE: 1 map tasks of 100005 inputs") || !strings.Contains(out.stderr, "verify with --map-tasks 2 or more") {
		t.Fatalf("verify --map-tasks 1: exit %d, stderr %q; want USAGE naming --map-tasks 2", out.status, out.stderr)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "jobs")); !os.IsNotExist(err) {
		t.Fatalf("verify mapped before it refused: %v", err)
	}
	// Two map tasks fit.
	_, pd, err := coordinator.NewPlan(t.Context(), r.store, coordinator.PlanOptions{Root: res.Root, MapTasks: 2, Reducers: 2})
	if err != nil {
		t.Fatalf("plan of 2 map tasks: %v", err)
	}
	j, err := coordinator.Open(t.Context(), r.store, pd)
	if err != nil || len(j.Plan.MapTasks) != 2 {
		t.Fatalf("plan %s: %v", pd, err)
	}
}

// TestVerifyReduceFanIn: --reduce-fan-in bounds the shuffle files a
// reduce task merges at once. Under an open-file limit that five map
// tasks' files (and the slack) exceed, verify refuses with FILE_LIMIT;
// with a fan-in of 2 the reduce tasks merge the files in groups first
// (five per reduce task in two levels, counted in the report), fit, and give the
// report of a verification without a merge level. A fan-in below 2 is
// USAGE.
func TestVerifyReduceFanIn(t *testing.T) {
	r := newRelease(t)
	args := []string{"verify", "--store", r.dir, "--root", r.res.Root.String(), "--map-tasks", "5", "--reducers", "2", "--parallelism", "2", "--json"}
	// 76 leaves 12 files to a reduce task beside the process's 64: not
	// the 13 it holds with five map tasks' files, enough for the 11 of
	// groups of two (a group and its merged file, and the slack).
	if res := runCLIWithFileLimit(t, 76, args...); res.status != errcode.ExitError || !strings.Contains(res.stderr, "FILE_LIMIT") {
		t.Fatalf("verify under ulimit -n 76 without a merge level: exit %d, stderr %q; want FILE_LIMIT", res.status, res.stderr)
	}
	res := runCLIWithFileLimit(t, 76, append(args, "--reduce-fan-in", "2")...)
	got := cliReport(t, res)
	// Five files to three to two, in two levels: five per reduce task.
	if got.Execution.MergedFiles != 10 || got.Execution.MergedBytes <= 0 {
		t.Fatalf("merge level wrote %d files (%d bytes), want 5 per reduce task", got.Execution.MergedFiles, got.Execution.MergedBytes)
	}
	sameReport(t, "reduce fan-in 2", r.localReport(t), got)
	for _, bad := range []string{"1", "-3"} {
		res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--reduce-fan-in", bad)
		if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "shardproof: USAGE:") || !strings.Contains(res.stderr, "fan-in") {
			t.Errorf("--reduce-fan-in %s: exit %d, stderr %q; want USAGE", bad, res.status, res.stderr)
		}
	}
}

// TestVerifyMetricsFile: --metrics-file leaves the verification's figures
// for node_exporter's textfile collector: an INVALID release shows its
// failure classes, verified 0 and a shard ratio below 1, every series
// labelled by the root digest (and the class), nothing else; a missing
// directory is USAGE before any work.
func TestVerifyMetricsFile(t *testing.T) {
	r := newRelease(t)
	data := stagetest.ShardBytes(t, r.store, r.res.Release.Shards[0])
	bad := stagetest.ReplaceShardBytes(t, r.store, r.res, 0, stagetest.Truncate(data, 1))
	path := filepath.Join(t.TempDir(), "verify.prom")
	res := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", bad.Root.String(), "--metrics-file", path)
	if res.status != errcode.ExitInvalid {
		t.Fatalf("exit %d, want %d\n%s", res.status, errcode.ExitInvalid, res.stderr)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("metrics file does not parse: %v", err)
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		fam := fams[name]
		if fam == nil {
			t.Fatalf("no %s in the metrics file", name)
		}
		for _, m := range fam.GetMetric() {
			match := true
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					match = false
				}
			}
			if match {
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no %s%v in the metrics file", name, labels)
		return 0
	}
	root := bad.Root.String()
	for class, want := range map[string]float64{"size_mismatch": 1, "digest_mismatch": 1, "tuple_root_mismatch": 1, "split_conflict": 0} {
		if got := value("shardproof_verify_failures", map[string]string{"root": root, "class": class}); got != want {
			t.Errorf("failures{class=%s} = %v, want %v", class, got, want)
		}
	}
	if got := value("shardproof_verify_failures", map[string]string{"root": root, "class": "missing_member"}); got == 0 {
		t.Errorf("failures{class=missing_member} = 0; the truncated shard's members are missing")
	}
	if v := value("shardproof_verify_verified", map[string]string{"root": root}); v != 0 {
		t.Errorf("verified = %v for an INVALID release", v)
	}
	if v := value("shardproof_verify_verified_shard_ratio", map[string]string{"root": root}); v >= 1 || v <= 0 {
		t.Errorf("verified shard ratio %v, want in (0, 1)", v)
	}
	if v := value("shardproof_verify_decompression_ratio", map[string]string{"root": root}); v <= 1 {
		t.Errorf("decompression ratio %v", v)
	}
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "root" && l.GetName() != "class" || l.GetName() == "root" && l.GetValue() != root {
					t.Errorf("%s has label %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}

	// A verification that ends with an error and no verdict (here its
	// root is not in the store) replaces the figures of the run before,
	// which must not stand for it, with its error code.
	gone := "sha256:" + strings.Repeat("ab", 32)
	res = runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", gone, "--metrics-file", path)
	if res.status != errcode.ExitError || !strings.Contains(res.stderr, "NOT_FOUND") {
		t.Fatalf("verify of a root not in the store: exit %d\n%s", res.status, res.stderr)
	}
	f2, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	p2 := expfmt.NewTextParser(model.LegacyValidation)
	if fams, err = p2.TextToMetricFamilies(f2); err != nil {
		t.Fatalf("metrics file after an error does not parse: %v", err)
	}
	if v := value("shardproof_verify_error", map[string]string{"root": gone, "code": "NOT_FOUND"}); v != 1 {
		t.Errorf("error{code=NOT_FOUND} = %v, want 1", v)
	}
	if v := value("shardproof_verify_last_run_timestamp_seconds", map[string]string{"root": gone}); v <= 0 {
		t.Errorf("last run timestamp %v", v)
	}
	for _, name := range []string{"shardproof_verify_verified", "shardproof_verify_failures", "shardproof_verify_verified_shard_ratio"} {
		if fams[name] != nil {
			t.Errorf("%s still in the metrics file after a run that ended with an error", name)
		}
	}

	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "v.prom")
	res = runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", r.res.Root.String(), "--metrics-file", missing)
	if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "--metrics-file") || strings.Contains(res.stderr, "verification planned") {
		t.Fatalf("missing directory: exit %d\n%s", res.status, res.stderr)
	}

	// --emit without --submit runs nothing and refuses --metrics-file
	// (USAGE); the file, whose directory exists, keeps what it held.
	res = runCLI(t, cliEnv(), "verify", "--executor", "kubernetes", "--emit", t.TempDir(), "--image", "x",
		"--store", r.dir, "--root", r.res.Root.String(), "--metrics-file", path)
	if res.status != errcode.ExitUsage || !strings.Contains(res.stderr, "--metrics-file needs a report") {
		t.Fatalf("--emit --metrics-file: exit %d\n%s", res.status, res.stderr)
	}
	if b, err := os.ReadFile(path); err != nil || strings.Contains(string(b), `code="USAGE"`) || !strings.Contains(string(b), `code="NOT_FOUND"`) {
		t.Fatalf("--emit --metrics-file, refused, rewrote the file (%v):\n%s", err, b)
	}
}

// TestVerifySummaryQuotesSampleIDs: a sampleId is any valid UTF-8, so a
// release's own ids may hold a newline or a terminal's escape sequence.
// The summary's example ids are printed quoted when they hold anything
// but printable characters, so such an id cannot add a line of its own
// ("verdict  VERIFIED" under the real "verdict  INVALID") or move a
// terminal's cursor; plain ids are printed as they are.
func TestVerifySummaryQuotesSampleIDs(t *testing.T) {
	r := newRelease(t)
	const id = "a\nverdict  VERIFIED\x1b[2K"
	res := stagetest.RewriteShard(t, r.store, r.res, 0, func(rows []stage.Row) []stage.Row {
		rows[0].SampleID = id
		return rows
	})
	out := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", res.Root.String())
	if out.status != errcode.ExitInvalid {
		t.Fatalf("exit %d, want %d\n%s\n%s", out.status, errcode.ExitInvalid, out.stdout, out.stderr)
	}
	if n := len(regexp.MustCompile(`(?m)^verdict`).FindAllString(out.stdout, -1)); n != 1 || strings.Contains(out.stdout, "\x1b") ||
		!strings.Contains(out.stdout, "EXTRA_MEMBER           1  e.g. "+strconv.Quote(id)+"\n") {
		t.Fatalf("summary with an id holding a newline and an escape (%d verdict lines):\n%s", n, out.stdout)
	}
	if !regexp.MustCompile(`MISSING_MEMBER +1  e\.g\. syn7-[0-9a-z]+\n`).MatchString(out.stdout) {
		t.Fatalf("a plain id is not printed as it is:\n%s", out.stdout)
	}
}

// TestVerifySummaryEscapesFailureDetails: a shard failure's detail can
// hold names the file's author chose (a SCHEMA_MISMATCH lists the fields
// the file has), so the summary's failure lines, of verify and of
// publish, escape every character that is not printable: a field named
// with a newline and a terminal's escape sequence can neither add a line
// of its own ("verdict  VERIFIED" under the real "verdict  INVALID") nor
// reach the terminal as an escape.
func TestVerifySummaryEscapesFailureDetails(t *testing.T) {
	r := newRelease(t)
	const name = "lang\nverdict  VERIFIED\x1b[2K"
	other := stage.DefaultSchema()
	for i := range other.Fields {
		if other.Fields[i].Name == "lang" {
			other.Fields[i].Name = name
		}
	}
	otherDigest, err := canon.SchemaDigest(other)
	if err != nil {
		t.Fatal(err)
	}
	as, err := canon.ArrowSchema(other)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.NewGoAllocator(), as)
	defer b.Release()
	for _, row := range stagetest.ShardRows(t, r.store, r.res, 0) {
		for i, f := range other.Fields {
			switch f.Name {
			case "sample_id":
				b.Field(i).(*array.StringBuilder).Append(row.SampleID)
			case "source_id":
				b.Field(i).(*array.StringBuilder).Append(row.SourceID)
			case "source_version":
				b.Field(i).(*array.Int64Builder).Append(row.SourceVersion)
			case "split":
				b.Field(i).(*array.StringBuilder).Append(row.Split)
			case "text":
				b.Field(i).(*array.StringBuilder).Append(row.Text)
			case "tokens":
				b.Field(i).(*array.Int64Builder).Append(row.Tokens)
			case name:
				b.Field(i).(*array.StringBuilder).Append(row.Lang)
			default:
				t.Fatalf("field %q", f.Name)
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	rel := stagetest.CloneRelease(r.res.Release)
	rel.Shards[0] = stagetest.WriteShard(t, r.store, rel.Shards[0].ID, rec, other, otherDigest, stage.ParquetOptions{})
	res := stagetest.Reissue(t, r.store, r.res, rel, true)

	out := runCLI(t, cliEnv(), "verify", "--store", r.dir, "--root", res.Root.String())
	if out.status != errcode.ExitInvalid || !strings.Contains(out.stdout, "SCHEMA_MISMATCH") {
		t.Fatalf("exit %d, want %d\n%s\n%s", out.status, errcode.ExitInvalid, out.stdout, out.stderr)
	}
	if n := len(regexp.MustCompile(`(?m)^verdict`).FindAllString(out.stdout, -1)); n != 1 || strings.Contains(out.stdout, "\x1b") ||
		!strings.Contains(out.stdout, `lang\nverdict  VERIFIED\x1b[2K`) {
		t.Fatalf("summary of a shard whose field name holds a newline and an escape (%d verdict lines):\n%s", n, out.stdout)
	}
}

// TestEscapeUnprintable: printable text, spaces included, is kept as it
// is; anything else is written as a Go escape, bytes that are not UTF-8
// as \xNN.
func TestEscapeUnprintable(t *testing.T) {
	for in, want := range map[string]string{
		"fields [a b]; digest sha256:00": "fields [a b]; digest sha256:00",
		"héllo wörld":                    "héllo wörld",
		"a\nb\tc\x1b[2K":                 `a\nb\tc\x1b[2K`,
		"x\u2028y\u202ez":                `x\u2028y\u202ez`,
		"bad\xffutf8\xc3":                `bad\xffutf8\xc3`,
	} {
		if got := escapeUnprintable(in); got != want {
			t.Errorf("escapeUnprintable(%q) = %q, want %q", in, got, want)
		}
	}
}

// The "shardproof: CODE: message" line escapes what is not printable in
// the message, which can carry a shard failure's detail: publish refuses
// a snapshot member that no longer reads as the snapshot says with its
// detail (publish/members.go), and a SCHEMA_MISMATCH detail names the
// file's own fields, so a field named with a newline and an escape
// sequence added a line and reached the terminal through the error line.
func TestErrorLineEscapesUnprintable(t *testing.T) {
	var buf bytes.Buffer
	old := stderr
	stderr = &buf
	defer func() { stderr = old }()
	err := errcode.New(errcode.SchemaMismatch, "snapshot member shard-00001.parquet no longer reads as the snapshot says (fields [lang\nverdict  VERIFIED\x1b[2K]); run a full recheck")
	if got := exitStatus(err); got != errcode.SchemaMismatch.Exit() {
		t.Fatalf("exit %d, want %d", got, errcode.SchemaMismatch.Exit())
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || strings.ContainsRune(out, 0x1b) || !strings.Contains(out, `[lang\nverdict  VERIFIED\x1b[2K]`) {
		t.Fatalf("error line %q: want one line, the field name escaped", out)
	}
}
