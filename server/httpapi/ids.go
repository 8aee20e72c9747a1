package httpapi

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// The ids of reservations and leases are signed at this edge: an id is
// "<prefix><payload>.<tag>", the payload base64url JSON of what the
// service made (the store's reservation ID, each key, its limit, the
// units held and, for a durable quota, the window; or a lease and the
// request that acquired it), and the tag HMAC-SHA256, under the API's id
// key, of the prefix, the payload and the identity of the caller that
// made it (transport.Auth.Identity), which the id does not carry. So an
// id cannot be forged or altered, and one caller's id is no id for
// another: either answers 404 and changes nothing. Any instance with the
// same keys settles an id (no shared table); the keys rotate (the first
// signs, every one verifies). An Idempotency-Key is scoped the same way:
// the store's reservation ID is an HMAC of the caller's identity and the
// key, neither global nor guessable.

// MinIDKeyLen is the shortest id key: 32 bytes (`openssl rand -hex 32`
// gives 64).
const MinIDKeyLen = 32

// The prefixes of the signed ids. The unsigned "r1." and "l1." ids of
// earlier versions are refused (404).
const (
	reservationPrefix = "r2."
	leasePrefix       = "l2."
)

// LoadIDKeys reads an id key file: one key per line (blank lines and
// lines starting with # ignored), each at least MinIDKeyLen bytes, the
// first the one that signs. An error names the file and line.
func LoadIDKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("id key file: %w", err)
	}
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		k := strings.TrimSpace(sc.Text())
		switch {
		case k == "" || strings.HasPrefix(k, "#"):
			continue
		case len(k) < MinIDKeyLen:
			return nil, fmt.Errorf("id key file %s:%d: a key of %d bytes, want at least %d", path, line, len(k), MinIDKeyLen)
		}
		keys = append(keys, []byte(k))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("id key file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("id key file %s: no key in it", path)
	}
	return keys, nil
}

// signer signs and opens ids under its keys: keys[0] signs.
type signer struct {
	keys [][]byte
}

// newSigner checks keys; none is a random key of this process.
func newSigner(keys [][]byte) (*signer, error) {
	if len(keys) == 0 {
		k := make([]byte, MinIDKeyLen)
		_, _ = rand.Read(k) // crypto/rand.Read never fails (Go 1.24+).
		return &signer{keys: [][]byte{k}}, nil
	}
	s := &signer{}
	for i, k := range keys {
		if len(k) < MinIDKeyLen {
			return nil, fmt.Errorf("httpapi: id key %d: %d bytes, want at least %d", i, len(k), MinIDKeyLen)
		}
		s.keys = append(s.keys, bytes.Clone(k))
	}
	return s, nil
}

// tag is the HMAC of prefix, payload and caller under key.
func tag(key []byte, prefix, payload, caller string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(prefix))
	m.Write([]byte(payload))
	m.Write([]byte{0})
	m.Write([]byte(caller))
	return m.Sum(nil)
}

// seal is the id of v made for caller: prefix, v in JSON, base64url, a
// dot and the tag; at most maxTokenLen bytes. what names the thing for
// an error ("reservation").
func (s *signer) seal(prefix, what, caller string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString(b)
	id := prefix + payload + "." + base64.RawURLEncoding.EncodeToString(tag(s.keys[0], prefix, payload, caller))
	if len(id) > maxTokenLen {
		return "", invalid("key", "the keys of the %s make an id of %d bytes, more than the %d allowed", what, len(id), maxTokenLen)
	}
	return id, nil
}

// open reads into v an id that seal made for caller under any of the
// keys. Anything else (another form, a bad tag, another caller's id) is
// a 404, as an id that names nothing, and tells nothing of why.
func (s *signer) open(prefix, what, caller, id string, v any) error {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(id) > maxTokenLen {
		return badToken(what)
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return badToken(what)
	}
	// Strict: an id has one spelling, so an altered one never opens.
	got, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil {
		return badToken(what)
	}
	valid := false
	for _, k := range s.keys {
		valid = hmac.Equal(got, tag(k, prefix, payload, caller)) || valid
	}
	if !valid {
		return badToken(what)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(payload)
	if err != nil {
		return badToken(what)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return badToken(what)
	}
	return nil
}

// idempotencyID is the store's reservation ID for caller's
// Idempotency-Key key: 128 bits of an HMAC under the signing key, in hex.
func (s *signer) idempotencyID(caller, key string) string {
	m := hmac.New(sha256.New, s.keys[0])
	m.Write([]byte("idempotency-key\x00"))
	m.Write([]byte(caller))
	m.Write([]byte{0})
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// errUnknownID is the cause of every id that does not open.
var errUnknownID = errors.New("no such id")

func badToken(what string) error {
	return &httpError{status: http.StatusNotFound, field: "id", msg: "not a " + what + " id of this caller: " + errUnknownID.Error()}
}

// caller is the identity of r's caller (transport.Auth.Identity): ""
// without tokens.
func (s *API) caller(r *http.Request) string {
	return s.auth.Identity(r.Header.Get("Authorization"))
}
