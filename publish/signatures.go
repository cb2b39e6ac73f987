package publish

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/evidence/evstore"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
	"github.com/shardproof/shardproof/raftgate"
)

// SignReport signs, with key, the evidence a register of report rep
// (digest d) carries, and stores the signature in s beside it
// (evidence.StoreKey): what verify --sign-key does with the report it
// made. The root manifest is read for the shards the register names.
func SignReport(ctx context.Context, s objstore.Store, key ed25519.PrivateKey, rep *manifest.Report, d manifest.Digest) error {
	rel, err := loadRelease(ctx, s, rep.Root)
	if err != nil {
		return err
	}
	reg := &raftgate.Register{Root: rep.Root, Shards: shardDigests(rel), Report: Summary(rep, d)}
	if _, err := evstore.SignAndStore(ctx, s, key, reg.Evidence().Message()); err != nil {
		return fmt.Errorf("sign report %s: %w", d, err)
	}
	return nil
}

// AttachRegisterSignatures sets reg's signatures, when it carries a
// report, to those stored in s for its evidence, after signing it with
// key and storing that signature when key is set. A gate given verifier
// keys admits the register only with one of a key it trusts.
func AttachRegisterSignatures(ctx context.Context, s objstore.Store, key ed25519.PrivateKey, reg *raftgate.Register, log *slog.Logger) error {
	ev := reg.Evidence()
	if ev == nil {
		return nil
	}
	sigs, err := attach(ctx, s, key, ev.Message(), log)
	if err != nil {
		return fmt.Errorf("signatures of report %s: %w", reg.Report.Digest, err)
	}
	reg.Signatures = sigs
	return nil
}

// AttachRecheckSignatures is AttachRegisterSignatures for a recheck.
func AttachRecheckSignatures(ctx context.Context, s objstore.Store, key ed25519.PrivateKey, rc *raftgate.RecheckCmd, log *slog.Logger) error {
	sigs, err := attach(ctx, s, key, rc.Evidence().Message(), log)
	if err != nil {
		return fmt.Errorf("signatures of the %s recheck of %s at %d: %w", rc.Kind, rc.Root, rc.Value, err)
	}
	rc.Signatures = sigs
	return nil
}

func attach(ctx context.Context, s objstore.Store, key ed25519.PrivateKey, msg []byte, log *slog.Logger) ([]evidence.Signature, error) {
	if key != nil {
		if _, err := evstore.SignAndStore(ctx, s, key, msg); err != nil {
			return nil, err
		}
	}
	return evstore.Load(ctx, s, msg, log)
}

// shardDigests lists rel's shard digests, in order, as a register names
// them.
func shardDigests(rel *manifest.Release) []manifest.Digest {
	out := make([]manifest.Digest, len(rel.Shards))
	for i, sh := range rel.Shards {
		out[i] = sh.Digest
	}
	return out
}
