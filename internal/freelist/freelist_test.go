package freelist

import (
	"testing"
	"unsafe"
)

func TestBounded(t *testing.T) {
	l := New[int](2)
	if _, ok := l.Get(); ok {
		t.Fatal("Get on an empty list returned a value")
	}
	if !l.Put(1) || !l.Put(2) {
		t.Fatal("Put on a list with room reported a drop")
	}
	if l.Put(3) { // dropped: the list keeps at most 2
		t.Fatal("Put on a full list reported 3 kept")
	}
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

func TestAllocatorReusesZeroedBuffers(t *testing.T) {
	a := NewAllocator(2, 1<<20)
	b := a.Allocate(1000)
	for i := range b {
		b[i] = 0xff
	}
	if uintptr(unsafe.Pointer(&b[0]))%64 != 0 {
		t.Fatal("buffer is not 64-byte aligned")
	}
	a.Free(b)
	c := a.Allocate(900)
	if &c[0] != &b[0] {
		t.Fatal("a released buffer large enough was not reused")
	}
	for i, v := range c {
		if v != 0 {
			t.Fatalf("reused buffer byte %d = %#x, want 0", i, v)
		}
	}
	c[0], c[899] = 7, 9
	d := a.Reallocate(5000, c) // grows: contents kept, the rest zero
	if d[0] != 7 || d[899] != 9 || d[900] != 0 || d[4999] != 0 || len(d) != 5000 {
		t.Fatalf("Reallocate lost contents or did not zero: %v %v %v %v", d[0], d[899], d[900], d[4999])
	}
	defer func() {
		if recover() == nil {
			t.Fatal("an allocation above the cap did not panic")
		}
	}()
	a.Allocate(1<<20 + 1)
}
