package canon

import "github.com/apache/arrow-go/v18/parquet/file"

// DropStoredArrowSchema removes the ARROW:schema key from a Parquet file's
// footer metadata before pqarrow reads it. That value is an Arrow IPC
// message whose length fields pqarrow trusts for allocation, so one
// flipped bit there can exhaust memory, which recover cannot catch. Every
// type a record schema may use maps one-to-one from the Parquet schema
// alone, so readers of untrusted files (the mapper, stage's inputs) lose
// nothing by ignoring it.
func DropStoredArrowSchema(pf *file.Reader) {
	md := pf.MetaData()
	if md == nil || md.FileMetaData == nil {
		return
	}
	kv := md.FileMetaData.KeyValueMetadata
	out := kv[:0:0]
	for _, e := range kv {
		if e != nil && e.Key != "ARROW:schema" {
			out = append(out, e)
		}
	}
	md.FileMetaData.KeyValueMetadata = out
}

// MaxPageBytes bounds the Parquet pages of shards and snapshot member
// files: verify's mapper refuses a page whose header declares more,
// compressed or not, before allocating for it (DECODE_ERROR), and stage
// writes none larger. A smaller chunk bounds its pages by its own bytes
// (internal/pagelimit).
const MaxPageBytes = 64 << 20
