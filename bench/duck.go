package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	_ "github.com/duckdb/duckdb-go/v2" // registers the "duckdb" database/sql driver

	"github.com/shardproof/shardproof/internal/errcode"
)

// duckDiffSQL is the peer's version of verify's member diff, on the same
// Parquet files: per sampleId, release count r against snapshot count s
// gives EXTRA (s = 0: r), MISSING (r < s: s - r) and DUPLICATE (r > s > 0:
// r - s); with r = s, the content digest (sha256 of text, compared as
// bytes with the member file's content_digest), split, sourceVersion and
// sourceId are compared, each counting once per sampleId, as the reducer
// counts them. A group of r = s rows is compared by its min and max, which
// is exact for groups of up to two rows (the largest equal-count group the
// benchmark data has); the reducer compares the sorted multisets.
const duckDiffSQL = `
WITH rel AS (
  SELECT sample_id, count(*) AS n,
         min(cd) AS cd_lo, max(cd) AS cd_hi,
         min(split) AS split_lo, max(split) AS split_hi,
         min(source_version) AS ver_lo, max(source_version) AS ver_hi,
         min(source_id) AS src_lo, max(source_id) AS src_hi
  FROM (SELECT sample_id, source_id, source_version, split, unhex(sha256(text)) AS cd
        FROM read_parquet('%s'))
  GROUP BY sample_id),
snap AS (
  SELECT sample_id, count(*) AS n,
         min(content_digest) AS cd_lo, max(content_digest) AS cd_hi,
         min(split) AS split_lo, max(split) AS split_hi,
         min(source_version) AS ver_lo, max(source_version) AS ver_hi,
         min(source_id) AS src_lo, max(source_id) AS src_hi
  FROM read_parquet('%s')
  GROUP BY sample_id)
SELECT
  CAST(coalesce(sum(r.n), 0) AS BIGINT),
  CAST(coalesce(sum(s.n), 0) AS BIGINT),
  CAST(coalesce(sum(CASE WHEN s.n IS NOT NULL AND coalesce(r.n, 0) < s.n THEN s.n - coalesce(r.n, 0) END), 0) AS BIGINT),
  CAST(coalesce(sum(CASE WHEN s.n IS NULL THEN r.n END), 0) AS BIGINT),
  CAST(coalesce(sum(CASE WHEN s.n IS NOT NULL AND r.n > s.n THEN r.n - s.n END), 0) AS BIGINT),
  count(*) FILTER (WHERE r.n = s.n AND (r.cd_lo <> s.cd_lo OR r.cd_hi <> s.cd_hi)),
  count(*) FILTER (WHERE r.n = s.n AND (r.ver_lo <> s.ver_lo OR r.ver_hi <> s.ver_hi)),
  count(*) FILTER (WHERE r.n = s.n AND (r.src_lo <> s.src_lo OR r.src_hi <> s.src_hi)),
  count(*) FILTER (WHERE r.n = s.n AND (r.split_lo <> s.split_lo OR r.split_hi <> s.split_hi))
FROM rel r FULL OUTER JOIN snap s ON r.sample_id = s.sample_id`

// duckScanSQL reads every column of every release shard once.
const duckScanSQL = `
SELECT count(*),
       CAST(sum(strlen(sample_id) + strlen(source_id) + strlen(split) + strlen(lang) + strlen(text)) AS BIGINT),
       CAST(sum(source_version + tokens) AS BIGINT)
FROM read_parquet('%s')`

// openDuck opens an in-memory DuckDB using every core.
func openDuck(ctx context.Context) (*sql.DB, error) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, err, "open duckdb")
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("SET threads = %d", runtime.NumCPU())); err != nil {
		db.Close()
		return nil, errcode.Wrap(errcode.Internal, err, "duckdb threads")
	}
	return db, nil
}

// globOf is the DuckDB glob of the exported files in dir, quoted for a
// SQL string literal.
func globOf(dir string) string {
	return strings.ReplaceAll(filepath.Join(dir, "*.parquet"), "'", "''")
}

// duckDiff runs duckDiffSQL over d's exported files.
func duckDiff(ctx context.Context, d *Dataset) (DiffCounts, error) {
	db, err := openDuck(ctx)
	if err != nil {
		return DiffCounts{}, err
	}
	defer db.Close()
	var c DiffCounts
	q := fmt.Sprintf(duckDiffSQL, globOf(d.ReleaseDir), globOf(d.SnapshotDir))
	if err := db.QueryRowContext(ctx, q).Scan(&c.Records, &c.SnapshotRecords, &c.Missing, &c.Extra, &c.Duplicate,
		&c.ContentSubstitution, &c.SourceVersionChange, &c.SourceIDChange, &c.SplitConflict); err != nil {
		return DiffCounts{}, errcode.Wrap(errcode.Internal, err, "duckdb diff")
	}
	return c, nil
}

// duckScan runs duckScanSQL over d's release files and returns the rows
// scanned.
func duckScan(ctx context.Context, d *Dataset) (int64, error) {
	db, err := openDuck(ctx)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var rows, bytes, sum int64
	if err := db.QueryRowContext(ctx, fmt.Sprintf(duckScanSQL, globOf(d.ReleaseDir))).Scan(&rows, &bytes, &sum); err != nil {
		return 0, errcode.Wrap(errcode.Internal, err, "duckdb scan")
	}
	if bytes <= 0 {
		return 0, errcode.New(errcode.Internal, "duckdb scan read %d rows but no bytes", rows)
	}
	return rows, nil
}
