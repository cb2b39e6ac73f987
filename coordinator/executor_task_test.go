package coordinator

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
)

func TestTaskIndex(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, c := range []struct {
		name string
		flag int
		env  func(string) string
		want int
		code errcode.Code
	}{
		{"flag wins", 4, env("JOB_COMPLETION_INDEX", "1"), 4, ""},
		{"kubernetes", -1, env("JOB_COMPLETION_INDEX", "3"), 3, ""},
		{"slurm", -1, env("SLURM_ARRAY_TASK_ID", "0"), 0, ""},
		{"aws batch", -1, env("AWS_BATCH_JOB_ARRAY_INDEX", "12"), 12, ""},
		{"agreeing", -1, env("JOB_COMPLETION_INDEX", "2", "SLURM_ARRAY_TASK_ID", "2"), 2, ""},
		{"disagreeing", -1, env("JOB_COMPLETION_INDEX", "2", "SLURM_ARRAY_TASK_ID", "1"), 0, errcode.Usage},
		{"negative", -1, env("SLURM_ARRAY_TASK_ID", "-1"), 0, errcode.Usage},
		{"not a number", -1, env("SLURM_ARRAY_TASK_ID", "1e3"), 0, errcode.Usage},
		{"none", -1, env(), 0, errcode.Usage},
	} {
		got, err := TaskIndex(c.flag, c.env)
		if errcode.Of(err) != c.code || (err == nil && got != c.want) {
			t.Errorf("%s: got %d, %v; want %d, code %q", c.name, got, err, c.want, c.code)
		}
	}
}

func TestParsePlanRef(t *testing.T) {
	d := manifest.Digest(manifest.Sum([]byte("plan")))
	for _, c := range []struct {
		in, store string
		want      PlanRef
		code      errcode.Code
	}{
		{"/data/s#" + d.String(), "", PlanRef{Store: "/data/s", Plan: d}, ""},
		{"s3://b/p?endpoint=http://h:1#" + d.String(), "", PlanRef{Store: "s3://b/p?endpoint=http://h:1", Plan: d}, ""},
		{"/dir#with#hash#" + d.String(), "", PlanRef{Store: "/dir#with#hash", Plan: d}, ""},
		{d.String(), "/data/s", PlanRef{Store: "/data/s", Plan: d}, ""},
		{"/data/s#" + d.String(), "/data/s", PlanRef{Store: "/data/s", Plan: d}, ""},
		{"/data/s#" + d.String(), "/other", PlanRef{}, errcode.Usage},
		{d.String(), "", PlanRef{}, errcode.Usage},
		{"/data/s#sha256:ABC", "", PlanRef{}, errcode.Usage},
		{"/data/s", "", PlanRef{}, errcode.Usage},
	} {
		got, err := ParsePlanRef(c.in, c.store)
		if errcode.Of(err) != c.code || got != c.want {
			t.Errorf("ParsePlanRef(%q, %q) = %+v, %v; want %+v, code %q", c.in, c.store, got, err, c.want, c.code)
		}
		if err == nil {
			if back, err := ParsePlanRef(got.String(), ""); err != nil || back != got {
				t.Errorf("round trip of %q: %+v, %v", got.String(), back, err)
			}
		}
	}
}

// TestRetryable pins the exit-status rule every engine shares.
func TestRetryable(t *testing.T) {
	for status, want := range map[int]bool{0: false, 1: false, 2: false, 3: true, 4: false, 5: true, -1: true, 137: true} {
		if Retryable(status) != want {
			t.Errorf("Retryable(%d) = %v", status, !want)
		}
	}
}

// TestTaskErrorCode: an engine's failure carries the code the task printed.
func TestTaskErrorCode(t *testing.T) {
	log := []byte("some log line\nshardproof: map task 1: NONDETERMINISM: jobs/x/map/1/r0.arrow differs\n")
	var err error = newTaskError(KindMap, 1, 1, log)
	if errcode.Of(err) != errcode.Nondeterminism {
		t.Errorf("code %s, want NONDETERMINISM", errcode.Of(err))
	}
	if errcode.Of(newTaskError(KindReduce, 0, -1, []byte("killed"))) != errcode.IO {
		t.Error("a task that printed no code should fail with IO")
	}
	// A task a signal ended, having written nothing, says both, not
	// "exit status -1: ".
	if msg := newTaskError(KindMap, 2, -1, nil).Error(); msg != "map task 2 was ended by a signal: (it wrote nothing to standard error)" {
		t.Errorf("signalled task: %q", msg)
	}
	var te *TaskError
	if !errors.As(err, &te) || te.Index != 1 || te.Kind != KindMap {
		t.Errorf("errors.As: %+v", te)
	}
}

// TestSlurmScriptQuoting runs the script's quoting through a real shell.
func TestSlurmScriptQuoting(t *testing.T) {
	for _, s := range []string{"/plain/path", "/with space/it's", `/x"y$z` + "`w`"} {
		out, err := exec.Command("sh", "-c", "printf %s "+shQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("shQuote(%q) through sh gave %q, %v", s, out, err)
		}
	}
	// The script runs the task binary with the arguments a task needs,
	// however odd the paths: a stand-in binary prints what it got.
	bin := filepath.Join(t.TempDir(), "shard proof")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []PlanRef{
		{Store: "/it's here", Plan: manifest.Digest(manifest.Sum(nil))},
		{Store: "s3://b/p?endpoint=http://h:1", Plan: manifest.Digest(manifest.Sum(nil)), Scratch: `/scr atch/"$x"'`},
	} {
		script := slurmScript(bin, ref, 3)
		cmd := exec.Command("sh", "-c", script, "sh", "map")
		cmd.Env = append(os.Environ(), "SLURM_ARRAY_TASK_ID=3")
		out, err := cmd.Output()
		want := strings.Join(append(append([]string{"task", "map"}, ref.TaskArgs()...), "--index", "3"), "\n") + "\n"
		if err != nil || string(out) != want {
			t.Errorf("script ran the task with\n%s(%v), want\n%s\nscript:\n%s", out, err, want, script)
		}
	}
}

// TestJobYAML checks the Indexed Job fields the engine relies on.
func TestJobYAML(t *testing.T) {
	k := &Kubernetes{Image: "img:1", Parallelism: 50}
	ref := PlanRef{Store: "s3://b/p", Plan: manifest.Digest(manifest.Sum([]byte("p")))}
	b, err := k.JobYAML(ref, KindReduce, 4)
	if err != nil {
		t.Fatal(err)
	}
	var job k8sJob
	if err := yaml.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	s := job.Spec
	if s.CompletionMode != "Indexed" || s.Completions != 4 || s.Parallelism != 4 || s.BackoffLimitPerIndex != 2 ||
		s.Template.Spec.RestartPolicy != "Never" {
		t.Errorf("spec %+v", s)
	}
	fail := s.PodFailurePolicy.Rules[0]
	if fail.Action != "FailIndex" || fail.OnExitCodes == nil || !slices.Equal(fail.OnExitCodes.Values, []int{1, 2, 4}) {
		t.Errorf("first rule %+v, want FailIndex on exit codes 1, 2, 4", fail)
	}
	cmd := strings.Join(s.Template.Spec.Containers[0].Command, " ")
	if cmd != "shardproof task reduce --plan "+ref.String()+" --wait 10m0s" {
		t.Errorf("command %q", cmd)
	}
	ref.Scratch = "s3://scratch/jobs-expire-1d"
	if b, err = k.JobYAML(ref, KindMap, 4); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	if cmd := strings.Join(job.Spec.Template.Spec.Containers[0].Command, " "); cmd != "shardproof task map --plan "+ref.String()+" --scratch "+ref.Scratch {
		t.Errorf("command with a scratch %q", cmd)
	}
	if _, err := (&Kubernetes{}).JobYAML(ref, KindMap, 1); errcode.Of(err) != errcode.Usage {
		t.Errorf("no image: %v", err)
	}
}
