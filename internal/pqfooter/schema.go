package pqfooter

import (
	"fmt"
	"math/bits"
)

// MaxSchemaDepth bounds how many groups, the root's included, a footer's
// schema tree nests: the path of a leaf under them names each but the
// root, and arrow-go builds it (twice, as a dotted string and as a list
// of names) for every leaf, so depth multiplies the leaves' cost. A
// list of lists nests three groups a level; no writer's schema comes
// near.
const MaxSchemaDepth = 64

// What arrow-go allocates for the parts of a footer whose cost is not in
// proportion to its bytes, measured on arrow-go v18 (building the schema
// and pqarrow's manifest; reading every column chunk's metadata), rounded
// up.
const (
	// costPathByte is per byte of a leaf's dotted path: a group's name
	// is one run of bytes in the footer, and in the path of every leaf
	// under it (3.1 bytes measured).
	costPathByte = 4
	// costLevel is per name in a leaf's path (45 bytes measured).
	costLevel = 48
	// costChunk is per column chunk of the row groups × leaves grid
	// (368 bytes of ColumnChunkMetaData measured), which a reader of
	// every chunk, such as verify's bounds check, builds.
	costChunk = 384
)

// Budget is the most Cost a footer of n bytes may have to pass Check:
// 4 MiB, and 64 bytes for every byte of the footer. A footer holds every
// column chunk a reader can read in 25 bytes or more (arrow-go writes
// some 100, with statistics and the page index), each with its leaf's
// path in path_in_schema, so a file of one row group or more pays for
// its grid and paths many times over; only a file of no rows, of many
// leaves nested under long names, nears it (a struct of 200 columns
// under a 1 KiB name: 18%; TestValidFilesPass).
func Budget(n int) uint64 { return 4<<20 + 64*uint64(n) }

// Cost estimates what arrow-go allocates, decoding footer and reading its
// column chunks' metadata, for what the footer's bytes do not pay for:
// each leaf's path (the bytes of its groups' names, and their number) and
// the row groups × leaves grid of column chunks. The rest of the decode
// allocates a bounded multiple of the footer's bytes (arrow-go's structs
// for what it reads; about 200 bytes for each byte of a schema element).
// It refuses, as Check does, a footer that does not walk or whose schema
// is not one tree.
func Cost(footer []byte) (uint64, error) {
	w := walker{b: footer}
	if err := w.structBody(fileMetaData, 1); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrFooter, err)
	}
	c, err := cost(footer, ^uint64(0))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrFooter, err)
	}
	return c, nil
}

// cost is Cost of a footer the walk passed, refusing one whose cost
// passes budget.
func cost(footer []byte, budget uint64) (uint64, error) {
	var (
		st            schemaStats
		rowGroups     uint64
		haveRowGroups bool
		w             = walker{b: footer}
		id            int16
	)
	for {
		h, err := w.byte()
		if err != nil {
			return 0, err
		}
		t := h & 0x0f
		if t == typeStop {
			break
		}
		if id, err = w.fieldID(h, id); err != nil {
			return 0, err
		}
		switch {
		case id == 2 && t == typeList:
			// Thrift keeps the last of a field given twice, and so does
			// arrow-go's schema; every one given must be a tree.
			if st, err = w.schema(); err != nil {
				return 0, err
			}
			continue
		case id == 4 && t == typeList:
			start := w.off
			if _, rowGroups, err = w.listHeader(); err != nil {
				return 0, err
			}
			haveRowGroups = true
			w.off = start
		}
		if err := w.value(t, 1); err != nil {
			return 0, err
		}
	}
	c := st.paths
	if haveRowGroups {
		hi, grid := bits.Mul64(rowGroups, st.leaves)
		hi2, gridCost := bits.Mul64(grid, costChunk)
		if hi != 0 || hi2 != 0 {
			gridCost = ^uint64(0)
		}
		c = satAdd(c, gridCost)
	}
	if c > budget {
		return c, fmt.Errorf("reading it costs arrow-go an estimated %d bytes (leaf columns %d, row groups %d), over the budget of %d for its %d bytes", c, st.leaves, rowGroups, budget, len(footer))
	}
	return c, nil
}

// satAdd is a+b, or the largest uint64 if that wraps.
func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return ^uint64(0)
	}
	return s
}

// fieldID reads the rest of a field header h (a delta, or a zigzag i16
// after it) given the previous field's id.
func (w *walker) fieldID(h byte, prev int16) (int16, error) {
	if delta := int16(h >> 4); delta != 0 {
		return prev + delta, nil
	}
	v, err := w.varint()
	if err != nil {
		return 0, err
	}
	return int16(v>>1) ^ -int16(v&1), nil // zigzag, truncated to 16 bits as Thrift does
}

// schemaStats is what Cost needs of a schema tree.
type schemaStats struct {
	leaves uint64
	// paths is the cost of the leaves' paths (costPathByte, costLevel).
	paths uint64
}

// schema walks FileMetaData.schema, a list of SchemaElement whose list
// header starts at w.off, as arrow-go's schema.FromParquet reads it: the
// first element is the root, and each element declaring num_children
// above 0 is a group whose children are the elements after it, depth
// first. FromParquet makes each group's slice of children at the
// declared count before reading them (a root declaring 2^26 children in
// an 18-byte footer made it allocate 1 GiB) and ignores elements after
// the root's tree; the walk refuses a count beyond the elements left, a
// negative one, a tree nesting past MaxSchemaDepth, a tree that needs
// more elements than the list holds, and elements after it.
func (w *walker) schema() (schemaStats, error) {
	var st schemaStats
	at := w.off
	_, n, err := w.listHeader()
	if err != nil {
		return st, err
	}
	// remaining[d] is the children group d (0 the root) has yet to
	// read; prefix[d] the bytes of the path of its children's names
	// before their own (the root names no path).
	var remaining [MaxSchemaDepth]uint64
	var prefix [MaxSchemaDepth + 1]uint64
	depth := 0
	for i := range n {
		if i > 0 && depth == 0 {
			return st, fmt.Errorf("schema at byte %d: the root's tree ends at element %d of %d", at, i, n)
		}
		nameLen, children, err := w.schemaElement()
		if err != nil {
			return st, err
		}
		if children < 0 {
			return st, fmt.Errorf("schema element %d declares %d children", i, children)
		}
		if i > 0 {
			remaining[depth-1]--
		}
		if c := uint64(children); c > 0 {
			if c > n-i-1 {
				return st, fmt.Errorf("schema element %d declares %d children, %d elements follow", i, c, n-i-1)
			}
			if depth == MaxSchemaDepth {
				return st, fmt.Errorf("schema element %d nests deeper than %d groups", i, MaxSchemaDepth)
			}
			remaining[depth] = c
			if i > 0 {
				prefix[depth+1] = prefix[depth] + nameLen + 1
			}
			depth++
			continue
		}
		if i > 0 {
			// A leaf: its path names its depth-1 groups below the root
			// and itself.
			st.leaves++
			st.paths = satAdd(st.paths, costPathByte*(prefix[depth]+nameLen)+costLevel*uint64(depth))
		}
		for depth > 0 && remaining[depth-1] == 0 {
			depth--
		}
	}
	if depth > 0 {
		return st, fmt.Errorf("schema at byte %d: its groups declare %d more children than its %d elements", at, remaining[depth-1], n)
	}
	return st, nil
}

// schemaElement walks one SchemaElement and returns the length of its
// name (field 4) and its num_children (field 5, 0 when absent), the last
// of each given with the IDL's type, as Thrift reads them; fields of
// another type arrow-go skips.
func (w *walker) schemaElement() (nameLen uint64, children int32, err error) {
	var id int16
	for {
		h, err := w.byte()
		if err != nil {
			return 0, 0, err
		}
		t := h & 0x0f
		if t == typeStop {
			return nameLen, children, nil
		}
		if id, err = w.fieldID(h, id); err != nil {
			return 0, 0, err
		}
		switch {
		case id == 4 && t == typeBinary:
			if nameLen, err = w.varint(); err != nil {
				return 0, 0, err
			}
			if err := w.skip(nameLen, "binary value"); err != nil {
				return 0, 0, err
			}
		case id == 5 && t == typeI32:
			v, err := w.varint()
			if err != nil {
				return 0, 0, err
			}
			u := uint32(v) // Thrift truncates to 32 bits, then unzigzags
			children = int32(u>>1) ^ -int32(u&1)
		default:
			if err := w.value(t, 3); err != nil {
				return 0, 0, err
			}
		}
	}
}
