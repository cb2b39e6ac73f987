package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/shardproof/shardproof/internal/errcode"
)

// A component is one kind of work a CPU sample is charged to: the first
// component in attributionRules any of whose patterns sets match the
// sample's stack. A set matches when each of its patterns matches some
// frame (function name) of the stack.
type component struct {
	name string
	sets [][]*regexp.Regexp
}

func rule(name string, sets ...[]string) component {
	c := component{name: name}
	for _, s := range sets {
		var rs []*regexp.Regexp
		for _, p := range s {
			rs = append(rs, regexp.MustCompile(p))
		}
		c.sets = append(c.sets, rs)
	}
	return c
}

// Component names; the last two take what no rule claims.
const (
	compRuntime = "runtime (collector, allocation, scheduler)"
	compOther   = "other"
)

// attributionRules name the work verify does beyond the ceiling's, and
// the work both do, by the functions that do it: verify's packages
// (github.com/shardproof/shardproof/…) and the harness's own loops
// (package main). Order matters: zstd inside a member bucket read is
// zstd, a sha256 inside the storage-digest path is the storage digest.
var attributionRules = []component{
	rule("zstd decompression (Parquet pages)",
		[]string{`/parquet/compress\.Decode$`},
		[]string{`/zstd\.\(\*Decoder\)\.DecodeAll$`}),
	// Not sha256x2.SumMany: Sum2, verify's tuple digests, runs through it.
	rule("content digests (sha256 of every text)",
		[]string{`/canon\.ContentDigests`}),
	rule("storage digest (sha256 of every file's bytes)",
		[]string{`/mapper\.hashMapped$`},
		[]string{`^main\.readCheckedInto$`, `^crypto/sha256\.`}),
	rule("reading the files (syscalls, copies)",
		[]string{`/mapper\.readAll$`},
		[]string{`/mapper\.\(\*fileBytes\)\.`},
		[]string{`/mapper\.Prefetch`},
		[]string{`^main\.readCheckedInto$`}),
	rule("snapshot member buckets (reducers' reads)",
		[]string{`/coordinator\.\(\*memberSource\)\.`}),
	rule("shuffle write (tuple buffers, sort, gather, Arrow IPC, store puts)",
		[]string{`/shuffle\.\(\*Encoder\)\.`},
		[]string{`/shuffle\.\(\*Buffer\)\.`},
		[]string{`/coordinator\.\(\*Job\)\.putOutput$`}),
	rule("reduce (shuffle reads, bucket leaves, diff)",
		[]string{`/shardproof/reducer\.`},
		[]string{`/coordinator\.\(\*Job\)\.reduce$`}),
	rule("canonical records, logical digest, tuple digests",
		[]string{`/internal/canon\.`},
		[]string{`/shardproof/tuplehash\.`}),
	rule("Parquet pages and values (all columns but zstd)",
		[]string{`/parquet/file\.`},
		[]string{`/parquet/internal/`},
		[]string{`/mapper\.`},
		[]string{`/parquet/pqarrow\.`}),
}

// attributionNames lists every component, in table order.
func attributionNames() []string {
	var names []string
	for _, c := range attributionRules {
		names = append(names, c.name)
	}
	return append(names, compRuntime, compOther)
}

// attribute charges every sample of a CPU profile to one component and
// returns the CPU seconds of each.
func attribute(p *profile.Profile) (map[string]float64, error) {
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, errcode.New(errcode.Usage, "not a CPU profile (no cpu/nanoseconds sample type)")
	}
	out := map[string]float64{}
	var frames []string
	for _, s := range p.Sample {
		frames = frames[:0]
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if ln.Function != nil {
					frames = append(frames, ln.Function.Name)
				}
			}
		}
		out[classify(frames)] += float64(s.Value[vi]) / 1e9
	}
	return out, nil
}

// classify names the component of a stack (leaf first).
func classify(frames []string) string {
	for _, c := range attributionRules {
		for _, set := range c.sets {
			if matchesAll(set, frames) {
				return c.name
			}
		}
	}
	if len(frames) > 0 && strings.HasPrefix(frames[0], "runtime.") {
		return compRuntime
	}
	return compOther
}

func matchesAll(set []*regexp.Regexp, frames []string) bool {
	for _, re := range set {
		found := false
		for _, f := range frames {
			if re.MatchString(f) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// attributeFile reads and attributes one CPU profile file.
func attributeFile(path string) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "profile") // keeps fs.ErrNotExist
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, errcode.Wrap(errcode.Usage, err, "profile %s", path)
	}
	a, err := attribute(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// Attribution is where the CPU of one profiled, untimed round went: CPU
// seconds per component for verify and for the ceiling, from their CPU
// profiles (100 samples a second per busy thread).
type Attribution struct {
	Components []string           `json:"components"`
	Verify     map[string]float64 `json:"verify"`
	Ceiling    map[string]float64 `json:"ceiling"`
	// Profiles is where the profiles were kept (go tool pprof).
	Profiles []string `json:"profiles,omitempty"`
}

// attributionTable renders columns of CPU seconds per component, with
// a total row, as Markdown.
func attributionTable(heads []string, cols []map[string]float64) string {
	var b strings.Builder
	b.WriteString("| component | " + strings.Join(heads, " | ") + " |\n|---|" + strings.Repeat("---:|", len(heads)) + "\n")
	totals := make([]float64, len(cols))
	for _, name := range attributionNames() {
		cells := make([]string, len(cols))
		zero := true
		for i, c := range cols {
			cells[i] = fmt.Sprintf("%.2f", c[name])
			totals[i] += c[name]
			zero = zero && c[name] == 0
		}
		if !zero {
			fmt.Fprintf(&b, "| %s | %s |\n", name, strings.Join(cells, " | "))
		}
	}
	cells := make([]string, len(cols))
	for i, t := range totals {
		cells[i] = fmt.Sprintf("**%.2f**", t)
	}
	fmt.Fprintf(&b, "| all | %s |\n", strings.Join(cells, " | "))
	return b.String()
}

// cmdAttribute prints the component table of CPU profiles given as
// files, one column each.
func cmdAttribute(files []string) error {
	if len(files) == 0 {
		return errcode.New(errcode.Usage, "attribute: name one or more CPU profiles")
	}
	var cols []map[string]float64
	for _, f := range files {
		a, err := attributeFile(f)
		if err != nil {
			return err
		}
		cols = append(cols, a)
	}
	fmt.Print(attributionTable(files, cols))
	return nil
}

// profiledRound runs verify and the ceiling once more, each with a CPU
// profile written into dir, and attributes both. The round is not timed:
// profiling costs a little CPU, and the measured rounds stay unprofiled.
func (r *runner) profiledRound(ctx context.Context, dir string) (*Attribution, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errcode.Wrap(errcode.IO, err, "profiles")
	}
	vp, cp := filepath.Join(dir, "verify.prof"), filepath.Join(dir, "ceiling.prof")
	if err := r.clearJobs(); err != nil {
		return nil, err
	}
	cmd := r.verifyCmd(ctx)
	cmd.Env = append(os.Environ(), "SHARDPROOF_CPUPROFILE="+vp)
	if _, _, err := measure(cmd, errcode.ExitInvalid); err != nil {
		return nil, err
	}
	cmd = exec.CommandContext(ctx, r.self, childSubcmd, "-tool", toolCeiling, "-meta", r.metaPath, "-cpuprofile", cp)
	if _, _, err := measure(cmd); err != nil {
		return nil, err
	}
	return attributeProfiles(vp, cp)
}

// attributeProfiles attributes verify's and the ceiling's CPU profiles.
func attributeProfiles(verify, ceiling string) (*Attribution, error) {
	a := &Attribution{Components: attributionNames(), Profiles: []string{verify, ceiling}}
	var err error
	if a.Verify, err = attributeFile(verify); err != nil {
		return nil, err
	}
	if a.Ceiling, err = attributeFile(ceiling); err != nil {
		return nil, err
	}
	return a, nil
}

// markdown renders the attribution with a column of verify's CPU seconds
// beyond the ceiling's.
func (a *Attribution) markdown() string {
	diff := map[string]float64{}
	for _, n := range a.Components {
		diff[n] = a.Verify[n] - a.Ceiling[n]
	}
	return attributionTable([]string{"verify CPU s", "ceiling CPU s", "verify − ceiling"}, []map[string]float64{a.Verify, a.Ceiling, diff})
}
