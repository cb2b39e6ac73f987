package procid

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

func TestSelfAlive(t *testing.T) {
	self := Self()
	if self.PID != os.Getpid() {
		t.Fatalf("Self().PID = %d, want %d", self.PID, os.Getpid())
	}
	alive, known := self.Alive()
	if runtime.GOOS != "linux" {
		if known {
			t.Fatalf("Alive known off Linux: %+v", self)
		}
		return
	}
	if self.Machine == "" || self.Start == 0 || !alive || !known {
		t.Fatalf("Self() = %+v: alive %v known %v", self, alive, known)
	}
	// The same PID started at another time is another process.
	reused := self
	reused.Start++
	if alive, known := reused.Alive(); alive || !known {
		t.Errorf("a reused PID: alive %v known %v, want dead", alive, known)
	}
	// Another machine's process cannot be checked.
	other := self
	other.Machine = "another-boot/pid:[1]"
	if _, known := other.Alive(); known {
		t.Error("a process of another machine is known")
	}
	if _, known := (ID{}).Alive(); known {
		t.Error("the zero ID is known")
	}
}

// A child that exited is dead, before and after it is collected.
func TestExitedChildIsDead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process start times come from /proc")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id := ID{PID: cmd.Process.Pid, Machine: Self().Machine}
	if start, _, ok := statAt(procRoot, id.PID); ok {
		id.Start = start
	}
	// Until Wait collects it, the exited child is a zombie.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if _, state, ok := statAt(procRoot, id.PID); !ok || state == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not exit")
		}
	}
	if alive, known := id.Alive(); alive || !known {
		t.Fatalf("an exited, uncollected child: alive %v known %v", alive, known)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if alive, known := id.Alive(); alive || !known {
		t.Fatalf("a collected child: alive %v known %v", alive, known)
	}
}
