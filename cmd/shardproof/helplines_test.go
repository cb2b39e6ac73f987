package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The CLI's own help drifts as the docs do: each command's Short, Long
// and Example and each flag's usage name commands, flags and codes that a
// user reads with --help and copies. TestHelpCommandLines walks the
// command tree and checks them with the docs' checker (docChecker).

// helpFinding is a place in a command's help that disagrees with the code.
type helpFinding struct {
	cmd   string // the command's path
	where string // "Long line N", "Example line N", "Short" or "flag --name"
	msg   string
}

func (f helpFinding) String() string { return fmt.Sprintf("%s --help: %s: %s", f.cmd, f.where, f.msg) }

// helpSnippets returns the command lines of a help text (a command's
// Short, Long or Example, or a flag's usage). Help is prose printed as
// written, not Markdown, so a command line is:
//
//   - a line that starts with "$ " and a shardproof or make command, or
//     with one indented (an example set apart, as help shows them),
//     backslash continuations joined: a whole command line (inBlock);
//   - a line at the margin that starts with "shardproof " and then a
//     command's name or a flag: a span, since prose may have wrapped
//     there; a sentence about the program ("shardproof executable the
//     tasks run") is none;
//   - a quoted span, '…' or "…", over line breaks but not a blank line,
//     that starts with "shardproof ", "make " or a command's name ('gate
//     prune --older-than'), or a parenthesised "(shardproof …)" (not
//     "(run "gate status" to see…)", prose): spans.
//     A quote opens only after a character that is no letter or digit
//     and closes only before one, so an apostrophe (the gate's,
//     members') neither opens nor closes one;
//   - in prose, a command's path followed by a flag (verify --sign-key,
//     gate status --digest, over a line break too): a span of those
//     words, which names the flag's command.
func (k *docChecker) helpSnippets(text string) []docSnippet {
	out := k.flagPhrases(text)
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t")
		t := strings.TrimLeft(l, " \t")
		prompt := strings.HasPrefix(t, "$ ")
		cmd := strings.TrimPrefix(t, "$ ")
		program := strings.HasPrefix(cmd, "shardproof ")
		if !program && !strings.HasPrefix(cmd, "make ") {
			continue
		}
		if !prompt && len(t) == len(l) {
			if w := strings.Fields(cmd); program && len(w) > 1 && (strings.HasPrefix(w[1], "-") || k.isCommand(w[1])) {
				out = append(out, docSnippet{i + 1, cmd, inSpan})
			}
			continue
		}
		first := i
		var b strings.Builder
		for {
			rest, more := strings.CutSuffix(l, `\`)
			b.WriteString(rest)
			if !more || i+1 == len(lines) {
				break
			}
			b.WriteString(" ")
			i++
			l = strings.TrimRight(lines[i], " \t")
		}
		out = append(out, docSnippet{first + 1, b.String(), inBlock})
	}
	for _, sn := range quotedSpans(text) {
		body, paren := strings.CutPrefix(sn.text, "(")
		w := strings.Fields(strings.TrimPrefix(body, "$ "))
		if len(w) > 1 && (w[0] == "shardproof" || !paren && (w[0] == "make" || k.isCommand(w[0]))) {
			sn.text = body
			out = append(out, sn)
		}
	}
	slices.SortStableFunc(out, func(a, b docSnippet) int { return cmp.Compare(a.line, b.line) })
	return out
}

// flagPhrases returns each "<command path> --flag" of text's prose as a
// span: a word that starts with "--" after the words of a command path,
// from one of rootCmd's commands down (the longest such path, at most
// three words, the first maybe after a parenthesis or a quote), written
// with nothing between them but spaces.
func (k *docChecker) flagPhrases(text string) []docSnippet {
	type word struct {
		w    string
		line int
	}
	var words []word
	for i, l := range strings.Split(text, "\n") {
		for _, w := range strings.Fields(l) {
			words = append(words, word{w, i + 1})
		}
	}
	var out []docSnippet
	for i, f := range words {
		flag := strings.TrimRight(f.w, ".,;:)'\"")
		if !flagMention.MatchString(flag) || !strings.HasPrefix(flag, "--") {
			continue
		}
		for from := max(0, i-3); from < i; from++ {
			path := make([]string, 0, i-from)
			for j, w := range words[from:i] {
				if j == 0 {
					w.w = strings.TrimLeft(w.w, "('\"")
				}
				path = append(path, w.w)
			}
			if slices.ContainsFunc(path, func(w string) bool { return !commandName.MatchString(w) }) {
				continue
			}
			if c, rest, err := k.root.Find(path); err != nil || len(rest) > 0 || c == k.root || isCobrasOwn(c) {
				continue
			}
			out = append(out, docSnippet{words[from].line, strings.Join(append(path, flag), " "), inSpan})
			break
		}
	}
	return out
}

// quotedSpans returns the spans of text in single or double quotes, and
// those in parentheses with the opening one kept (the caller takes only
// "(shardproof …)" of them), line breaks read as spaces. A span neither
// starts nor ends with a space, nor runs over a blank line.
func quotedSpans(text string) []docSnippet {
	isWord := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }
	before := func(i int) rune { r, _ := utf8.DecodeLastRuneInString(text[:i]); return r }
	after := func(i int) rune { r, _ := utf8.DecodeRuneInString(text[i:]); return r }
	var out []docSnippet
	for i := 0; i < len(text); i++ {
		closer := text[i]
		if closer == '(' {
			closer = ')'
		}
		if closer != '\'' && closer != '"' && closer != ')' || i > 0 && isWord(before(i)) || i+1 == len(text) || unicode.IsSpace(after(i+1)) {
			continue
		}
		end := -1
		for j := i + 1; j < len(text); j++ {
			if strings.HasPrefix(text[j:], "\n\n") {
				break
			}
			if text[j] == closer && !unicode.IsSpace(before(j)) && (closer == ')' || j+1 == len(text) || !isWord(after(j+1))) {
				end = j
				break
			}
		}
		if end < 0 {
			continue
		}
		s := text[i+1 : end]
		if closer == ')' {
			s = "(" + s
		}
		out = append(out, docSnippet{1 + strings.Count(text[:i], "\n"), strings.ReplaceAll(s, "\n", " "), inSpan})
		if closer != ')' {
			i = end // a quote inside a parenthesis is a span of its own
		}
	}
	return out
}

var (
	// commandName is a word that may name a command.
	commandName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	// identifier is a word that may be an error code.
	identifier = regexp.MustCompile(`[A-Za-z0-9_]+`)
	// flagMention is a --flag named in prose: not a value given with =
	// (--slurm-arg=--time=30), nor the middle of a word.
	flagMention = regexp.MustCompile(`(?:^|[^A-Za-z0-9_=-])--([a-z0-9][a-z0-9-]*)`)
)

// checkHelp returns what in one help text of c disagrees with the code:
// its command lines and make lines (helpSnippets), each word shaped like
// an error code that is none, each code written beside an exit status
// that is not its own (exitMismatches), and each --flag it names that
// neither c nor another command has (unless a command line was found to
// name it already).
func (k *docChecker) checkHelp(c *cobra.Command, text string) []docFinding {
	var out []docFinding
	seen := map[docFinding]bool{}
	for _, f := range k.checkSnippets(k.helpSnippets(text)) {
		// A command line holds its flag phrases: one finding each.
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for i, l := range strings.Split(text, "\n") {
		for _, w := range identifier.FindAllString(l, -1) {
			if notACode(w) {
				out = append(out, docFinding{i + 1, fmt.Sprintf("%s is no error code (internal/errcode)", w)})
			}
		}
		for _, m := range flagMention.FindAllStringSubmatch(l, -1) {
			told := slices.ContainsFunc(out, func(f docFinding) bool { return strings.HasSuffix(f.msg, "no flag --"+m[1]) })
			if !told && flagOf(c, m[1]) == nil && !k.anyFlag(m[1]) {
				out = append(out, docFinding{i + 1, fmt.Sprintf("--%s is no flag of any command", m[1])})
			}
		}
	}
	out = append(out, exitMismatches(text)...)
	slices.SortStableFunc(out, func(a, b docFinding) int { return cmp.Compare(a.line, b.line) })
	return out
}

// anyFlag reports whether some command of the tree has a flag name, or
// it is one cobra adds to every command.
func (k *docChecker) anyFlag(name string) bool {
	if name == "help" || name == "version" {
		return true
	}
	found := false
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		found = found || flagOf(c, name) != nil
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(k.root)
	return found
}

// isCobrasOwn reports whether c is a command cobra adds (help,
// completion), whose texts are not shardproof's.
func isCobrasOwn(c *cobra.Command) bool {
	return c.HasParent() && !c.Parent().HasParent() && (c.Name() == "help" || c.Name() == "completion")
}

// visitHelp calls visit with each help text of c and of every command
// under it but cobra's own, command by command, parents first: its
// Short, Long and Example, then each of its flags' usage (part "flag
// --name").
func visitHelp(c *cobra.Command, visit func(c *cobra.Command, part, text string)) {
	if isCobrasOwn(c) {
		return
	}
	visit(c, "Short", c.Short)
	visit(c, "Long", c.Long)
	visit(c, "Example", c.Example)
	c.LocalFlags().VisitAll(func(f *pflag.Flag) { visit(c, "flag --"+f.Name, f.Usage) })
	for _, s := range c.Commands() {
		visitHelp(s, visit)
	}
}

// checkHelpTree checks the help of c and of every command under it.
func (k *docChecker) checkHelpTree(c *cobra.Command) []helpFinding {
	var out []helpFinding
	visitHelp(c, func(c *cobra.Command, part, text string) {
		for _, f := range k.checkHelp(c, text) {
			where := part
			if part == "Long" || part == "Example" {
				where = fmt.Sprintf("%s line %d", part, f.line)
			}
			out = append(out, helpFinding{c.CommandPath(), where, f.msg})
		}
	})
	return out
}

// Every command line, make line, error code and flag a command's --help
// names exists: subcommands and flags as the docs' lines are checked,
// codes in internal/errcode, with their own exit status where one is
// written beside them.
func TestHelpCommandLines(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	k := newDocChecker(rootCmd, string(makefile))
	for _, f := range k.checkHelpTree(rootCmd) {
		t.Error(f)
	}
	// The help names 'shardproof recheck', "gate status" and a dozen
	// more: a scanner that finds none checks nothing.
	if k.invocations < 10 {
		t.Errorf("checked %d shardproof command lines in the help; it shows more", k.invocations)
	}
}

// helpSample is a command, not in rootCmd, whose help has good and bad
// lines; helpSampleFindings are what the checker must report in it, by
// the start of the message, and nothing else.
func helpSample() *cobra.Command {
	sample := &cobra.Command{
		Use:   "sample",
		Short: "Sample, whose refusals are BAD_INPUT and BAD_INPTU",
		Long: strings.Join([]string{
			"Run it as", // 1
			"",
			"  shardproof verify --store S --root sha256:…",
			"  $ shardproof gate status --digest=yes",
			"  shardproof verify --store \\", // 5
			"      --root R",
			"  make build FUZZTIME=1s",
			"  make nosuch",
			"shardproof executable the tasks run, and the gate's and members' state",
			"shardproof verify --resume PLAN --take-over at the margin, and", // 10
			"shardproof verify --nosuch at the margin.",
			"See 'gate status --digest' and \"gate fence",
			"advance --tombstones X\", or 'gate prune --older-than 30d' and 'shardproof gate nosuch';",
			"(shardproof keys generate) is good, (shardproof keys generate --nosuch) is not,",
			"nor 'make bogus', and a \"wait\" long-poll, 'failed to contact quorum' are prose.", // 15
			"Codes: CACHE_TOO_SMALL, CACHE_TO_SMALL, $SHARDPROOF_STORE, JOB_COMPLETION_INDEX.",
			"Flags: --take-over, --slurm-arg=--time=30, --take-ovr.",
			"Prose: verify --sign-key FILE signs, gate status --digst is wrong, a run every --poll",
			"and (worker --cache DIR) are good, and so is gate recheck", // 19
			"--sign-key over a line break, but (publish --nosign) is not.",
			"Exits: CACHE_FULL (exit 2) is wrong, CACHE_TOO_SMALL (exit 2) and (exit 5, INDETERMINATE) right.",
		}, "\n"),
		Example: "  shardproof run show r1 | sha256sum\n  shardproof synth --samples many --shards 1 --store S",
	}
	sample.Flags().Duration("older", 0, "as 'gate prune --older-than 720h' does, not 'gate prune --older' (an unknown flag)")
	sample.Flags().String("key", "", "private key file (shardproof keys generat)")
	sub := &cobra.Command{Use: "sub", Long: "Exit status: 4 refused (FENCE_BEHNID)."}
	sample.AddCommand(sub)
	return sample
}

var helpSampleFindings = []helpFinding{
	{"sample", "Short", "BAD_INPTU is no error code"},
	{"sample", "Long line 4", `shardproof gate status: --digest takes no value, and is given "yes"`},
	{"sample", "Long line 5", "shardproof verify: --store takes a value, and --root follows it"},
	{"sample", "Long line 8", "make nosuch: no such target in the Makefile"},
	{"sample", "Long line 11", "shardproof verify: no flag --nosuch"},
	{"sample", "Long line 13", "shardproof gate prune: --older-than 30d: not a duration"},
	{"sample", "Long line 13", `shardproof gate nosuch: shardproof gate has no command "nosuch"`},
	{"sample", "Long line 14", "shardproof keys generate: no flag --nosuch"},
	{"sample", "Long line 15", "make bogus: no such target in the Makefile"},
	{"sample", "Long line 16", "CACHE_TO_SMALL is no error code"},
	{"sample", "Long line 17", "--take-ovr is no flag of any command"},
	{"sample", "Long line 18", "shardproof gate status: no flag --digst"},
	{"sample", "Long line 20", "shardproof publish: no flag --nosign"},
	{"sample", "Long line 21", "CACHE_FULL is exit 3 (internal/errcode), not 2"},
	{"sample", "Example line 2", "shardproof synth: --samples many: not a int"},
	{"sample", "flag --key", `shardproof keys generat: shardproof keys has no command "generat"`},
	{"sample", "flag --older", "shardproof gate prune: no flag --older"},
	{"sample sub", "Long line 1", "FENCE_BEHNID is no error code"},
}

// The help checker reports exactly the bad lines of a sample command's
// help, each where it is, and none of the good ones.
func TestHelpCheckerReportsBadLines(t *testing.T) {
	k := newDocChecker(rootCmd, docSampleMakefile)
	got := k.checkHelpTree(helpSample())
	same := len(got) == len(helpSampleFindings)
	for i := 0; same && i < len(got); i++ {
		w := helpSampleFindings[i]
		same = got[i].cmd == w.cmd && got[i].where == w.where && strings.HasPrefix(got[i].msg, w.msg)
	}
	if !same {
		t.Errorf("findings:\n%s\nwant:\n%s", findingLines(got), findingLines(helpSampleFindings))
	}
	// verify ×4, gate status, gate nosuch, keys generate ×2, run
	// show, synth, keys generat.
	if k.invocations != 11 {
		t.Errorf("checked %d shardproof command lines, want 11", k.invocations)
	}
}

// Whatever a help text holds, the help checker neither panics nor
// reports a line outside it.
func FuzzHelpChecker(f *testing.F) {
	s := helpSample()
	f.Add(s.Long)
	f.Add(s.Example)
	f.Add("shardproof \u00a0")
	f.Add("  shardproof verify --store \\")
	f.Add("'gate status\n\n' (shardproof keys generate \"'\"shardproof x'")
	f.Add("(shardproof")
	k := newDocChecker(rootCmd, docSampleMakefile)
	f.Fuzz(func(t *testing.T, text string) {
		n := strings.Count(text, "\n") + 1
		for _, p := range k.checkHelp(s, text) {
			if p.line < 1 || p.line > n {
				t.Fatalf("finding at line %d of %d: %s", p.line, n, p.msg)
			}
		}
	})
}

// helpWidth is the column the help texts are wrapped within: cobra
// prints a command's Long and Example as written, so a wider line runs
// past the terminal's edge and breaks mid-word. Measured on the help as
// written: 731 of its 740 non-blank Long and Example lines are at most
// 77 columns wide (most break at 68 to 75), none is 78 or 79, and the
// nine wider ones (80 to 144) were edits never re-wrapped.
const helpWidth = 77

// helpColumns is how many columns line takes on a terminal: one a
// character (the help has no East Asian wide ones), a tab up to the next
// multiple of 8.
func helpColumns(line string) int {
	n := 0
	for _, r := range line {
		n++
		if r == '\t' {
			n += 7 - (n-1)%8
		}
	}
	return n
}

// wideHelpLines returns the lines of a Long or Example text wider than
// helpWidth, each with its width (line N, msg "is W columns"), but those
// that cannot be re-wrapped:
//
//   - a line of one word, indentation aside: a path, URL or digest
//     longer than the width has nowhere to break;
//   - a command line set apart, the lines helpSnippets reads as one
//     (starting, after the indentation, with "$ ", or indented and
//     starting with "shardproof " or "make "), with the lines a
//     backslash continues it on: an operator copies it as shown, and
//     where it breaks is a backslash its author places, not a re-wrap.
//
// Nothing else is spared: the help has no table (no line with two
// spaces between words after its indentation); one added must fit.
func wideHelpLines(text string) []docFinding {
	var out []docFinding
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		t := strings.TrimLeft(l, " \t")
		if strings.HasPrefix(t, "$ ") || len(t) < len(l) && (strings.HasPrefix(t, "shardproof ") || strings.HasPrefix(t, "make ")) {
			for strings.HasSuffix(strings.TrimRight(lines[i], " \t"), `\`) && i+1 < len(lines) {
				i++
			}
			continue
		}
		if w := helpColumns(l); w > helpWidth && len(strings.Fields(l)) > 1 {
			out = append(out, docFinding{i + 1, fmt.Sprintf("is %d columns", w)})
		}
	}
	return out
}

// checkHelpWidth returns the lines of the Long and Example of c and of
// every command under it wider than helpWidth (wideHelpLines), and each
// Short of more than one line (msg "is N lines"): cobra lists a
// command's Short after its name in its parent's help, where a line
// break would start a line at the margin. A Short's width is not
// checked: it has no line to break, and only rewording shortens it.
func checkHelpWidth(c *cobra.Command) []helpFinding {
	var out []helpFinding
	visitHelp(c, func(c *cobra.Command, part, text string) {
		switch part {
		case "Short":
			if n := strings.Count(text, "\n") + 1; n > 1 {
				out = append(out, helpFinding{c.CommandPath(), part, fmt.Sprintf("is %d lines", n)})
			}
		case "Long", "Example":
			for _, f := range wideHelpLines(text) {
				out = append(out, helpFinding{c.CommandPath(), fmt.Sprintf("%s line %d", part, f.line), f.msg})
			}
		}
	})
	return out
}

// widthFindingLine is how a width finding reads: "shardproof codes
// --help: Long line 7 is 128 columns".
func widthFindingLine(f helpFinding) string {
	return fmt.Sprintf("%s --help: %s %s", f.cmd, f.where, f.msg)
}

// Every line of every command's Long and Example fits in helpWidth
// columns, but a command line set apart or a single word, and every
// Short is one line.
func TestHelpWidth(t *testing.T) {
	for _, f := range checkHelpWidth(rootCmd) {
		t.Error(widthFindingLine(f))
	}
}

// The width check reports exactly the wide lines of a sample command's
// help, counting columns (not bytes, a tab to its stop), and none of
// those it spares.
func TestHelpWidthReportsWideLines(t *testing.T) {
	words := func(n int) string { // n columns of prose, a few of them runes of 3 bytes
		r := []rune(strings.Repeat("a word — … ", n/11+1))[:n]
		if r[n-1] == ' ' {
			r[n-1] = 'x'
		}
		return string(r)
	}
	if got := helpColumns(words(77)); got != 77 {
		t.Fatalf("words(77) is %d columns", got)
	}
	long := "sha256:" + strings.Repeat("0", 80)
	sample := &cobra.Command{
		Use:   "sample",
		Short: "A sample whose Short says more than fits in the parent's list of commands, which is not checked",
		Long: strings.Join([]string{
			words(77), // 1: at the limit, with multi-byte runes
			words(78),
			"  " + long,
			"  shardproof manifest show --store s3://bucket/prefix?endpoint=http://127.0.0.1:9000 " + long,
			"  shardproof verify --store DIR \\", // 5
			"      --root " + long + " --scratch /tmp/scratch",
			"  $ make bench BENCH_SAMPLES=1000000 BENCH_FLAGS='a long list of flags for the harness'",
			"shardproof verify --store DIR --root " + long, // at the margin: prose
			"\t" + words(70), // 78 columns
			"  " + words(76), // 10: indented, no command
			"\t" + words(69),
			long + " " + long,
		}, "\n"),
		Example: "  shardproof manifest show --store DIR " + long + "\n" + words(90),
	}
	sample.Flags().String("store", "", words(120)+" (a flag's usage is printed in cobra's columns: not checked)")
	sub := &cobra.Command{Use: "sub", Short: "Sub,\nover two lines", Long: "One line.\n\n" + words(80)}
	sample.AddCommand(sub)
	want := []string{
		"sample --help: Long line 2 is 78 columns",
		"sample --help: Long line 8 is 124 columns",
		"sample --help: Long line 9 is 78 columns",
		"sample --help: Long line 10 is 78 columns",
		"sample --help: Long line 12 is 175 columns",
		"sample --help: Example line 2 is 90 columns",
		"sample sub --help: Short is 2 lines",
		"sample sub --help: Long line 3 is 80 columns",
	}
	var got []string
	for _, f := range checkHelpWidth(sample) {
		got = append(got, widthFindingLine(f))
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
