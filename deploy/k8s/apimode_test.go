package k8s

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestArgoSyncerAPIMode: argocdAPI.url switches argo-syncer to Argo CD's API. The chart sets
// ARGO_URL and the options, reads ARGO_USERNAME, ARGO_PASSWORD and ARGO_TOKEN from
// argocdAPI.existingSecret (never from a value), mounts the server certificate, and grants nothing
// in the Argo CD namespace (no Role there, no admission policy); every variable is one argo-syncer
// reads. Without a Secret, or with a URL that is not http(s), it refuses to render.
func TestArgoSyncerAPIMode(t *testing.T) {
	vals := map[string]any{"argocdAPI": map[string]any{
		"url": "https://argocd.example.com", "existingSecret": "argocd-login", "grpcWeb": true,
		"serverCrtSecret": "argocd-ca", "pollInterval": "1m",
	}}
	objs := mustRender(t, "argo-syncer", defaultRelease, vals)
	c := deployment(t, objs).Spec.Template.Spec.Containers[0]
	env := envMap(t, c)
	for k, want := range map[string]string{
		"ARGO_URL": "https://argocd.example.com", "ARGO_GRPC_WEB": "true", "ARGO_POLL_INTERVAL": "1m",
		"ARGO_SERVER_CRT": "/etc/argo-syncer/argocd-server-crt/ca.crt",
	} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	if _, ok := env["ARGO_INSECURE"]; ok {
		t.Error("ARGO_INSECURE set although insecure is false")
	}
	fromSecret := map[string]bool{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "ARGO_") && e.ValueFrom != nil {
			ref := e.ValueFrom.SecretKeyRef
			if ref == nil || ref.Name != "argocd-login" || ref.Key != e.Name || ref.Optional == nil || !*ref.Optional {
				t.Errorf("%s from %+v, want optional key %s of Secret argocd-login", e.Name, e.ValueFrom, e.Name)
			}
			fromSecret[e.Name] = true
		} else if e.Name == "ARGO_PASSWORD" || e.Name == "ARGO_TOKEN" || e.Name == "ARGO_USERNAME" {
			t.Errorf("%s as a plain value", e.Name)
		}
	}
	if len(fromSecret) != 3 {
		t.Errorf("variables from the Secret: %v, want ARGO_USERNAME, ARGO_PASSWORD, ARGO_TOKEN", fromSecret)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "argocd-server-crt" && m.MountPath == "/etc/argo-syncer/argocd-server-crt" && m.ReadOnly)
	}
	var vol *corev1.Volume
	for _, v := range deployment(t, objs).Spec.Template.Spec.Volumes {
		if v.Name == "argocd-server-crt" {
			vol = &v
		}
	}
	if !mounted || vol == nil || vol.Secret == nil || vol.Secret.SecretName != "argocd-ca" {
		t.Errorf("server certificate: mounted %v, volume %+v; want Secret argocd-ca read-only", mounted, vol)
	}
	for _, o := range append(find(objs, "Role", ""), find(objs, "ValidatingAdmissionPolicy", "")...) {
		if o.GetNamespace() == "argocd" || o.GetKind() == "ValidatingAdmissionPolicy" {
			t.Errorf("API mode renders %s %s/%s: nothing is written through the Kubernetes API there", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
	if len(find(objs, "Role", "")) == 0 {
		t.Error("API mode renders no Role: the source Secrets and the Lease still need one")
	}
	named, _ := serviceEnv(t, filepath.Join("..", "..", "services", "argo-syncer"))
	for v := range env {
		if strings.HasPrefix(v, "ARGO_") && !named[v] {
			t.Errorf("chart sets %s, which argo-syncer does not read", v)
		}
	}

	// The declarative mode (the default) keeps its Role in the Argo CD namespace.
	declarative := mustRender(t, "argo-syncer", defaultRelease, nil)
	if roles := find(declarative, "Role", ""); !hasNamespace(roles, "argocd") {
		t.Error("the default rendering lost the Role in the Argo CD namespace")
	}
	if _, ok := envMap(t, deployment(t, declarative).Spec.Template.Spec.Containers[0])["ARGO_URL"]; ok {
		t.Error("ARGO_URL set by default")
	}

	for _, bad := range []struct {
		api  map[string]any
		want string
	}{
		{map[string]any{"url": "https://argocd.example.com"}, "argocdAPI.existingSecret"},
		{map[string]any{"url": "argocd.example.com:443", "existingSecret": "s"}, "argocdAPI"},
	} {
		if _, err := render(loadChart(t, "argo-syncer"), defaultRelease, map[string]any{"argocdAPI": bad.api}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("render with argocdAPI %v: %v, want an error naming %s", bad.api, err, bad.want)
		}
	}
}

func hasNamespace[T interface{ GetNamespace() string }](objs []T, ns string) bool {
	for _, o := range objs {
		if o.GetNamespace() == ns {
			return true
		}
	}
	return false
}
