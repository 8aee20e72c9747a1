package redisstore

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

func TestEncodeSubject(t *testing.T) {
	long := strings.Repeat("x", maxSubjectLen+1)
	for _, tc := range []struct{ subject, want string }{
		{"user:42", "user:42"},
		{"{evil}", "%7Bevil%7D"},
		{"a}b{c", "a%7Db%7Bc"},
		{"100%", "100%25"},
		{"#tag", "%23tag"},
		{"%7B", "%257B"},
		{"\x00\xff é", "\x00\xff é"},
		{strings.Repeat("x", maxSubjectLen), strings.Repeat("x", maxSubjectLen)},
		// python3: base64.urlsafe_b64encode(sha256(b"x"*129).digest()).rstrip(b"=")
		{long, "#DsnrM-dFELzdHy6lUgboLyFknFwr7L8rQz60dbNMAb0"},
	} {
		if got := encodeSubject(tc.subject); got != tc.want {
			t.Errorf("encodeSubject(%.40q) = %q, want %q", tc.subject, got, tc.want)
		}
	}
}

// TestEncodeSubjectInjective checks on random subjects over a small
// alphabet full of the escaped bytes that distinct subjects never share an
// encoding, and that no encoding holds a brace.
func TestEncodeSubjectInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "%{}#7BDa2:"
	seen := make(map[string]string)
	for range 200_000 {
		n := 1 + rng.IntN(8)
		if rng.IntN(100) == 0 {
			n = maxSubjectLen - 2 + rng.IntN(5)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		s := string(b)
		enc := encodeSubject(s)
		if strings.ContainsAny(enc, "{}") {
			t.Fatalf("encodeSubject(%q) = %q holds a brace", s, enc)
		}
		if prev, ok := seen[enc]; ok && prev != s {
			t.Fatalf("encodeSubject(%q) = encodeSubject(%q) = %q", s, prev, enc)
		}
		seen[enc] = s
	}
}

func TestKeySchema(t *testing.T) {
	lim := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second}
	if got, want := redisKey("fg", lim.Algorithm, lim.Period, "{evil}"), "fg:v1:gcra:1000000:{%7Bevil%7D}"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
	if got, want := redisKey("fg", "", time.Minute, "u"), "fg:v1:fixed_window:60000000:{u}"; got != want {
		t.Errorf("key = %q, want %q", got, want)
	}
	// The hash tag of every key is the encoded subject, whatever the
	// subject holds.
	for _, subject := range []string{"{evil}", "}{", "a{b}c", "{}", strings.Repeat("{", 500)} {
		k := redisKey("fg", floodgate.FixedWindow, time.Second, subject)
		if got, want := hashTag(k), encodeSubject(subject); got != want {
			t.Errorf("hash tag of %.60q is %.60q, want %.60q", k, got, want)
		}
		if got, want := keySlot(k), keySlot(encodeSubject(subject)); got != want {
			t.Errorf("slot of %.60q is %d, want %d (the slot of its encoded subject)", k, got, want)
		}
	}
}

func TestKeySlotKnownValues(t *testing.T) {
	// Values from CLUSTER KEYSLOT; TestClusterKeySlot compares with a live
	// cluster too.
	for key, want := range map[string]uint16{"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "123456789": 12739} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// FuzzRedisKey checks the key schema on pairs of inputs: the Cluster hash
// slot of a key is the slot of its subject's tag, whatever the prefix,
// algorithm and period (so every key of one subject is in one slot, which
// a batch needs), the tag holds no brace, and two different inputs
// (prefix, algorithm, period, subject) never share a key.
func FuzzRedisKey(f *testing.F) {
	f.Add("floodgate", uint8(0), int64(1_000_000), "user:42", "floodgate", uint8(4), int64(60_000_000), "user:42")
	f.Add("fg", uint8(1), int64(1), "{evil}", "fg", uint8(1), int64(1), "%7Bevil%7D")
	f.Add("a:v1:gcra:1", uint8(2), int64(5), "x", "a", uint8(4), int64(1), "x")
	f.Add("p", uint8(3), int64(7), "#tag", "p", uint8(3), int64(7), "%23tag")
	f.Add("p", uint8(5), int64(1<<48), strings.Repeat("}", maxSubjectLen+1), "p", uint8(5), int64(1<<48), strings.Repeat("}", maxSubjectLen))
	f.Add("", uint8(0), int64(1), "a}b{c", "", uint8(0), int64(10), "a}b{c")
	f.Fuzz(func(t *testing.T, prefix1 string, alg1 uint8, period1 int64, subject1, prefix2 string, alg2 uint8, period2 int64, subject2 string) {
		type input struct {
			prefix  string
			alg     floodgate.Algorithm
			period  time.Duration
			subject string
		}
		valid := func(prefix string, alg uint8, period int64, subject string) (input, bool) {
			// The store refuses a prefix with a brace and an empty
			// subject; a period is 1 µs to MaxPeriod.
			if strings.ContainsAny(prefix, "{}") || subject == "" || len(subject) > floodgate.MaxKeyLen {
				return input{}, false
			}
			if prefix == "" {
				prefix = DefaultPrefix
			}
			period = 1 + (period&(1<<62-1))%int64(floodgate.MaxPeriod/time.Microsecond)
			return input{prefix, floodgate.Algorithms[int(alg)%len(floodgate.Algorithms)], time.Duration(period) * time.Microsecond, subject}, true
		}
		a, ok1 := valid(prefix1, alg1, period1, subject1)
		b, ok2 := valid(prefix2, alg2, period2, subject2)
		if !ok1 || !ok2 {
			t.Skip()
		}
		ka, kb := redisKey(a.prefix, a.alg, a.period, a.subject), redisKey(b.prefix, b.alg, b.period, b.subject)
		for _, x := range []struct {
			in  input
			key string
		}{{a, ka}, {b, kb}} {
			tag := encodeSubject(x.in.subject)
			if strings.ContainsAny(tag, "{}") {
				t.Fatalf("the tag of %.60q holds a brace: %.60q", x.in.subject, tag)
			}
			if got := hashTag(x.key); got != tag {
				t.Fatalf("key %.80q hashes %.60q, want the tag %.60q", x.key, got, tag)
			}
			// Another prefix, algorithm and period: the same slot.
			other := redisKey(DefaultPrefix+":other", floodgate.Concurrency, time.Hour, x.in.subject)
			if got, want := keySlot(x.key), keySlot(other); got != want {
				t.Fatalf("%.60q: slot %d under %s/%v, %d under concurrency/1h", x.in.subject, got, x.in.alg, x.in.period, want)
			}
		}
		if (a == b) != (ka == kb) {
			t.Fatalf("inputs %+.60v and %+.60v: keys %.80q and %.80q", a, b, ka, kb)
		}
		if a.subject != b.subject && encodeSubject(a.subject) == encodeSubject(b.subject) {
			t.Fatalf("subjects %.60q and %.60q share the tag %.60q", a.subject, b.subject, encodeSubject(a.subject))
		}
	})
}
