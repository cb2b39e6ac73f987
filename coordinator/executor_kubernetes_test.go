package coordinator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A map Job whose index 1 failed for good with NONDETERMINISM (exit 1,
// FailIndex) while index 0 had a transient failure (exit 3) that its retry
// got past: Kubernetes keeps every failed pod, listed by name, and the
// Job's failedIndexes names the index that counted. The answers are what
// kubectl prints for such a Job (the emulator in cmd/shardproof keeps one
// pod per index, so it cannot show this).
func TestFailedJobReportsItsFailedIndex(t *testing.T) {
	dir := t.TempDir()
	kubectl := filepath.Join(dir, "kubectl")
	script := `#!/bin/sh
case "$*" in
*"failedIndexes"*) printf '1' ;;
*"get job"*) printf 'Failed FailedIndexes\n' ;;
*"get pods"*) printf 'j-map-0-aaaaa 0 3 2026-11-30T10:00:00Z\nj-map-0-bbbbb 0 0 2026-11-30T10:00:05Z\nj-map-1-ccccc 1 3 2026-11-30T10:00:01Z\nj-map-1-ddddd 1 1 2026-11-30T10:00:06Z\n' ;;
*"logs j-map-0-aaaaa"*) echo 'shardproof: IO: map task 0: store unreachable' ;;
*"logs j-map-1-ccccc"*) echo 'shardproof: IO: map task 1: store unreachable' ;;
*"logs j-map-1-ddddd"*) echo 'shardproof: NONDETERMINISM: map task 1: differs' ;;
esac
`
	if err := os.WriteFile(kubectl, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	k := &Kubernetes{Kubectl: kubectl}
	err := k.waitJob(context.Background(), "j-map")
	var te *TaskError
	if !errors.As(err, &te) || te.Index != 1 || te.Status != 1 || errcode.Of(err) != errcode.Nondeterminism {
		t.Fatalf("failed Job reported as %v; want map task 1's NONDETERMINISM from its newest pod", err)
	}
}

// A Job status poll that fails (the API server restarting during a long
// phase) is tried again: the first one failed the verify with IO while
// its Job ran on in the cluster. A streak of failures still ends the
// wait, with kubectl's error.
func TestWaitJobRidesOutFailedPolls(t *testing.T) {
	dir := t.TempDir()
	kubectl := filepath.Join(dir, "kubectl")
	script := `#!/bin/sh
n=$(cat "$0.count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$0.count"
if [ "$n" -lt "$(cat "$0.fail")" ]; then
	echo 'The connection to the server was refused' >&2
	exit 1
fi
printf 'Complete \n'
`
	if err := os.WriteFile(kubectl, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		fail int
		ok   bool
	}{{3, true}, {jobPollFailures, false}} {
		os.Remove(kubectl + ".count")
		if err := os.WriteFile(kubectl+".fail", []byte(strconv.Itoa(c.fail)), 0o644); err != nil {
			t.Fatal(err)
		}
		k := &Kubernetes{Kubectl: kubectl, Poll: time.Millisecond}
		err := k.waitJob(context.Background(), "j-map")
		if c.ok && err != nil || !c.ok && (errcode.Of(err) != errcode.IO || !strings.Contains(fmt.Sprint(err), "refused")) {
			t.Errorf("%d failed polls, then Complete: %v", c.fail, err)
		}
	}
}

// A kubectl or Slurm command that fails without writing to its standard
// error is named alone, where its message ended in ": " with nothing
// after; one that wrote something has it after the command, trimmed.
func TestCommandFailedNamesSilentFailure(t *testing.T) {
	dir := t.TempDir()
	kubectl := filepath.Join(dir, "kubectl")
	for _, c := range []struct{ script, want string }{
		{"#!/bin/sh\nexit 1\n", "kubectl get job j-map"},
		{"#!/bin/sh\necho ' Error from server (NotFound) ' >&2\nexit 1\n", "kubectl get job j-map: Error from server (NotFound)"},
	} {
		if err := os.WriteFile(kubectl, []byte(c.script), 0o755); err != nil {
			t.Fatal(err)
		}
		k := &Kubernetes{Kubectl: kubectl}
		_, err := k.kubectl(context.Background(), "get", "job", "j-map")
		var ce *errcode.Error
		if !errors.As(err, &ce) || ce.Code != errcode.IO || ce.Msg != c.want {
			t.Errorf("kubectl failing: %#v; want IO with message %q", err, c.want)
		}
	}
	s := &Slurm{}
	_, err := s.command(context.Background(), "false", "--job", "7")
	var ce *errcode.Error
	if !errors.As(err, &ce) || ce.Msg != "false --job 7" {
		t.Errorf("false failing: %#v; want IO with message %q", err, "false --job 7")
	}
}
