package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardproof/shardproof/internal/errcode"
)

// ScaleSchema identifies the JSON result of one `spbench scale`.
const ScaleSchema = "shardproof.bench.scale.v1"

// ScalePoint is verify at one size.
type ScalePoint struct {
	Params        Params  `json:"params"`
	Root          string  `json:"root"`
	Records       int64   `json:"records"`
	StoredBytes   int64   `json:"storedBytes"`
	MinSeconds    float64 `json:"minSeconds"`
	MedianSeconds float64 `json:"medianSeconds"`
	// NanosPerRecord is from the median wall time.
	NanosPerRecord float64  `json:"nanosPerRecord"`
	PeakRSSBytes   int64    `json:"peakRssBytes"`
	MedianRSSBytes int64    `json:"medianRssBytes"`
	Samples        []Sample `json:"samples"`
}

// ScaleResult is the JSON document of one scaling run.
type ScaleResult struct {
	Schema  string       `json:"schema"`
	Started string       `json:"started"`
	Command string       `json:"command"`
	Host    Host         `json:"host"`
	Points  []ScalePoint `json:"points"`
	// RSSGrowth is the largest size's peak RSS over the smallest's; the
	// target is at most 1.25 (flat within 25%).
	RSSGrowth float64 `json:"rssGrowth"`
	RSSFlat   bool    `json:"rssFlat"`
}

func cmdScale(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	var c common
	c.register(fs)
	sizes := fs.String("sizes", "1000000,4000000", "release sizes in records, comma-separated")
	largest := fs.Bool("largest", false, "also run 16000000 records (synthesis alone takes a long while on 2 cores)")
	if err := fs.Parse(args); err != nil {
		return errcode.Wrap(errcode.Usage, err, "scale")
	}
	if err := c.check(); err != nil {
		return err
	}
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return errcode.New(errcode.Usage, "-sizes: bad size %q", s)
		}
		ns = append(ns, n)
	}
	if *largest && !slices.Contains(ns, 16000000) {
		ns = append(ns, 16000000)
	}
	self, err := os.Executable()
	if err != nil {
		return errcode.Wrap(errcode.IO, err, "own executable")
	}
	started := time.Now().UTC()
	res := &ScaleResult{Schema: ScaleSchema, Started: started.Format(time.RFC3339), Command: "spbench scale " + strings.Join(args, " "), Host: host()}
	for _, n := range ns {
		p := c.params(n, 0)
		d, mp, err := prepare(ctx, self, c.cache, p)
		if err != nil {
			return err
		}
		r := &runner{self: self, shardproof: c.shardproof, metaPath: mp, d: d}
		pt := ScalePoint{Params: p, Root: d.Root.String(), Records: d.Records, StoredBytes: d.StoredBytes}
		var walls, rss []float64
		for round := 1; round <= c.rounds; round++ {
			s, err := r.run(ctx, toolVerify, round)
			if err != nil {
				return fmt.Errorf("size %d round %d: %w", n, round, err)
			}
			if *s.Child.Counts != d.Expected {
				return errcode.New(errcode.Internal, "size %d round %d: verify counts %+v, injected %+v", n, round, *s.Child.Counts, d.Expected)
			}
			slog.Info("bench: scale measured", "records", d.Records, "round", round, "wall", fmt.Sprintf("%.2fs", s.WallSeconds), "maxRSS", fmt.Sprintf("%.0fMiB", mb(s.MaxRSSBytes)))
			pt.Samples = append(pt.Samples, s)
			walls = append(walls, s.WallSeconds)
			rss = append(rss, float64(s.MaxRSSBytes))
			pt.PeakRSSBytes = max(pt.PeakRSSBytes, s.MaxRSSBytes)
		}
		pt.MinSeconds, pt.MedianSeconds = slices.Min(walls), median(walls)
		pt.NanosPerRecord = pt.MedianSeconds * 1e9 / float64(d.Records)
		pt.MedianRSSBytes = int64(median(rss))
		res.Points = append(res.Points, pt)
	}
	if len(res.Points) > 0 && res.Points[0].PeakRSSBytes > 0 {
		res.RSSGrowth = float64(res.Points[len(res.Points)-1].PeakRSSBytes) / float64(res.Points[0].PeakRSSBytes)
		res.RSSFlat = res.RSSGrowth <= 1.25
	}
	base := filepath.Join(c.results, started.Format("20060102T150405Z")+"-scale")
	md := res.Markdown()
	if err := writeOutputs(base, res, md, ""); err != nil {
		return err
	}
	fmt.Print(md)
	fmt.Printf("\nresults: %s.{json,md}\n", base)
	return nil
}

// Markdown renders the scaling table.
func (r *ScaleResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s — verify scaling\n\n`%s` on %d × %s.\n\n", r.Started, r.Command, r.Host.CPUs, r.Host.CPUModel)
	b.WriteString("| records | shards | stored MB | median s | min s | ns/record | peak RSS MiB |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Points {
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.2f | %.2f | %.0f | %.0f |\n", p.Records, p.Params.Shards, float64(p.StoredBytes)/1e6,
			p.MedianSeconds, p.MinSeconds, p.NanosPerRecord, mb(p.PeakRSSBytes))
	}
	fmt.Fprintf(&b, "\nPeak RSS growth, largest over smallest: **%.2f×** (target ≤ 1.25: %v).\n", r.RSSGrowth, r.RSSFlat)
	return b.String()
}
