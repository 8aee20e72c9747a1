package redisstore

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// FuzzDifferential is TestDifferential driven by the fuzzer: the fuzz
// input is the randomness of a differ (the limits of the sequence, each
// request's cost, lease and time step, batches, the clock going back), so
// that coverage-guided mutation steers the sequences. Each input runs 40
// steps against memstore and redisstore with explicit times on a shared
// fake timeline and requires identical decisions. One redis-server serves
// the whole fuzzing process.
//
//	go test -run '^$' -fuzz '^FuzzDifferential$' -fuzztime 10m ./store/redisstore/
func FuzzDifferential(f *testing.F) {
	for i := range len(floodgate.Algorithms) + 1 {
		f.Add(uint8(i), []byte{})
		f.Add(uint8(i), []byte("\x01\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f"))
	}
	addr := standaloneAddr(f)
	c := newRueidis(f, addr)
	prefix := testPrefix(f)
	checkTTLsAtEnd(f, c, prefix)
	rs, err := New(c, &Options{Prefix: prefix})
	if err != nil {
		f.Fatal(err)
	}
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, alg uint8, entropy []byte) {
		cases := append([]floodgate.Algorithm{}, floodgate.Algorithms...)
		cases = append(cases, "mixed")
		a := cases[int(alg)%len(cases)]
		d := &differ{t: t, rng: rand.New(newByteSource(entropy)), redis: rs, inspect: c,
			key: fmt.Sprintf("fuzz/%s/%d", a, seq.Add(1))}
		d.run(a, 40)
	})
}

// byteSource is a rand.Source that returns the fuzz input, eight bytes at
// a time, and then a PCG seeded by a hash of the input, so that every
// loop drawing numbers until they fit still ends.
type byteSource struct {
	data []byte
	rest *rand.PCG
}

func newByteSource(data []byte) *byteSource {
	h := fnv.New64a()
	h.Write(data)
	return &byteSource{data: data, rest: rand.NewPCG(h.Sum64(), uint64(len(data)))}
}

func (s *byteSource) Uint64() uint64 {
	if len(s.data) == 0 {
		return s.rest.Uint64()
	}
	var b [8]byte
	n := copy(b[:], s.data)
	s.data = s.data[n:]
	return binary.LittleEndian.Uint64(b[:])
}
