package procid

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// judgeEnv carries, to the child that plays a process of another user,
// the IDs it looks up.
const judgeEnv = "PROCID_TEST_JUDGE"

// A /proc mounted with hidepid=2 (a hardening common on shared login
// nodes) hides other users' processes: the holder of a job, run by one
// user, must not be taken for gone by another user's process, which
// cannot see it (unknown, so the caller waits for its heartbeat), while
// a process that has exited is still known gone. The judge is a child in
// a mount namespace of its own with such a /proc, running as another
// user than the live process it looks up.
func TestProcessHiddenByProcIsNotDead(t *testing.T) {
	if ids := os.Getenv(judgeEnv); ids != "" {
		judge(t, ids)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a /proc with hidepid=2 and runs processes as other users")
	}
	self := Self()
	live := exec.Command("sleep", "60")
	live.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := live.Start(); err != nil {
		t.Skipf("cannot run a process as another user: %v", err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	liveID := ID{PID: live.Process.Pid, Machine: self.Machine}
	if start, _, ok := statAt(procRoot, liveID.PID); ok {
		liveID.Start = start
	}
	gone := exec.Command(os.Args[0], "-test.run=^$")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	goneID := ID{PID: gone.Process.Pid, Machine: self.Machine, Start: 1}
	b, err := json.Marshal([]ID{liveID, goneID})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcessHiddenByProcIsNotDead$", "-test.v")
	cmd.Env = append(os.Environ(), judgeEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "SKIP:") {
		t.Skipf("the judge could not set itself up:\n%s", out)
	}
	if err != nil {
		t.Fatalf("judge: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "live: alive=false known=false") && !strings.Contains(string(out), "live: alive=true known=true") {
		t.Errorf("a live process of another user, hidden by /proc, is taken for gone:\n%s", out)
	}
	if !strings.Contains(string(out), "gone: alive=false known=true") {
		t.Errorf("a process that exited is not known gone:\n%s", out)
	}
}

// judge looks up the IDs in ids as another user (65533), under a /proc
// with hidepid=2, and prints what Alive says of each.
func judge(t *testing.T, ids string) {
	var id []ID
	if err := json.Unmarshal([]byte(ids), &id); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", 0, "hidepid=2"); err != nil {
		fmt.Printf("SKIP: mount /proc with hidepid=2: %v\n", err)
		return
	}
	if err := syscall.Setgroups(nil); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgid(65533); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setuid(65533); err != nil {
		t.Fatal(err)
	}
	if m := machine(); m != id[0].Machine {
		fmt.Printf("SKIP: the judge's machine is %q, not %q\n", m, id[0].Machine)
		return
	}
	for i, name := range []string{"live", "gone"} {
		alive, known := id[i].Alive()
		fmt.Printf("%s: alive=%v known=%v\n", name, alive, known)
	}
}

// fakeProc builds a proc file system at a new directory whose self is
// process self, of boot "boot-a" and PID namespace "pid:[1]", showing
// process 4194305 running since tick 100 (a PID past pid_max, so no
// process of this machine answers for it when it is not shown).
func fakeProc(t *testing.T, self int) string {
	t.Helper()
	root := t.TempDir()
	s := strconv.Itoa(self)
	for _, err := range []error{
		os.MkdirAll(filepath.Join(root, "sys/kernel/random"), 0o755),
		os.WriteFile(filepath.Join(root, "sys/kernel/random/boot_id"), []byte("boot-a\n"), 0o644),
		os.MkdirAll(filepath.Join(root, s, "ns"), 0o755),
		os.Symlink("pid:[1]", filepath.Join(root, s, "ns/pid")),
		os.Symlink(s, filepath.Join(root, "self")),
		os.MkdirAll(filepath.Join(root, "4194305"), 0o755),
		os.WriteFile(filepath.Join(root, "4194305/stat"),
			[]byte("4194305 (shardproof) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0 0\n"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// Through a /proc of this process's PID namespace, a holder is looked
// up: alive, or gone when its start differs or /proc has no such PID.
// Through a /proc of another PID namespace (a container with a PID
// namespace of its own and the host's /proc mounted), /proc/PID is
// another process than PID: every process of this machine is unknown
// (its heartbeat decides), not alive for ever nor dead at once.
func TestProcOfAnotherPIDNamespace(t *testing.T) {
	holder := ID{PID: 4194305, Machine: "boot-a/pid:[1]", Start: 100}
	reused := holder
	reused.Start = 101
	absent := ID{PID: 4194306, Machine: holder.Machine, Start: 100}

	ours := fakeProc(t, os.Getpid())
	here, err := machineAt(ours)
	if here != holder.Machine || err != nil {
		t.Fatalf("machineAt(a /proc whose self is this process) = %q, %v", here, err)
	}
	for _, c := range []struct {
		name         string
		id           ID
		alive, known bool
	}{{"holder", holder, true, true}, {"reused PID", reused, false, true}, {"absent PID", absent, false, true}} {
		if alive, known := c.id.aliveAt(ours, here); alive != c.alive || known != c.known {
			t.Errorf("%s through this namespace's /proc: alive %v known %v, want %v %v", c.name, alive, known, c.alive, c.known)
		}
	}

	// /proc/self is PID 4194307: not this process.
	other := fakeProc(t, 4194307)
	here, err = machineAt(other)
	if here != "" || err == nil || !strings.Contains(err.Error(), "another PID namespace") {
		t.Errorf("machineAt(a /proc of another PID namespace) = %q, %v; want none, and why", here, err)
	}
	for _, id := range []ID{holder, reused, absent} {
		if alive, known := id.aliveAt(other, here); alive || known {
			t.Errorf("%+v through another namespace's /proc: alive %v known %v, want unknown", id, alive, known)
		}
	}
}
