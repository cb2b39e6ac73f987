package main

// Variants of the Parquet encoding a foreign pipeline might produce, to see
// which ones verify accepts (none of them is excluded by docs/FORMATS.md).

import (
	"log"

	"github.com/parquet-go/parquet-go"
)

type shardOptional struct {
	SampleID      *string `parquet:"sample_id,optional"`
	SourceID      *string `parquet:"source_id,optional"`
	SourceVersion *int64  `parquet:"source_version,optional"`
	Split         *string `parquet:"split,optional"`
	Lang          *string `parquet:"lang,optional"`
	Text          *string `parquet:"text,optional"`
	Tokens        *int64  `parquet:"tokens,optional"`
}

type shardOptionalSome struct { // lang and tokens OPTIONAL
	SampleID      string  `parquet:"sample_id"`
	SourceID      string  `parquet:"source_id"`
	SourceVersion int64   `parquet:"source_version"`
	Split         string  `parquet:"split"`
	Lang          *string `parquet:"lang,optional"`
	Text          string  `parquet:"text"`
	Tokens        *int64  `parquet:"tokens,optional"`
}

type shardNoString struct { // BYTE_ARRAY without the String annotation
	SampleID      []byte `parquet:"sample_id"`
	SourceID      []byte `parquet:"source_id"`
	SourceVersion int64  `parquet:"source_version"`
	Split         []byte `parquet:"split"`
	Lang          []byte `parquet:"lang"`
	Text          []byte `parquet:"text"`
	Tokens        int64  `parquet:"tokens"`
}

type shardReordered struct { // columns in another order than the record schema
	Text          string `parquet:"text"`
	Tokens        int64  `parquet:"tokens"`
	SampleID      string `parquet:"sample_id"`
	SourceID      string `parquet:"source_id"`
	SourceVersion int64  `parquet:"source_version"`
	Split         string `parquet:"split"`
	Lang          string `parquet:"lang"`
}

type shardExtra struct { // one column the record schema does not name
	SampleID      string  `parquet:"sample_id"`
	SourceID      string  `parquet:"source_id"`
	SourceVersion int64   `parquet:"source_version"`
	Split         string  `parquet:"split"`
	Lang          string  `parquet:"lang"`
	Text          string  `parquet:"text"`
	Tokens        int64   `parquet:"tokens"`
	Quality       float64 `parquet:"quality"`
}

type shardDict struct { // dictionary-encoded strings
	SampleID      string `parquet:"sample_id"`
	SourceID      string `parquet:"source_id,dict"`
	SourceVersion int64  `parquet:"source_version"`
	Split         string `parquet:"split,dict"`
	Lang          string `parquet:"lang,dict"`
	Text          string `parquet:"text"`
	Tokens        int64  `parquet:"tokens"`
}

type memberFixed struct { // content_digest as FIXED_LEN_BYTE_ARRAY(32)
	SampleID      string   `parquet:"sample_id"`
	SourceID      string   `parquet:"source_id"`
	SourceVersion int64    `parquet:"source_version"`
	Split         string   `parquet:"split"`
	ContentDigest [32]byte `parquet:"content_digest"`
}

func writeShard(variant string, rows []ShardRow) []byte {
	switch variant {
	case "", "none":
		return writeParquet(rows, nil)
	case "snappy":
		return writeParquetOpts(rows, parquet.Compression(&parquet.Snappy))
	case "uncompressed":
		return writeParquetOpts(rows, parquet.Compression(&parquet.Uncompressed))
	case "rowgroups":
		return writeParquetOpts(rows, parquet.Compression(&parquet.Zstd), parquet.MaxRowsPerRowGroup(100))
	case "optional":
		out := make([]shardOptional, len(rows))
		for i, r := range rows {
			r := r
			out[i] = shardOptional{&r.SampleID, &r.SourceID, &r.SourceVersion, &r.Split, &r.Lang, &r.Text, &r.Tokens}
			if r.nullLang {
				out[i].Lang = nil
			}
			if r.nullSampleID {
				out[i].SampleID = nil
			}
		}
		return writeParquet(out, nil)
	case "optional-some":
		out := make([]shardOptionalSome, len(rows))
		for i, r := range rows {
			r := r
			out[i] = shardOptionalSome{r.SampleID, r.SourceID, r.SourceVersion, r.Split, &r.Lang, r.Text, &r.Tokens}
			if r.nullLang {
				out[i].Lang = nil
			}
		}
		return writeParquet(out, nil)
	case "nostring":
		out := make([]shardNoString, len(rows))
		for i, r := range rows {
			out[i] = shardNoString{[]byte(r.SampleID), []byte(r.SourceID), r.SourceVersion, []byte(r.Split), []byte(r.Lang), []byte(r.Text), r.Tokens}
		}
		return writeParquet(out, nil)
	case "reordered":
		out := make([]shardReordered, len(rows))
		for i, r := range rows {
			out[i] = shardReordered{r.Text, r.Tokens, r.SampleID, r.SourceID, r.SourceVersion, r.Split, r.Lang}
		}
		return writeParquet(out, nil)
	case "extra":
		out := make([]shardExtra, len(rows))
		for i, r := range rows {
			out[i] = shardExtra{r.SampleID, r.SourceID, r.SourceVersion, r.Split, r.Lang, r.Text, r.Tokens, 0.5}
		}
		return writeParquet(out, nil)
	case "dict":
		out := make([]shardDict, len(rows))
		for i, r := range rows {
			out[i] = shardDict{r.SampleID, r.SourceID, r.SourceVersion, r.Split, r.Lang, r.Text, r.Tokens}
		}
		return writeParquet(out, nil)
	}
	log.Fatalf("unknown -shard-variant %q", variant)
	return nil
}

func writeMember(variant string, rows []MemberRow) []byte {
	switch variant {
	case "", "none":
		return writeParquet(rows, nil)
	case "fixed":
		out := make([]memberFixed, len(rows))
		for i, r := range rows {
			out[i] = memberFixed{r.SampleID, r.SourceID, r.SourceVersion, r.Split, [32]byte(r.ContentDigest)}
		}
		return writeParquet(out, nil)
	}
	log.Fatalf("unknown -member-variant %q", variant)
	return nil
}
