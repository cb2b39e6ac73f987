package procid

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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
	if start, _, ok := stat(liveID.PID); ok {
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
