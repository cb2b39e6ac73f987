package raftgate

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// An address that is no HOST:PORT (a typo in gate serve's --http-addr,
// --raft-addr, an advertise flag, or a --join without its port) is USAGE
// naming the flag, and the data directory is not created: it was IO,
// exit 3, from the listener, the status scripts retry, and left the
// directory behind (a --join without a port asked port 80 for 30 s).
func TestMalformedAddressIsUsage(t *testing.T) {
	for name, set := range map[string]func(*Config){
		"--http-addr":      func(c *Config) { c.HTTPAddr = "bogus" },
		"--raft-addr":      func(c *Config) { c.RaftAddr = "127.0.0.1" },
		"--http-advertise": func(c *Config) { c.HTTPAdvertise = "gate.example:http" },
		"--raft-advertise": func(c *Config) { c.RaftAdvertise = "10.0.0.1:70000" },
		"--join":           func(c *Config) { c.Bootstrap, c.Join = false, "127.0.0.1:1,gate-1.example" },
	} {
		cfg := TestConfig(t.TempDir(), "g")
		set(&cfg)
		n := NewNode(cfg)
		err := n.Start(ctxT(t, 10*time.Second))
		n.Shutdown()
		if errcode.Of(err) != errcode.Usage || !strings.Contains(err.Error(), name+" ") || !strings.Contains(err.Error(), "want HOST:PORT") {
			t.Errorf("%s: start: %v, want USAGE naming the flag", name, err)
		}
		if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
			t.Errorf("%s: the data directory was created: %v", name, err)
		}
	}
}
