package deploy

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Tokens and keys of the lengths serve accepts (16 and 32 bytes at least).
const (
	clientToken = "client-token-0123456789abcdef"
	adminToken  = "admin-token-0123456789abcdef"
	idKey       = "id-key-0123456789abcdef0123456789abcdef"
)

// exampleRules is examples/config/edge.yaml, the rules of the README.
func exampleRules(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../examples/config/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// apiRules is a second domain whose text a careless template would break:
// a comment first, a quoted value with a colon, a blank line.
const apiRules = `# Per route: the body of a --set-file.
domain: api
descriptors:
  - key: route
    value: "GET /v1/items: list"

    rate_limit: {unit: second, requests_per_unit: 50}
`

// valuesYAML marshals values as a values file.
func valuesYAML(t *testing.T, values map[string]any) string {
	t.Helper()
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// everyToggle turns every option of the chart on, with the chart making
// every Secret.
func everyToggle(t *testing.T) map[string]any {
	return map[string]any{
		"image":             map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)},
		"imagePullSecrets":  []any{map[string]any{"name": "registry"}},
		"replicaCount":      3,
		"rules":             map[string]any{"edge": exampleRules(t), "api": apiRules},
		"redis":             map[string]any{"url": "redis://:s3cret@redis.floodgate.svc:6379/0"},
		"auth":              map[string]any{"clientTokens": []any{clientToken}, "adminTokens": []any{adminToken}},
		"idKeys":            map[string]any{"keys": []any{idKey}},
		"ledger":            map[string]any{"url": "postgres://floodgate:s3cret@postgres.floodgate.svc:5432/floodgate"},
		"failureMode":       "local",
		"timeout":           "20ms",
		"logLevel":          "debug",
		"dashboard":         false,
		"allowedHosts":      []any{"floodgate.example.com"},
		"extraArgs":         []any{"-redis-coalesce=4"},
		"extraEnv":          []any{map[string]any{"name": "GOMEMLIMIT", "value": "400MiB"}},
		"extraVolumes":      []any{map[string]any{"name": "scratch", "emptyDir": map[string]any{}}},
		"extraVolumeMounts": []any{map[string]any{"name": "scratch", "mountPath": "/scratch", "readOnly": true}},
		"tls":               map[string]any{"secretName": "floodgate-tls"},
		"service":           map[string]any{"type": "LoadBalancer", "annotations": map[string]any{"example.com/internal": "true"}},
		"autoscaling":       map[string]any{"enabled": true, "minReplicas": 2, "maxReplicas": 6, "targetCPUUtilizationPercentage": 60},
		"serviceMonitor":    map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}, "tlsConfig": map[string]any{"serverName": "floodgate.floodgate.svc"}},
		"serviceAccount":    map[string]any{"annotations": map[string]any{"example.com/role": "floodgate"}},
		"podAnnotations":    map[string]any{"example.com/scrape": "false"},
		"podLabels":         map[string]any{"team": "edge"},
		"priorityClassName": "high",
		"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":       []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "edge", "effect": "NoSchedule"}},
		"affinity": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/arch", "operator": "In", "values": []any{"amd64", "arm64"}}}}},
		}}},
	}
}

func TestChartDefaults(t *testing.T) {
	t.Parallel()
	objs := renderObjects(t, "")
	want := []string{"Deployment/floodgate", "PodDisruptionBudget/floodgate", "Service/floodgate", "ServiceAccount/floodgate"}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Fatalf("objects %v, want %v", got, want)
	}
	c := check(t, objs)
	if r := c.deployment.Spec.Replicas; r == nil || *r != 1 {
		t.Errorf("replicas %v, want 1: the memory store counts for one replica only", r)
	}
	if len(c.env) != 0 {
		t.Errorf("env %v, want none: no Redis, no ledger", c.env)
	}
	for _, flag := range []string{"config", "auth-token-file", "admin-token-file", "id-key-file", "tls-cert", "instances"} {
		if v, ok := c.args[flag]; ok {
			t.Errorf("-%s=%s without the values that ask for it", flag, v)
		}
	}
	if got, want := c.args["allowed-hosts"], "floodgate,floodgate.floodgate,floodgate.floodgate.svc,floodgate.floodgate.svc.cluster.local"; got != want {
		t.Errorf("-allowed-hosts=%s, want %s", got, want)
	}
	if got, want := c.container.Image, "ghcr.io/floodgate-rl/floodgate:0.1.0"; got != want {
		t.Errorf("image %s, want %s (the chart's appVersion)", got, want)
	}
	psc := c.deployment.Spec.Template.Spec.SecurityContext
	if psc.RunAsUser == nil || *psc.RunAsUser != 65532 || psc.FSGroup == nil || *psc.FSGroup != 65532 {
		t.Errorf("pod securityContext %+v: want uid and fsGroup 65532, the image's user", psc)
	}
	if got := len(c.deployment.Spec.Template.Spec.TopologySpreadConstraints); got != 2 {
		t.Errorf("%d topology spread constraints, want 2 (zone, node)", got)
	}
	if l := c.container.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Sleep == nil || l.PreStop.Sleep.Seconds != 5 {
		t.Errorf("lifecycle %+v: want a preStop sleep of 5s", l)
	}
}

func TestChartEveryToggle(t *testing.T) {
	t.Parallel()
	objs := renderObjects(t, valuesYAML(t, everyToggle(t)))
	want := []string{
		"ConfigMap/floodgate-rules", "Deployment/floodgate", "HorizontalPodAutoscaler/floodgate",
		"PodDisruptionBudget/floodgate", "Secret/floodgate-auth", "Secret/floodgate-id-keys",
		"Secret/floodgate-ledger", "Secret/floodgate-redis", "Service/floodgate",
		"ServiceAccount/floodgate", "ServiceMonitor/floodgate",
	}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Fatalf("objects %v, want %v", got, want)
	}
	// The TLS Secret is the user's (cert-manager's, say).
	c := check(t, objs, "floodgate-tls")

	for flag, want := range map[string]string{
		"config":           "/etc/floodgate/rules",
		"auth-token-file":  "/etc/floodgate/auth/client.tokens",
		"admin-token-file": "/etc/floodgate/auth/admin.tokens",
		"id-key-file":      "/etc/floodgate/id-keys/id.keys",
		"tls-cert":         "/etc/floodgate/tls/tls.crt",
		"tls-key":          "/etc/floodgate/tls/tls.key",
		"failure-mode":     "local",
		// The most replicas the autoscaler may run: each takes no more
		// than its share of a limit while Redis is down.
		"instances":      "6",
		"timeout":        "20ms",
		"log-level":      "debug",
		"ui":             "false",
		"redis-coalesce": "4",
		"allowed-hosts":  "floodgate,floodgate.floodgate,floodgate.floodgate.svc,floodgate.floodgate.svc.cluster.local,floodgate.example.com",
	} {
		if got := c.args[flag]; got != want {
			t.Errorf("-%s=%s, want %s", flag, got, want)
		}
	}
	for name, want := range map[string]string{
		"FLOODGATE_REDIS":  "secret:floodgate-redis/url",
		"FLOODGATE_LEDGER": "secret:floodgate-ledger/url",
		"GOMEMLIMIT":       "400MiB",
	} {
		if got := c.env[name]; got != want {
			t.Errorf("env %s=%s, want %s", name, got, want)
		}
	}
	secret := func(name string) *corev1.Secret {
		for _, s := range every[corev1.Secret](objs) {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no Secret %s", name)
		return nil
	}
	if got := secret("floodgate-auth").StringData; got["client.tokens"] != clientToken+"\n" || got["admin.tokens"] != adminToken+"\n" {
		t.Errorf("auth Secret %q: want one token a line", got)
	}
	if got := secret("floodgate-redis").StringData["url"]; got != "redis://:s3cret@redis.floodgate.svc:6379/0" {
		t.Errorf("redis Secret url %q", got)
	}
	if got := c.container.Image; got != "ghcr.io/floodgate-rl/floodgate@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image %s: want the digest", got)
	}

	// The rules are the files of the values, byte for byte, and load as
	// serve loads its -config directory.
	cm := one[corev1.ConfigMap](t, objs)
	if got, want := cm.Data["edge.yaml"], exampleRules(t); got != want {
		t.Errorf("edge.yaml in the ConfigMap differs from the values:\n%s\nwant:\n%s", got, want)
	}
	if got := cm.Data["api.yaml"]; got != apiRules {
		t.Errorf("api.yaml in the ConfigMap differs from the values:\n%q\nwant:\n%q", got, apiRules)
	}
	cfg := loadRules(t, c.rulesDir)
	if r := cfg.Match("edge", []config.Entry{{Key: "user", Value: "hot"}}); r == nil || r.Limit.Limit != 10 || r.Limit.Period != time.Second {
		t.Errorf("edge user=hot: rule %+v, want 10 per second", r)
	}
	if r := cfg.Match("api", []config.Entry{{Key: "route", Value: "GET /v1/items: list"}}); r == nil || r.Limit.Limit != 50 {
		t.Errorf("api route: rule %+v, want 50 per second", r)
	}

	hpa := one[autoscalingv2.HorizontalPodAutoscaler](t, objs)
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas != 2 || hpa.Spec.MaxReplicas != 6 {
		t.Errorf("HPA replicas %v..%d, want 2..6", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	if m := hpa.Spec.Metrics; len(m) != 1 || m[0].Resource == nil || m[0].Resource.Target.AverageUtilization == nil || *m[0].Resource.Target.AverageUtilization != 60 {
		t.Errorf("HPA metrics %+v, want CPU at 60%%", m)
	}
	sm := one[monitoringv1.ServiceMonitor](t, objs)
	if ep := sm.Spec.Endpoints[0]; ep.Scheme == nil || *ep.Scheme != "https" || ep.TLSConfig == nil || ep.TLSConfig.ServerName == nil {
		t.Errorf("ServiceMonitor endpoint %+v: want https with the tlsConfig of the values", ep)
	}
	if sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v: want the values' release=prometheus", sm.Labels)
	}
}

func TestChartExistingObjects(t *testing.T) {
	t.Parallel()
	objs := renderObjects(t, valuesYAML(t, map[string]any{
		"replicaCount":        2,
		"existingConfigMap":   "my-rules",
		"redis":               map[string]any{"existingSecret": "my-redis", "existingSecretKey": "redis-url", "url": "redis://ignored:6379"},
		"auth":                map[string]any{"existingSecret": "my-tokens", "adminTokensKey": "", "clientTokens": []any{clientToken}},
		"idKeys":              map[string]any{"existingSecret": "my-id-keys"},
		"ledger":              map[string]any{"existingSecret": "my-ledger"},
		"runAsUser":           nil,
		"runAsGroup":          nil,
		"fsGroup":             nil,
		"podDisruptionBudget": map[string]any{"enabled": false},
		"topologySpread":      map[string]any{"enabled": false},
		"preStopSleepSeconds": 0,
	}))
	want := []string{"Deployment/floodgate", "Service/floodgate", "ServiceAccount/floodgate"}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Fatalf("objects %v, want %v: the user's Secrets and ConfigMap are not rendered", got, want)
	}
	c := check(t, objs, "my-rules", "my-redis", "my-tokens", "my-id-keys", "my-ledger")
	if got := c.env["FLOODGATE_REDIS"]; got != "secret:my-redis/redis-url" {
		t.Errorf("FLOODGATE_REDIS from %s, want my-redis/redis-url", got)
	}
	if got := c.env["FLOODGATE_LEDGER"]; got != "secret:my-ledger/url" {
		t.Errorf("FLOODGATE_LEDGER from %s, want my-ledger/url", got)
	}
	if got := c.args["auth-token-file"]; got != "/etc/floodgate/auth/client.tokens" {
		t.Errorf("-auth-token-file=%s", got)
	}
	if got, ok := c.args["admin-token-file"]; ok {
		t.Errorf("-admin-token-file=%s with adminTokensKey empty", got)
	}
	if got := c.args["config"]; got != "/etc/floodgate/rules" {
		t.Errorf("-config=%s, want the user's ConfigMap's mount", got)
	}
	psc := c.deployment.Spec.Template.Spec.SecurityContext
	if psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.FSGroup != nil {
		t.Errorf("pod securityContext %+v: null values leave the ids to the platform", psc)
	}
	if c.container.Lifecycle != nil || len(c.deployment.Spec.Template.Spec.TopologySpreadConstraints) != 0 {
		t.Errorf("lifecycle %+v, spread %+v: both turned off", c.container.Lifecycle, c.deployment.Spec.Template.Spec.TopologySpreadConstraints)
	}
}

// TestChartRefuses holds the schema and the chart's own checks to refusing
// values that would deploy something broken, with a message naming the
// value.
func TestChartRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, values, want string
	}{
		{"replicas on the memory store", "replicaCount: 2", "needs redis.url or redis.existingSecret"},
		{"autoscaling on the memory store", "autoscaling: {enabled: true}", "needs redis.url or redis.existingSecret"},
		{"unknown value", "replicas: 3", "replicas"},
		{"unknown nested value", "redis: {host: redis}", "host"},
		{"replicas as text", "replicaCount: three", "replicaCount"},
		{"short token", "auth: {clientTokens: [short]}", "clientTokens"},
		{"token with a space", "auth: {adminTokens: ['0123456789 abcdefghij']}", "adminTokens"},
		{"short id key", "idKeys: {keys: [" + clientToken + "]}", "keys"},
		{"failure mode", "failureMode: fail_sometimes", "failureMode"},
		{"timeout without unit", "timeout: '10'", "timeout"},
		{"redis scheme", "redis: {url: 'http://redis:6379'}", "url"},
		{"root user", "runAsUser: 0", "runAsUser"},
		{"rules file name", "rules: {'edge.yaml': 'domain: edge'}", "'edge.yaml' does not match"},
		{"rules and a ConfigMap", "{rules: {edge: 'domain: edge'}, existingConfigMap: mine}", "not both"},
		{"autoscaling bounds", "{redis: {url: 'redis://r:6379'}, autoscaling: {enabled: true, minReplicas: 5, maxReplicas: 3}}", "minReplicas is above"},
		{"argument not a flag", "extraArgs: [serve]", "extraArgs"},
		{"digest", "image: {digest: latest}", "digest"},
		{"pull policy", "image: {pullPolicy: Sometimes}", "pullPolicy"},
		{"port", "ports: {http: 0}", "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := render(tc.values)
			if err == nil {
				t.Fatalf("values %s rendered", tc.values)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("values %s: error %q does not name %q", tc.values, err, tc.want)
			}
		})
	}
}

// loadRules loads the rules of dir as serve and `floodgate config
// validate` do.
func loadRules(t *testing.T, dir string) *config.Config {
	t.Helper()
	if dir == "" {
		t.Fatal("no rules")
	}
	if err := config.Validate(dir); err != nil {
		t.Fatalf("config validate: %v", err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("config load: %v", err)
	}
	return cfg
}
