package freelist

import "testing"

func TestBounded(t *testing.T) {
	l := New[int](2)
	if _, ok := l.Get(); ok {
		t.Fatal("Get on an empty list returned a value")
	}
	l.Put(1)
	l.Put(2)
	l.Put(3) // dropped: the list keeps at most 2
	got := map[int]bool{}
	for {
		v, ok := l.Get()
		if !ok {
			break
		}
		got[v] = true
	}
	if len(got) != 2 || !got[1] || !got[2] {
		t.Fatalf("list returned %v, want exactly {1, 2}", got)
	}
}
