package s3

import (
	"crypto/sha256"
	"errors"
	"hash"
	"io"
)

// pieceMax is the largest piece a partBuf allocates at once, and
// pieceMin the first piece of a body of unknown size.
const (
	pieceMax = 1 << 20
	pieceMin = 64 << 10
)

// partBuf holds one part of a Put body, at most limit bytes, in pieces
// allocated as the bytes arrive: the first small (the size hint, when
// there is one), each next twice the last up to pieceMax. A small body
// costs about its size and a large one a part, and no piece is copied
// into a larger one as the body grows (io.ReadAll's growing slice, and a
// second buffer for the parts, held 32–48 MiB per upload of unknown
// length at the default 16 MiB threshold). A multipart upload fills it
// again for every part, reusing its pieces.
type partBuf struct {
	limit  int64
	first  int
	pieces [][]byte
	n      int64 // bytes held
}

// newPartBuf returns an empty partBuf of at most limit bytes for a body
// of sizeHint bytes (0: unknown).
func newPartBuf(limit, sizeHint int64) *partBuf {
	first := pieceMin
	if sizeHint > 0 {
		// One byte more, to meet the end without another piece.
		first = int(min(sizeHint+1, pieceMax))
	}
	return &partBuf{limit: limit, first: first}
}

// fill replaces the bytes held by the next ones of r, up to limit, and
// reports whether r ended (io.EOF) before the buffer was full; any other
// error of r's, io.ErrUnexpectedEOF included, is returned.
func (p *partBuf) fill(r io.Reader) (ended bool, err error) {
	p.n = 0
	held := int64(0) // the pieces' capacity so far
	for i := 0; p.n < p.limit; i++ {
		if i == len(p.pieces) {
			size := int64(p.first)
			if i > 0 {
				size = min(2*int64(len(p.pieces[i-1])), pieceMax)
			}
			p.pieces = append(p.pieces, make([]byte, min(size, p.limit-held)))
		}
		held += int64(len(p.pieces[i]))
		m, err := readFull(r, p.pieces[i])
		p.n += int64(m)
		switch {
		case err == io.EOF:
			return true, nil
		case err != nil:
			return false, err
		}
	}
	return false, nil
}

// readFull is io.ReadFull but that it returns io.EOF whenever r ends
// before buf is full, and r's own errors as they are: io.ReadFull's
// io.ErrUnexpectedEOF for a short read cannot be told from a reader's
// own (a net/http body or a gzip stream cut short), and taking that for
// the end stored the bytes before it as the whole object.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// sum returns the sha256 of the bytes held and writes them to also, if
// not nil.
func (p *partBuf) sum(also hash.Hash) [32]byte {
	h := sha256.New()
	left := p.n
	for _, pc := range p.pieces {
		if left == 0 {
			break
		}
		b := pc[:min(int64(len(pc)), left)]
		h.Write(b)
		if also != nil {
			also.Write(b)
		}
		left -= int64(len(b))
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// reader returns the bytes held as a request body; the SDK seeks it back
// to its start to send it again.
func (p *partBuf) reader() io.ReadSeeker { return &pieceReader{p: p} }

type pieceReader struct {
	p   *partBuf
	off int64
}

func (r *pieceReader) Read(b []byte) (int, error) {
	if r.off >= r.p.n {
		return 0, io.EOF
	}
	base := int64(0)
	for _, pc := range r.p.pieces {
		end := base + int64(len(pc))
		if r.off < end {
			n := copy(b, pc[r.off-base:min(end, r.p.n)-base])
			r.off += int64(n)
			return n, nil
		}
		base = end
	}
	return 0, io.EOF
}

func (r *pieceReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.off
	case io.SeekEnd:
		offset += r.p.n
	default:
		return 0, errors.New("s3: part body: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("s3: part body: negative position")
	}
	r.off = offset
	return offset, nil
}
