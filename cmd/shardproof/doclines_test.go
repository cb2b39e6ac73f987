package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardproof/shardproof/internal/errcode"
)

// The docs show command lines a new user copies (STYLE.md: "The README
// shows the real commands"). TestDocCommandLines reads every Markdown file
// of the repository and checks each shardproof command line it shows, in
// a shell code block or an inline code span, against the real command
// tree; each `make` line against the Makefile; each error code written
// as code against the catalogue, and the exit status written beside a
// code against the code's. A finding names file:line.

// docFinding is one place where a doc disagrees with the code.
type docFinding struct {
	line int
	msg  string
}

func (f docFinding) String() string { return fmt.Sprintf("%d: %s", f.line, f.msg) }

// snippetKind says where a snippet came from, which decides how much of
// a command it must hold.
type snippetKind int

const (
	// inBlock is a line of a shell code block, its continuation lines
	// joined: a whole command line, which may not leave out a value or
	// an argument.
	inBlock snippetKind = iota
	// inSpan is an inline code span: prose quotes part of a command
	// (`verify --resume`) as often as a whole one.
	inSpan
)

// docSnippet is Markdown text that may hold a command line.
type docSnippet struct {
	line int // where it starts, 1-based
	text string
	kind snippetKind
}

// shellLangs are the info strings of fenced blocks that hold shell lines;
// other blocks (yaml, json, a tree listing) are not read as commands.
var shellLangs = []string{"", "sh", "bash", "shell", "console", "shell-session", "zsh"}

// markdownSnippets returns the lines of md's shell code blocks (with
// backslash continuations joined) and its inline code spans, each with the
// line it starts on. A code span may run over the lines of one paragraph
// or table; a backtick without its closing run is text.
func markdownSnippets(md string) []docSnippet {
	lines := strings.Split(md, "\n")
	var out []docSnippet
	var para []int // the current paragraph's lines, outside any fence
	flush := func() {
		if len(para) > 0 {
			out = append(out, codeSpans(lines, para[0], para[len(para)-1])...)
			para = nil
		}
	}
	fence, shell := "", false
	var cont strings.Builder
	contLine := 0
	emit := func() {
		if cont.Len() > 0 {
			out = append(out, docSnippet{contLine, cont.String(), inBlock})
			cont.Reset()
		}
	}
	for i, l := range lines {
		t := strings.TrimLeft(l, " \t")
		if fence == "" {
			if run := fenceRun(t); run != "" {
				flush()
				fence = run
				lang, _, _ := strings.Cut(strings.TrimSpace(t[len(run):]), " ")
				shell = slices.Contains(shellLangs, lang)
				continue
			}
			if strings.TrimSpace(l) == "" {
				flush()
				continue
			}
			para = append(para, i)
			continue
		}
		if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]+" \t") == "" {
			emit()
			fence = ""
			continue
		}
		if !shell {
			continue
		}
		if cont.Len() == 0 {
			contLine = i + 1
		}
		s := strings.TrimRight(l, " \t")
		if rest, ok := strings.CutSuffix(s, `\`); ok {
			cont.WriteString(rest + " ")
			continue
		}
		cont.WriteString(s)
		emit()
	}
	emit()
	flush()
	return out
}

// fenceRun returns the run of three or more backticks or tildes a fenced
// code block opens with, or "".
func fenceRun(t string) string {
	for _, c := range []string{"`", "~"} {
		n := 0
		for n < len(t) && t[n] == c[0] {
			n++
		}
		if n >= 3 && (c == "~" || !strings.Contains(t[n:], "`")) {
			return t[:n]
		}
	}
	return ""
}

// codeSpans returns the inline code spans of lines[first..last], one
// paragraph: a run of backticks up to the next run of the same length,
// line breaks read as spaces. In a table cell `\|` is a `|`.
func codeSpans(lines []string, first, last int) []docSnippet {
	text := strings.Join(lines[first:last+1], "\n")
	var out []docSnippet
	run := func(i int) int {
		n := 0
		for i+n < len(text) && text[i+n] == '`' {
			n++
		}
		return n
	}
	for i := 0; i < len(text); {
		switch text[i] {
		case '\\':
			i += 2 // an escaped character outside a span
			continue
		case '`':
		default:
			i++
			continue
		}
		n := run(i)
		end := -1
		for j := i + n; j < len(text); {
			if m := run(j); m == n {
				end = j
				break
			} else if m > 0 {
				j += m
			} else {
				j++
			}
		}
		if end < 0 {
			i += n
			continue
		}
		s := strings.ReplaceAll(text[i+n:end], "\n", " ")
		if len(s) >= 2 && s[0] == ' ' && s[len(s)-1] == ' ' && strings.Trim(s, " ") != "" {
			s = s[1 : len(s)-1]
		}
		out = append(out, docSnippet{first + 1 + strings.Count(text[:i], "\n"), strings.ReplaceAll(s, `\|`, "|"), inSpan})
		i = end + n
	}
	return out
}

// shellOps separate the commands of a line.
var shellOps = []string{"|", "||", "&&", ";", "&"}

// shellWords splits a command line into words as a shell would, enough for
// the lines docs show: quotes group and are removed, a word starting with
// # starts a comment, a placeholder in angle brackets (`<root from
// meta.json>`) is one word, the brackets and parentheses of optional or
// grouped parts (`[--older-than 720h]`, `(cd dir && …)`) are dropped, and
// an operator standing alone (or a `;` ending a word) separates commands.
// A `|` followed by a flag is the usage notation for alternatives
// (`--tombstones D | --benchmark D`), not a pipe, and is dropped.
func shellWords(s string) [][]string {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	end := func() {
		if !inWord {
			return
		}
		t := w.String()
		if !quoted {
			t = strings.TrimLeft(t, "([{")
			t = strings.TrimRight(t, ")]}")
			if b, ok := strings.CutSuffix(t, ";"); ok && b != "" {
				words = append(words, b)
				t = ";"
			}
		}
		if t != "" || quoted {
			words = append(words, t)
		}
		w.Reset()
		inWord, quoted = false, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			end()
		case c == '#' && !inWord:
			i = len(s)
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				j = len(s) - i - 1
			}
			w.WriteString(s[i+1 : i+1+j])
			inWord, quoted = true, true
			i += j + 1
		case c == '<' && i+1 < len(s) && s[i+1] != ' ' && s[i+1] != '<' && strings.IndexByte(s[i:], '>') > 0:
			j := strings.IndexByte(s[i:], '>')
			w.WriteString(s[i : i+j+1])
			inWord = true
			i += j
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	end()
	var cmds [][]string
	var cur []string
	for i, t := range words {
		if !slices.Contains(shellOps, t) {
			cur = append(cur, t)
			continue
		}
		if t == "|" && i+1 < len(words) && strings.HasPrefix(words[i+1], "-") {
			continue
		}
		cmds = append(cmds, cur)
		cur = nil
	}
	return append(cmds, cur)
}

// commandWrappers start a command without being it.
var commandWrappers = []string{"$", "do", "then", "else", "time", "/usr/bin/time", "sudo", "env", "nohup", "exec", "command", "!"}

var envAssignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// docChecker checks Markdown against the command tree rooted at root,
// the Makefile's targets and variables, and the error-code catalogue.
type docChecker struct {
	root     *cobra.Command
	targets  map[string]bool
	makeVars map[string]bool
	// invocations counts the shardproof command lines checked.
	invocations int
}

// newDocChecker reads the Makefile's targets and the variables it sets
// or reads.
func newDocChecker(root *cobra.Command, makefile string) *docChecker {
	k := &docChecker{root: root, targets: map[string]bool{}, makeVars: map[string]bool{}}
	target := regexp.MustCompile(`^([A-Za-z0-9_./%-][A-Za-z0-9_./% -]*):([^=]|$)`)
	setVar := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*[?:+]?=`)
	for _, l := range strings.Split(makefile, "\n") {
		if m := target.FindStringSubmatch(l); m != nil && !strings.HasPrefix(m[1], ".") {
			for _, t := range strings.Fields(m[1]) {
				k.targets[t] = true
			}
		}
		if m := setVar.FindStringSubmatch(l); m != nil {
			k.makeVars[m[1]] = true
		}
	}
	for _, m := range regexp.MustCompile(`\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]`).FindAllStringSubmatch(makefile, -1) {
		k.makeVars[m[1]] = true
	}
	return k
}

// nonCodeWords are words written as code in the docs that look like error
// codes and are not: environment variables (by prefix, and the Kubernetes
// index), and the names of other systems' constants. A new one belongs
// here; a misspelt code does not.
var (
	nonCodePrefixes = []string{"SHARDPROOF_", "AWS_", "SLURM_"}
	nonCodeWords    = []string{
		"JOB_COMPLETION_INDEX",               // Kubernetes Indexed Job environment
		"BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY", // Parquet physical types
		"MADV_HUGEPAGE", "MAP_POPULATE", // Linux madvise and mmap flags
	}
	codeLike = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)
)

// notACode reports whether w looks like an error code and is none: not in
// the catalogue, nor a listed non-code word.
func notACode(w string) bool {
	return codeLike.MatchString(w) && !errcode.Known(errcode.Code(w)) && !slices.Contains(nonCodeWords, w) &&
		!slices.ContainsFunc(nonCodePrefixes, func(p string) bool { return strings.HasPrefix(w, p) })
}

// check returns what in md disagrees with the code, in line order.
func (k *docChecker) check(md string) []docFinding {
	out := append(k.checkSnippets(markdownSnippets(md)), exitMismatches(md)...)
	slices.SortStableFunc(out, func(a, b docFinding) int { return a.line - b.line })
	return out
}

// exitBesideCode is an error code and an exit status written side by
// side, the code maybe in backticks, over line breaks: "CODE, exit N",
// "CODE (exit N", "CODE (exit status N", "exit N, CODE" and "exit status
// is N (CODE". Nothing looser: in "exit 4 with its code: ROOT_MISMATCH,
// …" or a list of statuses ("3 error, 4 refused (STALE_EPOCH)") which
// code a status belongs to is for a reader to tell.
var exitBesideCode = regexp.MustCompile(strings.NewReplacer("CODE", "`?([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)`?").Replace(
	`\bCODE(?:,|\s+\()\s*exit(?:\s+status)?\s+([0-9])\b|\bexit\s+([0-9]),\s+CODE|\bexit\s+status\s+is\s+([0-9])\s+\(CODE`))

// exitMismatches returns each code of text written beside an exit
// status (exitBesideCode) that is not the code's status in
// internal/errcode. A word that is no code (HTTP in "exit 4, HTTP 403",
// a verdict) is passed over: notACode reports a misspelt one.
func exitMismatches(text string) []docFinding {
	var out []docFinding
	for _, m := range exitBesideCode.FindAllStringSubmatchIndex(text, -1) {
		var code, status string // one alternative's two groups matched
		for g := 2; g < len(m); g += 2 {
			if m[g] < 0 {
				continue
			}
			if w := text[m[g]:m[g+1]]; len(w) == 1 && w[0] <= '9' {
				status = w
			} else {
				code = w
			}
		}
		c := errcode.Code(code)
		if errcode.Known(c) && strconv.Itoa(c.Exit()) != status {
			out = append(out, docFinding{1 + strings.Count(text[:m[0]], "\n"), fmt.Sprintf("%s is exit %d (internal/errcode), not %s", code, c.Exit(), status)})
		}
	}
	return out
}

// checkSnippets returns what in snippets disagrees with the code: a
// span that is one code-like word and no code, and each shardproof
// command line and make line.
func (k *docChecker) checkSnippets(snippets []docSnippet) []docFinding {
	var out []docFinding
	for _, sn := range snippets {
		add := func(msg string) { out = append(out, docFinding{sn.line, msg}) }
		if sn.kind == inSpan && notACode(sn.text) {
			add(fmt.Sprintf("`%s` is no error code (internal/errcode)", sn.text))
			continue
		}
		for n, words := range shellWords(sn.text) {
			for len(words) > 0 && (slices.Contains(commandWrappers, words[0]) || envAssignment.MatchString(words[0])) {
				words = words[1:]
			}
			switch {
			case len(words) == 0:
			case words[0] == "shardproof" || strings.HasSuffix(words[0], "/shardproof"):
				k.invocations++
				for _, m := range k.invocation(words[1:], sn.kind == inBlock, false) {
					add(m)
				}
			case words[0] == "make":
				for _, m := range k.makeLine(words[1:]) {
					add(m)
				}
			case n == 0 && sn.kind == inSpan && len(words) > 1 && k.isCommand(words[0]):
				// Prose names a command without the program: `gate
				// serve --auto-prune 720h`.
				for _, m := range k.invocation(words, false, true) {
					add(m)
				}
			}
		}
	}
	return out
}

// isCommand reports whether w names one of root's commands.
func (k *docChecker) isCommand(w string) bool {
	for _, c := range k.root.Commands() {
		if c.Name() == w && c.Name() != "help" && c.Name() != "completion" {
			return true
		}
	}
	return false
}

// makeLine checks `make args…`: each target is the Makefile's, each
// VAR=value a variable it sets or reads.
func (k *docChecker) makeLine(args []string) []string {
	var out []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-C"), strings.HasPrefix(a, "--directory"), strings.HasPrefix(a, "-f"), strings.HasPrefix(a, "--file"):
			return nil // another Makefile
		case strings.HasPrefix(a, "-"), isPlaceholder(a):
		case envAssignment.MatchString(a):
			if v, _, _ := strings.Cut(a, "="); !k.makeVars[v] {
				out = append(out, fmt.Sprintf("make %s: the Makefile neither sets nor reads %s", a, v))
			}
		case !k.targets[a]:
			out = append(out, fmt.Sprintf("make %s: no such target in the Makefile", a))
		}
	}
	return out
}

// isPlaceholder reports whether a word stands for a value rather than
// being one: `<root>`, `…`, `$ROOT`, `sha256:…`, `N`, `FILE`, `text|json`.
func isPlaceholder(w string) bool {
	if strings.ContainsAny(w, "<…$|*") || strings.Contains(w, "...") {
		return true
	}
	return upperWord.MatchString(w)
}

var (
	upperWord    = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	redirectOp   = regexp.MustCompile(`^[0-9]?>>?$`)
	redirectWord = regexp.MustCompile(`^[0-9]?>`)
)

// isEllipsis reports whether a word stands for more words.
func isEllipsis(w string) bool { return w == "…" || w == "..." }

// invocation checks the arguments of one shardproof command line. whole
// says the line is a whole command (a code block's), which may leave out
// neither a flag's value at its end nor an argument; bare says the line
// names no program (a prose span starting with a command's name), where a
// word that names no subcommand means the span is no command line.
func (k *docChecker) invocation(args []string, whole, bare bool) []string {
	var kept, named []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "<" || redirectOp.MatchString(a):
			i++ // a redirection and its file
		case redirectWord.MatchString(a), strings.HasPrefix(a, "<") && !strings.Contains(a, ">"):
		case strings.HasPrefix(a, "--") && strings.Contains(a, "/--"):
			// `--tls-cert/--tls-key/--tls-ca` names three flags.
			named = append(named, strings.Split(a[2:], "/--")...)
		default:
			kept = append(kept, a)
		}
	}
	args = kept
	c, rest, err := k.root.Find(args)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", commandLine(args), err)}
	}
	pos, flagProblems := k.flags(c, rest, whole)
	if len(pos) > 0 && c.HasSubCommands() {
		// Alternatives (`store ls|get|put`): each must be a command.
		if alts := strings.Split(pos[0], "|"); len(alts) > 1 && slices.ContainsFunc(alts, func(a string) bool { return findSub(c, a) != nil }) {
			var out []string
			i := slices.Index(args, pos[0])
			for _, a := range alts {
				alt := slices.Concat(args[:i:i], []string{a}, args[i+1:])
				for _, m := range k.invocation(alt, whole, false) {
					if !slices.Contains(out, m) {
						out = append(out, m)
					}
				}
			}
			return out
		}
		if c.Args != nil && !slices.ContainsFunc(pos, isEllipsis) && c.Args(c, pos) != nil {
			if bare || isPlaceholder(pos[0]) {
				return nil // not a command line, or not one that names its command
			}
			return []string{fmt.Sprintf("%s: %s has no command %q (its commands: %s)", commandLine(args), c.CommandPath(), pos[0], subNames(c))}
		}
	}
	out := flagProblems
	for _, n := range named {
		if flagOf(c, n) == nil {
			out = append(out, fmt.Sprintf("%s: no flag --%s", c.CommandPath(), n))
		}
	}
	if whole && c.Args != nil && !slices.ContainsFunc(pos, isEllipsis) {
		if err := c.Args(c, pos); err != nil {
			out = append(out, fmt.Sprintf("%s: %v", commandLine(args), err))
		}
	}
	return out
}

// flagOf returns c's flag name, its own or inherited, or nil.
func flagOf(c *cobra.Command, name string) *pflag.Flag {
	if f := c.Flags().Lookup(name); f != nil {
		return f
	}
	return c.InheritedFlags().Lookup(name)
}

func findSub(c *cobra.Command, name string) *cobra.Command {
	for _, s := range c.Commands() {
		if s.Name() == name || slices.Contains(s.Aliases, name) {
			return s
		}
	}
	return nil
}

func subNames(c *cobra.Command) string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return strings.Join(names, ", ")
}

// commandLine is args as the command line a finding quotes.
func commandLine(args []string) string {
	return strings.Join(append([]string{"shardproof"}, args...), " ")
}

// flags checks every flag in args against c's own and inherited flags,
// as cobra parses them, and returns the positional arguments.
func (k *docChecker) flags(c *cobra.Command, args []string, whole bool) (pos, out []string) {
	lookup := func(name string) *pflag.Flag { return flagOf(c, name) }
	short := func(s string) *pflag.Flag {
		if f := c.Flags().ShorthandLookup(s); f != nil {
			return f
		}
		return c.InheritedFlags().ShorthandLookup(s)
	}
	builtin := func(name string) bool {
		return name == "help" || name == "h" || (c == k.root && (name == "version" || name == "v"))
	}
	// isFlag reports whether w is one of c's flags: a word the doc
	// meant as the next flag, not as a value.
	isFlag := func(w string) bool {
		if n, ok := strings.CutPrefix(w, "--"); ok {
			n, _, _ = strings.Cut(n, "=")
			return lookup(n) != nil || builtin(n)
		}
		return len(w) == 2 && w[0] == '-' && (short(w[1:]) != nil || builtin(w[1:]))
	}
	where := c.CommandPath()
	// value checks the value v given to f.
	value := func(f *pflag.Flag, given string, v *string, next bool) {
		switch {
		case v == nil && whole:
			out = append(out, fmt.Sprintf("%s: %s takes a value, and the line ends", where, given))
		case v == nil:
		case next && isFlag(*v):
			out = append(out, fmt.Sprintf("%s: %s takes a value, and %s follows it", where, given, *v))
		case isPlaceholder(*v):
		default:
			if err := parseAs(f.Value.Type(), *v); err != nil {
				out = append(out, fmt.Sprintf("%s: %s %s: %v", where, given, *v, err))
			}
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		var next *string
		if i+1 < len(args) {
			next = &args[i+1]
		}
		switch {
		case a == "--":
			return append(pos, args[i+1:]...), out
		case !strings.HasPrefix(a, "-") || a == "-" || isEllipsis(a):
			pos = append(pos, a)
		case strings.HasPrefix(a, "--"):
			name, v, hasValue := strings.Cut(a[2:], "=")
			f := lookup(name)
			switch {
			case builtin(name):
			case f == nil:
				out = append(out, fmt.Sprintf("%s: no flag --%s", where, name))
			case hasValue && f.NoOptDefVal != "":
				if f.Value.Type() == "bool" && !isPlaceholder(v) {
					if _, err := strconv.ParseBool(v); err != nil {
						out = append(out, fmt.Sprintf("%s: --%s takes no value, and is given %q", where, name, v))
					}
				}
			case hasValue:
				value(f, "--"+name, &v, false)
			case f.NoOptDefVal == "":
				value(f, "--"+name, next, true)
				if next != nil && !isFlag(*next) {
					i++
				}
			}
		default:
			// One or more shorthands, the last maybe with its value.
			for j := 1; j < len(a); j++ {
				s := a[j : j+1]
				if builtin(s) {
					continue
				}
				f := short(s)
				if f == nil {
					out = append(out, fmt.Sprintf("%s: no flag -%s (in %s)", where, s, a))
					break
				}
				if f.NoOptDefVal != "" {
					continue
				}
				if rest := strings.TrimPrefix(a[j+1:], "="); rest != "" {
					value(f, "-"+s, &rest, false)
				} else {
					value(f, "-"+s, next, true)
					if next != nil && !isFlag(*next) {
						i++
					}
				}
				break
			}
		}
	}
	return pos, out
}

// parseAs checks v as a value of a flag of type typ, where the type says
// what it must look like.
func parseAs(typ, v string) error {
	var err error
	switch typ {
	case "bool":
		_, err = strconv.ParseBool(v)
	case "int", "int8", "int16", "int32", "int64":
		_, err = strconv.ParseInt(v, 10, 64)
	case "uint", "uint8", "uint16", "uint32", "uint64":
		_, err = strconv.ParseUint(v, 10, 64)
	case "float32", "float64":
		_, err = strconv.ParseFloat(v, 64)
	case "duration":
		_, err = time.ParseDuration(v)
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("not a %s", typ)
	}
	return nil
}

// docFiles returns the repository's Markdown files under dir: every one but
// the benchmark results, build and run outputs, and hidden or vendored
// directories.
func docFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	skip := []string{"bench/results", "bin", "chaos-out"}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || slices.Contains(skip, rel) || d.Name() == "vendor" || d.Name() == "node_modules" || strings.HasSuffix(rel, "pkg/mod")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every shardproof command line the docs show names commands and flags
// that exist, gives a value to each flag that takes one and none to one
// that does not; every `make` line names the Makefile's targets; every
// error code written as code is in the catalogue, with the exit status
// the catalogue gives it where one is written beside it.
func TestDocCommandLines(t *testing.T) {
	const repo = "../.."
	makefile, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	k := newDocChecker(rootCmd, string(makefile))
	files := docFiles(t, repo)
	for _, want := range []string{"README.md", "docs/FORMATS.md", "docs/DEVIATIONS.md", "examples/indepwriter/README.md"} {
		if !slices.Contains(files, want) {
			t.Errorf("%s not found among the docs %v", want, files)
		}
	}
	for _, f := range files {
		md, err := os.ReadFile(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range k.check(string(md)) {
			t.Errorf("%s:%d: %s", f, p.line, p.msg)
		}
	}
	// The README's tour alone shows a dozen: a scanner that finds none
	// checks nothing.
	if k.invocations < 40 {
		t.Errorf("checked %d shardproof command lines in %d files; the docs show more", k.invocations, len(files))
	}
	// Each command's usage line, the first line of its --help, is a
	// doc too.
	var usage func(c *cobra.Command)
	usage = func(c *cobra.Command) {
		_, args, _ := strings.Cut(c.Use, " ")
		words := append(strings.Fields(c.CommandPath())[1:], shellWords(args)[0]...)
		for _, m := range k.invocation(words, false, false) {
			t.Errorf("usage line %q of %s: %s", c.Use, c.CommandPath(), m)
		}
		for _, s := range c.Commands() {
			usage(s)
		}
	}
	usage(rootCmd)
}

// docSample is Markdown with good and bad command lines; docSampleFindings
// are what the checker must report in it, by line and the start of the
// message, and nothing else.
var (
	docSample = strings.Join([]string{
		"# Sample", // 1
		"",
		"```sh",
		"$ shardproof verify --store $S --root sha256:<root>   # good",
		"shardproof verify --store $S --root sha256:<root> --no-such-flag", // 5
		"SHARDPROOF_LOG_LEVEL=debug ./bin/shardproof gate status --digest=yes",
		"shardproof gate nosuch --json",
		"shardproof verify --store \\",
		"  --root sha256:<root>",
		"shardproof publish --store S --alias main --root R --retain", // 10
		"shardproof store prune-jobs --older-than 30d",
		"shardproof manifest show --store S",
		"shardproof run show r1 | sha256sum && make build",
		"make nosuch FUZZTIME=1s BOGUS=1",
		"go build -o bin/shardproof ./cmd/shardproof   # builds it, runs no shardproof command", // 15
		"shardproof <command> --help",
		"shardproof worker -q --once -k",
		"```",
		"",
		"```yaml", // 20
		"shardproof --not-a-shell-line",
		"```",
		"",
		"Inline: `shardproof gate prune --older-than 720h` is good, `gate serve --auto-prune 720h`",
		"too, and `verify --resume` names a flag; `gate serve --nosuch` is wrong, and so is", // 25
		"`shardproof stage --store $S",
		"--shards N --sead X part-*.parquet` (a span over two lines).",
		"Codes: `BAD_INPUT`, `AWS_REGION`, `BAD_INPTU`, `DELTA_*`, `gate node … serving …`.",
		"| `store ls\\|get\\|nope` | alternatives |",
		"| `make bench BENCH_SAMPLES=1000` | good |", // 30
		"`gate fence tombstone\\|benchmark VALUE` and `gate serve --tls-cert/--tls-ca/--tls-nope`.",
		"Exits: `CACHE_FULL` (exit 2) is wrong, `STORE_DENIED`, exit",
		"2 and INDETERMINATE (exit status 5) are right, `NOT_FOUND`, exit",
		"4 is wrong (over a line break), and so is (exit 1, BARRIER_CLOSED; a verdict INVALID, exit 1,",
		"is no code, nor HTTP in (exit 4, HTTP 403); the exit status is 3 (GATE_HALTED), is 5 (NOT_LEADER)", // 35
		"and exit status is 5 (NOT_LEADER).",
	}, "\n")
	docSampleFindings = []docFinding{
		{5, "shardproof verify: no flag --no-such-flag"},
		{6, `shardproof gate status: --digest takes no value, and is given "yes"`},
		{7, `shardproof gate nosuch --json: shardproof gate has no command "nosuch"`},
		{8, "shardproof verify: --store takes a value, and --root follows it"},
		{10, "shardproof publish: --retain takes a value, and the line ends"},
		{11, "shardproof store prune-jobs: --older-than 30d: not a duration"},
		{12, "shardproof manifest show --store S: USAGE: shardproof manifest show: accepts 1 arg(s), received 0"},
		{14, "make nosuch: no such target in the Makefile"},
		{14, "make BOGUS=1: the Makefile neither sets nor reads BOGUS"},
		{17, "shardproof worker: no flag -k (in -k)"},
		{25, "shardproof gate serve: no flag --nosuch"},
		{26, "shardproof stage: no flag --sead"},
		{28, "`BAD_INPTU` is no error code (internal/errcode)"},
		{29, `shardproof store nope: shardproof store has no command "nope"`},
		{31, "shardproof gate serve: no flag --tls-nope"},
		{32, "CACHE_FULL is exit 3 (internal/errcode), not 2"},
		{33, "NOT_FOUND is exit 3 (internal/errcode), not 4"},
		{34, "BARRIER_CLOSED is exit 4 (internal/errcode), not 1"},
		{36, "NOT_LEADER is exit 3 (internal/errcode), not 5"},
	}
	docSampleMakefile = "FUZZTIME ?= 30s\nbuild:\n\tgo build ./...\nbench: build\n\t./bench $(BENCH_SAMPLES)\n"
)

// The checker reports exactly the bad lines of a sample, each at the line
// it starts on, and none of the good ones.
func TestDocCheckerReportsBadLines(t *testing.T) {
	k := newDocChecker(rootCmd, docSampleMakefile)
	got := k.check(docSample)
	same := len(got) == len(docSampleFindings)
	for i := 0; same && i < len(got); i++ {
		same = got[i].line == docSampleFindings[i].line && strings.HasPrefix(got[i].msg, docSampleFindings[i].msg)
	}
	if !same {
		t.Errorf("findings:\n%s\nwant:\n%s", findingLines(got), findingLines(docSampleFindings))
	}
	if k.invocations != 13 {
		t.Errorf("checked %d shardproof command lines, want 13", k.invocations)
	}
}

// findingLines lists findings (docs or help), one a line, for a failure.
func findingLines[F fmt.Stringer](fs []F) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "\t%s\n", f)
	}
	return b.String()
}

// Whatever the Markdown, the checker neither panics nor reports a line
// outside it.
func FuzzDocChecker(f *testing.F) {
	f.Add(docSample)
	f.Add("`shardproof -")
	f.Add("```\nshardproof gate serve --data \\\n")
	f.Add("`a` `` ` `` ```` x\n\n` `")
	f.Add("`shardproof verify --root <a<b>> '--x \"y`")
	k := newDocChecker(rootCmd, docSampleMakefile)
	f.Fuzz(func(t *testing.T, md string) {
		n := strings.Count(md, "\n") + 1
		for _, p := range k.check(md) {
			if p.line < 1 || p.line > n {
				t.Fatalf("finding at line %d of %d: %s", p.line, n, p.msg)
			}
		}
	})
}
