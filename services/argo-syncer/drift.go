package main

// Drift: whether an object in the cluster still is what argo-syncer rendered. The applied-hash
// annotation says what argo-syncer last applied, not what the object holds now: someone may have
// edited a field argo-syncer owns (kubectl edit, the Argo CD UI) and left the annotation alone.
// So "in sync" also compares the rendered fields with the live ones. Only the rendered fields
// count: fields others own (Argo CD's status and operation, a finalizer, an annotation of
// another tool) are not drift, and a rendered field that is empty counts as absent, since the
// API server drops what the JSON encoding omits.

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// inSync reports whether a live object (its labels, annotations and spec) still holds every
// field of the rendered one, the applied-hash annotation included.
func inSync(labels, annotations map[string]string, spec any, desired *applyObject) bool {
	return subsetStrings(desired.Metadata.Labels, labels) &&
		subsetStrings(desired.Metadata.Annotations, annotations) &&
		covers(spec, desired.Spec)
}

func subsetStrings(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// holdsStrings is subsetStrings for a cached projection's labels or annotations.
func holdsStrings(have metaStrings, want map[string]string) bool {
	for k, v := range want {
		if have.Get(k) != v {
			return false
		}
	}
	return true
}

// covers reports whether live holds every non-empty field of desired, both compared as JSON.
// Maps are compared key by key (live may have more), lists element by element and whole (a
// list is owned as one value by server-side apply for these types), scalars by value.
func covers(live, desired any) bool {
	l, errL := asJSON(live)
	d, errD := asJSON(desired)
	if errL != nil || errD != nil {
		return false // not comparable: apply again rather than trust it
	}
	return coversValue(l, d)
}

func asJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

func coversValue(live, desired any) bool {
	switch d := desired.(type) {
	case map[string]any:
		l, _ := live.(map[string]any)
		for k, dv := range d {
			if !coversValue(l[k], dv) {
				return false
			}
		}
		return true
	case []any:
		l, _ := live.([]any)
		if len(l) != len(d) {
			return false
		}
		for i := range d {
			if !coversValue(l[i], d[i]) {
				return false
			}
		}
		return true
	default:
		if isEmpty(desired) {
			return live == nil || isEmpty(live)
		}
		return reflect.DeepEqual(live, desired)
	}
}

// isEmpty reports the JSON zero values that an omitempty encoding leaves out.
func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case float64:
		return x == 0
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// An Application's or AppProject's spec is not cached (cachedApplication, cachedProject):
// argo-syncer keeps its digest. When the digest is that of the rendered spec, the live spec is
// exactly it, so it holds every rendered field and inSync would say so. When it differs, the spec
// either drifted or holds more than argo-syncer renders (a field another tool or person set,
// which is not drift): one GET of the object tells which, by the same comparison as for the
// other objects. The answer is remembered while neither spec changes (coveredSpecs), so that a
// spec with a field of someone else's costs one read, not one on every intent and resync.

// applicationInSync reports whether the live Application existing (owned, cached) still holds
// every field of desired.
func (s *Syncer) applicationInSync(ctx context.Context, existing *cachedApplication, desired *applyObject) (bool, error) {
	return s.cachedInSync(ctx, "Application", &existing.cachedMeta, existing.SpecDigest, &s.covered, desired,
		func(ctx context.Context) (metav1.Object, any, error) {
			live, err := s.argo.ArgoprojV1alpha1().Applications(s.ns).Get(ctx, existing.Name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, err
			}
			return live, live.Spec, nil
		})
}

// projectInSync reports whether the live AppProject existing (owned, cached) still holds every
// field of desired.
func (s *Syncer) projectInSync(ctx context.Context, existing *cachedProject, desired *applyObject) (bool, error) {
	return s.cachedInSync(ctx, "AppProject", &existing.cachedMeta, existing.SpecDigest, &s.coveredProjects, desired,
		func(ctx context.Context) (metav1.Object, any, error) {
			live, err := s.argo.ArgoprojV1alpha1().AppProjects(s.ns).Get(ctx, existing.Name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, err
			}
			return live, live.Spec, nil
		})
}

// cachedInSync is applicationInSync and projectInSync: the cached object of the given kind,
// with metadata m and spec digest digest, against desired; read gets the live object and its
// spec when the digests differ and covered does not know the answer.
func (s *Syncer) cachedInSync(ctx context.Context, kind string, m *cachedMeta, digest specDigest, covered *coveredSpecs,
	desired *applyObject, read func(context.Context) (metav1.Object, any, error)) (bool, error) {
	if !holdsStrings(m.Labels, desired.Metadata.Labels) || !holdsStrings(m.Annotations, desired.Metadata.Annotations) {
		return false, nil // the applied hash is among the annotations: a changed rendering ends here
	}
	want := digestSpec(desired.Spec)
	if digest == want || covered.holds(m.Name, digest, want) {
		return true, nil
	}
	live, spec, err := read(ctx)
	s.metrics.read(kind, "drift_check", err)
	if apierrors.IsNotFound(err) {
		return false, nil // gone since the cache saw it: the apply recreates it
	}
	if err != nil {
		return false, classify(err, "read "+strings.ToLower(kind)+" "+m.Name)
	}
	ok := inSync(live.GetLabels(), live.GetAnnotations(), spec, desired)
	if ok {
		covered.remember(m.Name, digestSpec(spec), want)
	}
	return ok, nil
}

// coveredSpecs remembers, per object of one kind, a live spec digest that was found to hold every field
// of the rendered spec of another digest.
type coveredSpecs struct {
	mu sync.Mutex
	m  map[string][2]specDigest // object name → {live, rendered}
}

func (c *coveredSpecs) holds(name string, live, rendered specDigest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[name]
	return ok && d == [2]specDigest{live, rendered}
}

func (c *coveredSpecs) remember(name string, live, rendered specDigest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][2]specDigest{}
	}
	c.m[name] = [2]specDigest{live, rendered}
}

// forget drops what is remembered of a deleted object.
func (c *coveredSpecs) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, name)
}
