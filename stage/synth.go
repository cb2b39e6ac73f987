package stage

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/shardproof/shardproof/objstore"
)

// SynthOptions configure Synth.
type SynthOptions struct {
	// Samples is the number of records to generate.
	Samples int
	// Shards is the number of release shards.
	Shards int
	// Seed determines every generated value and the sort seed.
	Seed int64
	// TempDir holds the snapshot's tuples between the release shards and
	// the member files, and the sort's files when its keys do not fit in
	// memory (default os.TempDir()).
	TempDir string
	// Options are the common staging settings (Shards is taken from above).
	Options
}

// SynthVersion changes whenever Synth generates different rows for the
// same options, so caches of synthetic datasets (the bench harness's) are
// keyed by it. Version 2 added recurring phrases, taking the text's zstd
// ratio from about 2.75 to 3.45.
const SynthVersion = "2"

// Synth generates a synthetic dataset deterministically from o.Seed and
// stages it: several sources with source versions, train/val/test splits
// (~90/5/5), languages, English-like text of varying length (mean ~1 KB,
// Zipf-distributed words and recurring phrases, compressing about 3.4x
// with zstd level 3) and token counts ≈ words × 1.3. Row i is a pure
// function of (seed, i), so shards are generated directly in staging order
// without source files.
func Synth(ctx context.Context, store objstore.Store, o SynthOptions) (Result, error) {
	opts := o.Options
	opts.Shards = o.Shards
	return run(ctx, store, DefaultSchema(), newSynthSource(o.Samples, o.Seed), uint64(o.Seed), o.TempDir, opts)
}

type synthSource struct {
	n     int
	seed  int64
	vocab []string
	// zipf maps a uniform 16-bit draw to a word index with Zipf(s≈1.1)
	// frequencies.
	zipf []uint16
	// phrases are fixed multi-word runs (collocations, boilerplate) that
	// recur across records, as they do in real corpora; phraseZipf maps a
	// 16-bit draw to one. Words alone compress about 2.75x with zstd
	// level 3; with phrases the text compresses about 3.3x, as web text
	// does.
	phrases    [][]string
	phraseZipf []uint16
}

// Shape of the synthetic text (see synthSource.phrases).
const (
	synthPhrases      = 2048
	synthPhrasePct    = 25 // of word slots that start a phrase
	synthPhraseMaxLen = 6
)

type synthSourceDef struct {
	id      string
	version int64
	weight  int
}

// The sources of the synthetic corpus, with their current versions and
// relative sizes.
var synthSources = []synthSourceDef{
	{"web-crawl", 7, 40}, {"books", 3, 15}, {"wikipedia", 12, 15},
	{"news", 5, 10}, {"code-docs", 2, 10}, {"forums", 4, 10},
}

var synthLangs = []string{"en", "en", "en", "en", "en", "en", "de", "fr", "es", "it"}

// commonWords head the vocabulary: the most frequent ranks.
var commonWords = strings.Fields(`the of and to a in is that for it as was with be by on not he
i this are or his from at which but have an they you were her she there one all we
their been has when who will more no if out so said what up its about into than them
can only other new some could time these two may then do first any my now such like
our over man me even most made after also did many before must through back years
where much your way well down should because each just those people how too little
state good very make world still own see men work long get here between both life
being under never day same another know while last might us great old year off come
since against go came right used take three states himself few house use during
without again place around however home small found thought went say part once
general high upon school every does got united left number course war until always
away something fact though water less public put think almost hand enough far took
head yet government system better set told nothing night end why called didn't eyes
find going look asked later knew point next program city business give group toward
young days let room president side social present given several order national
possible rather second face per among form important often things looked early
white case john become large big need four within felt along children saw best
church ever least power development light thing family interest want members mind
country area others done turned although open god service certain kind problem began
different door thus help means sense whole matter perhaps itself york times law human
line above name example action company hands local show whether five history gave
today either act feet across taken past quite anything seen having death week
experience body word half really field am car words already themselves information
tell together college shall money period held keep sure free seems real behind cannot
miss political air question making office brought whose special major heard problems
federal became study ago moment available known result street economic boy position
reason change south board individual job society areas west close turn love community
true court force full seem am model data training dataset shard release verify
learning token sample source digest manifest snapshot batch gradient network layer`)

var syllables = strings.Fields("ka ri to na mel ser ven dor al is ur pra ten lo mi sa ter con ex pro fi nal tion ing ly ment ar el or an")

func newSynthSource(n int, seed int64) *synthSource {
	s := &synthSource{n: n, seed: seed}
	// The vocabulary is fixed (not seeded): common words, then a long tail
	// of pronounceable made-up words, as rare words are in real text.
	s.vocab = append(s.vocab, commonWords...)
	r := rand.New(rand.NewPCG(0x5eed, 0x70c))
	for len(s.vocab) < 6000 {
		var b strings.Builder
		for k := 2 + r.IntN(3); k > 0; k-- {
			b.WriteString(syllables[r.IntN(len(syllables))])
		}
		s.vocab = append(s.vocab, b.String())
	}
	s.zipf = zipfTable(len(s.vocab), 1.1)
	s.phraseZipf = zipfTable(synthPhrases, 1.0)
	for range synthPhrases {
		p := make([]string, 2+r.IntN(synthPhraseMaxLen-1))
		for k := range p {
			p[k] = s.vocab[s.zipf[r.Uint32()>>16]]
		}
		s.phrases = append(s.phrases, p)
	}
	return s
}

// zipfTable maps a uniform 16-bit draw to an index in [0, n) with
// Zipf(exp) frequencies.
func zipfTable(n int, exp float64) []uint16 {
	weights := make([]float64, n)
	var sum float64
	for i := range weights {
		weights[i] = 1 / math.Pow(float64(i+1), exp)
		sum += weights[i]
	}
	t := make([]uint16, 1<<16)
	acc, w := 0.0, 0
	for j := range t {
		u := (float64(j) + 0.5) / float64(len(t))
		for w < len(weights)-1 && acc+weights[w]/sum < u {
			acc += weights[w] / sum
			w++
		}
		t[j] = uint16(w)
	}
	return t
}

func (s *synthSource) Len() int { return s.n }

// SampleID is stable across seeds' row order: "syn<seed>-<i in base 36>".
func (s *synthSource) SampleID(i int) string {
	return "syn" + strconv.FormatInt(s.seed, 10) + "-" + strconv.FormatInt(int64(i), 36)
}

func (s *synthSource) keys(ctx context.Context, add func(id string) error) error {
	for i := range s.n {
		if err := add(s.SampleID(i)); err != nil {
			return err
		}
	}
	return nil
}

// Build generates rows idx into b.
func (s *synthSource) Build(_ int, idx []int, b *array.RecordBuilder) error {
	// Growing the text buffer by doubling costs more than generating the
	// text: reserve the expected size (mean ~1.1 KB per row) up front.
	b.Reserve(len(idx))
	b.Field(5).(*array.StringBuilder).ReserveData(len(idx) * 1100)
	var text []byte
	for _, i := range idx {
		var r Row
		text = s.row(i, &r, text[:0])
		r.Text = string(text)
		appendRow(b, &r)
	}
	return nil
}

// row fills r for sample i (all fields but Text) and appends its text to buf.
func (s *synthSource) row(i int, r *Row, buf []byte) []byte {
	rng := rand.New(rand.NewPCG(uint64(s.seed), uint64(i)))
	r.SampleID = s.SampleID(i)
	w := rng.IntN(100)
	for _, src := range synthSources {
		if w < src.weight {
			r.SourceID, r.SourceVersion = src.id, src.version
			break
		}
		w -= src.weight
	}
	switch p := rng.IntN(100); {
	case p < 90:
		r.Split = "train"
	case p < 95:
		r.Split = "val"
	default:
		r.Split = "test"
	}
	r.Lang = synthLangs[rng.IntN(len(synthLangs))]
	// Log-normal word counts: median ~130 words, mean ~170 (~1 KB).
	words := int(math.Exp(4.85+0.75*rng.NormFloat64())) + 3
	words = min(words, 5000)
	sentence := 0
	var phrase []string
	for k := 0; k < words; k++ {
		var word string
		if len(phrase) == 0 && rng.IntN(100) < synthPhrasePct {
			phrase = s.phrases[s.phraseZipf[rng.Uint32()>>16]]
		}
		if len(phrase) > 0 {
			word, phrase = phrase[0], phrase[1:]
		} else {
			word = s.vocab[s.zipf[rng.Uint32()>>16]]
		}
		if sentence == 0 {
			c, size := utf8.DecodeRuneInString(word)
			if 'a' <= c && c <= 'z' {
				buf = append(buf, byte(c-'a'+'A'))
				word = word[size:]
			}
		}
		buf = append(buf, word...)
		sentence++
		switch {
		case k == words-1:
			buf = append(buf, '.')
		case len(phrase) > 0:
			buf = append(buf, ' ')
		case sentence > 6 && rng.IntN(10) == 0:
			buf = append(buf, ". "...)
			sentence = 0
		case rng.IntN(14) == 0:
			buf = append(buf, ", "...)
		default:
			buf = append(buf, ' ')
		}
	}
	r.Tokens = int64(math.Round(float64(words) * 1.3))
	return buf
}
