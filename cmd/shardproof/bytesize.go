package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// byteUnits are the units a size flag takes after its digits, matched
// without regard to case: decimal (powers of 1000) as disks are sold,
// binary (powers of 1024) as df -h shows them.
var byteUnits = map[string]int64{
	"b":  1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50,
}

// parseByteSize parses a number of bytes: digits alone, or digits and a
// unit (500GiB, 2TB, 4096B). Anything else (a sign, a fraction, a unit
// such as G that could be either) is an error.
func parseByteSize(s string) (int64, error) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, errors.New("want a whole number of bytes, alone or with a unit: B, kB, MB, GB, TB, PB (powers of 1000), KiB, MiB, GiB, TiB, PiB (powers of 1024)")
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s bytes: more than %d", s[:i], int64(math.MaxInt64))
	}
	mult := int64(1)
	if unit := s[i:]; unit != "" {
		var ok bool
		if mult, ok = byteUnits[strings.ToLower(unit)]; !ok {
			return 0, fmt.Errorf("unit %q: want B, kB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of 1024), after a whole number", unit)
		}
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%s: more than %d bytes", s, int64(math.MaxInt64))
	}
	return n * mult, nil
}

// byteSize is an int64 flag of a number of bytes, given as parseByteSize
// takes it.
type byteSize struct{ p *int64 }

func (b byteSize) String() string {
	if b.p == nil {
		return "0"
	}
	return strconv.FormatInt(*b.p, 10)
}

func (b byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

func (byteSize) Type() string { return "size" }

// byteSizeVar registers a byteSize flag, initially 0.
func byteSizeVar(f *pflag.FlagSet, p *int64, name, usage string) {
	*p = 0
	f.Var(byteSize{p}, name, usage)
}
