package redisstore

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// maxSubjectLen is the longest subject (Request.Key) kept in a Redis key as
// it is; a longer one is replaced by its SHA-256.
const maxSubjectLen = 128

// DefaultPrefix is the prefix of every key when Options.Prefix is empty.
const DefaultPrefix = "floodgate"

// keyVersion is the version of the state layout in every key: a change of
// layout changes it, so new code never misreads old state.
const keyVersion = "v1"

// redisKey is the key that holds the state of subject under a limit of
// algorithm alg and the given period:
//
//	<prefix>:v1:<algorithm>:<period in µs>:{<encoded subject>}
func redisKey(prefix string, alg floodgate.Algorithm, period time.Duration, subject string) string {
	// Formatted on the stack: the key is the only allocation.
	var buf [20]byte
	return keyOf(prefix, alg, strconv.AppendInt(buf[:0], int64(period/time.Microsecond), 10), subject)
}

// calendarKey is the key of subject under a calendar limit of unit:
//
//	<prefix>:v1:fixed_window:<unit>:{<encoded subject>}
//
// The unit (day, week, month, year) is never a number, so no aligned
// limit's key is one, and its state ("<start>:<count>:<next>") is never
// read by one. The zone and anchor are not in the key: a state records
// where its window ends, so a change of them takes effect at the end of
// the current window, as a change of the limit does.
func calendarKey(prefix string, unit floodgate.CalendarUnit, subject string) string {
	return keyOf(prefix, floodgate.FixedWindow, []byte(unit), subject)
}

// counted reports whether limit keeps its state as counters per window
// (see fixed_window.lua): an aligned or calendar fixed window.
func counted(limit floodgate.Limit) bool {
	return limit.EffectiveAlgorithm() == floodgate.FixedWindow && !limit.Params().FirstHit
}

// stateKey is the key that holds the state of a limit whose key
// (Store.Key) is key. A fixed or sliding window keeps its state in keys
// named after its key, which holds only what a version before them wrote
// (layout 1, read during a rolling upgrade: see fixed_window.lua and
// sliding_window.lua):
//
//	<key>:w  an aligned or calendar fixed window, or a sliding window: a
//	         hash of one counter per window, the field named by the
//	         window's start in µs
//	<key>:f  a first-hit window: the string "<start>:<count>"
//
// The suffixes are after the hash tag, so the keys are in key's slot.
func stateKey(key string, limit floodgate.Limit) string {
	switch {
	case counted(limit), limit.EffectiveAlgorithm() == floodgate.SlidingWindow:
		return key + ":w"
	case limit.EffectiveAlgorithm() == floodgate.FixedWindow:
		return key + ":f"
	}
	return key
}

func keyOf(prefix string, alg floodgate.Algorithm, period []byte, subject string) string {
	if alg == "" {
		alg = floodgate.FixedWindow
	}
	enc := encodeSubject(subject)
	var b strings.Builder
	b.Grow(len(prefix) + len(alg) + len(enc) + 32)
	b.WriteString(prefix)
	b.WriteString(":" + keyVersion + ":")
	b.WriteString(string(alg))
	b.WriteByte(':')
	b.Write(period)
	b.WriteString(":{")
	b.WriteString(enc)
	b.WriteByte('}')
	return b.String()
}

// encodeSubject is the hash tag of a subject's keys: the subject with every
// '%', '{', '}' and '#' percent-escaped ("%25", "%7B", "%7D", "%23"), or,
// for a subject longer than 128 bytes, '#' followed by the unpadded
// base64url SHA-256 of the subject. The encoding is injective: no two
// subjects share a tag, since an escaped subject never contains '#'. The tag
// never contains a brace, so Redis Cluster hashes exactly the tag: every key
// of a subject is in one slot, whatever the subject holds.
func encodeSubject(subject string) string {
	if len(subject) > maxSubjectLen {
		sum := sha256.Sum256([]byte(subject))
		return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	n := 0
	for i := 0; i < len(subject); i++ {
		switch subject[i] {
		case '%', '{', '}', '#':
			n++
		}
	}
	if n == 0 {
		return subject
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(subject)+2*n)
	for i := 0; i < len(subject); i++ {
		switch c := subject[i]; c {
		case '%', '{', '}', '#':
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// hashTag is the part of key Redis Cluster hashes: between the first '{'
// and the first '}' after it, if not empty; else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// keySlot is Redis Cluster's HASH_SLOT: CRC16 (XMODEM) of the hash tag,
// modulo 16384.
func keySlot(key string) uint16 {
	var crc uint16
	for _, b := range []byte(hashTag(key)) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
