package slurmtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Cluster is a running single-node Slurm cluster: one partition "debug"
// with the node "localhost" (127.0.0.1, 2 CPUs), no accounting.
type Cluster struct {
	// Dir holds the config, state, spool, logs and munge socket.
	Dir string
	// Conf is the path of slurm.conf; SLURM_CONF points here.
	Conf string

	t     testing.TB
	procs []*exec.Cmd
}

// daemons are the programs the cluster needs, with their Debian package.
var daemons = []struct{ bin, pkg string }{
	{"munged", "munge"},
	{"slurmctld", "slurmctld"},
	{"slurmd", "slurmd"},
	{"sbatch", "slurm-client"},
	{"scontrol", "slurm-client"},
	{"sinfo", "slurm-client"},
}

// unavailable skips the test, or fails it under CI=true, where every test
// that needs a real service must run.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf("slurmtest: "+format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: not skipping; run scripts/deps.sh as root)")
	}
	t.Skip(msg + " (run scripts/deps.sh as root to install Slurm and munge)")
}

// Start starts munged, slurmctld and slurmd, waits until the node is idle
// and registers their shutdown with t.Cleanup.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if err := supported(); err != nil {
		unavailable(t, "%v", err)
	}
	for _, d := range daemons {
		if _, err := lookPath(d.bin); err != nil {
			unavailable(t, "%s not found (Debian package %s)", d.bin, d.pkg)
		}
	}
	u, err := user.Current()
	if err != nil {
		unavailable(t, "current user: %v", err)
	}
	if u.Uid != "0" {
		// slurmd must be able to launch jobs as their submitter and
		// munged's checks assume a system account; both need root.
		unavailable(t, "slurmd needs root, running as uid %s", u.Uid)
	}
	// A short path: the munge socket path must fit in sun_path (108 bytes),
	// which t.TempDir's test-named directories can exceed.
	dir, err := os.MkdirTemp("", "slurmtest")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), t: t}
	t.Cleanup(c.stop)
	for _, sub := range []string{"state", "spool"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}

	sock := filepath.Join(dir, "munge.sock")
	c.start("munged", "-F", "--force", "--socket="+sock,
		"--key-file="+filepath.Join(dir, "munge.key"),
		"--log-file="+filepath.Join(dir, "munged.log"),
		"--pid-file="+filepath.Join(dir, "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munged.seed"))
	if err := waitFor(10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }); err != nil {
		c.dumpLogs()
		unavailable(t, "munged did not create its socket: %v", err)
	}
	// slurmctld and slurmd bind ports that freePorts found free a moment
	// before, and another process may take one in between: then a daemon
	// logs "Address already in use" and both start again on new ports.
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c.Conf, []byte(c.config(u.Username, ports[0], ports[1])), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"slurmctld.log", "slurmd.log"} {
			os.Remove(filepath.Join(dir, name))
		}
		before := len(c.procs)
		// -c: start from an empty state; -D: foreground, so the test owns it.
		c.start("slurmctld", "-D", "-c", "-f", c.Conf)
		c.start("slurmd", "-D", "-N", "localhost", "-f", c.Conf)
		var last string
		err = waitFor(30*time.Second, func() bool {
			if c.portTaken() {
				return true
			}
			out, err := c.Command("sinfo", "-h", "-N", "-o", "%T").CombinedOutput()
			last = strings.TrimSpace(string(out))
			return err == nil && last == "idle"
		})
		switch {
		case err == nil && !c.portTaken():
			return c
		case c.portTaken() && attempt < 3:
			t.Logf("slurmtest: a port was taken before the daemons bound it; new ports")
			killProcs(c.procs[before:])
			c.procs = c.procs[:before]
			continue
		}
		c.dumpLogs()
		unavailable(t, "node did not become idle (sinfo: %q): %v", last, err)
	}
}

// portTaken reports whether slurmctld or slurmd could not bind its port.
func (c *Cluster) portTaken() bool {
	for _, name := range []string{"slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"} {
		if b, err := os.ReadFile(filepath.Join(c.Dir, name)); err == nil && bytes.Contains(b, []byte("Address already in use")) {
			return true
		}
	}
	return false
}

// config is a minimal slurm.conf: one node, one default partition, no
// cgroups, no accounting, everything under c.Dir.
func (c *Cluster) config(slurmUser string, ctldPort, slurmdPort int) string {
	d := c.Dir
	return fmt.Sprintf(`ClusterName=shardproof
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=%d
SlurmdPort=%d
SlurmUser=%s
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%s/munge.sock
StateSaveLocation=%s/state
SlurmdSpoolDir=%s/spool
SlurmctldPidFile=%s/slurmctld.pid
SlurmdPidFile=%s/slurmd.pid
SlurmctldLogFile=%s/slurmctld.log
SlurmdLogFile=%s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
MinJobAge=3600
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
`, ctldPort, slurmdPort, slurmUser, d, d, d, d, d, d, d)
}

// Env returns the environment for Slurm commands: the test's environment
// with SLURM_CONF pointing at this cluster.
func (c *Cluster) Env() []string {
	env := make([]string, 0, len(os.Environ())+1)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_CONF=") {
			env = append(env, kv)
		}
	}
	return append(env, "SLURM_CONF="+c.Conf)
}

// Command returns a command (sbatch, squeue, scontrol, …) aimed at this
// cluster.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	path, err := lookPath(name)
	if err != nil {
		path = name
	}
	cmd := exec.Command(path, args...)
	cmd.Env = c.Env()
	cmd.Dir = c.Dir
	return cmd
}

// Logs returns the tails of the daemons' logs, for failure messages.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, name := range []string{"munged.log", "slurmctld.log", "slurmd.log"} {
		data, _ := os.ReadFile(filepath.Join(c.Dir, name))
		if len(data) > 4096 {
			data = data[len(data)-4096:]
		}
		fmt.Fprintf(&b, "== %s\n%s\n", name, data)
	}
	return b.String()
}

func (c *Cluster) dumpLogs() { c.t.Helper(); c.t.Log(c.Logs()) }

// start runs a daemon in the foreground in its own process group, so stop
// can end it and anything it forked.
func (c *Cluster) start(name string, args ...string) {
	c.t.Helper()
	path, err := lookPath(name)
	if err != nil {
		unavailable(c.t, "%s: %v", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = c.Env()
	cmd.Dir = c.Dir
	out, err := os.Create(filepath.Join(c.Dir, name+".out"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	newProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		unavailable(c.t, "start %s: %v", name, err)
	}
	c.procs = append(c.procs, cmd)
}

// stop cancels every job, stops the daemons in reverse order (SIGTERM,
// then SIGKILL after 10s) and removes the directory.
func (c *Cluster) stop() {
	if len(c.procs) > 1 {
		// Jobs still running would outlive slurmd as orphaned slurmstepds.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if path, err := lookPath("scancel"); err == nil {
			cmd := exec.CommandContext(ctx, path, "--partition=debug")
			cmd.Env = c.Env()
			_ = cmd.Run()
		}
		cancel()
	}
	if c.t.Failed() {
		c.dumpLogs()
	}
	killProcs(c.procs)
	os.RemoveAll(c.Dir)
}

// killProcs stops the daemons in reverse order: SIGTERM to each process
// group, SIGKILL after 10 s.
func killProcs(procs []*exec.Cmd) {
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		killGroup(p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			killGroup(p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

// lookPath finds a program on PATH or in the sbin directories, which are
// not on every PATH.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// freePorts returns n distinct TCP ports that were free on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func waitFor(limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v", limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// Run runs a Slurm command against the cluster and returns its trimmed
// standard output, failing the test on error.
func (c *Cluster) Run(name string, args ...string) string {
	c.t.Helper()
	cmd := c.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
