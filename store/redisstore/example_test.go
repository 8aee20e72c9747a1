package redisstore_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/redisstore"
	"github.com/floodgate-rl/floodgate/store/redisstore/goredisstore"
)

// The examples that talk to Redis expect one on localhost:6379; they have
// no Output line, so go test compiles them without running them. The tests
// of the package run the same calls on servers of their own.

func ExampleOpen() {
	ctx := context.Background()
	store, err := redisstore.Open(ctx, "redis://localhost:6379/0", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := floodgate.New(store, &floodgate.Options{Timeout: 50 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	perMinute := floodgate.Limit{Limit: 60, Period: time.Minute}
	d, err := limiter.Allow(ctx, "user:42", perMinute)
	if err != nil {
		log.Print(err) // d is the failure policy's answer
	}
	fmt.Println(d.Allowed, d.Remaining)
}

func ExampleOpen_cluster() {
	ctx := context.Background()
	// Any nodes of the cluster as seeds; the others are discovered.
	store, err := redisstore.Open(ctx, "redis-cluster://10.0.0.1:7000,10.0.0.2:7000", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
}

func ExampleOpen_sentinel() {
	ctx := context.Background()
	store, err := redisstore.Open(ctx, "redis-sentinel://s1:26379,s2:26379,s3:26379/mymaster", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
}

func ExampleOpen_tls() {
	ctx := context.Background()
	// A private CA, and a client certificate for a server that requires
	// one (tls-auth-clients yes).
	caPEM, err := os.ReadFile("/etc/redis/tls/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		log.Fatal("no certificate in ca.pem")
	}
	cert, err := tls.LoadX509KeyPair("/etc/redis/tls/client.pem", "/etc/redis/tls/client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	store, err := redisstore.Open(ctx, "rediss://redis.internal:6380", &redisstore.Options{
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}},
	})
	if err != nil {
		log.Fatal(err) // names the server, and says why TLS failed
	}
	defer store.Close()
}

func ExampleNew() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close() // the store does not close a client it was given
	store, err := redisstore.New(client, &redisstore.Options{Prefix: "myapp"})
	if err != nil {
		log.Fatal(err)
	}
	limiter, _ := floodgate.New(store, nil)
	_, _ = limiter.Allow(context.Background(), "user:42", floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second})
}

func ExampleStore_ApplyBatch() {
	ctx := context.Background()
	store, err := redisstore.Open(ctx, "redis://localhost:6379", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, _ := floodgate.New(store, nil)
	// 10 per second and 1000 per hour, all or nothing: a request denied by
	// one limit takes nothing from the other. Limiter.AllowEach calls
	// ApplyBatch, one script run.
	perSecond := floodgate.Limit{Algorithm: floodgate.SlidingWindow, Limit: 10, Period: time.Second}
	perHour := floodgate.Limit{Limit: 1000, Period: time.Hour}
	d, each, err := limiter.AllowEach(ctx, "user:42", 1, perSecond, perHour)
	if err != nil {
		log.Print(err)
	}
	fmt.Println(d.Allowed, len(each))
}

func ExampleStore_Reserve() {
	ctx := context.Background()
	store, err := redisstore.Open(ctx, "redis://localhost:6379", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, _ := floodgate.New(store, nil)
	// Hold an LLM call's max_tokens of the tenant's hourly budget, commit
	// what it used. With ReleaseOnExpiry, a caller that crashes before
	// the commit gets its units given back by the store's sweep, a second
	// or so after the TTL, by whichever instance sweeps first.
	budget := floodgate.Limit{Limit: 100_000, Period: time.Hour}
	res, d, err := limiter.Reserve(ctx, "tenant:acme", budget, 4096, &floodgate.ReserveOptions{TTL: 2 * time.Minute, ReleaseOnExpiry: true})
	if err != nil || !d.Allowed {
		log.Print(d.RetryAfter, err)
		return
	}
	st, err := res.Commit(ctx, 1234) // 2862 units go back
	if err != nil {
		log.Print(err)
	}
	fmt.Println(st[0].Refunded)
}

func ExampleStore_Key() {
	// A go-redis client connects on first use, so this example needs no
	// server (a rueidis client, as Open makes, connects when it is made).
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, _ := goredisstore.New(client, &redisstore.Options{Prefix: "myapp"})
	gcra := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second}
	fmt.Println(store.Key("user:42", gcra))
	fmt.Println(store.Key("{evil}", gcra))
	// Output:
	// myapp:v1:gcra:1000000:{user:42}
	// myapp:v1:gcra:1000000:{%7Bevil%7D}
}
