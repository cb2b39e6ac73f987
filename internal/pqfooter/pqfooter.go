// Package pqfooter checks a Parquet file's footer before arrow-go decodes
// it. The footer is a FileMetaData struct in Thrift's compact protocol,
// and arrow-go's Thrift-generated code allocates a list's declared
// capacity (make([]*RowGroup, 0, n), []string for path_in_schema, ...)
// before reading any element of it; Thrift bounds n only by its 100 MiB
// message size, so a footer of a few bytes declaring 100M entries made
// arrow-go allocate 0.8 to 1.6 GB before failing on the missing
// elements. Check walks the footer's bytes with no generated code,
// allocating nothing by a count it reads, and refuses a list, set or map
// whose declared entries need more bytes than remain in the footer, or a
// binary value longer than what remains, so a footer it passes costs
// arrow-go allocations in proportion to its bytes.
//
// The walk follows the layout of the bytes (field headers, container
// headers, varints, lengths) but, for the lists arrow-go reads into
// typed slices, also the Parquet IDL: arrow-go's generated code ignores a
// list's declared element type and reads the elements the IDL says, so a
// list whose declared element type differs from the IDL's is refused
// (every writer declares the IDL's type). Otherwise the walk could skip
// as, say, a binary value bytes that arrow-go reads as a struct holding
// a list header of any count. A field whose declared type differs from
// the IDL's arrow-go skips the way the walk does.
//
// Lists within their bytes can still cost arrow-go more than their bytes
// when it builds the schema. FileMetaData.schema is a tree flattened
// depth first, each group's num_children naming how many of the next
// elements are its children, and arrow-go makes a group's slice of
// children at that count before reading them: an 18-byte footer whose
// root declared 2^26 children made it allocate 1 GiB. Check refuses a
// schema that is not exactly one tree over all its elements (a count past
// the elements left, a negative one, elements after the root's tree, a
// tree needing more than the list holds) or that nests past
// MaxSchemaDepth. arrow-go also builds every leaf's path from its
// groups' names, which the footer holds once: 4,000 leaves under a
// group of a 20,000-byte name, in an 88 KB file, cost 322 MiB. Cost
// estimates those paths and the row groups × leaves grid of column
// chunk metadata a reader of every chunk builds, and Check refuses a
// footer whose Cost passes Budget (4 MiB and 64 bytes a footer byte):
// the files of every writer tested use under a fifth of it (one of no
// rows, whose leaves' paths no column chunk repeats in the footer, comes
// nearest), and the rest of the decode allocates a bounded multiple of
// the footer's bytes.
package pqfooter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrFooter is the error every refusal of Check and CheckFile wraps.
var ErrFooter = errors.New("parquet footer refused")

// MaxDepth bounds how deep structs and containers may nest in a footer;
// Thrift's own skipping refuses deeper nesting (its default recursion
// depth is 64), and Parquet's IDL nests at most a few levels.
const MaxDepth = 64

// Compact protocol types (the low nibble of a field or container header).
const (
	typeStop   = 0
	typeTrue   = 1
	typeFalse  = 2
	typeByte   = 3
	typeI16    = 4
	typeI32    = 5
	typeI64    = 6
	typeDouble = 7
	typeBinary = 8
	typeList   = 9
	typeSet    = 10
	typeMap    = 11
	typeStruct = 12
	typeUUID   = 13
)

// idlField is what arrow-go reads for a field of one of the structs
// below when the field's declared type is typ: for a list, elements of
// type elem; for a struct (or a list of structs), the fields st lists.
type idlField struct {
	typ, elem byte
	st        idlStruct
}

// idlStruct lists a struct's fields that hold, or hold structs that hold,
// a list arrow-go reads into a typed slice; every other field is walked
// as its bytes declare, as arrow-go skips or reads it alike. A struct of
// no such fields is an empty idlStruct.
type idlStruct map[int16]idlField

var (
	sizeStatistics          = idlStruct{2: {typeList, typeI64, nil}, 3: {typeList, typeI64, nil}}
	geospatialStatistics    = idlStruct{2: {typeList, typeI32, nil}}
	encryptionWithColumnKey = idlStruct{1: {typeList, typeBinary, nil}}
	columnCryptoMetaData    = idlStruct{2: {typeStruct, 0, encryptionWithColumnKey}}
	columnMetaData          = idlStruct{
		2:  {typeList, typeI32, nil},            // encodings
		3:  {typeList, typeBinary, nil},         // path_in_schema
		8:  {typeList, typeStruct, idlStruct{}}, // key_value_metadata
		13: {typeList, typeStruct, idlStruct{}}, // encoding_stats
		16: {typeStruct, 0, sizeStatistics},
		17: {typeStruct, 0, geospatialStatistics},
	}
	columnChunk = idlStruct{3: {typeStruct, 0, columnMetaData}, 8: {typeStruct, 0, columnCryptoMetaData}}
	rowGroup    = idlStruct{
		1: {typeList, typeStruct, columnChunk}, // columns
		4: {typeList, typeStruct, idlStruct{}}, // sorting_columns
	}
	fileMetaData = idlStruct{
		2: {typeList, typeStruct, idlStruct{}}, // schema
		4: {typeList, typeStruct, rowGroup},    // row_groups
		5: {typeList, typeStruct, idlStruct{}}, // key_value_metadata
		7: {typeList, typeStruct, idlStruct{}}, // column_orders
	}
)

// minSize is the fewest bytes a value of compact type t takes.
func minSize(t byte) uint64 {
	switch t {
	case typeDouble:
		return 8
	case typeUUID:
		return 16
	}
	return 1
}

// sameType reports whether a declared type is the IDL's; Thrift reads
// either boolean type as a bool.
func sameType(declared, idl byte) bool {
	if idl == typeTrue || idl == typeFalse {
		return declared == typeTrue || declared == typeFalse
	}
	return declared == idl
}

// Check checks footer, the serialized FileMetaData of a Parquet file (the
// bytes between the data and the footer length), as arrow-go reads it:
// one struct from its first byte (bytes after it are not read), whose
// schema is one tree and whose Cost is within Budget. It returns an
// error wrapping ErrFooter that gives offsets and counts, never the
// footer's bytes. It never panics and allocates nothing by a count it
// reads.
func Check(footer []byte) error {
	return check(footer, fileMetaData)
}

// CheckEncrypted is Check for the footer of a file ending in PARE, a
// FileCryptoMetaData walked as its bytes declare.
func CheckEncrypted(footer []byte) error {
	return check(footer, idlStruct{})
}

func check(footer []byte, st idlStruct) error {
	w := walker{b: footer}
	if err := w.structBody(st, 1); err != nil {
		return fmt.Errorf("%w: %w", ErrFooter, err)
	}
	if len(st) == 0 {
		return nil // a FileCryptoMetaData: no schema, no row groups
	}
	if _, err := cost(footer, Budget(len(footer))); err != nil {
		return fmt.Errorf("%w: %w", ErrFooter, err)
	}
	return nil
}

// CheckFile reads the footer of the size bytes r holds and checks it: the
// file must end in a footer length and PAR1 (or PARE), the length must
// leave room for it and the leading magic, and the footer must pass
// Check (CheckEncrypted for PARE). It reads the footer once, into a
// buffer of its length, which is less than size.
func CheckFile(r io.ReaderAt, size int64) error {
	if size < 12 {
		return fmt.Errorf("%w: file is %d bytes, shorter than magic + footer length + magic (12)", ErrFooter, size)
	}
	var tail [8]byte
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return fmt.Errorf("read footer length: %w", err)
	}
	magic := string(tail[4:])
	if magic != "PAR1" && magic != "PARE" {
		return fmt.Errorf("%w: no PAR1 or PARE magic at the end of the file", ErrFooter)
	}
	fl := int64(binary.LittleEndian.Uint32(tail[:4]))
	if fl == 0 || fl > size-12 {
		return fmt.Errorf("%w: footer length %d does not fit in %d bytes", ErrFooter, fl, size)
	}
	footer := make([]byte, fl)
	if _, err := r.ReadAt(footer, size-8-fl); err != nil {
		return fmt.Errorf("read footer: %w", err)
	}
	if magic == "PARE" {
		return CheckEncrypted(footer)
	}
	return Check(footer)
}

// CheckBytes is CheckFile for a file held in memory.
func CheckBytes(data []byte) error {
	n := int64(len(data))
	if n < 12 {
		return CheckFile(nil, n)
	}
	fl := int64(binary.LittleEndian.Uint32(data[n-8 : n-4]))
	magic := string(data[n-4:])
	switch {
	case magic != "PAR1" && magic != "PARE":
		return fmt.Errorf("%w: no PAR1 or PARE magic at the end of the file", ErrFooter)
	case fl == 0 || fl > n-12:
		return fmt.Errorf("%w: footer length %d does not fit in %d bytes", ErrFooter, fl, n)
	case magic == "PARE":
		return CheckEncrypted(data[n-8-fl : n-8])
	}
	return Check(data[n-8-fl : n-8])
}

// walker reads b from off on.
type walker struct {
	b   []byte
	off int
}

func (w *walker) remaining() uint64 { return uint64(len(w.b) - w.off) }

func (w *walker) byte() (byte, error) {
	if w.off >= len(w.b) {
		return 0, fmt.Errorf("footer ends at byte %d inside a value", w.off)
	}
	c := w.b[w.off]
	w.off++
	return c, nil
}

// varint reads an unsigned LEB128 varint of at most 10 bytes, as Thrift's
// compact protocol does.
func (w *walker) varint() (uint64, error) {
	start := w.off
	v, n := binary.Uvarint(w.b[w.off:])
	switch {
	case n == 0:
		return 0, fmt.Errorf("footer ends at byte %d inside a varint", start)
	case n < 0:
		return 0, fmt.Errorf("varint at byte %d is longer than 10 bytes", start)
	}
	w.off += n
	return v, nil
}

// skip passes n bytes, refusing a length beyond what remains.
func (w *walker) skip(n uint64, what string) error {
	if n > w.remaining() {
		return fmt.Errorf("%s at byte %d declares %d bytes, %d remain", what, w.off, n, w.remaining())
	}
	w.off += int(n)
	return nil
}

// structBody walks a struct's fields up to its stop byte; st says what
// arrow-go reads for the fields it names.
func (w *walker) structBody(st idlStruct, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("struct at byte %d nests deeper than %d", w.off, MaxDepth)
	}
	var id int16
	for {
		at := w.off
		h, err := w.byte()
		if err != nil {
			return err
		}
		t := h & 0x0f
		if t == typeStop {
			return nil // Thrift ignores the high nibble of a stop byte
		}
		if id, err = w.fieldID(h, id); err != nil {
			return err
		}
		if !validType(t) {
			return fmt.Errorf("field at byte %d has type %d, not a compact protocol type", at, t)
		}
		if f, known := st[id]; known && sameType(t, f.typ) {
			if err := w.known(f, at, depth); err != nil {
				return err
			}
			continue
		}
		if err := w.value(t, depth); err != nil {
			return err
		}
	}
}

// known walks a field of the type f says, as arrow-go reads it.
func (w *walker) known(f idlField, at, depth int) error {
	if f.typ == typeStruct {
		return w.structBody(f.st, depth+1)
	}
	// A list: arrow-go reads elements of f.elem whatever the header says.
	elem, n, err := w.listHeader()
	if err != nil {
		return err
	}
	if n != 0 && !sameType(elem, f.elem) {
		return fmt.Errorf("list at byte %d declares elements of type %d, its field holds type %d", at, elem, f.elem)
	}
	if err := w.fits(n, minSize(f.elem), "list", at); err != nil {
		return err
	}
	for range n {
		if f.elem == typeStruct {
			err = w.structBody(f.st, depth+1)
		} else {
			err = w.element(f.elem, depth+1)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fits refuses n entries of at least per bytes each beyond what remains
// (per is at most 32, and n at most what remains, so n*per cannot wrap).
func (w *walker) fits(n, per uint64, what string, at int) error {
	if n > w.remaining() || n*per > w.remaining() {
		return fmt.Errorf("%s at byte %d declares %d entries, %d bytes remain", what, at, n, w.remaining())
	}
	return nil
}

func validType(t byte) bool { return t >= typeTrue && t <= typeUUID }

// listHeader reads a list or set header: its element type and count.
func (w *walker) listHeader() (elem byte, n uint64, err error) {
	h, err := w.byte()
	if err != nil {
		return 0, 0, err
	}
	elem, n = h&0x0f, uint64(h>>4)
	if n == 15 {
		if n, err = w.varint(); err != nil {
			return 0, 0, err
		}
	}
	if !validType(elem) && (elem != typeStop || n != 0) {
		// Thrift refuses an element type it does not know even for an
		// empty list; it takes stop for an empty one's.
		return 0, 0, fmt.Errorf("list at byte %d has element type %d, not a compact protocol type", w.off-1, elem)
	}
	return elem, n, nil
}

// value walks one value of compact type t as its bytes declare.
func (w *walker) value(t byte, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("value at byte %d nests deeper than %d", w.off, MaxDepth)
	}
	at := w.off
	switch t {
	case typeTrue, typeFalse:
		// A field's bool is in its header; any other takes one byte. A
		// field reaches here with its header read, so only container
		// elements do: see container.
		return nil
	case typeByte:
		_, err := w.byte()
		return err
	case typeI16, typeI32, typeI64:
		_, err := w.varint()
		return err
	case typeDouble:
		return w.skip(8, "double")
	case typeUUID:
		return w.skip(16, "uuid")
	case typeBinary:
		n, err := w.varint()
		if err != nil {
			return err
		}
		return w.skip(n, "binary")
	case typeStruct:
		return w.structBody(nil, depth+1)
	case typeList, typeSet:
		elem, n, err := w.listHeader()
		if err != nil {
			return err
		}
		if err := w.fits(n, minSize(elem), "list", at); err != nil {
			return err
		}
		for range n {
			if err := w.element(elem, depth+1); err != nil {
				return err
			}
		}
		return nil
	case typeMap:
		n, err := w.varint()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		kv, err := w.byte()
		if err != nil {
			return err
		}
		k, v := kv>>4, kv&0x0f
		if !validType(k) || !validType(v) {
			return fmt.Errorf("map at byte %d has key or value type %d/%d, not a compact protocol type", at, k, v)
		}
		if err := w.fits(n, minSize(k)+minSize(v), "map", at); err != nil {
			return err
		}
		for range n {
			if err := w.element(k, depth+1); err != nil {
				return err
			}
			if err := w.element(v, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("value at byte %d has type %d, not a compact protocol type", at, t)
}

// element walks a container element: as value, but a bool takes a byte.
func (w *walker) element(t byte, depth int) error {
	if t == typeTrue || t == typeFalse {
		_, err := w.byte()
		return err
	}
	return w.value(t, depth)
}

// TopField finds field id of the struct footer starts with (as Check
// walks it): the offset of the field's header, of its value, and of the
// value's end. ok is false when the struct has no such field. It is for
// tests and tools that rewrite a footer.
func TopField(footer []byte, id int16) (header, value, end int, ok bool, err error) {
	w := walker{b: footer}
	var cur int16
	for {
		header = w.off
		h, err := w.byte()
		if err != nil {
			return 0, 0, 0, false, err
		}
		t := h & 0x0f
		if t == typeStop {
			return 0, 0, 0, false, nil
		}
		if cur, err = w.fieldID(h, cur); err != nil {
			return 0, 0, 0, false, err
		}
		value = w.off
		if err := w.value(t, 1); err != nil {
			return 0, 0, 0, false, err
		}
		if cur == id {
			return header, value, w.off, true, nil
		}
	}
}
