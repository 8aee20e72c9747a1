package main

// settingClass is what `floodgate ratelimit` does with one of
// envoyproxy/ratelimit's settings.
type settingClass string

const (
	// honoured: read with upstream's meaning (the row says how it maps).
	honoured settingClass = "honoured"
	// refused: a value that asks for what Floodgate does not do stops the
	// start with a message naming the setting.
	refused settingClass = "refused"
	// ignored: it only tunes upstream's internals (or a feature Floodgate
	// does another way); a value that asks for something is logged once
	// as a warning naming it.
	ignored settingClass = "ignored"
)

// upstreamSetting is one environment variable of envoyproxy/ratelimit's
// src/settings/settings.go and what `floodgate ratelimit` does with it.
type upstreamSetting struct {
	Name    string
	Class   settingClass
	Meaning string
	// quiet, for an ignored or refused setting, is the value that asks for
	// nothing (upstream's "off"), which gets no warning or refusal; ""
	// when any value present asks for something.
	quiet string
}

// upstreamSettings lists every setting of envoyproxy/ratelimit's
// settings.go, in its order. TestUpstreamSettingsListed holds it against
// the copy in testdata/upstream, and TestUpstreamDocTable against the
// table of docs/upstream.md (go test -run TestUpstreamDocTable -update
// rewrites that table from this one).
var upstreamSettings = []upstreamSetting{
	{Name: "HOST", Class: honoured, Meaning: "with PORT, the HTTP listener (-http; default 0.0.0.0:8080): /healthcheck, POST /json, the HTTP API, /metrics"},
	{Name: "PORT", Class: honoured, Meaning: "see HOST"},
	{Name: "DEBUG_HOST", Class: honoured, Meaning: "with DEBUG_PORT, the profiler's listener (-debug-addr, /debug/pprof/); off unless one of the two is set (upstream opens 0.0.0.0:6070 by default); /rlconfig and /stats are not served (GET /v1/config has the config)"},
	{Name: "DEBUG_PORT", Class: honoured, Meaning: "see DEBUG_HOST"},
	{Name: "GRPC_UDS", Class: refused, Meaning: "a Unix socket for gRPC is not supported: set GRPC_HOST and GRPC_PORT"},
	{Name: "GRPC_HOST", Class: honoured, Meaning: "with GRPC_PORT, Envoy's gRPC listener (-grpc; default 0.0.0.0:8081)"},
	{Name: "GRPC_PORT", Class: honoured, Meaning: "see GRPC_HOST"},
	{Name: "GRPC_MAX_CONNECTION_AGE", Class: ignored, Meaning: "connections are not aged out; an idle one closes after -grpc-max-idle"},
	{Name: "GRPC_MAX_CONNECTION_AGE_GRACE", Class: ignored, Meaning: "see GRPC_MAX_CONNECTION_AGE"},
	{Name: "GRPC_SERVER_USE_TLS", Class: honoured, Meaning: "TLS on the gRPC listener only (the HTTP listener, probed at /healthcheck, stays plain as upstream's), with GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY; both files are read again when they change", quiet: "false"},
	{Name: "GRPC_SERVER_TLS_CERT", Class: honoured, Meaning: "the gRPC listener's certificate (-tls-cert), with GRPC_SERVER_USE_TLS"},
	{Name: "GRPC_SERVER_TLS_KEY", Class: honoured, Meaning: "its key (-tls-key), with GRPC_SERVER_USE_TLS"},
	{Name: "GRPC_CLIENT_TLS_CACERT", Class: honoured, Meaning: "with GRPC_SERVER_USE_TLS, the CAs of client certificates: every gRPC client must present one (-tls-client-ca, mutual TLS)"},
	{Name: "GRPC_CLIENT_TLS_SAN", Class: refused, Meaning: "checking a client certificate's SAN is not supported; client certificates are verified against GRPC_CLIENT_TLS_CACERT only"},
	{Name: "LOG_LEVEL", Class: honoured, Meaning: "-log-level: trace and debug are debug, info, warn or warning, error, fatal and panic are error; default warn, as upstream's"},
	{Name: "LOG_FORMAT", Class: honoured, Meaning: "json for JSON lines (-log-format json), anything else text"},
	{Name: "CONFIG_TYPE", Class: honoured, Meaning: "FILE: the YAML files of RUNTIME_ROOT (-config); GRPC_XDS_SOTW: RateLimitConfig resources from the xDS server of CONFIG_GRPC_XDS_SERVER_URL (-config-xds, docs/xds.md): each push applied as a reload, a bad one NACKed and the last good config kept; any other value is refused"},
	{Name: "FORCE_START_WITHOUT_INITIAL_CONFIG", Class: honoured, Meaning: "GRPC_XDS_SOTW: serve before the first push, with no rules (every descriptor allowed) until it comes (-config-xds-start-without-config); without it, serve listens once a first push is applied, as upstream; FILE: the files must load at start either way"},
	{Name: "CONFIG_GRPC_XDS_NODE_ID", Class: honoured, Meaning: "xDS: the node id the config is asked for (-config-xds-node; default \"default\")"},
	{Name: "CONFIG_GRPC_XDS_NODE_METADATA", Class: honoured, Meaning: "xDS: the node's metadata (xds.Options.NodeMetadata), key=value (or key:value) pairs separated by commas, each value a string"},
	{Name: "CONFIG_GRPC_XDS_SERVER_URL", Class: honoured, Meaning: "xDS: the server's host:port (-config-xds; default localhost:18000)"},
	{Name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", Class: ignored, Meaning: "upstream hands it to a gRPC retry interceptor whose retries are off by default (and which cannot retry a bidirectional stream), so it changes nothing there either; the wait before reconnecting is XDS_CLIENT_BACKOFF_*", quiet: "3s"},
	{Name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", Class: honoured, Meaning: "xDS: gRPC metadata sent with every stream (xds.Options.Headers), key:value pairs separated by commas; a name or value gRPC cannot send is refused"},
	{Name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", Class: honoured, Meaning: "xDS: TLS to the server (-config-xds-tls), verified by the system's CAs or CONFIG_GRPC_XDS_SERVER_TLS_CACERT; the four files below are read only with it, as upstream's (set without it, each is warned once)", quiet: "false"},
	{Name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Class: honoured, Meaning: "xDS: the client certificate presented to the server (-config-xds-tls-cert), read again at each connection"},
	{Name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", Class: honoured, Meaning: "xDS: its key (-config-xds-tls-key)"},
	{Name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", Class: honoured, Meaning: "xDS: the CAs that verify the server, in place of the system's (-config-xds-tls-ca)"},
	{Name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", Class: honoured, Meaning: "xDS: the name the server's certificate must hold (-config-xds-tls-server-name)"},
	{Name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Class: honoured, Meaning: "xDS: the first wait before reconnecting (xds.Options.Backoff.Initial; default 10s)"},
	{Name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", Class: honoured, Meaning: "xDS: the longest wait before reconnecting (Backoff.Max; default 60s)"},
	{Name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Class: honoured, Meaning: "xDS: despite its name, the growth of each wait over the last (Backoff.Multiplier), as upstream's backoff library reads it; 1 or less, upstream's default 0.5 included, keeps every wait at the initial interval with no jitter, as upstream's waits are; 0 is 2"},
	{Name: "XDS_CLIENT_BACKOFF_JITTER", Class: honoured, Meaning: "xDS: true (default) moves each growing wait by up to ±20% at random (Backoff.Jitter; upstream draws it between the initial interval and the wait, a wider spread); false draws nothing (Jitter -1)"},
	{Name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", Class: honoured, Meaning: "xDS: the largest push received (xds.Options.MaxRecvMsgSize; default gRPC's 4 MiB)"},
	{Name: "USE_DOG_STATSD", Class: ignored, Meaning: "Floodgate sends no StatsD: its metrics are Prometheus (USE_PROMETHEUS, or /metrics on the HTTP listener)", quiet: "false"},
	{Name: "USE_DOG_STATSD_MOGRIFIERS", Class: ignored, Meaning: "see USE_DOG_STATSD"},
	{Name: "USE_STATSD", Class: ignored, Meaning: "see USE_DOG_STATSD (upstream's default is true: set USE_STATSD=false, as Envoy Gateway does, for no warning)", quiet: "false"},
	{Name: "STATSD_HOST", Class: ignored, Meaning: "see USE_DOG_STATSD"},
	{Name: "STATSD_PORT", Class: ignored, Meaning: "see USE_DOG_STATSD"},
	{Name: "EXTRA_TAGS", Class: ignored, Meaning: "see USE_DOG_STATSD"},
	{Name: "STATS_FLUSH_INTERVAL", Class: ignored, Meaning: "see USE_DOG_STATSD"},
	{Name: "DISABLE_STATS", Class: ignored, Meaning: "the Prometheus registry is always kept (it is what the dashboard and /metrics read)", quiet: "false"},
	{Name: "USE_PROMETHEUS", Class: honoured, Meaning: "true: also serve the metrics on PROMETHEUS_ADDR at PROMETHEUS_PATH, a listener of their own (Floodgate's metric names, not upstream's)", quiet: "false"},
	{Name: "PROMETHEUS_ADDR", Class: honoured, Meaning: "with USE_PROMETHEUS, the metrics listener's address (default :9090; Envoy Gateway sets :19001)"},
	{Name: "PROMETHEUS_PATH", Class: honoured, Meaning: "with USE_PROMETHEUS, the metrics' path (default /metrics)"},
	{Name: "PROMETHEUS_MAPPER_YAML", Class: ignored, Meaning: "it maps upstream's StatsD names to Prometheus names; Floodgate's metrics have Prometheus names of their own"},
	{Name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", Class: ignored, Meaning: "durations are in seconds, as Prometheus's convention", quiet: "false"},
	{Name: "RUNTIME_ROOT", Class: honoured, Meaning: "CONFIG_TYPE=FILE: the config is every *.yaml and *.yml file in RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (default /srv/runtime_data/current/config), reloaded on change and on SIGHUP; a bad file is rejected and the last good config kept"},
	{Name: "RUNTIME_SUBDIRECTORY", Class: honoured, Meaning: "see RUNTIME_ROOT"},
	{Name: "RUNTIME_APPDIRECTORY", Class: honoured, Meaning: "see RUNTIME_ROOT (default config)"},
	{Name: "RUNTIME_IGNOREDOTFILES", Class: ignored, Meaning: "files whose name starts with a dot are always skipped (a ConfigMap's ..data is one); false cannot load them", quiet: "true"},
	{Name: "RUNTIME_WATCH_ROOT", Class: honoured, Meaning: "either value: the config directory is watched, and survives being replaced (a ConfigMap update); a RUNTIME_ROOT that is a symbolic link swapped to a new tree is reloaded on SIGHUP"},
	{Name: "EXPIRATION_JITTER_MAX_SECONDS", Class: ignored, Meaning: "each key expires when its state is spent; there are no TTLs to spread"},
	{Name: "LOCAL_CACHE_SIZE_IN_BYTES", Class: honoured, Meaning: "the over-limit cache (-deny-cache, exact: see store/redisstore): 0 turns it off, N keeps N/128 keys (about 128 bytes each); unset keeps Floodgate's default (on)"},
	{Name: "NEAR_LIMIT_RATIO", Class: ignored, Meaning: "it only feeds upstream's near_limit stat"},
	{Name: "CACHE_KEY_PREFIX", Class: honoured, Meaning: "the prefix of every Redis key (redisstore's Prefix); no braces"},
	{Name: "BACKEND_TYPE", Class: honoured, Meaning: "redis (or empty); memcache is refused"},
	{Name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", Class: honoured, Meaning: "true is Floodgate's behaviour: a denied request does not count; false (upstream's default) is warned once: set count_rejected: true on the rules that should count denied hits (docs/service.md)", quiet: "true"},
	{Name: "LIMIT_RESPONSE_HEADERS_ENABLED", Class: honoured, Meaning: "-limit-response-headers; without it Envoy's answers carry no rate limit headers, as upstream's", quiet: "false"},
	{Name: "LIMIT_LIMIT_HEADER", Class: honoured, Meaning: "-limit-limit-header"},
	{Name: "LIMIT_REMAINING_HEADER", Class: honoured, Meaning: "-limit-remaining-header"},
	{Name: "LIMIT_RESET_HEADER", Class: honoured, Meaning: "-limit-reset-header"},
	{Name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", Class: honoured, Meaning: "/healthcheck fails until a config with at least one domain is in force, and while an empty one is"},
	{Name: "REDIS_SOCKET_TYPE", Class: honoured, Meaning: "tcp; unix is refused (Unix sockets are not supported)"},
	{Name: "REDIS_TYPE", Class: honoured, Meaning: "SINGLE, SENTINEL (REDIS_URL is master,sentinel1,...) or CLUSTER (REDIS_URL is node1,node2,...): redis://, redis-sentinel:// or redis-cluster:// (docs/redis.md)"},
	{Name: "REDIS_URL", Class: honoured, Meaning: "host:port, or the list of REDIS_TYPE; a redis:// URL of docs/redis.md is taken as it is; unset: the embedded memory store (upstream would dial its default socket)"},
	{Name: "REDIS_POOL_SIZE", Class: ignored, Meaning: "the client pipelines every concurrent call over its own connections"},
	{Name: "REDIS_AUTH", Class: honoured, Meaning: "password, or user:password"},
	{Name: "REDIS_TLS", Class: honoured, Meaning: "TLS to Redis (rediss://)", quiet: "false"},
	{Name: "REDIS_TLS_CLIENT_CERT", Class: honoured, Meaning: "-redis-tls-cert"},
	{Name: "REDIS_TLS_CLIENT_KEY", Class: honoured, Meaning: "-redis-tls-key"},
	{Name: "REDIS_TLS_CACERT", Class: honoured, Meaning: "-redis-tls-ca"},
	{Name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", Class: refused, Meaning: "true is refused: the certificate's name is always checked; -redis-tls-server-name (FLOODGATE_REDIS_TLS_SERVER_NAME) names the one to expect", quiet: "false"},
	{Name: "REDIS_PIPELINE_WINDOW", Class: ignored, Meaning: "the client pipelines concurrent calls by itself"},
	{Name: "REDIS_PIPELINE_LIMIT", Class: ignored, Meaning: "see REDIS_PIPELINE_WINDOW"},
	{Name: "REDIS_CLUSTER_PIPELINE_PARALLELISM", Class: ignored, Meaning: "see REDIS_PIPELINE_WINDOW"},
	{Name: "REDIS_PERSECOND", Class: refused, Meaning: "true is refused: one Redis holds every limit", quiet: "false"},
	{Name: "REDIS_PERSECOND_SOCKET_TYPE", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_PERSECOND_TYPE", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_PERSECOND_URL", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_PERSECOND_POOL_SIZE", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_PERSECOND_AUTH", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_PERSECOND_TLS", Class: ignored, Meaning: "only with REDIS_PERSECOND", quiet: "false"},
	{Name: "REDIS_SENTINEL_AUTH", Class: honoured, Meaning: "REDIS_TYPE=SENTINEL: the Sentinels' password (sentinel_password)"},
	{Name: "REDIS_PERSECOND_SENTINEL_AUTH", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_PERSECOND_PIPELINE_WINDOW", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_PERSECOND_PIPELINE_LIMIT", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", Class: honoured, Meaning: "true: /healthcheck fails while Redis does not answer a PING (else only until Redis was first reached)", quiet: "false"},
	{Name: "REDIS_TIMEOUT", Class: honoured, Meaning: "the dial and connection timeouts of the Redis URL (dial_timeout, conn_timeout); each decision's own deadline is -timeout"},
	{Name: "REDIS_PERSECOND_TIMEOUT", Class: ignored, Meaning: "only with REDIS_PERSECOND"},
	{Name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", Class: ignored, Meaning: "there is no pool to run empty", quiet: "WAIT"},
	{Name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", Class: ignored, Meaning: "only with REDIS_PERSECOND", quiet: "WAIT"},
	{Name: "REDIS_STARTUP_INITIAL_INTERVAL", Class: ignored, Meaning: "an unreachable Redis at start is retried in the background while the failure modes answer; /healthcheck fails until it is reached"},
	{Name: "REDIS_STARTUP_MAX_INTERVAL", Class: ignored, Meaning: "see REDIS_STARTUP_INITIAL_INTERVAL"},
	{Name: "REDIS_STARTUP_MAX_ELAPSED_TIME", Class: ignored, Meaning: "see REDIS_STARTUP_INITIAL_INTERVAL: Floodgate never gives up", quiet: "0"},
	{Name: "MEMCACHE_HOST_PORT", Class: refused, Meaning: "Memcached is not a store of Floodgate's"},
	{Name: "MEMCACHE_MAX_IDLE_CONNS", Class: refused, Meaning: "see MEMCACHE_HOST_PORT"},
	{Name: "MEMCACHE_SRV", Class: refused, Meaning: "see MEMCACHE_HOST_PORT"},
	{Name: "MEMCACHE_SRV_REFRESH", Class: refused, Meaning: "see MEMCACHE_HOST_PORT"},
	{Name: "MEMCACHE_TLS", Class: refused, Meaning: "see MEMCACHE_HOST_PORT", quiet: "false"},
	{Name: "MEMCACHE_TLS_CLIENT_CERT", Class: refused, Meaning: "see MEMCACHE_HOST_PORT"},
	{Name: "MEMCACHE_TLS_CLIENT_KEY", Class: refused, Meaning: "see MEMCACHE_HOST_PORT"},
	{Name: "MEMCACHE_TLS_CACERT", Class: refused, Meaning: "see MEMCACHE_HOST_PORT"},
	{Name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", Class: refused, Meaning: "see MEMCACHE_HOST_PORT", quiet: "false"},
	{Name: "SHADOW_MODE", Class: honoured, Meaning: "-shadow-mode", quiet: "false"},
	{Name: "QUOTA_MODE", Class: honoured, Meaning: "-quota-mode", quiet: "false"},
	{Name: "RESPONSE_DYNAMIC_METADATA", Class: honoured, Meaning: "-response-dynamic-metadata", quiet: "false"},
	{Name: "MERGE_DOMAIN_CONFIG", Class: honoured, Meaning: "-merge-domain-config", quiet: "false"},
	{Name: "TRACING_ENABLED", Class: honoured, Meaning: "true: -otel, traces over OTLP to the endpoint of the standard OTEL_EXPORTER_OTLP_* variables (docs/tracing.md); the TRACING_* below give the defaults of the settings no OTEL_* variable gives; refused with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none", quiet: "false"},
	{Name: "TRACING_SERVICE_NAME", Class: honoured, Meaning: "the service.name resource attribute (default RateLimit); OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES win"},
	{Name: "TRACING_SERVICE_NAMESPACE", Class: honoured, Meaning: "the service.namespace resource attribute; OTEL_RESOURCE_ATTRIBUTES wins"},
	{Name: "TRACING_SERVICE_INSTANCE_ID", Class: honoured, Meaning: "the service.instance.id resource attribute (default a random UUID, as upstream's); OTEL_RESOURCE_ATTRIBUTES wins"},
	{Name: "TRACING_EXPORTER_PROTOCOL", Class: honoured, Meaning: "http (http/protobuf, the default) or grpc; OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL win"},
	{Name: "TRACING_SAMPLING_RATE", Class: honoured, Meaning: "the share of traces sampled, 0 to 1 (default 1), as upstream's sampler: parentbased_traceidratio (a call whose caller sampled its trace is sampled); OTEL_TRACES_SAMPLER wins"},
}
