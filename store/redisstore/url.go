package redisstore

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// ErrBadURL is wrapped by every error of Open about its URL. The message
// names the part of the URL at fault and never repeats the password.
var ErrBadURL = errors.New("redisstore: bad Redis URL")

// ErrClientCertificate is wrapped by Open's error when the server asked
// for a TLS client certificate and none was configured (Options.TLS).
var ErrClientCertificate = errors.New("the server asked for a TLS client certificate, and none was configured")

// topology is the kind of deployment a URL names.
type topology string

const (
	standalone topology = "standalone"
	sentinel   topology = "sentinel"
	cluster    topology = "cluster"
)

// urlConfig is a parsed Redis URL.
type urlConfig struct {
	Topology         topology
	TLS              bool
	Addrs            []string // host:port, at least one
	Username         string
	Password         string
	DB               int
	Master           string // sentinel only
	SentinelUsername string
	SentinelPassword string
	DialTimeout      time.Duration
	// ConnTimeout is rueidis's ConnWriteTimeout: how long a connection
	// may go without an answer it waits for before it is closed.
	ConnTimeout time.Duration

	dbInPath bool
}

// schemes maps each URL scheme to its topology and TLS.
var schemes = map[string]struct {
	topology topology
	tls      bool
}{
	"redis":           {standalone, false},
	"rediss":          {standalone, true},
	"redis-sentinel":  {sentinel, false},
	"rediss-sentinel": {sentinel, true},
	"redis-cluster":   {cluster, false},
	"rediss-cluster":  {cluster, true},
}

// query parameters each topology accepts.
var queryParams = map[topology][]string{
	standalone: {"db", "dial_timeout", "conn_timeout"},
	sentinel:   {"db", "dial_timeout", "conn_timeout", "master", "sentinel_username", "sentinel_password"},
	cluster:    {"dial_timeout", "conn_timeout"},
}

func badURL(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadURL, fmt.Sprintf(format, args...))
}

// parseURL parses the URL forms of docs/redis.md.
func parseURL(raw string) (urlConfig, error) {
	var c urlConfig
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		// "redis:/host" or "redis:host": a scheme without its "//".
		if name, _, colon := strings.Cut(raw, ":"); colon {
			if _, known := schemes[strings.ToLower(name)]; known {
				return c, badURL("%q must be followed by \"://\" (%s://host:6379)", name+":", name)
			}
		}
		return c, badURL("no scheme (want redis://, rediss://, redis-sentinel:// or redis-cluster://)")
	}
	kind, ok := schemes[strings.ToLower(scheme)]
	if !ok {
		return c, badURL("unknown scheme %q (want redis, rediss, redis-sentinel, rediss-sentinel, redis-cluster or rediss-cluster)", scheme)
	}
	c.Topology, c.TLS = kind.topology, kind.tls
	if strings.ContainsRune(rest, '#') {
		return c, badURL("unexpected '#' (percent-encode it as %%23 in a password)")
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	hosts := authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		var err error
		if c.Username, c.Password, err = userinfo(authority[:i]); err != nil {
			return c, err
		}
		hosts = authority[i+1:]
	}
	defaultPort := "6379"
	if c.Topology == sentinel {
		defaultPort = "26379"
	}
	if hosts == "" {
		return c, badURL("no host")
	}
	for h := range strings.SplitSeq(hosts, ",") {
		addr, err := hostPort(h, defaultPort)
		if err != nil {
			return c, err
		}
		c.Addrs = append(c.Addrs, addr)
	}
	if c.Topology == standalone && len(c.Addrs) > 1 {
		return c, badURL("%s:// takes one host, not %d (use redis-cluster:// or redis-sentinel:// for several)", scheme, len(c.Addrs))
	}
	if err := c.parsePath(path); err != nil {
		return c, err
	}
	if err := c.parseQuery(rawQuery); err != nil {
		return c, err
	}
	if c.Topology == sentinel && c.Master == "" {
		return c, badURL("no master name (add /mastername or ?master=mastername)")
	}
	return c, nil
}

func userinfo(s string) (user, pass string, err error) {
	user, pass, _ = strings.Cut(s, ":")
	if user, err = url.PathUnescape(user); err != nil {
		return "", "", badURL("username: bad percent-encoding")
	}
	if pass, err = url.PathUnescape(pass); err != nil {
		return "", "", badURL("password: bad percent-encoding")
	}
	return user, pass, nil
}

// hostPort checks one "host", "host:port", "[v6]" or "[v6]:port" and adds
// the default port.
func hostPort(h, defaultPort string) (string, error) {
	host, port, colon := h, "", false
	switch {
	case strings.HasPrefix(h, "["):
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", badURL("host %q: no closing ']'", h)
		}
		host = h[1:end]
		switch after := h[end+1:]; {
		case after == "":
		case after[0] == ':':
			port, colon = after[1:], true
		default:
			return "", badURL("host %q: unexpected %q after ']'", h, after)
		}
		if !strings.Contains(host, ":") {
			return "", badURL("host %q: only IPv6 addresses go in brackets", h)
		}
	case strings.Count(h, ":") > 1:
		return "", badURL("host %q: put an IPv6 address in brackets: [::1]:6379", h)
	case strings.Contains(h, ":"):
		host, port, colon = strings.Cut(h, ":")
	}
	if host == "" {
		return "", badURL("empty host in %q", h)
	}
	for _, r := range host {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("/?#@,[]", r) {
			return "", badURL("host %q: unexpected %q", h, r)
		}
	}
	if port == "" && !colon {
		port = defaultPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] < '1' || port[0] > '9' {
		return "", badURL("host %q: port %q is not a number from 1 to 65535", h, port)
	}
	return net.JoinHostPort(host, port), nil
}

func (c *urlConfig) parsePath(path string) error {
	path = strings.TrimPrefix(path, "/")
	switch c.Topology {
	case standalone:
		if path == "" {
			return nil
		}
		db, err := parseDB(path)
		c.DB, c.dbInPath = db, true
		return err
	case sentinel:
		if strings.Contains(path, "/") {
			return badURL("path %q: want /mastername (and ?db=N for a database)", "/"+path)
		}
		master, err := url.PathUnescape(path)
		if err != nil {
			return badURL("master name: bad percent-encoding")
		}
		c.Master = master
		return nil
	default: // cluster
		if path != "" && path != "0" {
			return badURL("path %q: a Redis Cluster has only database 0", "/"+path)
		}
		return nil
	}
}

func parseDB(s string) (int, error) {
	db, err := strconv.Atoi(s)
	if err != nil || db < 0 || s[0] == '+' || (len(s) > 1 && s[0] == '0') {
		return 0, badURL("database %q is not a whole number of 0 or more (redis://host:6379/2 selects database 2)", s)
	}
	return db, nil
}

func (c *urlConfig) parseQuery(raw string) error {
	if raw == "" {
		return nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return badURL("query: bad encoding")
	}
	allowed := queryParams[c.Topology]
	for name, vals := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || a == name
		}
		if !ok {
			return badURL("unknown parameter %q for %s (want one of %s)", name, c.Topology, strings.Join(allowed, ", "))
		}
		if len(vals) != 1 {
			return badURL("parameter %q given %d times", name, len(vals))
		}
		v := vals[0]
		switch name {
		case "db":
			if c.dbInPath {
				return badURL("database given in both the path and ?db=")
			}
			if c.DB, err = parseDB(v); err != nil {
				return err
			}
		case "master":
			if c.Master != "" && c.Master != v {
				return badURL("master name given twice: in the path and in ?master=")
			}
			c.Master = v
		case "sentinel_username":
			c.SentinelUsername = v
		case "sentinel_password":
			c.SentinelPassword = v
		case "dial_timeout":
			if c.DialTimeout, err = time.ParseDuration(v); err != nil || c.DialTimeout <= 0 {
				return badURL("dial_timeout %q is not a positive duration such as 2s", v)
			}
		case "conn_timeout":
			if c.ConnTimeout, err = time.ParseDuration(v); err != nil || c.ConnTimeout <= 0 {
				return badURL("conn_timeout %q is not a positive duration such as 2s", v)
			}
		}
	}
	return nil
}

// DefaultConnTimeout is the default conn_timeout of a URL: a connection
// that has waited this long for an answer is closed, failing the calls in
// flight on it, and the next calls dial again. rueidis's own default is 10
// s (its keepalive times the Linux default of 9 probes, plus one), which
// after a network path that stopped delivering and came back (a
// blackholed route, a dropped NAT entry without a reset) left every call
// failing at its deadline for 11.5 s (TestFaultBlackhole). No script the
// store runs takes near 2 s, and a caller that waits that long has
// usually long given up, so 2 s only shortens that outage.
const DefaultConnTimeout = 2 * time.Second

// clientOption is the rueidis configuration of the URL. With TLS it speaks
// TLS with a clone of custom (Options.TLS), or with the default if custom
// is nil.
func (c urlConfig) clientOption(custom *tls.Config) rueidis.ClientOption {
	o := rueidis.ClientOption{
		InitAddress: c.Addrs,
		Username:    c.Username,
		Password:    c.Password,
		SelectDB:    c.DB,
		// The store never reads through the client-side cache: skip the
		// CLIENT TRACKING handshake, which some managed offerings refuse.
		DisableCache:      true,
		ForceSingleClient: c.Topology == standalone,
		// Every command goes through the connection's pipeline, even
		// alone on it: otherwise rueidis writes and reads a command that
		// finds its connection idle on the caller's goroutine, under a
		// socket deadline from the call's context, and closes the
		// connection when it passes, failing the calls sent on it
		// meanwhile and dialing again under the next call's deadline (on
		// a saturated host, a burst of failure-policy answers per late
		// reply). Pipelined, a passed deadline ends the wait for the
		// reply and the connection stays (TestDeadlineKeepsConnection).
		AlwaysPipelining: true,
	}
	o.Dialer.Timeout = c.DialTimeout
	o.ConnWriteTimeout = cmp.Or(c.ConnTimeout, DefaultConnTimeout)
	if c.TLS {
		o.TLSConfig = tlsConfig(custom)
	}
	if c.Topology == sentinel {
		o.Sentinel = rueidis.SentinelOption{
			MasterSet: c.Master,
			Username:  c.SentinelUsername,
			Password:  c.SentinelPassword,
		}
		o.Sentinel.Dialer.Timeout = c.DialTimeout
		if c.TLS {
			o.Sentinel.TLSConfig = tlsConfig(custom)
		}
	}
	return o
}

// tlsConfig returns a clone of custom, or the default configuration if
// custom is nil, with MinVersion TLS 1.2 if it was 0. ServerName stays as
// custom has it: empty, the TLS dialer takes it from each node's address
// (rueidis dials with a tls.Dialer and sets no ServerName of its own), so
// every node of a Cluster is verified by the name or IP address it is
// reached at.
func tlsConfig(custom *tls.Config) *tls.Config {
	conf := &tls.Config{}
	if custom != nil {
		conf = custom.Clone()
	}
	if conf.MinVersion == 0 {
		conf.MinVersion = tls.VersionTLS12
	}
	return conf
}

// watchCertRequests makes o's TLS configurations that have no client
// certificate record whether a server asks for one, and returns the
// record. A server that requires a certificate refuses a client without
// one after the TLS 1.3 handshake, which the client has already taken as
// done: its first write races the server's alert, and it often sees only
// "connection reset by peer", which says nothing of why. Open then adds
// that the server asked. Sending no certificate is what Go does anyway
// when it has none.
func watchCertRequests(o *rueidis.ClientOption) *atomic.Bool {
	asked := new(atomic.Bool)
	for _, conf := range []*tls.Config{o.TLSConfig, o.Sentinel.TLSConfig} {
		if conf == nil || len(conf.Certificates) > 0 || conf.GetClientCertificate != nil {
			continue
		}
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked.Store(true)
			return &tls.Certificate{}, nil
		}
	}
	return asked
}

// openError is Open's error for err, which the client returned, naming the
// deployment and, if asked is set, that a server asked for a client
// certificate that the client did not have. A server that only accepts
// one (tls-auth-clients optional) asks too, and then answers with a
// reply, such as WRONGPASS, that says itself what is wrong: the note is
// added to the errors that are not Redis replies.
func (c urlConfig) openError(err error, asked *atomic.Bool) error {
	if _, reply := rueidis.IsRedisErr(err); asked.Load() && !reply {
		return fmt.Errorf("redisstore: Open %s %v: %w (%w)", c.Topology, c.Addrs, err, ErrClientCertificate)
	}
	return fmt.Errorf("redisstore: Open %s %v: %w", c.Topology, c.Addrs, err)
}
