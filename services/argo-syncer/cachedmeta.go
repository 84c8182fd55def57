package main

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// cachedMeta is what argo-syncer keeps of a cached object's metadata when it caches a
// projection of the object (cachedApplication, cachedProject, cachedSecret): 160 bytes where metav1.ObjectMeta
// takes 232 before its maps, lists and strings. What it drops (the creation time, generation,
// owner references, managed fields and the rest) no reader of the cache looks at; objects
// argo-syncer writes are built from the rendered object, never from the cached one.
type cachedMeta struct {
	Name, Namespace string
	// id is the UID and resource version (GetUID, GetResourceVersion).
	id                  objectIdentity
	DeletionTimestamp   *metav1.Time
	Finalizers          []string
	Labels, Annotations metaStrings
}

// newCachedMeta keeps what cachedMeta holds of m, its namespace and finalizers interned and its
// labels and annotations as metaStrings.
func newCachedMeta(m *metav1.ObjectMeta) cachedMeta {
	c := cachedMeta{Name: m.Name, Namespace: intern(m.Namespace), id: newObjectIdentity(m.UID, m.ResourceVersion),
		DeletionTimestamp: m.DeletionTimestamp, Labels: newMetaStrings(m.Labels), Annotations: newMetaStrings(m.Annotations)}
	if len(m.Finalizers) > 0 {
		c.Finalizers = make([]string, len(m.Finalizers))
		for i, f := range m.Finalizers {
			c.Finalizers[i] = intern(f)
		}
	}
	return c
}

// deepCopy copies m; Labels and Annotations are never changed in place (SetLabels replaces
// them), so the copy shares them.
func (m *cachedMeta) deepCopy() cachedMeta {
	c := *m
	c.Finalizers = append([]string(nil), m.Finalizers...)
	if m.DeletionTimestamp != nil {
		c.DeletionTimestamp = m.DeletionTimestamp.DeepCopy()
	}
	return c
}

// kept returns m: labelOf and annotationOf read a projection's labels and annotations through it
// without building a map.
func (m *cachedMeta) kept() *cachedMeta { return m }

// The projections are runtime.Objects and metav1.Objects, as the informer's cache and its
// indexers need. The getters of what cachedMeta does not keep return the zero value and their
// setters drop what they are given: the cache only reads. A map or slice a getter returns is the
// caller's own.

var (
	_ metav1.Object = (*cachedApplication)(nil)
	_ metav1.Object = (*cachedProject)(nil)
	_ metav1.Object = (*cachedSecret)(nil)
)

func (*cachedApplication) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (a *cachedApplication) DeepCopyObject() runtime.Object {
	c := &cachedApplication{cachedMeta: a.deepCopy(), Project: a.Project, SpecDigest: a.SpecDigest, status: a.status}
	if a.Foreign != nil {
		c.Foreign = a.Foreign.DeepCopy()
	}
	return c
}

func (*cachedProject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (p *cachedProject) DeepCopyObject() runtime.Object {
	// SourceRepos is never changed in place: shared.
	c := &cachedProject{cachedMeta: p.deepCopy(), SourceRepos: p.SourceRepos, SpecDigest: p.SpecDigest}
	if p.Foreign != nil {
		c.Foreign = p.Foreign.DeepCopy()
	}
	return c
}

func (*cachedSecret) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (s *cachedSecret) DeepCopyObject() runtime.Object {
	c := *s
	c.cachedMeta = s.deepCopy()
	return &c
}

func (m *cachedMeta) GetNamespace() string                { return m.Namespace }
func (m *cachedMeta) SetNamespace(ns string)              { m.Namespace = ns }
func (m *cachedMeta) GetName() string                     { return m.Name }
func (m *cachedMeta) SetName(name string)                 { m.Name = name }
func (m *cachedMeta) GetUID() types.UID                   { return m.id.UID() }
func (m *cachedMeta) SetUID(uid types.UID)                { m.id = newObjectIdentity(uid, m.id.ResourceVersion()) }
func (m *cachedMeta) GetResourceVersion() string          { return m.id.ResourceVersion() }
func (m *cachedMeta) SetResourceVersion(v string)         { m.id = newObjectIdentity(m.id.UID(), v) }
func (m *cachedMeta) GetDeletionTimestamp() *metav1.Time  { return m.DeletionTimestamp }
func (m *cachedMeta) SetDeletionTimestamp(t *metav1.Time) { m.DeletionTimestamp = t }
func (m *cachedMeta) GetFinalizers() []string             { return append([]string(nil), m.Finalizers...) }
func (m *cachedMeta) SetFinalizers(f []string)            { m.Finalizers = f }
func (m *cachedMeta) GetLabels() map[string]string        { return m.Labels.Map() }
func (m *cachedMeta) SetLabels(l map[string]string)       { m.Labels = newMetaStrings(l) }
func (m *cachedMeta) GetAnnotations() map[string]string   { return m.Annotations.Map() }
func (m *cachedMeta) SetAnnotations(a map[string]string)  { m.Annotations = newMetaStrings(a) }

func (*cachedMeta) GetGenerateName() string                       { return "" }
func (*cachedMeta) SetGenerateName(string)                        {}
func (*cachedMeta) GetGeneration() int64                          { return 0 }
func (*cachedMeta) SetGeneration(int64)                           {}
func (*cachedMeta) GetSelfLink() string                           { return "" }
func (*cachedMeta) SetSelfLink(string)                            {}
func (*cachedMeta) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (*cachedMeta) SetCreationTimestamp(metav1.Time)              {}
func (*cachedMeta) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (*cachedMeta) SetDeletionGracePeriodSeconds(*int64)          {}
func (*cachedMeta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (*cachedMeta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (*cachedMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (*cachedMeta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

// sameUID are the options of a deletion of o that fails if the name has become another object's.
func sameUID(o metav1.Object) metav1.DeleteOptions {
	uid := o.GetUID()
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
}

// identity is the object's UID and resource version as kept (newer and sameObject compare them
// without building their strings).
func (m *cachedMeta) identity() objectIdentity { return m.id }

// objectIdentity is an object's UID and resource version. The API server's are a UUID and an
// etcd revision, kept here as 24 bytes where their two strings took 32 and two allocations of
// 48 and 8 bytes: about 55 bytes an object, 670 a cluster at ten rules (BenchmarkCachedCluster).
// Any other form (the Argo CD API mode's cluster Secrets, an object built by hand) is kept as
// given. The zero objectIdentity is an empty UID and resource version.
type objectIdentity struct {
	uid [16]byte
	// revision is the resource version plus one when uid and it are kept compact; 0 when not,
	// and then asGiven holds them (nil: both empty).
	revision uint64
	asGiven  *identityAsGiven
}

type identityAsGiven struct {
	uid             types.UID
	resourceVersion string
}

func newObjectIdentity(uid types.UID, resourceVersion string) objectIdentity {
	if uid == "" && resourceVersion == "" {
		return objectIdentity{}
	}
	u, uidOK := parseUUID(string(uid))
	rv, err := strconv.ParseUint(resourceVersion, 10, 64)
	if !uidOK || err != nil || rv == ^uint64(0) || strconv.FormatUint(rv, 10) != resourceVersion {
		return objectIdentity{asGiven: &identityAsGiven{uid: uid, resourceVersion: resourceVersion}}
	}
	return objectIdentity{uid: u, revision: rv + 1}
}

// UID is the object's UID as the API server gave it.
func (id objectIdentity) UID() types.UID {
	switch {
	case id.revision != 0:
		return types.UID(formatUUID(id.uid))
	case id.asGiven != nil:
		return id.asGiven.uid
	}
	return ""
}

// ResourceVersion is the object's resource version as the API server gave it.
func (id objectIdentity) ResourceVersion() string {
	switch {
	case id.revision != 0:
		return strconv.FormatUint(id.revision-1, 10)
	case id.asGiven != nil:
		return id.asGiven.resourceVersion
	}
	return ""
}

// sameObject reports whether the two identities have the same UID.
func (id objectIdentity) sameObject(other objectIdentity) bool {
	if id.revision != 0 && other.revision != 0 {
		return id.uid == other.uid
	}
	return id.UID() == other.UID()
}

// newerThan reports whether id is a later version of the same object than other, or another
// object (newer).
func (id objectIdentity) newerThan(other objectIdentity) bool {
	if id.revision != 0 && other.revision != 0 {
		return id.uid != other.uid || id.revision > other.revision
	}
	return id.UID() != other.UID() || newerVersion(id.ResourceVersion(), other.ResourceVersion())
}

// parseUUID reads a UUID in the API server's form: 36 characters, lowercase hexadecimal digits
// in groups of 8, 4, 4, 4 and 12 separated by dashes. Any other form is not read (ok false), so
// that formatUUID gives back exactly the string read.
func parseUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 {
		return u, false
	}
	var digits [32]byte
	n := 0
	for i := range len(s) {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return u, false
			}
			continue
		}
		d, ok := lowerHex(s[i])
		if !ok {
			return u, false
		}
		digits[n] = d
		n++
	}
	for i := range u {
		u[i] = digits[2*i]<<4 | digits[2*i+1]
	}
	return u, true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// formatUUID writes u as parseUUID reads it.
func formatUUID(u [16]byte) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 36)
	for i, x := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, digits[x>>4], digits[x&0xf])
	}
	return string(b)
}
