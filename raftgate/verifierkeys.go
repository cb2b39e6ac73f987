package raftgate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
)

// checkEvidence admits the evidence of c when the node requires
// verifier signatures (Config.VerifierKeys, or the set ReloadVerifierKeys
// put in its place): a register with a report and a recheck must carry a
// signature by a trusted key over their fields
// (evidence.Trusted.Signers), and signers are the IDs of the trusted
// keys that signed. Other commands, and every command on a node without
// keys, pass with no signers. The set is loaded once: a reload meanwhile
// changes the next check, never this one halfway.
func (n *Node) checkEvidence(c Command) (signers []string, err error) {
	t := n.trusted.Load()
	if t == nil {
		return nil, nil
	}
	switch c := c.(type) {
	case *Register:
		if ev := c.Evidence(); ev != nil {
			return t.Signers(ev.Message(), c.Signatures, fmt.Sprintf("register of %s with report %s", c.Root, c.Report.Digest))
		}
	case *RecheckCmd:
		return t.Signers(c.Evidence().Message(), c.Signatures, fmt.Sprintf("recheck of %s (%s %d, report %s)", c.Root, truncate(c.Kind), c.Value, c.Report))
	}
	return nil, nil
}

// vouched returns v, the result of a register or recheck whose evidence
// the keys signers signed, naming them (RecheckResult.VerifiedBy), and
// logs who vouched for the command applied. From cluster version
// versionSigners the state records them too (applyVouched logs the
// command naming them); below it, while a member's build could not
// decode that field, the answer and this line are where they are kept.
// applied is the command's own refusal, if any (a recheck with hits is
// recorded and refused).
func (n *Node) vouched(c Command, v any, applied error, signers []string) any {
	if len(signers) == 0 {
		return v
	}
	var root, report string
	switch c := c.(type) {
	case *Register:
		root, report = c.Root.String(), c.Report.Digest.String()
	case *RecheckCmd:
		root, report = c.Root.String(), c.Report.String()
	}
	attrs := []any{"type", commandType(c), "root", root, "report", report, "verifiedBy", strings.Join(signers, ",")}
	if applied != nil {
		attrs = append(attrs, "code", errcode.Of(applied))
	}
	n.log.Info("command applied; trusted verifier keys signed its evidence", attrs...)
	if r, ok := v.(RecheckResult); ok {
		r.VerifiedBy = signers
		return r
	}
	return v
}

// ReloadVerifierKeys reads Config.VerifierKeysFile again and makes its
// keys the set the node requires evidence signatures of, in place of the
// set in effect, at once: a check that starts afterwards uses the new
// set, one already running finishes with the old, and none sees a mix.
// It logs the key IDs added and removed (IDs only) and returns them;
// Status lists the new set. gate serve calls it on SIGHUP.
//
// A file that cannot be read, holds a line that is no public key, or
// lists no key is USAGE, as at start: the set in effect stays, and the
// error is logged with its code. So a reload never leaves a node that
// required signatures requiring none. Nor does it make a node that
// required none require some: a node started without verifier keys, or
// given them without a file, has nothing to read again (USAGE, logged,
// nothing changes); restart it with a key file. Each member reads its
// own file: an operator who revokes or adds a key updates every
// member's file and reloads every member.
func (n *Node) ReloadVerifierKeys() (added, removed []string, err error) {
	n.reloading.Lock()
	defer n.reloading.Unlock()
	old := n.trusted.Load()
	switch {
	case old == nil:
		err = errcode.New(errcode.Usage, "this member requires no verifier signatures (started without --verifier-keys): a reload gives it none; restart it with --verifier-keys FILE to require them")
	case n.cfg.VerifierKeysFile == "":
		err = errcode.New(errcode.Usage, "this member's verifier keys were given without a file: there is nothing to read again")
	}
	var t *evidence.Trusted
	if err == nil {
		t, err = evidence.LoadTrusted(n.cfg.VerifierKeysFile)
	}
	if err != nil {
		attrs := []any{"code", errcode.Of(err), "err", err}
		if old != nil {
			attrs = append(attrs, "verifierKeys", strings.Join(old.IDs(), ","))
		}
		n.log.Error("verifier keys not reloaded; the keys in effect stay", attrs...)
		return nil, nil, err
	}
	added, removed = keyDiff(old.IDs(), t.IDs())
	n.trusted.Store(t)
	n.log.Info("verifier keys reloaded", "added", strings.Join(added, ","), "removed", strings.Join(removed, ","), "verifierKeys", strings.Join(t.IDs(), ","))
	return added, removed, nil
}

// keyDiff returns the IDs of now not in was (added) and of was not in now
// (removed); both lists are sorted, as Trusted.IDs are.
func keyDiff(was, now []string) (added, removed []string) {
	for _, id := range now {
		if !slices.Contains(was, id) {
			added = append(added, id)
		}
	}
	for _, id := range was {
		if !slices.Contains(now, id) {
			removed = append(removed, id)
		}
	}
	return added, removed
}
