package raftgate

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportGraph keeps the gate free of the data plane: no Arrow, no
// Parquet, no object store (the FSM must never read the store).
func TestImportGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned %d packages", len(deps))
	}
	for _, d := range deps {
		for _, banned := range []string{"apache/arrow", "parquet-go", "shardproof/objstore", "aws-sdk-go"} {
			if strings.Contains(d, banned) {
				t.Errorf("raftgate depends on %s", d)
			}
		}
	}
}
