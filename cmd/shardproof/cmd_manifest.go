package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/internal/errcode"
	"github.com/shardproof/shardproof/internal/verifyread"
	"github.com/shardproof/shardproof/manifest"
	"github.com/shardproof/shardproof/objstore"
)

// manifest show|check|put: the documents of DESIGN.md by digest, like
// `crane manifest`. show prints a stored document's exact bytes (so piping
// it to sha256sum reproduces the digest) and prints nothing unless those
// bytes hash to the digest and decode strictly; check and put apply the
// same strict decoding to a local file before anything is stored.
var manifestCmd = &cobra.Command{
	Use:   "manifest",
	Short: "Show, check and store release, snapshot, fence-log, record-schema and report documents",
}

var manifestFlags struct {
	url    string
	pretty bool
}

var manifestShowCmd = &cobra.Command{
	Use:   "show DIGEST",
	Short: "Print the stored bytes of the document with this sha256 digest",
	Long: `Print the stored bytes of the document with this sha256 digest.

The document is read from blobs/sha256/<hex> (latest version) with a size cap
of 64 MiB, its sha256 is checked against DIGEST (DIGEST_MISMATCH otherwise),
and it must decode strictly as a release, snapshot, tombstone log, benchmark
registry, record schema, verification report or recheck report. The
output is the exact stored bytes, so

  shardproof manifest show --store DIR sha256:… | sha256sum

prints the digest again. --pretty indents the JSON instead and, for a
release, snapshot or verification report, writes a one-line summary to
stderr.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		d, err := manifest.ParseDigest(args[0])
		if err != nil {
			return errcode.Wrap(errcode.Usage, err, "%s: DIGEST", cmd.CommandPath())
		}
		s, err := openStore(cmd, manifestFlags.url)
		if err != nil {
			return err
		}
		data, version, err := objstore.ReadBlob(cmd.Context(), s, d, manifest.MaxDocumentSize)
		if err != nil {
			return err
		}
		// ReadBlob has checked the digest while reading; checking the bytes
		// we are about to print costs one more hash and depends on nothing
		// but this function.
		if got := manifest.Sum(data); got != d {
			return errcode.New(errcode.DigestMismatch, "%s version %s: requested digest=%s, sha256 of bytes read=%s", d.BlobKey(), version, d, got)
		}
		schema, doc, err := manifest.DecodeAny(data)
		if err != nil {
			// The digest is on the command line; the error says where in
			// the document and carries the code.
			slog.Debug("manifest show: not a valid document", "digest", d.String(), "version", string(version), "code", errcode.Of(err))
			return err
		}
		slog.Debug("manifest show", "digest", d.String(), "version", string(version), "schema", schema, "bytes", len(data))
		out := data
		if manifestFlags.pretty {
			var buf bytes.Buffer
			if err := json.Indent(&buf, data, "", "  "); err != nil {
				return errcode.Wrap(errcode.Internal, err, "indent a decoded document")
			}
			buf.WriteByte('\n')
			out = buf.Bytes()
			if line := summary(d, version, doc); line != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), line)
			}
		}
		if _, err := cmd.OutOrStdout().Write(out); err != nil {
			return errcode.Wrap(errcode.IO, err, "write %s", d)
		}
		return nil
	},
}

var manifestCheckCmd = &cobra.Command{
	Use:   "check FILE|-",
	Short: "Strictly decode a local document and print its schema and digest",
	Long: `Strictly decode a local document (FILE, or - for stdin) and print its
schema identifier and digest, the sha256 of its exact bytes:

  training.shard.release.v1 sha256:…

Writers in other languages can check a document before storing it. A
document that is not valid fails with its code (BAD_DOCUMENT, BAD_DIGEST,
BAD_COUNT, TOTALS_MISMATCH, DOCUMENT_TOO_LARGE) and exit status 1; a
FILE that cannot be opened, or a directory, is USAGE (exit status 2).`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		data, schema, err := readLocalDocument(cmd, args[0])
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", schema, manifest.Sum(data)); err != nil {
			return errcode.Wrap(errcode.IO, err, "write result")
		}
		return nil
	},
}

var manifestPutCmd = &cobra.Command{
	Use:   "put FILE|-",
	Short: "Check a local document and store its exact bytes content-addressed",
	Long: `Check a local document (FILE, or - for stdin) as 'manifest check' does and
store its exact bytes at blobs/sha256/<hex> with a conditional create, then
print its schema identifier, digest and store version:

  training.tombstones.v1 sha256:… v1

This is how a hand-written tombstone log or benchmark registry enters the
store. Putting the same bytes again changes nothing and prints the existing
version. An invalid document is never stored.`,
	Args: exactArgs(1),
	RunE: func(cmd *cobra.Command, args []string) error {
		data, schema, err := readLocalDocument(cmd, args[0])
		if err != nil {
			return err
		}
		s, err := openStore(cmd, manifestFlags.url)
		if err != nil {
			return err
		}
		d, version, created, err := objstore.PutBlob(cmd.Context(), s, data)
		if err != nil {
			return err
		}
		slog.Info("document stored", "schema", schema, "digest", manifest.Digest(d).String(), "version", string(version), "created", created)
		if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s\n", schema, manifest.Digest(d), version); err != nil {
			return errcode.Wrap(errcode.IO, err, "write result")
		}
		return nil
	},
}

// readLocalDocument reads FILE or stdin ("-") up to the document size cap
// and strictly decodes it as any known document.
func readLocalDocument(cmd *cobra.Command, name string) ([]byte, string, error) {
	in := cmd.InOrStdin()
	if name != "-" {
		f, err := openArgFile("document file", name)
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		in = f
	}
	data, err := verifyread.ReadAll(in, manifest.MaxDocumentSize)
	if tooLarge := new(verifyread.TooLargeError); errors.As(err, &tooLarge) {
		return nil, "", err
	} else if err != nil {
		return nil, "", errcode.Wrap(errcode.IO, err, "read %s", name)
	}
	schema, _, err := manifest.DecodeAny(data)
	if err != nil {
		return nil, "", err
	}
	return data, schema, nil
}

// summary is one line for people: what a release, snapshot or report
// holds and what it is bound to ("" for other documents).
func summary(d manifest.Digest, v objstore.Version, doc manifest.Validator) string {
	switch x := doc.(type) {
	case *manifest.Release:
		return fmt.Sprintf("release %s (version %s): %d shards, %d records, %d tokens; snapshot %s, recordSchema %s, tombstoneWatermark %d, benchmarkFence %d, %s",
			d, v, x.Totals.Shards, x.Totals.Records, x.Totals.Tokens, x.DatasetSnapshot, x.RecordSchema,
			x.TombstoneWatermark, x.BenchmarkFence, x.Build.MemberPartition)
	case *manifest.Snapshot:
		return fmt.Sprintf("snapshot %s (version %s): %d member files, %d records; recordSchema %s, tupleRoot %s, %s",
			d, v, x.Totals.Shards, x.Totals.Records, x.RecordSchema, x.TupleRoot, x.MemberPartition)
	case *manifest.Report:
		omitted := ""
		if x.FailuresOmitted > 0 {
			omitted = fmt.Sprintf(" (%d listed)", len(x.Failures))
		}
		return fmt.Sprintf("report %s (version %s): %s for root %s; %d of %d shards verified, %d records, %d shard-level failures%s; tombstoneWatermark %d, benchmarkFence %d",
			d, v, x.Verdict, x.Root, x.Counts.ShardsVerified, x.Counts.Shards, x.Counts.Records, int64(len(x.Failures))+x.FailuresOmitted, omitted,
			x.TombstoneWatermark, x.BenchmarkFence)
	}
	return ""
}

func init() {
	manifestCmd.PersistentFlags().StringVar(&manifestFlags.url, "store", os.Getenv("SHARDPROOF_STORE"), "store URL or path (default $SHARDPROOF_STORE)")
	manifestShowCmd.Flags().BoolVar(&manifestFlags.pretty, "pretty", false, "indent the JSON (the output then no longer hashes to DIGEST)")
	manifestCmd.AddCommand(manifestShowCmd, manifestCheckCmd, manifestPutCmd)
	rootCmd.AddCommand(manifestCmd)
}
