// Package sha256x2 computes SHA-256 digests of two messages at once. On
// amd64 with the SHA extensions it runs the two messages' rounds
// interleaved, a group of four rounds of one, then of the other, so that
// the two dependency chains overlap in the core: a single message leaves
// most of the SHA unit idle, waiting on each round's result. Elsewhere it
// is crypto/sha256 twice.
//
// The digests are exactly crypto/sha256's (the tests compare them over
// every length up to several blocks and random pairs); only the speed
// differs: in BenchmarkPair, a pair of 120-byte messages (a tuple
// encoding) takes 330 ns against 700 for two crypto/sha256.Sum256 calls,
// and 900-byte ones (a text record) 1,360 against 1,860. The block
// functions are generated (gen.py) from the standard library's SHA-NI
// code, so the rounds are Go's own.
package sha256x2

//go:generate sh -c "python3 gen.py $(go env GOROOT) > block_amd64.s"

import (
	"crypto/sha256"
	"encoding/binary"
)

// Size is the size of a digest in bytes.
const Size = sha256.Size

var iv = [8]uint32{
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
}

// Sum2 returns the SHA-256 digests of a and b.
func Sum2(a, b []byte) (da, db [Size]byte) {
	if !useSHANI {
		return sha256.Sum256(a), sha256.Sum256(b)
	}
	var d [2][Size]byte
	m := [2][]byte{a, b}
	SumMany(d[:], m[:])
	return d[0], d[1]
}

// SumMany sets dst[i] to the SHA-256 digest of msgs[i]. It keeps both
// lanes busy: a lane whose message ends takes the next one, so messages
// of unequal lengths are still hashed two at a time, and only the end of
// the last one runs alone. dst must be at least as long as msgs.
func SumMany[B ~[]byte](dst [][Size]byte, msgs []B) {
	if !useSHANI {
		for i, m := range msgs {
			dst[i] = sha256.Sum256(m)
		}
		return
	}
	dst = dst[:len(msgs)]
	var lanes [2]stream
	var idx [2]int // the message each lane hashes, -1 for none
	next := 0
	take := func(k int) {
		idx[k] = -1
		if next < len(msgs) {
			lanes[k].init(msgs[next])
			idx[k] = next
			next++
		}
	}
	take(0)
	take(1)
	for {
		var p [2][]byte
		var n [2]int
		for k := range lanes {
			for idx[k] >= 0 {
				if p[k], n[k] = lanes[k].next(); n[k] > 0 {
					break
				}
				// Lane k's message is done: take the next.
				dst[idx[k]] = lanes[k].sum()
				take(k)
			}
		}
		switch {
		case idx[0] < 0 && idx[1] < 0:
			return
		case idx[0] < 0:
			block1(&lanes[1].h, &p[1][0], n[1])
			lanes[1].done(n[1])
		case idx[1] < 0:
			block1(&lanes[0].h, &p[0][0], n[0])
			lanes[0].done(n[0])
		default:
			m := min(n[0], n[1])
			block2(&lanes[0].h, &lanes[1].h, &p[0][0], &p[1][0], m)
			lanes[0].done(m)
			lanes[1].done(m)
		}
	}
}

// Sum returns the SHA-256 digest of p, as crypto/sha256.Sum256 does.
func Sum(p []byte) [Size]byte { return sha256.Sum256(p) }

// stream is one message's blocks: the whole blocks of the message, then
// one or two padded tail blocks.
type stream struct {
	h    [8]uint32
	msg  []byte // whole blocks not yet hashed
	tail [128]byte
	tn   int // bytes of tail left to hash (0, 64 or 128)
	toff int
}

func (s *stream) init(p []byte) {
	s.h, s.toff = iv, 0
	clear(s.tail[:])
	full := len(p) &^ 63
	s.msg = p[:full]
	r := copy(s.tail[:], p[full:])
	s.tail[r] = 0x80
	s.tn = 64
	if r >= 56 {
		s.tn = 128
	}
	binary.BigEndian.PutUint64(s.tail[s.tn-8:], uint64(len(p))<<3)
}

// next returns the next run of contiguous blocks and their count.
func (s *stream) next() ([]byte, int) {
	if len(s.msg) > 0 {
		return s.msg, len(s.msg) >> 6
	}
	if s.tn > s.toff {
		return s.tail[s.toff:s.tn], (s.tn - s.toff) >> 6
	}
	return nil, 0
}

// done records n blocks of the current run as hashed.
func (s *stream) done(n int) {
	if len(s.msg) > 0 {
		s.msg = s.msg[n<<6:]
		return
	}
	s.toff += n << 6
}

func (s *stream) sum() (d [Size]byte) {
	for i, v := range s.h {
		binary.BigEndian.PutUint32(d[i*4:], v)
	}
	return d
}
