// Package evstore keeps evidence signatures in the object store, beside
// the evidence they sign (evidence.StoreKey): what verify --sign-key
// writes and what publish, recheck and the gate commands send. It is apart
// from package evidence so that the gate, which checks signatures, never
// links the object store.
package evstore

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// SignatureSchema is the schema of a stored signature document.
const SignatureSchema = "training.evidence.signature.v1"

// maxStored bounds a stored signature document and the documents one
// message's directory is read for.
const (
	maxStoredSize = 4 << 10
	maxStored     = 64
)

// Stored is a signature document: what verify --sign-key writes beside
// the report it signed.
type Stored struct {
	Schema string `json:"schema"`
	evidence.Signature
}

// SignAndStore signs msg with priv and stores the signature document at
// StoreKey. The signature of one key over one message is always the same
// bytes, so a second run meets its own document and writes nothing; a
// document of other bytes there (damaged) gets a new version.
func SignAndStore(ctx context.Context, s objstore.Store, priv ed25519.PrivateKey, msg []byte) (evidence.Signature, error) {
	sig := evidence.Sign(priv, msg)
	b, err := json.Marshal(Stored{Schema: SignatureSchema, Signature: sig})
	if err != nil {
		return sig, errcode.Wrap(errcode.Internal, err, "encode signature")
	}
	key := evidence.StoreKey(msg, priv.Public().(ed25519.PublicKey))
	opts := objstore.PutOptions{IfNoneMatch: true, Size: int64(len(b)), SHA256: manifest.Sum(b)}
	_, err = s.Put(ctx, key, bytes.NewReader(b), opts)
	if objstore.IsPrecondition(err) {
		if old, rerr := readStored(ctx, s, key); rerr == nil && old == sig {
			return sig, nil
		}
		opts.IfNoneMatch = false
		_, err = s.Put(ctx, key, bytes.NewReader(b), opts)
	}
	if err != nil {
		return sig, errcode.Wrap(errcode.Of(err), err, "store signature %s", key)
	}
	return sig, nil
}

// Load returns the signatures of msg stored under its directory that
// verify over it, sorted by key (the store lists in order), at most
// MaxSignatures. A document that does not decode or does not verify is
// logged with its code and skipped: it is no evidence, and the gate
// would refuse it. Errors are the store's.
func Load(ctx context.Context, s objstore.Store, msg []byte, log *slog.Logger) ([]evidence.Signature, error) {
	if log == nil {
		log = slog.Default()
	}
	prefix := evidence.StoreDir(msg)
	var out []evidence.Signature
	after := ""
	for seen := 0; seen < maxStored; {
		page, err := s.List(ctx, prefix, after, maxStored-seen)
		if err != nil {
			return nil, errcode.Wrap(errcode.Of(err), err, "list signatures %s", prefix)
		}
		for _, o := range page.Objects {
			seen++
			sig, err := readStored(ctx, s, o.Key)
			if err == nil {
				err = sig.Verify(msg)
			}
			if err != nil {
				if c := errcode.Of(err); c == errcode.StoreUnavailable || c == errcode.IO || c == errcode.StoreDenied || c == errcode.Canceled {
					return nil, err
				}
				log.Warn("stored signature skipped", "key", o.Key, "code", errcode.Of(err))
				continue
			}
			if len(out) < evidence.MaxSignatures {
				out = append(out, sig)
			}
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	return out, nil
}

// readStored reads and strictly decodes one signature document.
func readStored(ctx context.Context, s objstore.Store, key string) (evidence.Signature, error) {
	rc, err := s.Get(ctx, key, "")
	if err != nil {
		return evidence.Signature{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(objstore.ContextReader(ctx, rc), maxStoredSize+1))
	if err != nil {
		if errcode.Of(err) == errcode.Internal {
			err = errcode.Wrap(errcode.IO, err, "read %s", key)
		}
		return evidence.Signature{}, err
	}
	var d Stored
	if err := manifest.DecodeJSON(b, &d, maxStoredSize); err != nil {
		return evidence.Signature{}, err
	}
	if d.Schema != SignatureSchema {
		return evidence.Signature{}, errcode.New(errcode.BadDocument, "%s: schema %q, want %s", key, truncate(d.Schema), SignatureSchema)
	}
	return d.Signature, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
