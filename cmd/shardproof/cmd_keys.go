package main

import (
	"crypto/ed25519"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardproof/shardproof/evidence"
	"github.com/shardproof/shardproof/internal/errcode"
)

// keys: a verifier's signing key pair (see evidence, and gate serve
// --verifier-keys).
var keysCmd = &cobra.Command{
	Use:   "keys",
	Short: "Make a verifier's signing key pair",
}

var keysGenerateFlags struct{ private, public string }

var keysGenerateCmd = &cobra.Command{
	Use:   "generate --private FILE --public FILE",
	Short: "Make an ed25519 key pair a verifier signs its evidence with",
	Long: `Make an ed25519 key pair for signing verification evidence: verify,
task aggregate, recheck, publish, gate register and gate recheck take
--sign-key with the private file, and a gate started with --verifier-keys
FILE listing the public key accepts registers of a report and rechecks
only with a signature by one of its keys (EVIDENCE_UNSIGNED otherwise).

The private file (mode 0600) holds one line "ed25519-private:<base64 of the
32-byte seed>", the public file one line "ed25519:<base64 of the 32-byte
key>", which is also a line of a --verifier-keys file. Neither file may
exist: a key file is never overwritten (USAGE). It prints the key's ID,
"ed25519:sha256:" and the first 16 hex digits of the key's sha256, as
"gate status" shows the keys a gate trusts.

Exit status: 0 written, 2 usage (a file exists or cannot be created), 3
a file created could not be written (IO; neither is left).`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, _ []string) error {
		f := keysGenerateFlags
		if f.private == "" || f.public == "" {
			return errcode.New(errcode.Usage, "%s: --private and --public are required", cmd.CommandPath())
		}
		pub, err := evidence.GenerateKeyFiles(f.private, f.public)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "key %s\nprivate %s (keep it to the verifier)\npublic %s (add it to the gate's --verifier-keys file)\n", evidence.KeyID(pub), f.private, f.public)
		return nil
	},
}

func init() {
	keysGenerateCmd.Flags().StringVar(&keysGenerateFlags.private, "private", "", "file to create for the private key (mode 0600)")
	keysGenerateCmd.Flags().StringVar(&keysGenerateFlags.public, "public", "", "file to create for the public key")
	keysCmd.AddCommand(keysGenerateCmd)
	rootCmd.AddCommand(keysCmd)
}

// addSignKeyFlag registers --sign-key on a command that makes or
// registers evidence.
func addSignKeyFlag(f *pflag.FlagSet, what string) {
	f.String("sign-key", os.Getenv("SHARDPROOF_SIGN_KEY"), "private key file (shardproof keys generate) to sign "+what+" with, storing the signature beside it; signatures stored there already are sent either way (env SHARDPROOF_SIGN_KEY)")
}

// signKey loads --sign-key's private key; nil without the flag.
func signKey(cmd *cobra.Command) (ed25519.PrivateKey, error) {
	path, _ := cmd.Flags().GetString("sign-key")
	if path == "" {
		return nil, nil
	}
	return evidence.LoadPrivateKey(path)
}
