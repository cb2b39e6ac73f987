package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardproof/shardproof/internal/errcode"
)

// codes: the error-code catalogue, so scripts and operators can map an exit
// status or a "shardproof: CODE: …" line to its meaning.
var codesCmd = &cobra.Command{
	Use:   "codes",
	Short: "Print every error code with its exit status and meaning",
	Long: `Print every error code with its exit status and meaning, sorted by code.

Exit statuses: 0 ok, 1 invalid input or verdict INVALID, 2 usage,
credentials refused (UNAUTHENTICATED by the gate, STORE_DENIED by an S3
store, or by a file store whose directory refuses this user or is
read-only), a store URL naming no bucket (NO_SUCH_BUCKET) or a cache
bound below a worker's shards (CACHE_TOO_SMALL): retrying does not help,
3 operational error, 4 rejected by the gate or store, 5 indeterminate
(retrying is safe).`,
	Args: exactArgs(0),
	RunE: func(cmd *cobra.Command, args []string) error {
		codes := errcode.All()
		slices.Sort(codes)
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "CODE\tEXIT\tMEANING")
		for _, c := range codes {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", c, c.Exit(), c.Meaning())
		}
		tw.Flush()
		if _, err := fmt.Fprint(cmd.OutOrStdout(), b.String()); err != nil {
			return errcode.Wrap(errcode.IO, err, "write codes")
		}
		return nil
	},
}

func init() { rootCmd.AddCommand(codesCmd) }
