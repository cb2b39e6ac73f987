//go:build unix

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/raft"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/raftgate"
)

// The gate chaos test: three `shardproof gate serve` processes (real Raft
// over TCP, raft-boltdb on disk) take publications, rollbacks, fence
// advances, rechecks, run creations, attestations, reassignments,
// checkpoint admissions and linearizable reads from concurrent clients
// while a nemesis SIGKILLs members and restarts them from their data
// directories, SIGSTOPs the leader and resumes it after a new one was
// elected, and partitions the Raft network: the leader cut off from both
// followers while it goes on answering clients, or one link between two
// members cut; and it cuts the clients' links (httpLink): the leader's for
// a while, or every open client connection at once, so requests and
// answers are lost in flight by members that keep running. Every client records when it called and when it got its answer;
// porcupine then checks that history against gateModel. A write whose
// outcome the gate called INDETERMINATE is retried with the same
// parameters, as the client's contract says is safe, until it gets a
// definite answer; every attempt is an operation of the history, and
// the checker takes a command's unknown attempts as one (collapseRetries).
//
// `make test` runs it for chaosSmoke; `make chaos` for CHAOS_TIME
// (SHARDPROOF_CHAOS_TIME), with the history's visualization written to
// SHARDPROOF_CHAOS_DIR when the check fails.

var chaosAliases = []string{"chaos-a", "chaos-b"}

const (
	// chaosRoots are registered before the history starts, out of a pool
	// of chaosPool the clients register more from.
	chaosRoots  = 5
	chaosPool   = 4096
	chaosRetain = 2
	// chaosWorld is the world size of the test's runs.
	chaosWorld = 2
	// chaosShortBarrier is the barrier timeout of the runs created with a
	// short one.
	chaosShortBarrier = 800 * time.Millisecond
	// chaosSmoke is the duration inside `make test`.
	chaosSmoke = 12 * time.Second
	// Root i's reports say it was checked at both fences up to
	// chaosWM(i) = chaosWMBase + chaosWMStep·i: newer roots at higher
	// watermarks. Clients keep the fences chaosWMLead behind the newest
	// registered root's, so recent roots satisfy them and older ones fall
	// behind (FENCE_BEHIND, PERMIT_CLOSED) until a recheck raises them.
	chaosWMBase = 40
	chaosWMStep = 3
	chaosWMLead = 3 * chaosWMStep
)

// chaosWM is the watermark root i's reports were checked at.
func chaosWM(i int) uint64 { return chaosWMBase + chaosWMStep*uint64(i) }

// chaosNode is one `gate serve` child process.
type chaosNode struct {
	id, dir, httpAddr, raftAddr, join string
	logPath, cutPath                  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
}

func (n *chaosNode) url() string { return "http://" + n.httpAddr }

// start launches the process; --join, or --bootstrap for the node that
// joins none, is passed on the first start only.
func (n *chaosNode) start(t *testing.T, first bool) {
	t.Helper()
	args := []string{"gate", "serve", "--data", n.dir, "--id", n.id, "--http-addr", n.httpAddr, "--raft-addr", n.raftAddr}
	switch {
	case first && n.join != "":
		args = append(args, "--join", n.join)
	case first:
		args = append(args, "--bootstrap")
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = cliEnv(chaosCutEnv + "=" + n.cutPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done, n.paused = cmd, done, false
	n.mu.Unlock()
}

// running reports whether the process is alive and not stopped.
func (n *chaosNode) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.paused {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

func (n *chaosNode) signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		n.cmd.Process.Signal(sig)
		switch sig {
		case syscall.SIGSTOP:
			n.paused = true
		case syscall.SIGCONT:
			n.paused = false
		}
	}
}

// kill SIGKILLs the process and waits for it to be gone.
func (n *chaosNode) kill() {
	n.signal(syscall.SIGKILL)
	n.mu.Lock()
	done := n.done
	n.cmd, n.paused = nil, false
	n.mu.Unlock()
	if done != nil {
		<-done
	}
}

// stop ends the process with SIGINT (SIGKILL if it does not exit).
func (n *chaosNode) stop() {
	n.signal(syscall.SIGCONT)
	n.signal(syscall.SIGINT)
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		n.kill()
	}
}

func (n *chaosNode) status(ctx context.Context, digest bool) (*raftgate.Status, error) {
	c := raftgate.NewClient(n.url())
	defer c.Close()
	c.RetryFor = time.Millisecond
	if digest {
		return c.StatusDigest(ctx)
	}
	return c.Status(ctx)
}

// chaosCluster is the three processes.
type chaosCluster struct {
	t     *testing.T
	nodes []*chaosNode
	// links[i] is the clients' way to nodes[i]'s HTTP API.
	links []*httpLink
	// addr returns a free address for a member.
	addr func(*testing.T) string
}

func startChaosCluster(t *testing.T) *chaosCluster {
	t.Helper()
	return startChaosClusterOn(t, freeAddr)
}

// startChaosClusterOn is startChaosCluster with the members' addresses
// taken from addr.
func startChaosClusterOn(t *testing.T, addr func(*testing.T) string) *chaosCluster {
	t.Helper()
	dir := t.TempDir()
	c := &chaosCluster{t: t, addr: addr}
	for i := range 3 {
		n := &chaosNode{
			id: fmt.Sprintf("n%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			httpAddr: addr(t), raftAddr: addr(t),
			logPath: filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)),
			cutPath: cutPathFor(dir, fmt.Sprintf("n%d", i+1)),
		}
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
		if t.Failed() {
			for _, n := range c.nodes {
				b, _ := os.ReadFile(n.logPath)
				t.Logf("log of %s (last 3000 bytes):\n%s", n.id, tail(string(b), 3000))
			}
		}
	})
	for i, n := range c.nodes {
		if i > 0 {
			n.join = c.nodes[0].httpAddr
		}
		c.startFresh(n)
		// The link once n has its final address: startFresh may have
		// moved it to new ports.
		c.links = append(c.links, newHTTPLink(t, n.httpAddr))
		if i == 0 {
			c.leader(20 * time.Second)
		}
	}
	// Every member known to the leader's state and promoted to voter
	// (a member joins as a learner: a cut of the leader before the last
	// joiner's promotion leaves no majority to elect another), and the
	// cluster version raised: a fence advance that keeps a rechecked
	// permit open needs it, and the leader cannot raise it while a
	// member is down.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := c.leader(20*time.Second).status(t.Context(), false)
		if err == nil && len(st.Nodes) == 3 && allVoters(st, 3) && st.ClusterVersion == raftgate.CommandVersion {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster did not form: %+v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// allVoters reports whether st's Raft configuration holds n servers, all
// voters.
func allVoters(st *raftgate.Status, n int) bool {
	if len(st.Voters) != n {
		return false
	}
	for _, v := range st.Voters {
		if v.Suffrage != raft.Voter.String() {
			return false
		}
	}
	return true
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (c *chaosCluster) urls() string {
	var u []string
	for _, n := range c.nodes {
		u = append(u, n.url())
	}
	return strings.Join(u, ",")
}

// clientURLs lists the members through the clients' links.
func (c *chaosCluster) clientURLs() string {
	var u []string
	for _, l := range c.links {
		u = append(u, l.url())
	}
	return strings.Join(u, ",")
}

func (c *chaosCluster) waitReady(n *chaosNode, timeout time.Duration) {
	c.t.Helper()
	if err := n.ready(timeout); err != nil {
		c.t.Fatal(err)
	}
}

// ready waits until n answers /readyz, its process exits, or timeout.
func (n *chaosNode) ready(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := readyClient.Get(n.url() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		n.mu.Lock()
		done := n.done
		n.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("%s exited before it was ready", n.id)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s: %v", n.id, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startFresh starts n for the first time and waits until it is ready.
// freeAddr closes its listener before the child binds the port, so
// another process (a test package running in parallel, or an outgoing
// connection given that ephemeral port) may take it in between: a child
// that exits with "address already in use" starts again on new ports,
// in a fresh data directory, as nothing else knows its addresses yet.
func (c *chaosCluster) startFresh(n *chaosNode) {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		n.start(c.t, true)
		err := n.ready(20 * time.Second)
		if err == nil {
			return
		}
		b, _ := os.ReadFile(n.logPath)
		last := string(b)
		if i := strings.LastIndex(last, "=== start "); i >= 0 {
			last = last[i:]
		}
		if attempt == 3 || !strings.Contains(last, "address already in use") {
			c.t.Fatal(err)
		}
		c.t.Logf("%s: a port was taken before it bound it (%s); new ports", n.id, strings.TrimSpace(tail(last, 200)))
		if err := os.RemoveAll(n.dir); err != nil {
			c.t.Fatal(err)
		}
		n.httpAddr, n.raftAddr = c.addr(c.t), c.addr(c.t)
	}
}

// A member whose first port another process holds starts again on new
// ports, and the clients' link to it follows it there: the links were
// made before the members started, and one kept the taken address.
func TestChaosClusterStartsAgainOnATakenPort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three gate servers")
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	first := true
	c := startChaosClusterOn(t, func(t *testing.T) string {
		if first {
			first = false
			return held.Addr().String()
		}
		return freeAddr(t)
	})
	if a := c.nodes[0].httpAddr; a == held.Addr().String() {
		t.Fatalf("n1 serves at the held address %s", a)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	for i, l := range c.links {
		resp, err := client.Get(l.url() + "/v1/status")
		if err != nil {
			t.Fatalf("%s through its link: %v", c.nodes[i].id, err)
		}
		var st raftgate.Status
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || st.ID != c.nodes[i].id {
			t.Fatalf("%s's link reaches %q (%v)", c.nodes[i].id, st.ID, err)
		}
	}
}

// leader returns the running member that says it leads, with the highest
// term, waiting up to timeout for one.
func (c *chaosCluster) leader(timeout time.Duration) *chaosNode {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var best *chaosNode
		var term uint64
		for _, n := range c.nodes {
			if !n.running() {
				continue
			}
			ctx, cancel := context.WithTimeout(c.t.Context(), time.Second)
			st, err := n.status(ctx, false)
			cancel()
			if err == nil && st.RaftState == "Leader" && st.Term >= term {
				best, term = n, st.Term
			}
		}
		if best != nil {
			return best
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no leader within %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// chaosDuration is SHARDPROOF_CHAOS_TIME, or chaosSmoke.
func chaosDuration(t *testing.T) time.Duration {
	v := os.Getenv("SHARDPROOF_CHAOS_TIME")
	if v == "" {
		return chaosSmoke
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("SHARDPROOF_CHAOS_TIME=%q: want a positive duration", v)
	}
	return d
}

// chaosHistory collects operations from every client.
type chaosHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	// counts of definite answers by kind and code, for the log and the
	// test's own sanity checks.
	counts map[string]int
	// unexpected holds answers no operation of the test may get.
	unexpected []string
}

func (h *chaosHistory) fail(op modelOp, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unexpected = append(h.unexpected, fmt.Sprintf("%s: %v", describeOp(op), err))
}

func (h *chaosHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *chaosHistory) add(client int, op modelOp, out modelOut, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The gate stamps a command with its leader's wall clock in
	// milliseconds, somewhere between the call and the answer: the model
	// bounds barrier deadlines with the same clock. op.callMs was read
	// when the attempt was sent; the answer is now. Both are read from
	// the wall clock itself, so a clock slewed during the run cannot
	// shift them against the members' stamps.
	op.retMs = math.MaxInt64
	if ret != math.MaxInt64 {
		op.retMs = time.Now().UnixMilli() + 1
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: op, Call: call, Output: out, Return: ret})
	k := op.kind + " " + describeCode(out)
	if op.retried {
		k += " after INDETERMINATE"
	}
	h.counts[k]++
}

func describeCode(out modelOut) string {
	switch {
	case out.unknown:
		return "unknown"
	case out.code == "":
		return "ok"
	}
	return string(out.code)
}

func TestGateChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three gate servers under faults")
	}
	d := chaosDuration(t)
	c := startChaosCluster(t)

	// The releases: the first chaosRoots VERIFIED before the history
	// starts.
	roots := make([]manifest.Digest, chaosPool)
	rootIndex := map[manifest.Digest]int{}
	for i := range roots {
		roots[i] = manifest.Sum([]byte(fmt.Sprintf("chaos root %d", i)))
		rootIndex[roots[i]] = i
	}
	admin := raftgate.NewClient(c.urls())
	defer admin.Close()
	for i := range chaosRoots {
		if _, err := admin.Register(t.Context(), chaosRegister(roots, i, 0, false)); err != nil {
			t.Fatalf("register root %d: %v", i, err)
		}
	}
	var registered atomic.Int64 // roots [0, registered) may be registered
	registered.Store(chaosRoots)

	h := &chaosHistory{start: time.Now(), counts: map[string]int{}}
	ctx, stopClients := context.WithCancel(t.Context())
	// Writes left indeterminate may retry until this much after the end.
	retryUntil := time.Now().Add(d + 20*time.Second)
	var wg sync.WaitGroup
	const clients = 4
	for id := range clients {
		wg.Go(func() { chaosClient(ctx, id, c.clientURLs(), roots, rootIndex, &registered, h, retryUntil) })
	}

	// The nemesis: one fault at a time, healed before the next.
	var kills, leaderKills, pauses, partitions, linkCuts atomic.Int32
	leaders := map[string]bool{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	end := time.Now().Add(d)
	time.Sleep(time.Second) // a fault-free start
	for time.Now().Before(end) {
		l := c.leader(30 * time.Second)
		leaders[l.id] = true
		switch x := rng.IntN(16); {
		case x < 4: // any member, crashed
			n := c.nodes[rng.IntN(len(c.nodes))]
			if n == l {
				leaderKills.Add(1)
			}
			n.kill()
			kills.Add(1)
			time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
			n.start(t, false)
		case x < 7: // the leader, crashed
			l.kill()
			kills.Add(1)
			leaderKills.Add(1)
			time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
			l.start(t, false)
		case x < 10: // the leader, paused until another is elected
			l.signal(syscall.SIGSTOP)
			pauses.Add(1)
			time.Sleep(time.Duration(1500+rng.IntN(1500)) * time.Millisecond)
			l.signal(syscall.SIGCONT)
		case x < 12: // the leader, cut off from both followers
			li := slices.Index(c.nodes, l)
			var links [][2]int
			for i := range c.nodes {
				if i != li {
					links = append(links, [2]int{li, i})
				}
			}
			c.setCuts(links)
			partitions.Add(1)
			time.Sleep(time.Duration(1500+rng.IntN(2000)) * time.Millisecond)
			c.setCuts(nil)
		case x < 14: // the clients' links to the leader cut, requests in flight broken
			li := slices.Index(c.nodes, l)
			c.links[li].setCut(true)
			linkCuts.Add(1)
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			c.links[li].setCut(false)
		case x < 15: // every client connection broken, a few times in a row
			for range 1 + rng.IntN(4) {
				for _, hl := range c.links {
					hl.reset()
				}
				linkCuts.Add(1)
				time.Sleep(time.Duration(50+rng.IntN(300)) * time.Millisecond)
			}
		default: // one link between two members cut
			a := rng.IntN(len(c.nodes))
			b := (a + 1 + rng.IntN(len(c.nodes)-1)) % len(c.nodes)
			c.setCuts([][2]int{{a, b}})
			partitions.Add(1)
			time.Sleep(time.Duration(1500+rng.IntN(2000)) * time.Millisecond)
			c.setCuts(nil)
		}
		for _, n := range c.nodes {
			c.waitReady(n, 30*time.Second)
		}
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
	}
	stopClients()
	wg.Wait()

	// Healed: every member applies a last command and must then hold a
	// byte-identical state.
	final := uint64(time.Since(h.start)) // above any value the clients used
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := admin.AdvanceFence(t.Context(), raftgate.FenceTombstone, final)
		if err == nil {
			break
		}
		// A resumed member may still cost an election: retrying is safe.
		if !errors.Is(err, raftgate.ErrIndeterminate) && errcode.Of(err) != errcode.GateUnavailable || time.Now().After(deadline) {
			t.Fatalf("final fence advance: %v", err)
		}
	}
	c.checkConverged(30 * time.Second)

	h.mu.Lock()
	ops := h.ops
	h.mu.Unlock()
	t.Logf("%s of chaos: %d operations, %d kills (%d of the leader), %d leader pauses, %d partitions, %d client link cuts, leaders %v; answers %v",
		d, len(ops), kills.Load(), leaderKills.Load(), pauses.Load(), partitions.Load(), linkCuts.Load(), keys(leaders), h.counts)

	if len(h.unexpected) > 0 {
		t.Fatalf("%d answers outside the gate's contract, e.g. %s", len(h.unexpected), h.unexpected[0])
	}
	t.Logf("history: %s", shapeOf(ops))
	if dir := os.Getenv("SHARDPROOF_CHAOS_DIR"); dir != "" {
		path := filepath.Join(dir, "gate-chaos-history.json")
		if err := writeHistory(path, ops); err != nil {
			t.Logf("write the history: %v", err)
		} else {
			t.Logf("history written to %s (SHARDPROOF_CHAOS_REPLAY=%s go test -run TestGateChaosReplay checks it again)", path, path)
		}
	}
	ops = collapseRetries(ops)
	t.Logf("with each command's unknown attempts one operation: %s", shapeOf(ops))
	model := gatePorcupine(chaosRoots, chaosPool, len(chaosAliases))
	checkStart := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, 5*time.Minute)
	t.Logf("porcupine: %s in %s", res, time.Since(checkStart).Round(time.Millisecond))
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		if dir := os.Getenv("SHARDPROOF_CHAOS_DIR"); dir != "" {
			path = filepath.Join(dir, "gate-chaos-history.html")
		}
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
		t.Fatalf("history of %d operations is %s, not linearizable (visualization: %s)\n%s", len(ops), res, path, explainIllegal(info, ops))
	}
	// The checker must refuse the same history with one stale read added:
	// after the last acknowledged publication, a read that misses it.
	if stale, ok := withStaleRead(ops, clients); !ok {
		t.Fatal("no acknowledged publication in the history to read stale")
	} else {
		staleStart := time.Now()
		if res := porcupine.CheckOperationsTimeout(model, stale, 2*time.Minute); res != porcupine.Illegal {
			t.Fatalf("the checker said %s of a history with a stale read, want Illegal", res)
		}
		t.Logf("porcupine: the same history with a stale read added is Illegal (%s)", time.Since(staleStart).Round(time.Millisecond))
	}
	// Under -race the members are race-enabled too: a race they report
	// fails the test.
	for _, n := range c.nodes {
		if b, _ := os.ReadFile(n.logPath); strings.Contains(string(b), "DATA RACE") {
			t.Fatalf("%s reported a data race:\n%s", n.id, tail(string(b), 6000))
		}
	}
	// The test only means something if faults happened and the gate did
	// work through them.
	if kills.Load()+pauses.Load()+partitions.Load()+linkCuts.Load() == 0 {
		t.Fatal("the nemesis injected no fault")
	}
	if h.counts["publish ok"]+h.counts["rollback ok"] < 5 || h.counts["readAlias ok"] < 5 {
		t.Fatalf("too little progress under faults: %v", h.counts)
	}
}

// explainIllegal names the first operation (by call time) that the
// longest partial linearization could not place, and the operations it
// placed last.
func explainIllegal(info porcupine.LinearizationInfo, ops []porcupine.Operation) string {
	var best []int
	for _, part := range info.PartialLinearizations() {
		for _, l := range part {
			if len(l) > len(best) {
				best = l
			}
		}
	}
	placed := make([]bool, len(ops))
	for _, i := range best {
		placed[i] = true
	}
	line := func(i int) string {
		o := ops[i]
		ret := "∞"
		if o.Return != math.MaxInt64 {
			ret = fmt.Sprintf("%.6f", float64(o.Return)/1e9)
		}
		return fmt.Sprintf("  #%d client %d [%.6f s, %s s] %s → %s\n", i, o.ClientId, float64(o.Call)/1e9, ret,
			describeOp(o.Input.(modelOp)), describeOut(o.Input.(modelOp), o.Output.(modelOut)))
	}
	var b strings.Builder
	var unplaced []int
	for i := range ops {
		if !placed[i] {
			unplaced = append(unplaced, i)
		}
	}
	slices.SortFunc(unplaced, func(x, y int) int { return cmp.Compare(ops[x].Call, ops[y].Call) })
	fmt.Fprintf(&b, "%d of %d operations placed; the first not placed:\n", len(best), len(ops))
	for _, i := range unplaced[:min(3, len(unplaced))] {
		b.WriteString(line(i))
	}
	b.WriteString("the last placed, in linearization order:\n")
	for _, i := range best[max(0, len(best)-12):] {
		b.WriteString(line(i))
	}
	return b.String()
}

// withStaleRead returns ops plus a read that starts after the first
// acknowledged publication or rollback of a second or later generation
// returned, and answers the generation before it. The first, not the
// last: to call a history Illegal porcupine must exhaust every
// linearization of what precedes the stale read, which for a long history
// full of unknown outcomes took over a minute, against a second here.
func withStaleRead(ops []porcupine.Operation, client int) ([]porcupine.Operation, bool) {
	last := -1
	for i, o := range ops {
		in, out := o.Input.(modelOp), o.Output.(modelOut)
		if (in.kind == "publish" || in.kind == "rollback") && !out.unknown && out.code == "" && out.gen > 1 &&
			(last < 0 || o.Return < ops[last].Return) {
			last = i
		}
	}
	if last < 0 {
		return nil, false
	}
	p := ops[last]
	in, out := p.Input.(modelOp), p.Output.(modelOut)
	read := porcupine.Operation{ClientId: client, Input: modelOp{kind: "readAlias", alias: in.alias},
		Output: modelOut{gen: out.gen - 1, root: out.root}, Call: p.Return + 1, Return: p.Return + 2}
	return append(slices.Clip(ops), read), true
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkConverged waits until every member reports the same command index
// and requires the same state digest there.
func (c *chaosCluster) checkConverged(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var sts []*raftgate.Status
		for _, n := range c.nodes {
			st, err := n.status(c.t.Context(), true)
			if err != nil {
				break
			}
			sts = append(sts, st)
		}
		if len(sts) == len(c.nodes) && sts[0].StateIndex > 0 {
			same := true
			for _, st := range sts[1:] {
				same = same && st.StateIndex == sts[0].StateIndex
			}
			if same {
				for _, st := range sts[1:] {
					if *st.StateDigest != *sts[0].StateDigest {
						c.t.Fatalf("members disagree at command index %d: %s has %s, %s has %s",
							st.StateIndex, sts[0].ID, sts[0].StateDigest, st.ID, st.StateDigest)
					}
				}
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("members did not reach the same command index within %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chaosRegister is the register command of root i with a VERIFIED report;
// report tells reports of the same root apart.
func chaosRegister(roots []manifest.Digest, i, report int, invalid bool) *raftgate.Register {
	verdict := manifest.Verified
	if invalid {
		verdict = manifest.Invalid
	}
	return &raftgate.Register{
		Root: roots[i], Shards: []manifest.Digest{manifest.Sum([]byte(fmt.Sprintf("chaos shard %d", i)))},
		Report: &raftgate.ReportSummary{
			Digest: manifest.Sum([]byte(fmt.Sprintf("chaos report %d.%d", i, report))), Verdict: verdict,
			DatasetSnapshot:    manifest.Sum([]byte("chaos snapshot")),
			TombstoneWatermark: chaosWM(i), BenchmarkFence: chaosWM(i),
		},
	}
}

// releaseLetter is the model's letter for a release state.
var releaseLetter = map[string]byte{raftgate.ReleaseVerified: 'V', raftgate.ReleasePublished: 'P', raftgate.ReleaseRetired: 'R', raftgate.ReleaseInvalid: 'I'}

// chaosClient runs operations until ctx ends.
func chaosClient(ctx context.Context, id int, urls string, roots []manifest.Digest, rootIndex map[manifest.Digest]int, registered *atomic.Int64, h *chaosHistory, retryUntil time.Time) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id)))
	cl := raftgate.NewClient(urls)
	defer cl.Close()
	cl.RetryFor = 3 * time.Second
	seen := make([]uint64, len(chaosAliases)) // the last generation this client saw
	aliasRoot := map[int]int{}                // and the root it pointed at
	fence := uint64(0)
	runs := 0
	attempt := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 4*time.Second)
	}
	// pick is a recent root, sometimes one nobody registered yet.
	pick := func() int {
		k := int(registered.Load())
		if k < len(roots) && rng.IntN(20) == 0 {
			return k
		}
		return k - 1 - rng.IntN(min(k, 6))
	}
	// Report numbers start at 1: the setup registered every root with
	// report 0, and a register that repeats a release's current report
	// digest is a retry, answered with the release as it is. Client 0's
	// first register, when INVALID, reused that digest: the gate rightly
	// answered VERIFIED and the model, expecting a new report, failed
	// the history (once in CI).
	reports := 1
	// The run this client created last, whose ranks it attests and
	// reassigns, and the last epoch of it the client saw.
	lastRun, lastRoot, lastEpoch, lastStep, lastWorld := -1, 0, uint64(0), int64(-1), chaosWorld
	var lastCreate modelOp // the createRun that made lastRun
	for ctx.Err() == nil {
		a := rng.IntN(len(chaosAliases))
		var op modelOp
		switch x := rng.IntN(100); {
		case x < 5:
			if k := registered.Load(); k < int64(len(roots)) && rng.IntN(4) != 0 {
				op = modelOp{kind: "register", root: int(registered.Add(1) - 1)}
			} else {
				// Again, with a newer report; now and then an INVALID
				// one, which makes the release INVALID for good.
				op = modelOp{kind: "register", root: pick(), invalid: rng.IntN(10) == 0}
			}
		case x < 8:
			// A recheck with no hits, of a recent or an older root, at
			// or a little above the fence this client last saw (below
			// the current one if it moved since: FENCE_BEHIND). It
			// raises the root's watermark and reopens its closed
			// permits if it now satisfies both fences.
			// Mostly of the root of this client's run or of an alias as
			// last seen, whose permits a fence advance may have closed.
			k := int(registered.Load())
			root := k - 1 - rng.IntN(min(k, 12))
			switch rng.IntN(3) {
			case 0:
				if lastRun >= 0 {
					root = lastRoot
				}
			case 1:
				if r, ok := aliasRoot[a]; ok {
					root = r
				}
			}
			// Now and then it finds a hit: the release is INVALID for good.
			op = modelOp{kind: "recheck", root: root, fence: rng.IntN(2), value: fence + chaosWMStep*uint64(rng.IntN(4)), hits: rng.IntN(12) == 0}
		case x < 28:
			op = modelOp{kind: "readAlias", alias: a}
		case x < 56:
			expect := seen[a]
			if expect > 0 && rng.IntN(8) == 0 {
				expect-- // stale on purpose: the idempotence and conflict rules
			}
			op = modelOp{kind: "publish", alias: a, root: pick(), expect: expect, retain: chaosRetain}
		case x < 67:
			op = modelOp{kind: "rollback", alias: a, root: pick(), expect: seen[a]}
		case x < 71:
			// One run in four with a barrier timeout short enough to
			// pass now and then: BARRIER_TIMEOUT, or the leader's sweep.
			if lastRun >= 0 && rng.IntN(4) == 0 {
				// The last run's createRun again, as a late retry would
				// send it: the run as it is, or RUN_PRUNED once a prune
				// deleted it (never a run made anew).
				op = lastCreate
				break
			}
			op = modelOp{kind: "createRun", alias: a, run: id<<20 | runs, prev: lastRun, short: rng.IntN(4) == 0}
			runs++
		case x < 79:
			if lastRun < 0 {
				continue
			}
			op = modelOp{kind: "attest", run: lastRun, rank: rng.IntN(lastWorld), root: lastRoot}
			// Now and then a wrong one, which fails the run: another
			// root (ROOT_MISMATCH), or rank 1 naming rank 0's shard
			// (SHARD_NOT_ASSIGNED). Until the client's next run, every
			// command on this one is RUN_FAILED.
			switch rng.IntN(50) {
			case 0:
				op.root = (lastRoot + 1) % len(roots)
			case 1:
				op.rank, op.stray = 1, true
			}
		case x < 81:
			if lastRun < 0 {
				continue
			}
			// Recovery of one rank, with scale-out to three ranks or
			// back to two, from the last epoch this client saw, or the
			// one before on purpose: STALE_EPOCH, or the original answer
			// when it repeats the reassignment that made the epoch.
			expect := lastEpoch
			if expect > 0 && rng.IntN(4) == 0 {
				expect--
			}
			world := chaosWorld + rng.IntN(2)
			op = modelOp{kind: "reassign", run: lastRun, world: world, rank: rng.IntN(world), root: lastRoot, expect: expect}
		case x < 86:
			if lastRun < 0 {
				continue
			}
			// The next step, or the same again, or sometimes one behind
			// (STEP_REGRESSION) or of another root (ROOT_MISMATCH).
			step := uint64(max(lastStep, 0)) + uint64(rng.IntN(3))
			if step > 0 && rng.IntN(8) == 0 {
				step--
			}
			root := lastRoot
			if rng.IntN(10) == 0 {
				root = (lastRoot + 1) % len(roots)
			}
			op = modelOp{kind: "checkpoint", run: lastRun, root: root, value: step}
		case x < 94:
			// Forward, but no closer than chaosWMLead to the newest
			// root's watermark (an advance to the current value changes
			// nothing); sometimes behind: FENCE_REGRESSION.
			v := min(fence+chaosWMStep*uint64(rng.IntN(4)), max(fence, chaosWM(int(registered.Load())-1)-chaosWMLead))
			if v > 0 && rng.IntN(6) == 0 {
				v--
			}
			op = modelOp{kind: "fence", fence: rng.IntN(2), value: v}
		case x < 95:
			// Deletes the failed runs: later commands on them, a
			// repeated createRun included, are RUN_PRUNED.
			op = modelOp{kind: "prune"}
		default:
			op = modelOp{kind: "readFences"}
		}
		reg := chaosRegister(roots, op.root, id<<32|reports, op.invalid)
		if op.kind == "register" {
			reports++
		}
		// Attempts whose outcome is unknown: each is an operation of its
		// own, which may have taken effect at any time up to the answer
		// of the attempt that finally got a definite one (a repeat of an
		// applied command changes nothing, so its fate is sealed by then).
		var pending []porcupine.Operation
		var out modelOut
		var err error
		var call int64
		for {
			call = h.now()
			op.callMs = time.Now().UnixMilli()
			actx, cancel := attempt()
			out, err = chaosDo(actx, cl, op, reg, roots, rootIndex)
			cancel()
			unreachable := err != nil && (errcode.Of(err) == errcode.GateUnavailable || errcode.Of(err) == errcode.Canceled)
			if !errors.Is(err, raftgate.ErrIndeterminate) && !(unreachable && len(pending) > 0) {
				break
			}
			if errors.Is(err, raftgate.ErrIndeterminate) {
				pending = append(pending, porcupine.Operation{ClientId: id, Input: op, Call: call, Output: modelOut{unknown: true}})
			}
			// The same command again, as the client's contract allows.
			op.retried = true
			if time.Now().After(retryUntil) {
				for _, p := range pending {
					h.add(p.ClientId, p.Input.(modelOp), p.Output.(modelOut), p.Call, math.MaxInt64)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		ret := h.now()
		for _, p := range pending {
			h.add(p.ClientId, p.Input.(modelOp), p.Output.(modelOut), p.Call, ret)
		}
		if err != nil {
			if c := errcode.Of(err); c != errcode.GateUnavailable && c != errcode.Canceled {
				h.fail(op, err)
			}
			// A definite failure to reach the gate (GATE_UNAVAILABLE,
			// CANCELED after retryable attempts): nothing was applied, so
			// the operation is not part of the history.
			continue
		}
		h.add(id, op, out, call, ret)
		switch {
		case out.code != "":
		case op.kind == "readAlias" || op.kind == "publish" || op.kind == "rollback" || op.kind == "createRun":
			if out.gen >= seen[op.alias] && op.kind != "createRun" {
				aliasRoot[op.alias] = out.root
			}
			seen[op.alias] = max(seen[op.alias], out.gen)
			if op.kind == "createRun" && out.root >= 0 && op.run != lastRun { // a root not of the test fails the check anyway
				lastRun, lastRoot, lastEpoch, lastStep, lastWorld = op.run, out.root, 0, -1, chaosWorld
				lastCreate, lastCreate.retried = op, false
			}
		case op.kind == "attest" || op.kind == "reassign" || op.kind == "checkpoint":
			// Only this client changes its run, and it knows each
			// operation's outcome before the next: the answer is the
			// run's current world size.
			lastEpoch, lastStep, lastWorld = max(lastEpoch, out.epoch), max(lastStep, out.step), out.world
		case op.kind == "fence" || op.kind == "readFences":
			fence = max(fence, out.fences[0], out.fences[1])
		}
	}
}

// runOut is the model's view of a run summary.
func runOut(r *raftgate.RunSummary) modelOut {
	return modelOut{epoch: r.Epoch, world: r.WorldSize, attested: r.Attested, open: r.Barrier == raftgate.BarrierOpen, step: r.Step, ckpts: r.Checkpoints}
}

// chaosDo sends op once. err is nil when the gate answered definitely,
// with success or a coded rejection (out.code).
func chaosDo(ctx context.Context, cl *raftgate.Client, op modelOp, reg *raftgate.Register, roots []manifest.Digest, rootIndex map[manifest.Digest]int) (modelOut, error) {
	runID := fmt.Sprintf("chaos-%d", op.run)
	alias := chaosAliases[op.alias]
	root := func(d manifest.Digest) int {
		if i, ok := rootIndex[d]; ok {
			return i
		}
		return -1 // no root of the test: the model accepts no such answer
	}
	var out modelOut
	var err error
	switch op.kind {
	case "register":
		var r *raftgate.RecheckResult
		if r, err = cl.Register(ctx, reg); err == nil {
			out.state = releaseLetter[r.Release.State]
		}
	case "recheck":
		var r *raftgate.RecheckResult
		kind := []string{raftgate.FenceTombstone, raftgate.FenceBenchmark}[op.fence]
		hits := int64(0)
		if op.hits {
			hits = 1
		}
		report := manifest.Sum([]byte(fmt.Sprintf("chaos recheck %d %s %d %d", op.root, kind, op.value, hits)))
		if r, err = cl.Recheck(ctx, &raftgate.RecheckCmd{Root: roots[op.root], Kind: kind, Value: op.value, Report: report, Hits: hits}); err == nil {
			out.state = releaseLetter[r.Release.State]
		}
	case "readAlias":
		var al *raftgate.Alias
		if al, err = cl.Alias(ctx, alias); err == nil {
			out.gen, out.root = al.Generation, root(al.Root)
		}
	case "publish":
		var r *raftgate.PublishResult
		if r, err = cl.Publish(ctx, alias, roots[op.root], op.expect, op.retain); err == nil {
			out.gen, out.root = r.Generation, root(r.Root)
		}
	case "rollback":
		var r *raftgate.PublishResult
		if r, err = cl.Rollback(ctx, alias, roots[op.root], op.expect); err == nil {
			out.gen, out.root = r.Generation, root(r.Root)
		}
	case "createRun":
		var r *raftgate.RunSummary
		timeout := int64(24 * 3600 * 1000)
		if op.short {
			timeout = chaosShortBarrier.Milliseconds()
		}
		if r, err = cl.CreateRun(ctx, &raftgate.CreateRun{Run: runID, Alias: alias, WorldSize: chaosWorld, BarrierTimeoutMs: timeout}); err == nil {
			out.gen, out.root = r.Generation, root(r.Root)
		}
	case "attest":
		// The release has one shard: rank 0's (shard i goes to rank i %
		// worldSize); the other ranks attest none.
		var shards []manifest.Digest
		if op.rank == 0 || op.stray {
			shards = reg.Shards
		}
		var r *raftgate.RunSummary
		if r, err = cl.Attest(ctx, runID, op.rank, roots[op.root], shards); err == nil {
			out = runOut(r)
		}
	case "reassign":
		expect := op.expect
		var r *raftgate.RunSummary
		if r, err = cl.Reassign(ctx, &raftgate.Reassign{Run: runID, WorldSize: op.world, Reset: []int{op.rank}, ExpectedEpoch: &expect}); err == nil {
			out = runOut(r)
		}
	case "checkpoint":
		var r *raftgate.RunSummary
		if r, err = cl.AdmitCheckpoint(ctx, runID, int64(op.value), roots[op.root]); err == nil {
			out = runOut(r)
		}
	case "fence":
		kind := []string{raftgate.FenceTombstone, raftgate.FenceBenchmark}[op.fence]
		var r *raftgate.FenceResult
		if r, err = cl.AdvanceFence(ctx, kind, op.value); err == nil {
			out.fences = [2]uint64{r.Fences.Tombstone, r.Fences.Benchmark}
		}
	case "prune":
		_, err = cl.Prune(ctx, 0)
	case "readFences":
		var s *raftgate.State
		if s, err = cl.State(ctx); err == nil {
			out.fences = [2]uint64{s.Fences.Tombstone, s.Fences.Benchmark}
		}
	}
	if err == nil {
		return out, nil
	}
	switch code := errcode.Of(err); code {
	case errcode.UnknownAlias, errcode.UnknownRelease, errcode.UnknownRun, errcode.RunPruned, errcode.StaleEpoch, errcode.PublishConflict, errcode.GenerationConflict, errcode.NotVerified,
		errcode.RollbackIneligible, errcode.FenceRegression, errcode.RootMismatch, errcode.BarrierClosed, errcode.StepRegression,
		errcode.RunFailed, errcode.ShardNotAssigned, errcode.FenceBehind, errcode.PermitClosed, errcode.BarrierTimeout,
		errcode.TombstoneHit, errcode.BenchmarkHit:
		return modelOut{code: code}, nil
	}
	return modelOut{}, err
}
