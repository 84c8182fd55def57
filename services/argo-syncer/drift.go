package main

// Drift: whether an object in the cluster still is what argo-syncer rendered. The applied-hash
// annotation says what argo-syncer last applied, not what the object holds now: someone may have
// edited a field argo-syncer owns (kubectl edit, the Argo CD UI) and left the annotation alone.
// So "in sync" also compares the rendered fields with the live ones. Only the rendered fields
// count: fields others own (Argo CD's status and operation, a finalizer, an annotation of
// another tool) are not drift, and a rendered field that is empty counts as absent, since the
// API server drops what the JSON encoding omits.

import (
	"encoding/json"
	"reflect"
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
