package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// chartDir is the chart, relative to this package.
const chartDir = "helm/floodgate"

// release and namespace name the release every test renders.
const (
	release   = "floodgate"
	namespace = "floodgate"
)

// object is one rendered Kubernetes object, decoded strictly into its API
// type (a pointer: *appsv1.Deployment, ...).
type object struct {
	source string // the template, or the manifest file, it came from
	kind   string
	name   string
	obj    any
}

// render renders the chart as `helm install --dry-run` does on the client
// alone: it merges values (YAML) over the chart's, validates them against
// values.schema.json, checks the chart's kubeVersion against the
// capabilities' and renders every template in strict mode (a value the
// chart does not define is an error). It returns the manifests in the
// order Helm installs them.
func render(values string) ([]releaseutil.Manifest, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	// The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion):
	// the chart uses no capability, so this only checks the constraint.
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}
	if !chartutil.IsCompatibleRange(chrt.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart needs Kubernetes %s, capabilities have %s", chrt.Metadata.KubeVersion, caps.KubeVersion)
	}
	top, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: true}.Render(chrt, top)
	if err != nil {
		return nil, err
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("the chart has %d hooks; it should have none", len(hooks))
	}
	return manifests, nil
}

// renderObjects renders values and decodes every object strictly.
func renderObjects(t *testing.T, values string) []object {
	t.Helper()
	manifests, err := render(values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var objs []object
	for _, m := range manifests {
		// As `helm install` sends it: the content and a line break, which
		// a block scalar ending the document (a rules file) keeps.
		o, err := decode(m.Name, m.Content+"\n")
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs
}

// decode decodes one YAML document strictly into the API type of its
// apiVersion and kind: a field the type does not have, a field given
// twice, or a kind this chart should not make is an error.
func decode(source, doc string) (object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return object{}, fmt.Errorf("%s: %w", source, err)
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		obj = new(corev1.Namespace)
	case "v1 ServiceAccount":
		obj = new(corev1.ServiceAccount)
	case "v1 Secret":
		obj = new(corev1.Secret)
	case "v1 ConfigMap":
		obj = new(corev1.ConfigMap)
	case "v1 Service":
		obj = new(corev1.Service)
	case "apps/v1 Deployment":
		obj = new(appsv1.Deployment)
	case "policy/v1 PodDisruptionBudget":
		obj = new(policyv1.PodDisruptionBudget)
	case "autoscaling/v2 HorizontalPodAutoscaler":
		obj = new(autoscalingv2.HorizontalPodAutoscaler)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		obj = new(monitoringv1.ServiceMonitor)
	default:
		return object{}, fmt.Errorf("%s: unexpected object %s %s", source, tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		return object{}, fmt.Errorf("%s: %s: %w", source, tm.Kind, err)
	}
	meta := obj.(metav1.Object)
	if errs := validation.IsDNS1123Subdomain(meta.GetName()); len(errs) > 0 {
		return object{}, fmt.Errorf("%s: %s %q: %s", source, tm.Kind, meta.GetName(), strings.Join(errs, "; "))
	}
	if tm.Kind != "Namespace" && meta.GetNamespace() != namespace {
		return object{}, fmt.Errorf("%s: %s %s: namespace %q, want %q", source, tm.Kind, meta.GetName(), meta.GetNamespace(), namespace)
	}
	return object{source: source, kind: tm.Kind, name: meta.GetName(), obj: obj}, nil
}

// kinds lists the objects' kinds and names, sorted: "Deployment/floodgate".
func kinds(objs []object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.kind+"/"+o.name)
	}
	slices.Sort(out)
	return out
}

// one returns the only object of type T, failing the test if there is
// not exactly one.
func one[T any](t *testing.T, objs []object) *T {
	t.Helper()
	all := every[T](objs)
	if len(all) != 1 {
		t.Fatalf("%d objects of type %T, want 1 (objects: %v)", len(all), new(T), kinds(objs))
	}
	return all[0]
}

func every[T any](objs []object) []*T {
	var out []*T
	for _, o := range objs {
		if v, ok := o.obj.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

// checked is what check learned from a release's objects, for the tests'
// own assertions.
type checked struct {
	deployment *appsv1.Deployment
	container  corev1.Container
	// args are serve's flags, by name without the dash ("http": ":8080").
	args map[string]string
	// env holds each plain environment variable's value, and "secret:NAME/KEY"
	// for one from a Secret.
	env map[string]string
	// rulesDir is a directory holding the ConfigMap's files as the volume
	// would ("" without one).
	rulesDir string
}

// check holds a release's objects to what every release of the chart
// must be; existing names the Secrets and ConfigMaps the objects may
// reference without rendering them (the user's own).
func check(t *testing.T, objs []object, existing ...string) checked {
	t.Helper()
	var c checked
	c.deployment = one[appsv1.Deployment](t, objs)
	pod := c.deployment.Spec.Template
	if got := len(pod.Spec.Containers); got != 1 {
		t.Fatalf("%d containers, want 1", got)
	}
	c.container = pod.Spec.Containers[0]

	checkSecurity(t, pod.Spec)
	c.args = serveArgs(t, c.container)
	checkProbes(t, c.container, c.args)
	c.env, c.rulesDir = checkReferences(t, objs, pod.Spec, existing)

	podLabels := pod.Labels
	sel, err := metav1.LabelSelectorAsSelector(c.deployment.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(podLabels)) {
		t.Errorf("Deployment's selector %v does not select its pods %v (%v)", c.deployment.Spec.Selector, podLabels, err)
	}

	svc := one[corev1.Service](t, objs)
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("Service selects %s=%s, which the pods do not have (%v)", k, v, podLabels)
		}
	}
	if len(svc.Spec.Selector) == 0 {
		t.Error("Service selects nothing")
	}
	containerPorts := map[string]int32{}
	for _, p := range c.container.Ports {
		containerPorts[p.Name] = p.ContainerPort
	}
	svcPorts := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = true
		if _, ok := containerPorts[p.TargetPort.String()]; !ok {
			t.Errorf("Service port %s targets %q, which the container does not name (%v)", p.Name, p.TargetPort.String(), containerPorts)
		}
	}
	for name, flag := range map[string]string{"http": "http", "grpc": "grpc"} {
		if !svcPorts[name] {
			t.Errorf("Service has no port %q", name)
		}
		if want := fmt.Sprintf(":%d", containerPorts[name]); c.args[flag] != want {
			t.Errorf("-%s=%s, but the container's port %q is %d", flag, c.args[flag], name, containerPorts[name])
		}
	}

	if pdbs := every[policyv1.PodDisruptionBudget](objs); len(pdbs) == 1 {
		sel, err := metav1.LabelSelectorAsSelector(pdbs[0].Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(podLabels)) {
			t.Errorf("PodDisruptionBudget's selector %v does not select the pods %v (%v)", pdbs[0].Spec.Selector, podLabels, err)
		}
	}
	if hpas := every[autoscalingv2.HorizontalPodAutoscaler](objs); len(hpas) == 1 {
		ref := hpas[0].Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || ref.Name != c.deployment.Name {
			t.Errorf("HorizontalPodAutoscaler scales %+v, not the Deployment %s", ref, c.deployment.Name)
		}
		if c.deployment.Spec.Replicas != nil {
			t.Errorf("with a HorizontalPodAutoscaler the Deployment sets replicas %d: each upgrade would undo its scaling", *c.deployment.Spec.Replicas)
		}
	}
	if sms := every[monitoringv1.ServiceMonitor](objs); len(sms) == 1 {
		sm := sms[0]
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(svc.Labels)) {
			t.Errorf("ServiceMonitor's selector %v does not select the Service %v (%v)", sm.Spec.Selector, svc.Labels, err)
		}
		if len(sm.Spec.Endpoints) != 1 || !svcPorts[sm.Spec.Endpoints[0].Port] || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor's endpoints %+v: want /metrics on a port of the Service %v", sm.Spec.Endpoints, svcPorts)
		}
	}
	return c
}

// checkSecurity holds the pod to the "restricted" Pod Security Standard
// and the chart's own rules: no service account token, a read-only root.
func checkSecurity(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod: securityContext.runAsNonRoot is not true")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod: securityContext.seccompProfile is not RuntimeDefault")
	}
	if psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		t.Error("pod: runs as root")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("pod: automountServiceAccountToken is not false (serve never calls the Kubernetes API)")
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Error("pod: shares a host namespace")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("pod: volume %s is a hostPath", v.Name)
		}
	}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Fatalf("container %s: no securityContext", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Errorf("container %s: runAsNonRoot is not true", c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("container %s: privileged", c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("container %s: capabilities %+v, want drop [ALL] and no add", c.Name, sc.Capabilities)
		case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("container %s: seccompProfile is not RuntimeDefault", c.Name)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				t.Errorf("container %s: hostPort %d", c.Name, p.HostPort)
			}
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s: resources %+v: want CPU and memory requests and a memory limit", c.Name, c.Resources)
		}
	}
}

// serveArgs returns the container's flags of `floodgate serve`, checking
// that it runs /bin/floodgate serve with -flag=value arguments only.
func serveArgs(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	if !slices.Equal(c.Command, []string{"/bin/floodgate"}) || len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("container runs %q %q, want /bin/floodgate serve", c.Command, c.Args)
	}
	args := map[string]string{}
	for _, a := range c.Args[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if !ok || !strings.HasPrefix(a, "-") {
			t.Fatalf("argument %q is not -flag=value", a)
		}
		if _, dup := args[name]; dup {
			t.Errorf("flag -%s given twice", name)
		}
		args[name] = value
	}
	return args
}

// checkProbes holds the probes to serve's health endpoints on its HTTP
// port: liveness on /healthz (the process answers), readiness on /readyz
// (the store answers), in HTTPS exactly when the listeners have TLS.
func checkProbes(t *testing.T, c corev1.Container, args map[string]string) {
	t.Helper()
	scheme := corev1.URISchemeHTTP
	if args["tls-cert"] != "" {
		scheme = corev1.URISchemeHTTPS
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"liveness", c.LivenessProbe, "/healthz"},
		{"readiness", c.ReadinessProbe, "/readyz"},
	} {
		switch {
		case p.probe == nil || p.probe.HTTPGet == nil:
			t.Errorf("%s probe: none, or not httpGet", p.name)
		case p.probe.HTTPGet.Path != p.path:
			t.Errorf("%s probe: path %q, want %q", p.name, p.probe.HTTPGet.Path, p.path)
		case p.probe.HTTPGet.Port.String() != "http":
			t.Errorf("%s probe: port %q, want the container's http port", p.name, p.probe.HTTPGet.Port.String())
		case p.probe.HTTPGet.Scheme != scheme:
			t.Errorf("%s probe: scheme %q, want %q", p.name, p.probe.HTTPGet.Scheme, scheme)
		case p.probe.PeriodSeconds < 1 || p.probe.FailureThreshold < 1:
			t.Errorf("%s probe: period %d, failure threshold %d", p.name, p.probe.PeriodSeconds, p.probe.FailureThreshold)
		}
	}
}

// checkReferences checks that every Secret and ConfigMap the pod
// references is rendered with the key it needs or is one of existing,
// that every flag naming a file names one a volume holds, and that the
// credentials reach serve only from Secrets. It returns the environment
// and the rules as files in a directory ("" without rules).
func checkReferences(t *testing.T, objs []object, spec corev1.PodSpec, existing []string) (map[string]string, string) {
	t.Helper()
	secrets := map[string]*corev1.Secret{}
	for _, s := range every[corev1.Secret](objs) {
		secrets[s.Name] = s
		if len(s.Data) > 0 {
			t.Errorf("Secret %s: data is base64; the chart writes stringData", s.Name)
		}
	}
	configMaps := map[string]*corev1.ConfigMap{}
	for _, cm := range every[corev1.ConfigMap](objs) {
		configMaps[cm.Name] = cm
	}
	secretKey := func(what, name, key string) {
		t.Helper()
		if s, ok := secrets[name]; ok {
			if _, ok := s.StringData[key]; !ok {
				t.Errorf("%s: Secret %s has no key %q (keys: %v)", what, name, key, keysOf(s.StringData))
			}
			return
		}
		if !slices.Contains(existing, name) {
			t.Errorf("%s: Secret %s is neither rendered nor the user's", what, name)
		}
	}
	c := spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			secretKey("env "+e.Name, ref.Name, ref.Key)
			env[e.Name] = "secret:" + ref.Name + "/" + ref.Key
		case e.ValueFrom != nil:
			t.Errorf("env %s: from %+v", e.Name, e.ValueFrom)
		default:
			env[e.Name] = e.Value
		}
	}
	for _, name := range []string{"FLOODGATE_REDIS", "FLOODGATE_LEDGER"} {
		if v, ok := env[name]; ok && !strings.HasPrefix(v, "secret:") {
			t.Errorf("env %s holds its URL in the pod spec; it must come from a Secret", name)
		}
	}
	// Where each volume is mounted, and what files it holds.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
		if !m.ReadOnly {
			t.Errorf("volume %s is mounted read-write", m.Name)
		}
		if m.SubPath != "" {
			t.Errorf("volume %s is mounted with subPath, which the kubelet never updates", m.Name)
		}
	}
	files := map[string]bool{} // path -> held
	var rulesDir string
	for _, v := range spec.Volumes {
		dir, ok := mounts[v.Name]
		if !ok {
			t.Errorf("volume %s is not mounted", v.Name)
			continue
		}
		switch {
		case v.Secret != nil:
			if s, ok := secrets[v.Secret.SecretName]; ok {
				for k := range s.StringData {
					files[filepath.Join(dir, k)] = true
				}
			} else if slices.Contains(existing, v.Secret.SecretName) {
				files[dir+"/*"] = true
			} else {
				t.Errorf("volume %s: Secret %s is neither rendered nor the user's", v.Name, v.Secret.SecretName)
			}
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o007 != 0 {
				t.Errorf("volume %s: Secret files readable by others (mode %v)", v.Name, v.Secret.DefaultMode)
			}
		case v.ConfigMap != nil:
			cm, ok := configMaps[v.ConfigMap.Name]
			if !ok {
				if !slices.Contains(existing, v.ConfigMap.Name) {
					t.Errorf("volume %s: ConfigMap %s is neither rendered nor the user's", v.Name, v.ConfigMap.Name)
				}
				files[dir+"/*"] = true
				continue
			}
			rulesDir = t.TempDir()
			for name, text := range cm.Data {
				if err := os.WriteFile(filepath.Join(rulesDir, name), []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
				files[filepath.Join(dir, name)] = true
			}
			files[dir] = true
		}
	}
	held := func(path string) bool {
		return files[path] || files[filepath.Dir(path)+"/*"] || files[path+"/*"]
	}
	args := serveArgs(t, c)
	for _, flag := range []string{"auth-token-file", "admin-token-file", "id-key-file", "tls-cert", "tls-key", "config"} {
		if path, ok := args[flag]; ok && !held(path) {
			t.Errorf("-%s=%s: no volume holds it", flag, path)
		}
	}
	for _, flag := range []string{"redis", "ledger"} {
		if _, ok := args[flag]; ok {
			t.Errorf("-%s in the arguments: the URL and its password belong in a Secret", flag)
		}
	}
	return env, rulesDir
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
