package coordinator

import (
	"testing"

	"github.com/shardproof/shardproof/objstore/s3/s3test"
)

// TestMain also removes the test gateway's data, when a test started it,
// once every test has run.
func TestMain(m *testing.M) {
	defer s3test.Stop()
	m.Run()
}
