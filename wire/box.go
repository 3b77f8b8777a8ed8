package wire

import "unsafe"

// Token and score lists are the bulk of tensor-free payloads (the seed's
// prompt_token_ids). Boxing each int64 or float64 into an interface costs
// one allocation per element; instead a list's numbers live in one slab it
// owns, and each interface points at its element.
//
// Sound: an interface holding an int64/float64 is (its type word, pointer to the value); the
// slab escapes to the heap, interior pointers keep it alive, no boxed element is written again.

type eface struct {
	typ  unsafe.Pointer
	data unsafe.Pointer
}

func typeWord(v any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&v)).typ }

var (
	int64Type   = typeWord(int64(0))
	float64Type = typeWord(float64(0))
)

// slab hands out stable element pointers: it is made with the capacity of
// the rest of the list and never grows.
type slab[T int64 | float64] struct{ s []T }

func (b *slab[T]) box(v T, remaining int, typ unsafe.Pointer) any {
	if b.s == nil {
		b.s = make([]T, 0, remaining)
	}
	b.s = append(b.s, v)
	e := eface{typ: typ, data: unsafe.Pointer(&b.s[len(b.s)-1])}
	return *(*any)(unsafe.Pointer(&e))
}
