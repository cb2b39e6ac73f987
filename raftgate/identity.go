package raftgate

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A cluster identity (State.ClusterID) is 16 random bytes, written as 32
// lowercase hex digits, that a gate cluster is given when it is founded
// (--bootstrap, with or without --restore: a restore founds a new cluster
// and gets a new identity, never the backup's). Every Raft connection
// between members carries it, from cluster version 3 (versionClusterID)
// on, and a member refuses one whose identity is not its own
// (CLUSTER_ID_MISMATCH): a member of the cluster a backup was taken from,
// back after the restore with a configuration that names the new
// cluster's addresses, can neither vote, append entries, nor install a
// snapshot there, and the new cluster's members none of that in the old
// one. etcd checks its cluster ID on every peer message for the same
// reason.
//
// The identity is replicated state: snapshots, backups and --recover
// keep it. A member also keeps it in its data directory (clusterIDFile),
// which it writes when it applies the identity and when it joins (it asks
// the member it joins through for it first, so the leader's first
// connection is checked too): a member restarted checks connections
// before it has replayed its log. A cluster founded by a build before
// version 3 has none: its leader draws one when it raises the cluster
// version to 3, once every member runs a build that carries it.
//
// The identity is no credential: it is no secret (gate status shows it),
// and it tells clusters apart, it does not tell a member from a process
// that copies it. The gate token authenticates (see auth.go).

// versionClusterID is the cluster version from which Raft connections
// between members carry the cluster identity and members refuse those
// that carry another or none. Below it members dial as the builds of
// version 2 do (no handshake, or the token's), since some may be such
// builds, and accept what those builds send.
const versionClusterID = 3

// clusterIDLen is the length of a cluster identity in bytes.
const clusterIDLen = 16

// clusterIDFile is the file, in a data directory, that holds the cluster
// identity the member applied or joined with.
const clusterIDFile = "cluster-id"

// newClusterID draws a new cluster identity.
func newClusterID() string {
	b := make([]byte, clusterIDLen)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// checkClusterID refuses what is not a cluster identity: 32 lowercase hex
// digits, not all zero (zero stands for none on the wire).
func checkClusterID(id string) error {
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != clusterIDLen || hex.EncodeToString(b) != id {
		return fmt.Errorf("cluster ID %q is not %d lowercase hex digits", truncate(id), 2*clusterIDLen)
	}
	if bytes.Equal(b, make([]byte, clusterIDLen)) {
		return errors.New("cluster ID is all zeros")
	}
	return nil
}

// readClusterIDFile returns the identity in dir's clusterIDFile, "" if
// there is none.
func readClusterIDFile(dir string) (string, error) {
	p := filepath.Join(dir, clusterIDFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", errcode.Wrap(errcode.IO, err, "read %s", p)
	}
	if len(b) > 1024 {
		b = b[:1024]
	}
	id := string(bytes.TrimSpace(b))
	if err := checkClusterID(id); err != nil {
		return "", errcode.New(errcode.BadDocument, "%s: %v; delete it and the member learns its cluster's identity again from the state it applies", p, err)
	}
	return id, nil
}

// writeClusterIDFile writes id into dir's clusterIDFile, atomically and
// durably.
func writeClusterIDFile(dir, id string) error {
	p := filepath.Join(dir, clusterIDFile)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(id + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	// The rename is durable once the directory is synced, as the
	// learner marker's is: a member that lost the file in a crash would
	// check connections only once it has replayed its state.
	return syncDir(dir)
}

// identity is what a member knows of its cluster's identity.
type identity struct {
	mu sync.Mutex
	// id is the identity (hex), "" while unknown.
	id string
	// checked is set once the identity is the cluster's, applied or
	// learnt from a member (the cluster is at versionClusterID or
	// above): the member then dials with the identity handshake and
	// refuses connections without it. A founder's identity before the
	// raise that records it is not checked: its cluster may still take
	// a member of an older build.
	checked bool
	// ready is closed once Start has set what the data directory holds:
	// until then an accepted connection waits, so none is judged
	// against an identity not loaded yet.
	ready     chan struct{}
	readyOnce sync.Once
	// filed is the identity the data directory holds, as this member
	// read or wrote it.
	filed string
	// said holds the refusals logged, so each is logged once per peer.
	saidMu sync.Mutex
	said   map[string]bool
}

func newIdentity() *identity {
	return &identity{ready: make(chan struct{}), said: map[string]bool{}}
}

// current returns the identity ("" unknown) and whether it is checked.
func (i *identity) current() (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.id, i.checked
}

// set sets the identity; checked never goes back to false.
func (i *identity) set(id string, checked bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.id = id
	i.checked = i.checked || checked
}

// first reports whether the refusal key is new (and records it). The
// record is bounded: past maxSaid keys every refusal is logged.
func (i *identity) first(key string) bool {
	const maxSaid = 1024
	i.saidMu.Lock()
	defer i.saidMu.Unlock()
	if i.said[key] {
		return false
	}
	if len(i.said) < maxSaid {
		i.said[key] = true
	}
	return true
}

// ClusterID is the cluster identity this node knows: its state's, or
// what its data directory holds or it learnt when it joined; "" while
// none is known (a cluster below version 3, or a founder before the
// raise that records its identity).
func (n *Node) ClusterID() string {
	id, checked := n.ident.current()
	if !checked {
		return ""
	}
	return id
}

// learnClusterID makes id this member's checked identity and writes it
// into the data directory, when it is not there yet. The state's identity
// wins over the file's (the state is the cluster's).
func (n *Node) learnClusterID(id, from string) {
	if checkClusterID(id) != nil {
		return
	}
	old, checked := n.ident.current()
	n.ident.mu.Lock()
	filed := n.ident.filed
	n.ident.mu.Unlock()
	if old == id && checked && filed == id {
		return
	}
	if old != "" && old != id && checked {
		n.log.Warn("the cluster identity in the data directory differs from the one applied; the applied one replaces it", "code", errcode.ClusterIDMismatch, "had", old, "clusterID", id, "from", from)
	}
	n.ident.set(id, true)
	if err := writeClusterIDFile(n.cfg.DataDir, id); err != nil {
		n.log.Warn("write the cluster identity into the data directory", "code", errcode.IO, "err", err)
	} else {
		n.ident.mu.Lock()
		n.ident.filed = id
		n.ident.mu.Unlock()
	}
	n.log.Info("gate cluster identity", "clusterID", id, "from", from)
}

// proposedClusterID is the identity a raise to versionClusterID records
// when the state has none: the founder's, else a new one.
func (n *Node) proposedClusterID() string {
	var have string
	n.fsm.Read(func(s *State) { have = s.ClusterID })
	if have != "" {
		return ""
	}
	if id, _ := n.ident.current(); id != "" {
		return id
	}
	return newClusterID()
}

// markReady lets accepted connections run their handshake (see ready).
func (i *identity) markReady() { i.readyOnce.Do(func() { close(i.ready) }) }

// loadClusterID sets, before Raft starts, the identity this member
// checks connections against: a restore's new one; for a directory with
// state, the one its clusterIDFile holds (the state's, applied when Raft
// restores it, replaces it); for a new cluster's founder, a new one,
// which the leader's raise to versionClusterID records (not checked
// until then: the cluster may still take a member of an older build). A
// directory without state drops a clusterIDFile left there: a joiner
// learns its cluster's identity when it joins.
func (n *Node) loadClusterID(existing bool, restored *State) error {
	defer n.ident.markReady()
	switch {
	case restored != nil:
		if restored.ClusterID != "" {
			n.ident.set(restored.ClusterID, true)
		}
	case existing:
		id, err := readClusterIDFile(n.cfg.DataDir)
		if err != nil {
			return err
		}
		if id != "" {
			n.ident.set(id, true)
			n.ident.filed = id
		}
	default:
		if err := os.Remove(filepath.Join(n.cfg.DataDir, clusterIDFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errcode.Wrap(errcode.IO, err, "remove the cluster identity left in %s", n.cfg.DataDir)
		}
		if n.cfg.Join == "" && n.cfg.Bootstrap && n.fsm.version >= versionClusterID {
			n.ident.set(newClusterID(), false)
		}
	}
	return nil
}
