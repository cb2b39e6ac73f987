package manifest

import (
	"math"
	"testing"
)

// AddFigure sums figures that fit and refuses, leaving a as it was, a
// sum past the type's largest value or a negative figure.
func TestAddFigure(t *testing.T) {
	for _, c := range []struct {
		a, b, sum int64
		ok        bool
	}{
		{0, 0, 0, true},
		{2, 3, 5, true},
		{math.MaxInt64 - 1, 1, math.MaxInt64, true},
		{math.MaxInt64, 1, math.MaxInt64, false},
		{1 << 62, 1 << 62, 1 << 62, false},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, false},
		{5, -1, 5, false},
		{-1, 5, -1, false},
	} {
		if sum, ok := AddFigure(c.a, c.b); sum != c.sum || ok != c.ok {
			t.Errorf("AddFigure(%d, %d) = %d, %v; want %d, %v", c.a, c.b, sum, ok, c.sum, c.ok)
		}
	}
	if sum, ok := AddFigure(math.MaxInt, 1); ok || sum != math.MaxInt {
		t.Errorf("AddFigure(MaxInt, 1) = %d, %v; want MaxInt, false", sum, ok)
	}
}
