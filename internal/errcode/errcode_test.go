package errcode

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// declaredCodes parses errcode.go and returns every constant of type Code
// with its string value, so a constant added without a catalogue entry (or
// with a copy-pasted value) is caught.
func declaredCodes(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "errcode.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			if len(vs.Values) != len(vs.Names) {
				t.Fatalf("%s: Code constants must have explicit string values", fset.Position(vs.Pos()))
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s: %s is not a string literal", fset.Position(vs.Pos()), name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				consts[name.Name] = v
			}
		}
	}
	return consts
}

var codeSyntax = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)

func TestCatalogueComplete(t *testing.T) {
	consts := declaredCodes(t)
	if len(consts) < 40 {
		t.Fatalf("found only %d Code constants; is the parser looking at the right file?", len(consts))
	}
	byValue := map[string]string{}
	for name, v := range consts {
		if other, dup := byValue[v]; dup {
			t.Errorf("%s and %s share the code string %q", name, other, v)
		}
		byValue[v] = name
		c := Code(v)
		if !codeSyntax.MatchString(v) {
			t.Errorf("%s = %q is not UPPER_SNAKE_CASE", name, v)
		}
		if !Known(c) {
			t.Errorf("%s (%q) is not in the catalogue", name, v)
			continue
		}
		if m := c.Meaning(); m == "" || strings.ContainsAny(m, "\n\r\t") || strings.TrimSpace(m) != m {
			t.Errorf("%s has meaning %q; want one non-empty trimmed line", name, m)
		}
		if e := c.Exit(); e < ExitInvalid || e > ExitIndeterminate {
			t.Errorf("%s has exit status %d, want one of %d..%d", name, e, ExitInvalid, ExitIndeterminate)
		}
	}
	// And the other way round: nothing in the catalogue lacks a constant.
	all := All()
	if len(all) != len(consts) {
		t.Errorf("catalogue has %d entries, errcode.go declares %d Code constants", len(all), len(consts))
	}
	for _, c := range all {
		if _, ok := byValue[string(c)]; !ok {
			t.Errorf("catalogue entry %q has no constant", c)
		}
	}
}

// TestDesignCodes pins the codes DESIGN.md names: scripts and other
// languages match on these strings.
func TestDesignCodes(t *testing.T) {
	for _, c := range []Code{"DIGEST_MISMATCH", "SIZE_MISMATCH", "LOGICAL_MISMATCH", "SCHEMA_MISMATCH",
		"MISSING_MEMBER", "EXTRA_MEMBER", "DUPLICATE_MEMBER", "CONTENT_SUBSTITUTION", "SPLIT_CONFLICT",
		"TOMBSTONE_HIT", "BENCHMARK_HIT", "GENERATION_CONFLICT", "FENCE_BEHIND", "PERMIT_CLOSED",
		"ROOT_MISMATCH", "BARRIER_TIMEOUT", "PRECONDITION_FAILED",
		"BAD_DIGEST", "BAD_DOCUMENT", "BAD_COUNT", "TOTALS_MISMATCH", "DOCUMENT_TOO_LARGE"} {
		if !Known(c) {
			t.Errorf("%s is missing from the catalogue", c)
		}
	}
	for c, want := range map[Code]int{DigestMismatch: ExitInvalid, BadDocument: ExitInvalid, Usage: ExitUsage,
		IO: ExitError, PreconditionFailed: ExitRejected, GenerationConflict: ExitRejected, Indeterminate: ExitIndeterminate} {
		if c.Exit() != want {
			t.Errorf("%s exits %d, want %d", c, c.Exit(), want)
		}
	}
}

func TestUnknownCode(t *testing.T) {
	c := Code("NO_SUCH_CODE")
	if Known(c) || c.Meaning() != "" || c.Exit() != ExitError {
		t.Fatalf("unknown code: known=%v meaning=%q exit=%d", Known(c), c.Meaning(), c.Exit())
	}
}

type coded struct{ c Code }

func (e *coded) Error() string   { return "typed evidence" }
func (e *coded) ErrorCode() Code { return e.c }

func TestOf(t *testing.T) {
	base := New(NotFound, "key %q", "a/b")
	cases := []struct {
		name string
		err  error
		want Code
	}{
		{"nil", nil, ""},
		{"plain error", errors.New("boom"), Internal},
		{"stdlib sentinel", fs.ErrNotExist, Internal},
		{"New", base, NotFound},
		{"fmt %w of New", fmt.Errorf("reading: %w", base), NotFound},
		{"Wrap keeps the outer code", Wrap(DigestMismatch, base, "shard"), DigestMismatch},
		{"Wrap of plain error", Wrap(IO, errors.New("disk"), "write"), IO},
		{"typed Coder", &coded{SizeMismatch}, SizeMismatch},
		{"fmt %w of typed Coder", fmt.Errorf("ctx: %w", &coded{TombstoneHit}), TombstoneHit},
		{"Wrap of typed Coder", Wrap(BadDocument, &coded{BadDigest}, "doc"), BadDocument},
		{"typed Coder outside New", fmt.Errorf("a: %w", fmt.Errorf("b: %w", &coded{Nondeterminism})), Nondeterminism},
		{"join, first coded", errors.Join(errors.New("x"), New(FenceBehind, "y")), FenceBehind},
	}
	for _, c := range cases {
		if got := Of(c.err); got != c.want {
			t.Errorf("%s: Of = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestWrapAndIs(t *testing.T) {
	if Wrap(IO, nil, "x") != nil {
		t.Fatal("Wrap(nil) is not nil")
	}
	cause := errors.New("disk full")
	err := Wrap(IO, cause, "write %s", "blobs/sha256/ab")
	if !errors.Is(err, cause) {
		t.Error("errors.Is does not find the wrapped cause")
	}
	if !errors.Is(err, New(IO, "")) {
		t.Error("errors.Is does not match by code")
	}
	if errors.Is(err, New(NotFound, "")) {
		t.Error("errors.Is matched another code")
	}
	if errors.Is(err, New(IO, "some message")) {
		t.Error("errors.Is matched a target that has a message (only bare codes match)")
	}
	if !errors.Is(fmt.Errorf("outer: %w", err), New(IO, "")) {
		t.Error("errors.Is does not see through fmt wrapping")
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != IO || e.Err != cause {
		t.Errorf("errors.As = %+v", e)
	}
	want := "IO: write blobs/sha256/ab: disk full"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	for _, c := range []struct {
		err  *Error
		want string
	}{
		{&Error{Code: Usage}, "USAGE"},
		{&Error{Code: Usage, Msg: "m"}, "USAGE: m"},
		{&Error{Code: Usage, Err: cause}, "USAGE: disk full"},
	} {
		if c.err.Error() != c.want {
			t.Errorf("Error() = %q, want %q", c.err.Error(), c.want)
		}
	}
}

func TestAllSortedUnique(t *testing.T) {
	all := All()
	slices.Sort(all)
	if len(slices.Compact(slices.Clone(all))) != len(all) {
		t.Fatal("All returns duplicates")
	}
}
